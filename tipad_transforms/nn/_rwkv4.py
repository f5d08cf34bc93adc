"""RWKV-4 layers on the ``tipad_transforms.ops.wkv`` kernel, named like RWKV-4 checkpoints.

In the spirit of BlinkDL's RWKV-LM ``RWKV-v4neo/src/model.py``: the math of each layer is one
function (``time_mix``, ``channel_mix``, ``block``) of ``m``, the module (``RWKVTimeMix``,
``RWKVChannelMix``, ``RWKVBlock``) or its recurrent snapshot (``nn/_recurrent.py``), which
hold the same names. Parameter names, shapes and initial values are RWKV-4's, so the
``blocks.N.*`` weights of an RWKV-4 checkpoint load with ``load_state_dict(strict=True)``.

Every module runs in two ways:

- ``m(x)``: ``x`` is a whole sequence ``(B, T, n_embd)``, the first token sees zeros as its past;
  returns ``y`` ``(B, T, n_embd)``.
- ``m(x, state)``: the sequence continues from ``state`` (``m.init_state(B)`` at the start, or
  the state a previous call returned; ``None``: the zero state); returns ``(y, new_state)``.
  Running a sequence in pieces, down to one token at a time (RNN mode, for generation), gives
  the output of running it whole, to float rounding (docs/rwkv.md states the measured bound).

A state is a small ``NamedTuple`` of tensors (``TimeMixState``, ``ChannelMixState``,
``BlockState``); ``state.detach()`` cuts the graph between training chunks. Calls never modify a
state in place: each returns a new one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from ..ops import init_wkv_state, wkv
from ._common import (
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
    """What ``RWKVChannelMix`` carries: ``shift`` ``(B, n_embd)``, the previous token's ``x``."""

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
    shift = None if state is None else state.shift
    mix = _mixer(x, shifted(x, shift))
    k = m.key(mix(m.time_mix_k))
    v = m.value(mix(m.time_mix_v))
    r = torch.sigmoid(m.receptance(mix(m.time_mix_r)))
    if state is None:
        return m.output(r * wkv(m.time_decay, m.time_first, k, v)), None
    y, s = wkv(m.time_decay, m.time_first, k, v, state.wkv)
    return m.output(r * y), TimeMixState(last(x, state.shift), s)


def channel_mix(m: Any, x: torch.Tensor, state: ChannelMixState | None) -> tuple[torch.Tensor, Any]:
    """``sigmoid(receptance(xr)) * value(relu(key(xk)) ** 2)``; ``(y, new_state)``."""
    shift = None if state is None else state.shift
    mix = _mixer(x, shifted(x, shift))
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
    """RWKV-4 time mixing: ``output(sigmoid(r) * wkv(time_decay, time_first, k, v))``.

    ``k``, ``v`` and ``r`` are linear maps of the input mixed with the previous token's
    (``time_mix_k``, ``time_mix_v``, ``time_mix_r``, per channel); ``wkv`` is
    ``tipad_transforms.ops.wkv``, a decayed softmax over the past computed as a recurrence.

    Args:
        n_embd: width of the input and output.
        dim_att: width of ``k``, ``v``, ``r`` and the WKV state (RWKV-4's ``dim_att``); default
            ``n_embd``.
        layer_id: position of this layer in the stack, ``0 <= layer_id < n_layer``; it sets the
            initial values only (deeper layers start with slower decay and more mixing).
        n_layer: number of layers in the stack (initial values only).

    Parameters (RWKV-4 names and shapes, float32 at creation; ``r01 = layer_id / (n_layer - 1)``,
    ``0`` when ``n_layer == 1``; ``r1a0 = 1 - layer_id / n_layer``; ``ddd[i] = i / n_embd``):

    - ``time_decay`` ``(dim_att,)``: ``-5 + 8 * (h / (dim_att - 1)) ** (0.7 + 1.3 * r01)``;
      the decay per step is ``exp(-exp(time_decay))``.
    - ``time_first`` ``(dim_att,)``: ``log(0.3) + 0.5 * ((h + 1) % 3 - 1)``, the bonus of the
      current token.
    - ``time_mix_k``, ``time_mix_v``, ``time_mix_r`` ``(1, 1, n_embd)``: ``ddd ** r1a0``,
      ``ddd ** r1a0 + 0.3 * r01``, ``ddd ** (0.5 * r1a0)``.
    - ``key``, ``value``, ``receptance``: ``Linear(n_embd, dim_att, bias=False)``; ``output``:
      ``Linear(dim_att, n_embd, bias=False)`` (PyTorch's default init, like RWKV-LM's modules;
      RWKV-LM re-initialises them model-wide in ``generate_init_weight``).

    Call ``m(x)`` or ``m(x, state)`` with a ``TimeMixState``: see ``forward``.
    """

    State = TimeMixState
    _math = staticmethod(time_mix)
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

    def _like(self) -> torch.Tensor:
        return self.time_mix_k

    def _zeros(
        self, batch_size: int, device: torch.device | str, dtype: torch.dtype
    ) -> TimeMixState:
        return TimeMixState(
            torch.zeros(batch_size, self.n_embd, device=device, dtype=dtype),
            init_wkv_state(batch_size, self.dim_att, device=device, dtype=state_dtype(dtype)),
        )

    def _state_shapes(self, batch_size: int) -> tuple[tuple[int, ...], ...]:
        return (batch_size, self.n_embd), (batch_size, 3, self.dim_att)

    def extra_repr(self) -> str:
        return f"n_embd={self.n_embd}, dim_att={self.dim_att}, layer_id={self.layer_id}"


