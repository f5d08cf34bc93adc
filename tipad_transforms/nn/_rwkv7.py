"""RWKV-7 "Goose" (x070) layers on ``tipad_transforms.ops.wkv7``, named like x070 checkpoints.

Written from BlinkDL's RWKV-LM ``RWKV-v7/train_temp/src/model.py`` (2025, the code the released
x070 models were trained with): ``RWKV7TimeMix`` (``RWKV_Tmix_x070``), ``RWKV7ChannelMix``
(``RWKV_CMix_x070``) and ``RWKV7Block`` (``Block``). Parameter names, shapes, registration order
and initial values are RWKV-LM's, so the ``blocks.N.*`` weights of an x070 checkpoint load with
``load_state_dict(strict=True)``.

The value residual: layer 0 hands its ``v`` (``v_first``) to every later layer, which mixes it
into its own ``v``. As in RWKV-LM, a layer takes ``v_first`` and returns it:
``x, v_first = block(x, v_first)``. ``v_first`` lives for one call; it is not part of a state.

Calls, as the RWKV-4 layers (``tipad_transforms.nn._rwkv4``):

- ``block(x, v_first)`` -> ``(y, v_first)``: a whole sequence from the zero state;
- ``block(x, v_first, state)`` -> ``(y, v_first, new_state)``: continues from ``state``
  (``None``: the zero state); pieces, down to one token at a time, equal the whole run to
  float rounding (docs/rwkv.md states the measured bound).

``RWKV7ChannelMix`` has no ``v_first``: ``ffn(x)`` -> ``y``, ``ffn(x, state)`` -> ``(y, state)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple, cast, overload

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import wkv7
from ..ops._wkv7 import MAX_HEAD_SIZE
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
    group_norm,
    last,
    layer_norm,
    linear,
    shifted,
    sizes_checked,
    state_dtype,
    step_linear,
)
from ._rwkv4 import ChannelMixState

__all__ = [
    "RWKV7Block",
    "RWKV7BlockState",
    "RWKV7ChannelMix",
    "RWKV7TimeMix",
    "RWKV7TimeMixState",
    "lora_widths",
]

# The log-decay scale: w = -exp(-0.5) * sigmoid(...), i.e. RWKV-LM's -softplus(-x) - 0.5 under exp.
_DECAY_SCALE = math.exp(-0.5)


class RWKV7TimeMixState(NamedTuple):
    """What ``RWKV7TimeMix`` carries from one token to the next.

    ``shift``: ``(B, n_embd)``, the previous token's input ``x`` in ``x``'s dtype (zeros before
    the first token). ``wkv``: ``(B, H, N, N)`` float32 (float64 for float64 ``x``), the WKV-7
    state per head indexed ``S[b, h, value, key]`` (zeros at the start; the layout of
    ``tipad_transforms.ops.wkv7`` and of the ``rwkv`` package's ``att_kv`` state).
    """

    shift: torch.Tensor
    wkv: torch.Tensor

    def detach(self) -> RWKV7TimeMixState:
        """The same values, cut from the autograd graph (between training chunks)."""
        return RWKV7TimeMixState(self.shift.detach(), self.wkv.detach())


class RWKV7BlockState(NamedTuple):
    """What ``RWKV7Block`` carries: its time mix's state and its channel mix's."""

    att: RWKV7TimeMixState
    ffn: ChannelMixState

    def detach(self) -> RWKV7BlockState:
        """The same values, cut from the autograd graph."""
        return RWKV7BlockState(self.att.detach(), self.ffn.detach())


def lora_widths(n_embd: int) -> dict[str, int]:
    """The LoRA widths the released x070 models were trained with, for width ``n_embd``.

    ``max(32, round(f / 32) * 32)`` with ``f = 1.8 sqrt(C)`` for ``w`` and ``a``, ``1.3 sqrt(C)``
    for ``v``, ``0.6 C^0.8`` for ``g`` (Python's ``round``, as RWKV-LM): ``{"w": 64, "a": 64,
    "v": 32, "g": 128}`` at ``C = 768``. RWKV-LM's 2026 code suggests wider ones; a checkpoint's
    own widths are read from its tensors by ``RWKV7.from_state_dict``.
    """
    check_size("n_embd", n_embd)

    def rule(f: float) -> int:
        return max(32, int(round(f / 32) * 32))

    root = math.sqrt(n_embd)
    return {"w": rule(1.8 * root), "a": rule(1.8 * root), "v": rule(1.3 * root),
            "g": rule(0.6 * n_embd**0.8)}  # fmt: skip


def _ratios(layer_id: int, n_layer: int) -> tuple[float, float]:
    """``(ratio_0_to_1, ratio_1_to_almost0)``; a lone layer counts as a first one (RWKV-LM: 0/0)."""
    check_layer(layer_id, n_layer)
    return (layer_id / (n_layer - 1) if n_layer > 1 else 0.0), 1.0 - layer_id / n_layer


def _ortho(rows: int, cols: int, scale: float) -> torch.Tensor:
    """RWKV-LM's ``ortho_init``: orthogonal, gain ``scale`` (times ``sqrt(rows/cols)`` if tall)."""
    gain = math.sqrt(rows / cols) if rows > cols else 1.0
    return nn.init.orthogonal_(torch.empty(rows, cols), gain=gain * scale)


def _uniform_linear(n_in: int, n_out: int, bound: float) -> nn.Linear:
    layer = nn.Linear(n_in, n_out, bias=False)
    with torch.no_grad():
        if bound == 0:
            layer.weight.zero_()
        else:
            layer.weight.uniform_(-bound, bound)
    return layer


# RWKV-LM's order of a time mix's own tensors in a checkpoint (its children's follow).
_ORDER = ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "w1", "w2", "w0", "a1", "a2", "a0",
          "v1", "v2", "v0", "g1", "g2", "k_k", "k_a", "r_k")  # fmt: skip


