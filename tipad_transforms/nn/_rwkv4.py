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
  the output of running it whole, to float rounding (docs/rwkv.md states the measured bound).

A state is a small ``NamedTuple`` of tensors (``TimeMixState``, ``ChannelMixState``,
``BlockState``); ``state.detach()`` cuts the graph between training chunks. Calls never modify a
state in place: each returns a new one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import itemgetter
from typing import NamedTuple, overload

import torch
from torch import nn

from ..ops import init_wkv_state, wkv
from ._common import (
    STATELESS,
    KeepsRows,
    Stateless,
    channel_ramp,
    check_layer,
    check_part,
    check_size,
    check_state_args,
    check_tuple,
    check_x,
    fast_step,
    forget_rows,
    last,
    layer_norm,
    read,
    shifted,
    sizes_checked,
    state_dtype,
    step_linear,
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


class RWKVTimeMix(KeepsRows):
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

    Call ``m(x)`` or ``m(x, state)``: see ``forward``. The weights are contiguous
    ``nn.Linear`` weights; the eager inference step (``RWKVBlock``) reads widening ones
    (``dim_att > n_embd``) through a row-major ``(n_embd, dim_att)`` copy.
    """

    @sizes_checked
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

        self.key = nn.Linear(n_embd, self.dim_att, bias=False)
        self.value = nn.Linear(n_embd, self.dim_att, bias=False)
        self.receptance = nn.Linear(n_embd, self.dim_att, bias=False)
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
        check_state_args(batch_size, device, dtype)
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
        (rank, last dim, batch size) or device, ``TypeError`` for a wrong type or dtype.
        """
        x = check_x(x, self.n_embd, self.time_mix_k)
        if torch.is_grad_enabled():  # training: no copy held beside the weights
            forget_rows(self)
        if state is STATELESS:
            k, v, r = self._kvr(x, shifted(x, None))
            return self.output(torch.sigmoid(r) * wkv(self.time_decay, self.time_first, k, v))
        if state is None:
            state = self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        shift, aa_bb_pp = self._check_state(state, x)
        k, v, r = self._kvr(x, shifted(x, shift))
        y, aa_bb_pp = wkv(self.time_decay, self.time_first, k, v, aa_bb_pp)
        return self.output(torch.sigmoid(r) * y), TimeMixState(last(x, shift), aa_bb_pp)

    def _kvr(
        self, x: torch.Tensor, xx: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mix = _mixer(x, xx)
        k = self.key(mix(self.time_mix_k))
        v = self.value(mix(self.time_mix_v))
        return k, v, self.receptance(mix(self.time_mix_r))

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


class RWKVChannelMix(KeepsRows):
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

    Call ``m(x)`` or ``m(x, state)``: see ``forward``. The eager inference step
    (``RWKVBlock``) reads ``key`` through a row-major ``(n_embd, dim_ffn)`` copy of its weight
    when ``dim_ffn > n_embd``.
    """

    @sizes_checked
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

        self.key = nn.Linear(n_embd, self.dim_ffn, bias=False)
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
        check_state_args(batch_size, device, dtype)
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
        x = check_x(x, self.n_embd, self.time_mix_k)
        if torch.is_grad_enabled():  # training: no copy held beside the weights
            forget_rows(self)
        if state is STATELESS:
            return self._mix(x, None)
        if state is None:
            state = self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        (prev,) = self._check_state(state, x)
        return self._mix(x, prev), ChannelMixState(last(x, prev))

    def _mix(self, x: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
        mix = _mixer(x, shifted(x, prev))
        k = torch.square(torch.relu(self.key(mix(self.time_mix_k))))
        return torch.sigmoid(self.receptance(mix(self.time_mix_r))) * self.value(k)

    def _check_state(self, state: object, x: torch.Tensor) -> ChannelMixState:
        (prev,) = check_tuple(state, 1, "ChannelMixState")
        return ChannelMixState(check_part("state.shift", prev, (x.shape[0], self.n_embd), x))

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

    @sizes_checked
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
        ln0, ln1, ln2, att, ffn = _parts(self)
        x = check_x(x, att.n_embd, att.time_mix_k)
        if state is not STATELESS and state is not None:
            check_tuple(state, 2, "BlockState")
        if state is STATELESS:
            if ln0 is not None:
                x = ln0(x)
            x = x + att(ln1(x))
            return x + ffn(ln2(x))
        if state is None:
            state = self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        if fast_step(x, self, ((att, RWKVTimeMix), (ffn, RWKVChannelMix)), (ln0, ln1, ln2)):
            return _eager_step(self, x, state)
        if ln0 is not None:
            x = ln0(x)
        a, att_state = att(ln1(x), state[0])
        x = x + a
        f, ffn_state = ffn(ln2(x), state[1])
        return x + f, BlockState(att_state, ffn_state)


# The eager step reads parameters and children from the modules' dicts: one C call each, where
# nn.Module.__getattr__ costs ~1.5 us a read (an ordinary lookup that fails, then Python).
# The mixers' linear maps in the order the steps use them (also the RNN plan's, nn/_rnn.py).
TIME_MIX_MAPS = ("key", "value", "receptance", "output")
CHANNEL_MIX_MAPS = ("key", "receptance", "value")
_TIME_MIX = itemgetter("time_decay", "time_first", "time_mix_k", "time_mix_v", "time_mix_r")
_CHANNEL_MIX = itemgetter("time_mix_k", "time_mix_r")


def _parts(
    block: RWKVBlock,
) -> tuple[nn.LayerNorm | None, nn.LayerNorm, nn.LayerNorm, RWKVTimeMix, RWKVChannelMix]:
    """``block``'s ``ln0`` (layer 0's, else None), ``ln1``, ``ln2``, ``att``, ``ffn``."""
    m = block._modules  # subscripts, not an itemgetter: torch.compile traces forward
    # ln0 = None on the other layers is a plain attribute, not a child.
    return m.get("ln0"), m["ln1"], m["ln2"], m["att"], m["ffn"]  # type: ignore[return-value]


def _eager_step(block: RWKVBlock, x: torch.Tensor, state: tuple) -> tuple[torch.Tensor, BlockState]:
    """``block(x, state)`` (a checked ``x``, a ``BlockState``-like ``state``) where
    ``fast_step`` allows it: no graph to record, plain modules, no hooks.

    The module path's ops on the same tensors in the same order (a widening weight read
    through its row-major copy, ``_common.step_linear``: the same values, rounded as that
    layout's product rounds), written as one flat function on ``F.linear`` /
    ``F.layer_norm``: a one-token step (RNN mode,
    generation) is all fixed cost, about 30 small ops a layer, and the module path's calls,
    helpers and attribute reads add up to more than a tenth of the step (measured against the
    ``rwkv`` package; docs/benchmarks.md). The states are checked as the mixers check them.
    """
    ln0, ln1, ln2, att, ffn = _parts(block)
    if ln0 is not None:
        x = layer_norm(ln0, x, True)
    shift_att, aa_bb_pp = att._check_state(state[0], x)
    (shift_ffn,) = ffn._check_state(state[1], x)

    # Time mix: output(sigmoid(r) * wkv(k, v)), k v r from the token mixed with the last one.
    time_decay, time_first, mix_k, mix_v, mix_r = read(_TIME_MIX, att)
    xa = layer_norm(ln1, x, True)
    mix = _mixer(xa, shifted(xa, shift_att))
    k = step_linear(att, "key", mix(mix_k))
    v = step_linear(att, "value", mix(mix_v))
    r = step_linear(att, "receptance", mix(mix_r))
    y, aa_bb_pp = wkv(time_decay, time_first, k, v, aa_bb_pp)
    x = x + step_linear(att, "output", torch.sigmoid(r) * y)

    # Channel mix: sigmoid(r) * value(relu(key(xk)) ** 2).
    mix_k, mix_r = read(_CHANNEL_MIX, ffn)
    xf = layer_norm(ln2, x, True)
    mix = _mixer(xf, shifted(xf, shift_ffn))
    k = torch.square(torch.relu(step_linear(ffn, "key", mix(mix_k))))
    x = x + torch.sigmoid(step_linear(ffn, "receptance", mix(mix_r))) * step_linear(ffn, "value", k)
    new_state = BlockState(
        TimeMixState(last(xa, shift_att), aa_bb_pp), ChannelMixState(last(xf, shift_ffn))
    )
    return x, new_state