class ChannelMix(Layer[ChannelMixState]):
    """What the RWKV-4 and RWKV-7 channel mixes share: a state of one shift."""

    State = ChannelMixState
    dim_ffn: int

    def _zeros(
        self, batch_size: int, device: torch.device | str, dtype: torch.dtype
    ) -> ChannelMixState:
        return ChannelMixState(torch.zeros(batch_size, self.n_embd, device=device, dtype=dtype))

    def _state_shapes(self, batch_size: int) -> tuple[tuple[int, ...], ...]:
        return ((batch_size, self.n_embd),)

    def extra_repr(self) -> str:
        return f"n_embd={self.n_embd}, dim_ffn={self.dim_ffn}, layer_id={self.layer_id}"


class RWKVChannelMix(ChannelMix):
    """RWKV-4 channel mixing: ``sigmoid(receptance(xr)) * value(relu(key(xk)) ** 2)``.

    ``xk``, ``xr`` mix the input with the previous token's (``time_mix_k``, ``time_mix_r``).

    Args:
        n_embd: width of the input and output.
        dim_ffn: hidden width (RWKV-4's ``dim_ffn``); default ``4 * n_embd``.
        layer_id: position in the stack, for the initial values only.
        n_layer: number of layers in the stack, for the initial values only.

    Parameters (RWKV-4 names and shapes): ``time_mix_k``, ``time_mix_r`` ``(1, 1, n_embd)``, both
    ``ddd ** r1a0`` (as in ``RWKVTimeMix``); ``key`` ``Linear(n_embd, dim_ffn)``,
    ``receptance`` ``Linear(n_embd, n_embd)``, ``value`` ``Linear(dim_ffn, n_embd)``, no bias.

    Call ``m(x)`` or ``m(x, state)`` with a ``ChannelMixState``: see ``forward``.
    """

    _math = staticmethod(channel_mix)
    _recurrent = ("time_mix_k", "time_mix_r", "key", "receptance", "value")

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

    def _like(self) -> torch.Tensor:
        return self.time_mix_k


class RWKVBlock(Layer[BlockState]):
    """One RWKV-4 layer: ``x = x + att(ln1(x)); x = x + ffn(ln2(x))``.

    Layer 0 also normalises its input first with ``ln0`` (RWKV-4 puts the layer norm of the
    embeddings there), so its state-dict keys are those of ``blocks.N`` in an RWKV-4
    checkpoint: ``ln1.*``, ``ln2.*``, ``ln0.*`` (layer 0 only), ``att.*``, ``ffn.*``.

    Args:
        n_embd: width of the residual stream.
        dim_att: width of the time mix (default ``n_embd``).
        dim_ffn: hidden width of the channel mix (default ``4 * n_embd``).
        layer_id: position in the stack, ``0 <= layer_id < n_layer``.
        n_layer: number of layers in the stack.

    Call ``m(x)`` or ``m(x, state)`` with a ``BlockState``: see ``forward``.
    """

    State = BlockState
    _math = staticmethod(block)
    _recurrent = ("ln0", "ln1", "ln2", "att", "ffn")
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
        self._add_block_children(
            RWKVTimeMix(n_embd, dim_att, layer_id, n_layer),
            RWKVChannelMix(n_embd, dim_ffn, layer_id, n_layer),
        )

    def _like(self) -> torch.Tensor:
        return self.att.time_mix_k

    def _zeros(self, batch_size: int, device: torch.device | str, dtype: torch.dtype) -> BlockState:
        return BlockState(
            self.att.init_state(batch_size, device=device, dtype=dtype),
            self.ffn.init_state(batch_size, device=device, dtype=dtype),
        )

    def _state_shapes(self, batch_size: int) -> tuple[None, None]:
        return None, None  # the mixers check their parts