def _checkpoint_order(
    module: nn.Module, state_dict: dict[str, object], prefix: str, local_metadata: object
) -> None:
    """A ``state_dict`` post-hook of layer 0's time mix: its ``v1 v2 v0`` buffers, which
    ``state_dict`` lists after the parameters, back at their place in RWKV-LM's order."""
    mine = [k for k in state_dict if k.startswith(prefix)]
    rank = {prefix + name: i for i, name in enumerate(_ORDER)}
    entries = [(k, state_dict.pop(k)) for k in mine]
    own = sorted((e for e in entries if e[0] in rank), key=lambda e: rank[e[0]])
    state_dict.update(own + [e for e in entries if e[0] not in rank])


class RWKV7TimeMix(nn.Module):
    """RWKV-7 time mixing (RWKV-LM ``RWKV_Tmix_x070``).

    With ``xx`` the previous token's input minus this one's and ``x_m = x + xx * x_m`` for
    ``m`` in ``r w k v a g``:

    - ``r, k, v = receptance(x_r), key(x_k), value(x_v)``;
    - log decay ``w = -exp(-0.5) * sigmoid(w0 + tanh(x_w @ w1) @ w2)`` (decay ``exp(w)`` in
      ``(0.545, 1)``);
    - value residual: layer 0 keeps ``v_first = v``; later layers
      ``v <- v + (v_first - v) * sigmoid(v0 + (x_v @ v1) @ v2)``;
    - in-context learning rate ``iclr = sigmoid(a0 + (x_a @ a1) @ a2)``, gate
      ``g = sigmoid(x_g @ g1) @ g2``;
    - ``kk = normalize(k * k_k)`` per head, ``k <- k * (1 + (iclr - 1) * k_a)``;
    - ``y = wkv7(r, w, k, v, -kk, kk * iclr)`` per head (``tipad_transforms.ops.wkv7``);
    - ``out = output((ln_x(y) + sum_N(r * k * r_k) * v) * g)``, ``ln_x`` a GroupNorm over heads.

    Args:
        n_embd: width ``C`` of the input, output and attention (``C = H * head_size``).
        layer_id, n_layer: position in the stack, ``0 <= layer_id < n_layer``; they set the
            initial values, and layer 0 produces ``v_first`` instead of mixing it in.
        head_size: ``N``, 64 in the released models; must divide ``n_embd`` and be at most
            128 (``ops.wkv7``'s limit).
        w_lora, a_lora, v_lora, g_lora: LoRA widths (RWKV-LM's ``D_DECAY_LORA``,
            ``D_AAA_LORA``, ``D_MV_LORA``, ``D_GATE_LORA``); default ``lora_widths(n_embd)``.

    Parameters, in RWKV-LM's order (state-dict keys ``blocks.N.att.*``; float32 at creation;
    ``C`` wide vectors are ``(1, 1, C)``): ``x_r x_w x_k x_v x_a x_g``; ``w1 (C, w_lora)``,
    ``w2 (w_lora, C)``, ``w0``; ``a1 a2 a0``; ``v1 v2 v0``; ``g1 g2``; ``k_k``, ``k_a``,
    ``r_k (H, N)``;
    ``receptance key value output`` (``Linear(C, C)``, no bias); ``ln_x``
    (``GroupNorm(H, C, eps=64e-5)``). Initial values are RWKV-LM's (see docs/rwkv.md), with
    ``ln_x.weight = ((1 + layer_id) / n_layer) ** 0.7`` from its ``generate_init_weight``.

    Layer 0 makes ``v_first`` instead of mixing it in, so its ``v0 v1 v2`` are unused; x070
    checkpoints carry them for every layer all the same. There they are buffers, not
    parameters: the same state-dict keys, shapes, values and order (``load_state_dict(strict=True)``
    and ``.to()`` treat them alike), but no part in
    autograd, so ``DistributedDataParallel`` with its default ``find_unused_parameters=False``
    finds no parameter without a gradient, and ``parameters()`` (what an optimizer is given)
    leaves them out.

    Raises:
        TypeError: a size that is not an int. ValueError: a size below 1, ``head_size`` not
        dividing ``n_embd`` or above 128, ``layer_id`` outside ``[0, n_layer)``, or sizes
        whose tensors cannot be allocated.
    """

    @sizes_checked
    def __init__(
        self,
        n_embd: int,
        layer_id: int = 0,
        n_layer: int = 1,
        *,
        head_size: int = 64,
        w_lora: int | None = None,
        a_lora: int | None = None,
        v_lora: int | None = None,
        g_lora: int | None = None,
    ) -> None:
        super().__init__()
        c = self.n_embd = check_size("n_embd", n_embd)
        n = self.head_size = check_size("head_size", head_size)
        if c % n:
            raise ValueError(f"head_size={n} must divide n_embd={c}")
        if n > MAX_HEAD_SIZE:
            raise ValueError(
                f"head_size must be at most {MAX_HEAD_SIZE} (the limit of ops.wkv7), got {n}"
            )
        h = self.n_head = c // n
        self.layer_id = layer_id
        r01, r1a0 = _ratios(layer_id, n_layer)
        widths = lora_widths(c)
        given = {"w": w_lora, "a": a_lora, "v": v_lora, "g": g_lora}
        for key, value in given.items():
            if value is not None:
                widths[key] = check_size(f"{key}_lora", value)
        self.lora = widths

        ddd = channel_ramp(c)
        i = torch.arange(c, dtype=torch.float64)
        linear = i / max(c - 1, 1) - 0.5
        half = max((n - 1) / 2, 0.5)  # one-channel heads: RWKV-LM divides by 0
        zigzag = ((i % n) - (n - 1) / 2) / half
        zigzag = zigzag * zigzag.abs()
        www = -6 + 6 * (i / max(c - 1, 1)) ** (1 + r01**0.3)

        def vec(t: torch.Tensor) -> nn.Parameter:
            return nn.Parameter(t.reshape(1, 1, c).float())

        self.x_r = vec(1.0 - ddd ** (0.2 * r1a0))
        self.x_w = vec(1.0 - ddd ** (0.9 * r1a0))
        self.x_k = vec(1.0 - ddd ** (0.7 * r1a0))
        self.x_v = vec(1.0 - ddd ** (0.7 * r1a0))
        self.x_a = vec(1.0 - ddd ** (0.9 * r1a0))
        self.x_g = vec(1.0 - ddd ** (0.2 * r1a0))
        self.w1 = nn.Parameter(torch.zeros(c, widths["w"]))
        self.w2 = nn.Parameter(_ortho(widths["w"], c, 0.1))
        self.w0 = vec(www + 0.5 + zigzag * 2.5)  # 0.5: RWKV-LM's softplus offset
        self.a1 = nn.Parameter(torch.zeros(c, widths["a"]))
        self.a2 = nn.Parameter(_ortho(widths["a"], c, 0.1))
        self.a0 = vec(-0.19 + zigzag * 0.3 + linear * 0.4)
        v1, v2 = torch.zeros(c, widths["v"]), _ortho(widths["v"], c, 0.1)
        v0 = (0.73 - linear * 0.4).reshape(1, 1, c).float()
        if layer_id == 0:  # unused: buffers (see the class docstring)
            self.register_buffer("v1", v1)
            self.register_buffer("v2", v2)
            self.register_buffer("v0", v0)
            self.register_state_dict_post_hook(_checkpoint_order)
        else:
            self.v1, self.v2, self.v0 = nn.Parameter(v1), nn.Parameter(v2), nn.Parameter(v0)
        self.g1 = nn.Parameter(torch.zeros(c, widths["g"]))
        self.g2 = nn.Parameter(_ortho(widths["g"], c, 0.1))
        self.k_k = vec(0.71 - linear * 0.1)
        self.k_a = vec(torch.full((c,), 1.02, dtype=torch.float64))
        self.r_k = nn.Parameter(torch.full((h, n), -0.04))

        self.receptance = _uniform_linear(c, c, 0.5 / c**0.5)
        self.key = _uniform_linear(c, c, 0.05 / c**0.5)
        self.value = _uniform_linear(c, c, 0.5 / c**0.5)
        self.output = _uniform_linear(c, c, 0.0)
        self.ln_x = nn.GroupNorm(h, c, eps=64e-5)
        with torch.no_grad():
            self.ln_x.weight.fill_(((1 + layer_id) / n_layer) ** 0.7)

    def init_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> RWKV7TimeMixState:
        """The state before the first token: zero ``shift`` ``(batch_size, n_embd)`` in
        ``dtype`` and zero ``wkv`` ``(batch_size, H, N, N)``, float32 (float64 when ``dtype`` is
        float64). ``device`` and ``dtype`` default to the module's parameters'.
        """
        check_state_args(batch_size, device, dtype)
        device = self.x_r.device if device is None else device
        dtype = self.x_r.dtype if dtype is None else dtype
        return RWKV7TimeMixState(
            torch.zeros(batch_size, self.n_embd, device=device, dtype=dtype),
            torch.zeros(
                batch_size, self.n_head, self.head_size, self.head_size,
                device=device, dtype=state_dtype(dtype),
            ),
        )  # fmt: skip

    @overload
    def forward(
        self, x: torch.Tensor, v_first: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...
    @overload
    def forward(
        self, x: torch.Tensor, v_first: torch.Tensor | None, state: RWKV7TimeMixState | None
    ) -> tuple[torch.Tensor, torch.Tensor, RWKV7TimeMixState]: ...

    def forward(
        self,
        x: torch.Tensor,
        v_first: torch.Tensor | None = None,
        state: RWKV7TimeMixState | Stateless | None = STATELESS,
    ) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, RWKV7TimeMixState]:
        """Mix ``x`` ``(B, T, n_embd)`` over time.

        Returns ``(y, v_first)``, or ``(y, v_first, new_state)`` when ``state`` is given
        (``None``: the zero state). ``y`` has ``x``'s shape and dtype; ``v_first``
        ``(B, T, n_embd)`` is this layer's ``v`` in layer 0 and the ``v_first`` passed in
        otherwise (layers after 0 require it; layer 0 ignores it). Floating ``x`` in the
        parameters' dtype on their device; the WKV-7 state is float32 (float64 for float64
        ``x``). Raises ``ValueError`` naming ``x``, ``v_first`` or ``state`` for a wrong shape,
        batch size or device, ``TypeError`` for a wrong type.
        """
        return self._forward(x, v_first, state, False)

    def _forward(
        self,
        x: torch.Tensor,
        v_first: torch.Tensor | None,
        state: RWKV7TimeMixState | Stateless | None,
        fast: bool,
    ) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, RWKV7TimeMixState]:
        """``forward``; ``fast``: the children as ``F.linear`` / ``F.group_norm`` (what
        ``RWKV7Block``'s eager inference step checked they are)."""
        x = check_x(x, self.n_embd, self.x_r)
        b, t, c = x.shape
        checked: RWKV7TimeMixState | None = None
        if state is not STATELESS:
            if state is None:
                state = self.init_state(b, device=x.device, dtype=x.dtype)
            checked = self._check_state(state, x)
        if self.layer_id > 0:
            if v_first is None:
                raise ValueError(
                    f"v_first is required by layer {self.layer_id}: pass the v_first that "
                    "layer 0 returned"
                )
            v_first = check_part("v_first", v_first, (b, t, c), x)
            if v_first.dtype != x.dtype and not torch.is_autocast_enabled(x.device.type):
                raise TypeError(f"v_first must have x's dtype {x.dtype}, got {v_first.dtype}")
        xx = shifted(x, None if checked is None else checked.shift) - x
        r = linear(self.receptance, x + xx * self.x_r, fast)
        w = -_DECAY_SCALE * torch.sigmoid(
            self.w0 + torch.tanh((x + xx * self.x_w) @ self.w1) @ self.w2
        )
        k = linear(self.key, x + xx * self.x_k, fast)
        xv = x + xx * self.x_v
        v = linear(self.value, xv, fast)
        if self.layer_id == 0:
            v_first = v
        else:
            assert v_first is not None
            v = v + (v_first - v) * torch.sigmoid(self.v0 + (xv @ self.v1) @ self.v2)
        iclr = torch.sigmoid(self.a0 + ((x + xx * self.x_a) @ self.a1) @ self.a2)
        g = torch.sigmoid((x + xx * self.x_g) @ self.g1) @ self.g2

        def heads(z: torch.Tensor) -> torch.Tensor:
            return z.view(b, t, self.n_head, self.head_size)

        kk = F.normalize(heads(k * self.k_k), dim=-1, p=2.0)
        k = k * (1 + (iclr - 1) * self.k_a)
        args = (heads(r), heads(w), heads(k), heads(v), -kk, kk * heads(iclr))
        if checked is None:
            y = wkv7(*args)
            new_state = None
        else:
            y, s = wkv7(*args, checked.wkv)
            new_state = RWKV7TimeMixState(last(x, checked.shift), s)
        y = (
            group_norm(self.ln_x, y.reshape(b * t, c), fast).view(b, t, c)
            if b * t
            else y.reshape(b, t, c)
        )
        bonus = (heads(r) * heads(k) * self.r_k).sum(-1, keepdim=True) * heads(v)
        out = linear(self.output, (y + bonus.view(b, t, c)) * g, fast)
        return (out, v_first) if new_state is None else (out, v_first, new_state)

    def _check_state(self, state: object, x: torch.Tensor) -> RWKV7TimeMixState:
        state = check_tuple(state, 2, "RWKV7TimeMixState")
        b = x.shape[0]
        shift = check_part("state.shift", state[0], (b, self.n_embd), x)
        n, h = self.head_size, self.n_head
        s = check_part("state.wkv", state[1], (b, h, n, n), x)
        if s.dtype != state_dtype(x.dtype):
            raise TypeError(
                f"state.wkv must be {state_dtype(x.dtype)} for {x.dtype} x, got {s.dtype}"
            )
        return RWKV7TimeMixState(shift, s)

    def extra_repr(self) -> str:
        return (
            f"n_embd={self.n_embd}, head_size={self.head_size}, layer_id={self.layer_id}, "
            f"lora={self.lora}"
        )


