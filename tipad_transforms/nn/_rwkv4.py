"""RWKV-4 layers on ``ops.wkv``, named like RWKV-4 checkpoints (BlinkDL's RWKV-LM
``RWKV-v4neo/src/model.py``), so their ``blocks.N.*`` weights load with ``strict=True``.

Each layer's math is one function (``time_mix``, ``channel_mix``, ``block``) of ``m``: the
module or its recurrent snapshot (``nn/_recurrent.py``), which hold the same names. Calls and
states: see the package docstring and docs/rwkv.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from ..ops import init_wkv_state, wkv
from ._common import (
    Block,
    Layer,
    channel_ramp,
    check_size,
    last,
    ratios,
    shifted,
    sizes_checked,
    state_dtype,
)

__all__ = [
    "BlockState",
    "ChannelMixState",
    "RWKVBlock",
    "RWKVChannelMix",
    "RWKVTimeMix",
    "TimeMixState",
]


class TimeMixState(NamedTuple):
    """What ``RWKVTimeMix`` carries from one token to the next.

    ``shift``: ``(B, n_embd)``, the previous token's input ``x`` in ``x``'s dtype (zeros before
    the first token). ``wkv``: ``(B, 3, dim_att)`` float32 (float64 for float64 ``x``), the WKV
    recurrence's running numerator ``aa``, denominator ``bb`` and exponent ``pp`` (``0, 0,
    -1e38`` at the start; see ``tipad_transforms.ops.init_wkv_state``).
    """

    shift: torch.Tensor
    wkv: torch.Tensor

    def detach(self) -> TimeMixState:
        """The same values, cut from the autograd graph (between training chunks)."""
        return TimeMixState(self.shift.detach(), self.wkv.detach())


class ChannelMixState(NamedTuple):
    """What a channel mix carries: ``shift`` ``(B, n_embd)``, the previous token's ``x``."""

    shift: torch.Tensor

    def detach(self) -> ChannelMixState:
        """The same values, cut from the autograd graph."""
        return ChannelMixState(self.shift.detach())


class BlockState(NamedTuple):
    """What ``RWKVBlock`` carries: its time mix's state and its channel mix's state."""

    att: TimeMixState
    ffn: ChannelMixState

    def detach(self) -> BlockState:
        """The same values, cut from the autograd graph."""
        return BlockState(self.att.detach(), self.ffn.detach())


# ---- the math ---------------------------------------------------------------------------------


