"""RWKV-4 layers on the ``tipad_transforms.ops.wkv`` kernel, named like RWKV-4 checkpoints.

One page in the spirit of BlinkDL's RWKV-LM ``RWKV-v4neo/src/model.py``: ``RWKVTimeMix`` (the
attention-like mixer over time), ``RWKVChannelMix`` (the feed-forward one) and ``RWKVBlock`` (both
behind layer norms, with residuals). Parameter names, shapes and initial values are RWKV-4's, so
the ``blocks.N.*`` weights of an RWKV-4 checkpoint load with ``load_state_dict(strict=True)``.

Every module runs in two ways:

- ``m(x)``: ``x`` is a whole sequence ``(B, T, n_embd)``, the first token sees zeros as its past;
  returns ``y`` ``(B, T, n_embd)``.
- ``m(x, state)``: the sequence continues from ``state`` (``m.init_state(B)`` at the start, or
  the state a previous call returned; ``None``: the zero state); returns ``(y, new_state)``.
  Running a sequence in pieces, down to one token at a time (RNN mode, for generation), gives
  the output of running it whole.

A state is a small ``NamedTuple`` of tensors (``TimeMixState``, ``ChannelMixState``,
``BlockState``); ``state.detach()`` cuts the graph between training chunks. Calls never modify a
state in place: each returns a new one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, overload

import torch
from torch import nn

from ..ops import init_wkv_state, wkv
from ._common import (
    STATELESS,
    Stateless,
    channel_ramp,
    check_layer,
    check_part,
    check_size,
    check_tuple,
    check_x,
    fast_step,
    generation_layout,
    last,
    layer_norm,
    linear,
    shifted,
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


def _layer_ratios(layer_id: int, n_layer: int) -> tuple[float, float]:
    """RWKV-4's depth ratios ``(r01, r1a0)``: 0 -> 1 and 1 -> ~0 from the first layer to the last.

    RWKV-LM computes ``r01 = layer_id / (n_layer - 1)``, a ZeroDivisionError for a single layer;
    here a lone layer counts as a first layer (``r01 = 0``), as ``layer_id = 0`` does anywhere.
    """
    check_layer(layer_id, n_layer)
    r01 = layer_id / (n_layer - 1) if n_layer > 1 else 0.0
    return r01, 1.0 - layer_id / n_layer


def _mix(x: torch.Tensor, xx: torch.Tensor, time_mix: torch.Tensor) -> torch.Tensor:
    return x * time_mix + xx * (1 - time_mix)


def _mixer(x: torch.Tensor, xx: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``_mix(x, xx, m)`` for several ``m`` as ``xx + (x - xx) * m``: one fused op per mix
    after one shared difference, where ``_mix`` takes four (a one-token step is all fixed
    cost). Rounds differently from ``_mix``: used on the no-grad path only, where nothing
    compares it with a gradient."""
    if torch.is_grad_enabled():
        return lambda m: _mix(x, xx, m)
    d = x - xx
    return lambda m: torch.addcmul(xx, d, m)