class RWKV7ChannelMix(KeepsRows):
    """RWKV-7 channel mixing (RWKV-LM ``RWKV_CMix_x070``): ``value(relu(key(x_k)) ** 2)``.

    ``x_k = x + xx * x_k``, ``xx`` the previous token's input minus this one's; no receptance.

    Args:
        n_embd: width of the input and output.
        layer_id, n_layer: position in the stack, for the initial values only.
        dim_ffn: hidden width, default ``4 * n_embd`` (the released models').

    Parameters (RWKV-LM's names, shapes and init): ``x_k`` ``(1, 1, n_embd)``,
    ``1 - ddd ** (r1a0 ** 4)``; ``key`` ``Linear(n_embd, dim_ffn)`` uniform
    ``±0.5 / sqrt(n_embd)``; ``value`` ``Linear(dim_ffn, n_embd)`` zero; no bias.

    Call ``m(x)`` -> ``y`` or ``m(x, state)`` -> ``(y, new_state)`` with a ``ChannelMixState``
    (``None``: the zero state), as ``RWKVChannelMix``. The eager inference step (see
    ``RWKV7Block``) reads ``key`` through a row-major ``(n_embd, dim_ffn)`` copy of its weight
    when ``dim_ffn > n_embd`` (``_common.rows_weight``); the parameter itself stays the
    contiguous ``(dim_ffn, n_embd)`` of ``nn.Linear``.
    """

    @sizes_checked
    def __init__(
        self, n_embd: int, layer_id: int = 0, n_layer: int = 1, *, dim_ffn: int | None = None
    ) -> None:
        super().__init__()
        c = self.n_embd = check_size("n_embd", n_embd)
        self.dim_ffn = 4 * c if dim_ffn is None else check_size("dim_ffn", dim_ffn)
        self.layer_id = layer_id
        _, r1a0 = _ratios(layer_id, n_layer)
        self.x_k = nn.Parameter((1.0 - channel_ramp(c) ** (r1a0**4)).float())
        self.key = _uniform_linear(c, self.dim_ffn, 0.5 / c**0.5)
        self.value = _uniform_linear(self.dim_ffn, c, 0.0)

    def init_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> ChannelMixState:
        """The state before the first token: zero ``shift`` ``(batch_size, n_embd)``."""
        check_state_args(batch_size, device, dtype)
        device = self.x_k.device if device is None else device
        dtype = self.x_k.dtype if dtype is None else dtype
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
        """``x`` ``(B, T, n_embd)`` -> ``y`` of the same shape and dtype; with ``state``
        returns ``(y, new_state)``. Errors as ``RWKV7TimeMix.forward``.
        """
        return self._forward(x, state, False)

    def _forward(
        self, x: torch.Tensor, state: ChannelMixState | Stateless | None, fast: bool
    ) -> torch.Tensor | tuple[torch.Tensor, ChannelMixState]:
        """``forward``; ``fast`` as ``RWKV7TimeMix._forward``."""
        x = check_x(x, self.n_embd, self.x_k)
        prev = None
        if state is not STATELESS:
            if state is None:
                state = self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
            (prev,) = check_tuple(state, 1, "ChannelMixState")
            prev = check_part("state.shift", prev, (x.shape[0], self.n_embd), x)
        k = x + (shifted(x, prev) - x) * self.x_k
        if fast:
            k = step_linear(self, "key", k)
        else:
            if torch.is_grad_enabled():  # training: no copy held beside the weights
                forget_rows(self)
            k = self.key(k)
        y = linear(self.value, torch.square(torch.relu(k)), fast)
        return y if prev is None else (y, ChannelMixState(last(x, prev)))

    def extra_repr(self) -> str:
        return f"n_embd={self.n_embd}, dim_ffn={self.dim_ffn}, layer_id={self.layer_id}"