def _mixer(x: torch.Tensor, xx: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``m -> x * m + xx * (1 - m)``, the token mix. Without grad, as ``xx + (x - xx) * m``:
    one fused op per mix after one shared difference instead of four (a one-token step is all
    fixed cost); it rounds differently, so it is kept where no gradient is compared."""
    if torch.is_grad_enabled():
        return lambda m: x * m + xx * (1 - m)
    d = x - xx
    return lambda m: torch.addcmul(xx, d, m)


def time_mix(m: Any, x: torch.Tensor, state: TimeMixState | None) -> tuple[torch.Tensor, Any]:
    """``output(sigmoid(r) * wkv(time_decay, time_first, k, v))``, ``k v r`` from the token
    mixed with the previous one; ``(y, new_state)`` (``None`` without a state)."""
    mix = _mixer(x, shifted(x, state))
    k = m.key(mix(m.time_mix_k))
    v = m.value(mix(m.time_mix_v))
    r = torch.sigmoid(m.receptance(mix(m.time_mix_r)))
    if state is None:
        return m.output(r * wkv(m.time_decay, m.time_first, k, v)), None
    y, s = wkv(m.time_decay, m.time_first, k, v, state.wkv)
    return m.output(r * y), TimeMixState(last(x, state.shift), s)


def channel_mix(m: Any, x: torch.Tensor, state: ChannelMixState | None) -> tuple[torch.Tensor, Any]:
    """``sigmoid(receptance(xr)) * value(relu(key(xk)) ** 2)``; ``(y, new_state)``."""
    mix = _mixer(x, shifted(x, state))
    k = torch.square(torch.relu(m.key(mix(m.time_mix_k))))
    y = torch.sigmoid(m.receptance(mix(m.time_mix_r))) * m.value(k)
    return y, None if state is None else ChannelMixState(last(x, state.shift))


def block(m: Any, x: torch.Tensor, state: BlockState | None) -> tuple[torch.Tensor, Any]:
    """``x = ln0(x)`` (layer 0), ``x = x + att(ln1(x))``, ``x = x + ffn(ln2(x))``."""
    if m.ln0 is not None:
        x = m.ln0(x)
    if state is None:
        x = x + m.att(m.ln1(x))
        return x + m.ffn(m.ln2(x)), None
    a, att = m.att(m.ln1(x), state[0])
    x = x + a
    f, ffn = m.ffn(m.ln2(x), state[1])
    return x + f, BlockState(att, ffn)


# ---- the modules ------------------------------------------------------------------------------


class RWKVTimeMix(Layer[TimeMixState]):
    """RWKV-4 time mixing: ``output(sigmoid(r) * wkv(time_decay, time_first, k, v))``, ``k``,
    ``v``, ``r`` linear maps of the input mixed with the previous token's (``time_mix_k``,
    ``time_mix_v``, ``time_mix_r``), ``wkv`` the recurrence ``tipad_transforms.ops.wkv``.

    Args:
        n_embd: width of the input and output.
        dim_att: width of ``k``, ``v``, ``r`` and the WKV state (RWKV-4's ``dim_att``); default
            ``n_embd``.
        layer_id: position of this layer in the stack, ``0 <= layer_id < n_layer``; it sets the
            initial values only (deeper layers start with slower decay and more mixing).
        n_layer: number of layers in the stack (initial values only).

    Parameters: RWKV-4's names, shapes and initial values (float32), tabled in docs/rwkv.md
    ("The layers"): ``time_decay``, ``time_first`` ``(dim_att,)`` (the decay per step is
    ``exp(-exp(time_decay))``, ``time_first`` the current token's bonus); ``time_mix_k``,
    ``time_mix_v``, ``time_mix_r`` ``(1, 1, n_embd)``; ``key``, ``value``, ``receptance``,
    ``output``, ``Linear`` without bias in PyTorch's default init.

    Call ``m(x)`` or ``m(x, state)`` with a ``TimeMixState``: see ``forward``.
    """

    State = TimeMixState
    _math = staticmethod(time_mix)
    _like_name = "time_mix_k"
    _repr = ("n_embd", "dim_att", "layer_id")
    _recurrent = ("time_decay", "time_first", "time_mix_k", "time_mix_v", "time_mix_r",
                  "key", "value", "receptance", "output")  # fmt: skip

    @sizes_checked
    def __init__(
        self, n_embd: int, dim_att: int | None = None, layer_id: int = 0, n_layer: int = 1
    ) -> None:
        super().__init__(n_embd, layer_id, n_layer)
        self.dim_att = n_embd if dim_att is None else check_size("dim_att", dim_att)
        r01, r1a0 = ratios(layer_id, n_layer)

        # float64 then rounded once; max(..., 1): a one-channel layer gets -5 (RWKV-LM: 0 / 0).
        h = torch.arange(self.dim_att, dtype=torch.float64)
        decay = -5 + 8 * (h / max(self.dim_att - 1, 1)) ** (0.7 + 1.3 * r01)
        zigzag = ((h + 1) % 3 - 1) * 0.5
        ddd = channel_ramp(n_embd)
        self.time_decay = nn.Parameter(decay.float())
        self.time_first = nn.Parameter((math.log(0.3) + zigzag).float())
        self.time_mix_k = nn.Parameter((ddd**r1a0).float())
        self.time_mix_v = nn.Parameter((ddd**r1a0 + 0.3 * r01).float())
        self.time_mix_r = nn.Parameter((ddd ** (0.5 * r1a0)).float())

        self.key = nn.Linear(n_embd, self.dim_att, bias=False)
        self.value = nn.Linear(n_embd, self.dim_att, bias=False)
        self.receptance = nn.Linear(n_embd, self.dim_att, bias=False)
        self.output = nn.Linear(self.dim_att, n_embd, bias=False)

    def _zeros(
        self, batch_size: int, device: torch.device | str, dtype: torch.dtype
    ) -> TimeMixState:
        return TimeMixState(  # the WKV start is not zeros
            torch.zeros(batch_size, self.n_embd, device=device, dtype=dtype),
            init_wkv_state(batch_size, self.dim_att, device=device, dtype=state_dtype(dtype)),
        )

    def _state_shapes(self, batch_size: int) -> tuple[tuple[int, ...], ...]:
        return (batch_size, self.n_embd), (batch_size, 3, self.dim_att)


class ChannelMix(Layer[ChannelMixState]):
    """What the RWKV-4 and RWKV-7 channel mixes share: a state of one shift."""

    State = ChannelMixState
    _repr = ("n_embd", "dim_ffn", "layer_id")

    def _state_shapes(self, batch_size: int) -> tuple[tuple[int, ...], ...]:
        return ((batch_size, self.n_embd),)


class RWKVChannelMix(ChannelMix):
    """RWKV-4 channel mixing: ``sigmoid(receptance(xr)) * value(relu(key(xk)) ** 2)``, ``xk``,
    ``xr`` the input mixed with the previous token's (``time_mix_k``, ``time_mix_r``).

    Args:
        n_embd: width of the input and output.
        dim_ffn: hidden width; default ``4 * n_embd``.
        layer_id, n_layer: position in the stack, for the initial values only.

    Parameters as ``RWKVTimeMix``'s: ``key`` ``Linear(n_embd, dim_ffn)``, ``receptance``
    ``Linear(n_embd, n_embd)``, ``value`` ``Linear(dim_ffn, n_embd)``. Call ``m(x)`` or
    ``m(x, state)`` with a ``ChannelMixState``: see ``forward``.
    """

    _math = staticmethod(channel_mix)
    _recurrent = ("time_mix_k", "time_mix_r", "key", "receptance", "value")
    _like_name = "time_mix_k"

    @sizes_checked
    def __init__(
        self, n_embd: int, dim_ffn: int | None = None, layer_id: int = 0, n_layer: int = 1
    ) -> None:
        super().__init__(n_embd, layer_id, n_layer)
        self.dim_ffn = 4 * n_embd if dim_ffn is None else check_size("dim_ffn", dim_ffn)
        _, r1a0 = ratios(layer_id, n_layer)
        ddd = channel_ramp(n_embd)
        self.time_mix_k = nn.Parameter((ddd**r1a0).float())
        self.time_mix_r = nn.Parameter((ddd**r1a0).float())

        self.key = nn.Linear(n_embd, self.dim_ffn, bias=False)
        self.receptance = nn.Linear(n_embd, n_embd, bias=False)
        self.value = nn.Linear(self.dim_ffn, n_embd, bias=False)


class RWKVBlock(Block[BlockState], Layer[BlockState]):
    """One RWKV-4 layer: ``x = x + att(ln1(x)); x = x + ffn(ln2(x))``.

    Layer 0 first normalises its input with ``ln0`` (RWKV-4's layer norm of the embeddings).
    State-dict keys: ``ln1.*``, ``ln2.*``, ``ln0.*`` (layer 0 only), ``att.*``, ``ffn.*``, as
    ``blocks.N`` of an RWKV-4 checkpoint.

    Args:
        n_embd, dim_att, layer_id, n_layer: as ``RWKVTimeMix``.
        dim_ffn: as ``RWKVChannelMix``.

    Call ``m(x)`` or ``m(x, state)`` with a ``BlockState``: see ``forward``.
    """

    State = BlockState
    _math = staticmethod(block)
    att: RWKVTimeMix
    ffn: RWKVChannelMix

    @sizes_checked
    def __init__(
        self,
        n_embd: int,
        dim_att: int | None = None,
        dim_ffn: int | None = None,
        layer_id: int = 0,
        n_layer: int = 1,
    ) -> None:
        super().__init__(n_embd, layer_id, n_layer)
        self._add_children(
            RWKVTimeMix(n_embd, dim_att, layer_id, n_layer),
            RWKVChannelMix(n_embd, dim_ffn, layer_id, n_layer),
        )