class RWKVTimeMix(nn.Module):
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

    Call ``m(x)`` or ``m(x, state)``: see ``forward``.
    """

    def __init__(
        self, n_embd: int, dim_att: int | None = None, layer_id: int = 0, n_layer: int = 1
    ) -> None:
        super().__init__()
        self.n_embd = check_size("n_embd", n_embd)
        self.dim_att = n_embd if dim_att is None else check_size("dim_att", dim_att)
        self.layer_id = layer_id
        r01, r1a0 = _layer_ratios(layer_id, n_layer)

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

        self.key = generation_layout(nn.Linear(n_embd, self.dim_att, bias=False))
        self.value = generation_layout(nn.Linear(n_embd, self.dim_att, bias=False))
        self.receptance = generation_layout(nn.Linear(n_embd, self.dim_att, bias=False))
        self.output = nn.Linear(self.dim_att, n_embd, bias=False)

    def init_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> TimeMixState:
        """The state before the first token: zero ``shift`` ``(batch_size, n_embd)`` in ``dtype``
        and the WKV start ``(batch_size, 3, dim_att)`` (``0, 0, -1e38``), float32, or float64
        when ``dtype`` is float64.

        ``device`` and ``dtype`` default to the module's parameters'.
        """
        check_size("batch_size", batch_size)
        device = self.time_mix_k.device if device is None else device
        dtype = self.time_mix_k.dtype if dtype is None else dtype
        return TimeMixState(
            torch.zeros(batch_size, self.n_embd, device=device, dtype=dtype),
            init_wkv_state(batch_size, self.dim_att, device=device, dtype=state_dtype(dtype)),
        )

    @overload
    def forward(self, x: torch.Tensor) -> torch.Tensor: ...
    @overload
    def forward(
        self, x: torch.Tensor, state: TimeMixState | None
    ) -> tuple[torch.Tensor, TimeMixState]: ...

    def forward(
        self, x: torch.Tensor, state: TimeMixState | Stateless | None = STATELESS
    ) -> torch.Tensor | tuple[torch.Tensor, TimeMixState]:
        """Mix ``x`` ``(B, T, n_embd)`` over time; returns ``y`` of the same shape and dtype.

        Floating ``x`` in the parameters' dtype (float32, float64, float16, bfloat16) on their
        device; the WKV recurrence and its state are float32 (float64 for float64 ``x``).
        With ``state`` (a ``TimeMixState`` for batch size ``B``) the sequence continues from it
        and ``(y, new_state)`` is returned; ``state=None`` starts from ``init_state(B)`` and
        returns the pair too. Raises ``ValueError`` naming ``x`` or ``state`` for a wrong shape
        (rank, last dim, batch size) or device, ``TypeError`` for a wrong type.
        """
        x = check_x(x, self.n_embd)
        if state is STATELESS:
            xx = shifted(x, None)
            k, v, r = self._kvr(x, xx)
            return self.output(torch.sigmoid(r) * wkv(self.time_decay, self.time_first, k, v))
        if state is None:
            state = self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        return self._run(x, self._check_state(state, x), False)

    def _run(
        self, x: torch.Tensor, state: TimeMixState, fast: bool
    ) -> tuple[torch.Tensor, TimeMixState]:
        """The stateful call on checked arguments; ``fast``: the linear maps as ``F.linear``
        (``RWKVBlock``'s eager inference step, which checked that this is what they are)."""
        k, v, r = self._kvr(x, shifted(x, state.shift), fast)
        y, s = wkv(self.time_decay, self.time_first, k, v, state.wkv)
        out = linear(self.output, torch.sigmoid(r) * y, fast)
        return out, TimeMixState(last(x, state.shift), s)

    def _kvr(
        self, x: torch.Tensor, xx: torch.Tensor, fast: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mix = _mixer(x, xx)
        k = linear(self.key, mix(self.time_mix_k), fast)
        v = linear(self.value, mix(self.time_mix_v), fast)
        return k, v, linear(self.receptance, mix(self.time_mix_r), fast)

    def _check_state(self, state: object, x: torch.Tensor) -> TimeMixState:
        state = check_tuple(state, 2, "TimeMixState")
        b = x.shape[0]
        shift = check_part("state.shift", state[0], (b, self.n_embd), x)
        s = check_part("state.wkv", state[1], (b, 3, self.dim_att), x)
        if s.dtype != state_dtype(x.dtype):
            raise TypeError(
                f"state.wkv must be {state_dtype(x.dtype)} for {x.dtype} x, got {s.dtype}"
            )
        return TimeMixState(shift, s)

    def extra_repr(self) -> str:
        return f"n_embd={self.n_embd}, dim_att={self.dim_att}, layer_id={self.layer_id}"


class RWKVChannelMix(nn.Module):
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

    Call ``m(x)`` or ``m(x, state)``: see ``forward``.
    """

    def __init__(
        self, n_embd: int, dim_ffn: int | None = None, layer_id: int = 0, n_layer: int = 1
    ) -> None:
        super().__init__()
        self.n_embd = check_size("n_embd", n_embd)
        self.dim_ffn = 4 * n_embd if dim_ffn is None else check_size("dim_ffn", dim_ffn)
        self.layer_id = layer_id
        _, r1a0 = _layer_ratios(layer_id, n_layer)
        ddd = channel_ramp(n_embd)
        self.time_mix_k = nn.Parameter((ddd**r1a0).float())
        self.time_mix_r = nn.Parameter((ddd**r1a0).float())

        self.key = generation_layout(nn.Linear(n_embd, self.dim_ffn, bias=False))
        self.receptance = nn.Linear(n_embd, n_embd, bias=False)
        self.value = nn.Linear(self.dim_ffn, n_embd, bias=False)

    def init_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> ChannelMixState:
        """The state before the first token: zero ``shift`` ``(batch_size, n_embd)``.

        ``device`` and ``dtype`` default to the module's parameters'.
        """
        check_size("batch_size", batch_size)
        device = self.time_mix_k.device if device is None else device
        dtype = self.time_mix_k.dtype if dtype is None else dtype
        return ChannelMixState(torch.zeros(batch_size, self.n_embd, device=device, dtype=dtype))

    @overload
    def forward(self, x: torch.Tensor) -> torch.Tensor: ...
    @overload
    def forward(
        self, x: torch.Tensor, state: ChannelMixState | None
    ) -> tuple[torch.Tensor, ChannelMixState]: ...

    def forward(
        self, x: torch.Tensor, state: ChannelMixState | Stateless | None = STATELESS
    ) -> torch.Tensor | tuple[torch.Tensor, ChannelMixState]:
        """``x`` ``(B, T, n_embd)`` -> ``y`` of the same shape and dtype; with ``state`` (a
        ``ChannelMixState`` for batch size ``B``, or ``None`` for the zero state) returns
        ``(y, new_state)``.

        Errors as ``RWKVTimeMix.forward``.
        """
        x = check_x(x, self.n_embd)
        if state is STATELESS:
            return self._mix(x, None, False)
        if state is None:
            state = self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        return self._run(x, state, False)

    def _run(
        self, x: torch.Tensor, state: object, fast: bool
    ) -> tuple[torch.Tensor, ChannelMixState]:
        """The stateful call on a checked ``x``; ``fast`` as ``RWKVTimeMix._run``."""
        (prev,) = check_tuple(state, 1, "ChannelMixState")
        prev = check_part("state.shift", prev, (x.shape[0], self.n_embd), x)
        return self._mix(x, prev, fast), ChannelMixState(last(x, prev))

    def _mix(self, x: torch.Tensor, prev: torch.Tensor | None, fast: bool) -> torch.Tensor:
        mix = _mixer(x, shifted(x, prev))
        k = torch.square(torch.relu(linear(self.key, mix(self.time_mix_k), fast)))
        r = linear(self.receptance, mix(self.time_mix_r), fast)
        return torch.sigmoid(r) * linear(self.value, k, fast)

    def extra_repr(self) -> str:
        return f"n_embd={self.n_embd}, dim_ffn={self.dim_ffn}, layer_id={self.layer_id}"


class RWKVBlock(nn.Module):
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

    Call ``m(x)`` or ``m(x, state)``: see ``forward``.
    """

    def __init__(
        self,
        n_embd: int,
        dim_att: int | None = None,
        dim_ffn: int | None = None,
        layer_id: int = 0,
        n_layer: int = 1,
    ) -> None:
        super().__init__()
        check_size("n_embd", n_embd)
        self.layer_id = layer_id
        self.ln1 = nn.LayerNorm(n_embd)
        self.ln2 = nn.LayerNorm(n_embd)
        self.ln0 = nn.LayerNorm(n_embd) if layer_id == 0 else None
        self.att = RWKVTimeMix(n_embd, dim_att, layer_id, n_layer)
        self.ffn = RWKVChannelMix(n_embd, dim_ffn, layer_id, n_layer)

    def init_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> BlockState:
        """The state before the first token (see ``TimeMixState``, ``ChannelMixState``)."""
        return BlockState(
            self.att.init_state(batch_size, device=device, dtype=dtype),
            self.ffn.init_state(batch_size, device=device, dtype=dtype),
        )

    @overload
    def forward(self, x: torch.Tensor) -> torch.Tensor: ...
    @overload
    def forward(
        self, x: torch.Tensor, state: BlockState | None
    ) -> tuple[torch.Tensor, BlockState]: ...

    def forward(
        self, x: torch.Tensor, state: BlockState | Stateless | None = STATELESS
    ) -> torch.Tensor | tuple[torch.Tensor, BlockState]:
        """``x`` ``(B, T, n_embd)`` -> ``(B, T, n_embd)``; with ``state`` (a ``BlockState``, or
        ``None`` for the zero state) returns ``(y, new_state)``. Errors as
        ``RWKVTimeMix.forward``.
        """
        x = check_x(x, self.att.n_embd)
        if state is not STATELESS and state is not None:
            check_tuple(state, 2, "BlockState")
        if self.ln0 is not None:
            x = self.ln0(x)
        if state is STATELESS:
            x = x + self.att(self.ln1(x))
            return x + self.ffn(self.ln2(x))
        if state is None:
            state = self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        mixers = ((self.att, RWKVTimeMix), (self.ffn, RWKVChannelMix))
        if not fast_step(x, self, mixers, (self.ln0, self.ln1, self.ln2)):
            a, att_state = self.att(self.ln1(x), state[0])
            x = x + a
            f, ffn_state = self.ffn(self.ln2(x), state[1])
            return x + f, BlockState(att_state, ffn_state)
        # Eager inference (one-token generation): the same computation without the module
        # calls; the children's checks that matter (the states') still run.
        xa = layer_norm(self.ln1, x, True)
        a, att_state = self.att._run(xa, self.att._check_state(state[0], xa), True)
        x = x + a
        f, ffn_state = self.ffn._run(layer_norm(self.ln2, x, True), state[1], True)
        return x + f, BlockState(att_state, ffn_state)