class RWKV7Block(nn.Module):
    """One RWKV-7 layer (RWKV-LM ``Block``): ``x = x + att(ln1(x)); x = x + ffn(ln2(x))``.

    Layer 0 first normalises its input with ``ln0`` and produces ``v_first``. State-dict keys:
    ``ln1.*``, ``ln2.*``, ``ln0.*`` (layer 0 only), ``att.*``, ``ffn.*``, as ``blocks.N`` of an
    x070 checkpoint.

    Args:
        n_embd, layer_id, n_layer, head_size, w_lora, a_lora, v_lora, g_lora: as
            ``RWKV7TimeMix``.
        dim_ffn: as ``RWKV7ChannelMix``.

    Call ``block(x, v_first)`` -> ``(y, v_first)``, or ``block(x, v_first, state)`` ->
    ``(y, v_first, new_state)`` with an ``RWKV7BlockState`` (``None``: the zero state).
    """

    @sizes_checked
    def __init__(
        self,
        n_embd: int,
        layer_id: int = 0,
        n_layer: int = 1,
        *,
        head_size: int = 64,
        dim_ffn: int | None = None,
        w_lora: int | None = None,
        a_lora: int | None = None,
        v_lora: int | None = None,
        g_lora: int | None = None,
    ) -> None:
        super().__init__()
        check_size("n_embd", n_embd)
        check_layer(layer_id, n_layer)
        self.layer_id = layer_id
        self.ln1 = nn.LayerNorm(n_embd)
        self.ln2 = nn.LayerNorm(n_embd)
        self.ln0 = nn.LayerNorm(n_embd) if layer_id == 0 else None
        self.att = RWKV7TimeMix(
            n_embd, layer_id, n_layer, head_size=head_size,
            w_lora=w_lora, a_lora=a_lora, v_lora=v_lora, g_lora=g_lora,
        )  # fmt: skip
        self.ffn = RWKV7ChannelMix(n_embd, layer_id, n_layer, dim_ffn=dim_ffn)

    def init_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> RWKV7BlockState:
        """The state before the first token (see ``RWKV7TimeMixState``, ``ChannelMixState``)."""
        return RWKV7BlockState(
            self.att.init_state(batch_size, device=device, dtype=dtype),
            self.ffn.init_state(batch_size, device=device, dtype=dtype),
        )

    @overload
    def forward(
        self, x: torch.Tensor, v_first: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...
    @overload
    def forward(
        self, x: torch.Tensor, v_first: torch.Tensor | None, state: RWKV7BlockState | None
    ) -> tuple[torch.Tensor, torch.Tensor, RWKV7BlockState]: ...

    def forward(
        self,
        x: torch.Tensor,
        v_first: torch.Tensor | None = None,
        state: RWKV7BlockState | Stateless | None = STATELESS,
    ) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, RWKV7BlockState]:
        """``x`` ``(B, T, n_embd)`` -> ``(y, v_first)``, or ``(y, v_first, new_state)`` with a
        ``state``. Errors as ``RWKV7TimeMix.forward``.
        """
        x = check_x(x, self.att.n_embd, self.att.x_r)
        if state is not STATELESS and state is not None:
            check_tuple(state, 2, "RWKV7BlockState")
        if self.ln0 is not None:
            x = self.ln0(x)
        if state is STATELESS:
            a, v_first = self.att(self.ln1(x), v_first)
            x = x + a
            return x + self.ffn(self.ln2(x)), v_first
        if state is None:
            state = self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        mixers = ((self.att, RWKV7TimeMix), (self.ffn, RWKV7ChannelMix))
        if not fast_step(x, self, mixers, (self.ln0, self.ln1, self.ln2)):
            a, v_first, att_state = self.att(self.ln1(x), v_first, state[0])
            x = x + a
            f, ffn_state = self.ffn(self.ln2(x), state[1])
            return x + f, v_first, RWKV7BlockState(att_state, ffn_state)
        # Eager inference (one-token generation): the same computation without module calls.
        att = self.att._forward(layer_norm(self.ln1, x, True), v_first, state[0], True)
        a, v_first, att_state = cast(tuple[torch.Tensor, torch.Tensor, RWKV7TimeMixState], att)
        x = x + a
        ffn = self.ffn._forward(layer_norm(self.ln2, x, True), state[1], True)
        f, ffn_state = cast(tuple[torch.Tensor, ChannelMixState], ffn)
        return x + f, v_first, RWKV7BlockState(att_state, ffn_state)
