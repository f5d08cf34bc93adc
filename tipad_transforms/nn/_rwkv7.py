"""RWKV-7 "Goose" (x070) layers on ``ops.wkv7``, written from BlinkDL's RWKV-LM
``RWKV-v7/train_temp/src/model.py`` (the code the released x070 models were trained with):
``RWKV7TimeMix`` (``RWKV_Tmix_x070``), ``RWKV7ChannelMix`` (``RWKV_CMix_x070``), ``RWKV7Block``
(``Block``). Names, shapes, registration order and initial values are RWKV-LM's, so the
``blocks.N.*`` weights of an x070 checkpoint load with ``strict=True``. Each layer's math is one
function of the module or its recurrent snapshot, as in ``nn/_rwkv4.py``.

The value residual: layer 0 hands its ``v`` (``v_first``) to every later layer, which mixes it
into its own; as in RWKV-LM a layer takes ``v_first`` and returns it. It lives for one call,
not in a state.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import wkv7
from ..ops.rwkv7 import MAX_HEAD_SIZE
from ._common import (
    Block,
    ValueLayer,
    channel_ramp,
    check_part,
    check_size,
    last,
    ratios,
    shifted,
    sizes_checked,
)
from ._rwkv4 import ChannelMix, ChannelMixState

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
    """What ``RWKV7TimeMix`` carries from one token to the next: ``shift`` as in
    ``TimeMixState``; ``wkv`` ``(B, H, N, N)`` float32 (float64 for float64 ``x``), the WKV-7
    state per head indexed ``S[b, h, value, key]`` (zeros at the start; the layout of
    ``ops.wkv7`` and of the ``rwkv`` package's ``att_kv`` state).
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
    """The LoRA widths the released x070 models were trained with, for width ``n_embd``:
    ``{"w": 64, "a": 64, "v": 32, "g": 128}`` at 768 (the rule: docs/rwkv.md). A checkpoint's
    own widths are read from its tensors by ``RWKV7.from_state_dict``."""
    check_size("n_embd", n_embd)

    def rule(f: float) -> int:
        return max(32, int(round(f / 32) * 32))

    root = math.sqrt(n_embd)
    return {"w": rule(1.8 * root), "a": rule(1.8 * root), "v": rule(1.3 * root),
            "g": rule(0.6 * n_embd**0.8)}  # fmt: skip


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


# ---- the math ---------------------------------------------------------------------------------


def time_mix(
    m: Any, x: torch.Tensor, v_first: torch.Tensor | None, state: RWKV7TimeMixState | None
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """RWKV-7 time mixing (see ``RWKV7TimeMix``); ``(y, v_first, new_state)`` (``None``
    without a state)."""
    b, t, c = x.shape
    xx = shifted(x, state) - x
    r = m.receptance(x + xx * m.x_r)
    w = -_DECAY_SCALE * torch.sigmoid(m.w0 + torch.tanh((x + xx * m.x_w) @ m.w1) @ m.w2)
    k = m.key(x + xx * m.x_k)
    xv = x + xx * m.x_v
    v = m.value(xv)
    if m.layer_id == 0:
        v_first = v
    else:
        v = v + (v_first - v) * torch.sigmoid(m.v0 + (xv @ m.v1) @ m.v2)
    iclr = torch.sigmoid(m.a0 + ((x + xx * m.x_a) @ m.a1) @ m.a2)
    g = torch.sigmoid((x + xx * m.x_g) @ m.g1) @ m.g2

    def heads(z: torch.Tensor) -> torch.Tensor:
        return z.view(b, t, m.n_head, m.head_size)

    kk = F.normalize(heads(k * m.k_k), dim=-1, p=2.0)
    k = k * (1 + (iclr - 1) * m.k_a)
    args = (heads(r), heads(w), heads(k), heads(v), -kk, kk * heads(iclr))
    if state is None:
        y, new_state = wkv7(*args), None
    else:
        y, s = wkv7(*args, state.wkv)
        new_state = RWKV7TimeMixState(last(x, state.shift), s)
    y = m.ln_x(y.reshape(b * t, c)).view(b, t, c) if b * t else y.reshape(b, t, c)
    bonus = (heads(r) * heads(k) * m.r_k).sum(-1, keepdim=True) * heads(v)
    return m.output((y + bonus.view(b, t, c)) * g), v_first, new_state  # type: ignore[return-value]


def channel_mix(m: Any, x: torch.Tensor, state: ChannelMixState | None) -> tuple[torch.Tensor, Any]:
    """``value(relu(key(x_k)) ** 2)``, ``x_k`` the token mixed with the previous one."""
    k = m.key(x + (shifted(x, state) - x) * m.x_k)
    y = m.value(torch.square(torch.relu(k)))
    return y, None if state is None else ChannelMixState(last(x, state.shift))


def block(
    m: Any, x: torch.Tensor, v_first: torch.Tensor | None, state: RWKV7BlockState | None
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """``x = ln0(x)`` (layer 0), ``x = x + att(ln1(x), v_first)``, ``x = x + ffn(ln2(x))``."""
    if m.ln0 is not None:
        x = m.ln0(x)
    if state is None:
        a, v_first = m.att(m.ln1(x), v_first)
        x = x + a
        return x + m.ffn(m.ln2(x)), v_first, None
    a, v_first, att = m.att(m.ln1(x), v_first, state[0])
    x = x + a
    f, ffn = m.ffn(m.ln2(x), state[1])
    return x + f, v_first, RWKV7BlockState(att, ffn)


# ---- the modules ------------------------------------------------------------------------------


class RWKV7TimeMix(ValueLayer[RWKV7TimeMixState]):
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

    Parameters: RWKV-LM's names, shapes, order and initial values (float32), tabled in
    docs/rwkv.md ("RWKV-7 layers"). Layer 0's ``v0 v1 v2`` are unused, but x070 checkpoints
    carry them: there they are buffers (the same state-dict keys, shapes and order), so
    ``DistributedDataParallel``'s default ``find_unused_parameters=False`` finds no parameter
    without a gradient and ``parameters()`` leaves them out.

    Raises:
        TypeError: a size that is not an int. ValueError: a size below 1, ``head_size`` not
        dividing ``n_embd`` or above 128, ``layer_id`` outside ``[0, n_layer)``, or sizes
        whose tensors cannot be allocated.
    """

    State = RWKV7TimeMixState
    _math = staticmethod(time_mix)
    _like_name = "x_r"
    _repr = ("n_embd", "head_size", "layer_id", "lora")
    _recurrent = ("layer_id", "n_head", "head_size", *_ORDER,
                  "receptance", "key", "value", "output", "ln_x")  # fmt: skip

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
        super().__init__(n_embd, layer_id, n_layer)
        c = self.n_embd
        n = self.head_size = check_size("head_size", head_size)
        if c % n:
            raise ValueError(f"head_size={n} must divide n_embd={c}")
        if n > MAX_HEAD_SIZE:
            raise ValueError(
                f"head_size must be at most {MAX_HEAD_SIZE} (the limit of ops.wkv7), got {n}"
            )
        h = self.n_head = c // n
        r01, r1a0 = ratios(layer_id, n_layer)
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

    def _state_shapes(self, batch_size: int) -> tuple[tuple[int, ...], ...]:
        n = self.head_size
        return (batch_size, self.n_embd), (batch_size, self.n_head, n, n)

    def _check_v_first(self, v_first: object, x: torch.Tensor) -> torch.Tensor | None:
        if self.layer_id == 0:
            return None  # layer 0 makes its own
        if v_first is None:
            raise ValueError(
                f"v_first is required by layer {self.layer_id}: pass the v_first that "
                "layer 0 returned"
            )
        v_first = check_part("v_first", v_first, tuple(x.shape), x)
        if v_first.dtype != x.dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(f"v_first must have x's dtype {x.dtype}, got {v_first.dtype}")
        return v_first


class RWKV7ChannelMix(ChannelMix):
    """RWKV-7 channel mixing (RWKV-LM ``RWKV_CMix_x070``): ``value(relu(key(x_k)) ** 2)``,
    ``x_k = x + xx * x_k``, ``xx`` the previous token's input minus this one's.

    Args:
        n_embd: width of the input and output.
        layer_id, n_layer: position in the stack, for the initial values only.
        dim_ffn: hidden width, default ``4 * n_embd`` (the released models').

    Parameters ``x_k`` ``(1, 1, n_embd)``, ``key``, ``value`` (no bias), as ``RWKV7TimeMix``'s.
    Call ``m(x)`` -> ``y`` or ``m(x, state)`` -> ``(y, new_state)`` with a ``ChannelMixState``
    (``None``: the zero state), as ``RWKVChannelMix``.
    """

    _math = staticmethod(channel_mix)
    _recurrent = ("x_k", "key", "value")
    _like_name = "x_k"

    @sizes_checked
    def __init__(
        self, n_embd: int, layer_id: int = 0, n_layer: int = 1, *, dim_ffn: int | None = None
    ) -> None:
        super().__init__(n_embd, layer_id, n_layer)
        c = self.n_embd
        self.dim_ffn = 4 * c if dim_ffn is None else check_size("dim_ffn", dim_ffn)
        _, r1a0 = ratios(layer_id, n_layer)
        self.x_k = nn.Parameter((1.0 - channel_ramp(c) ** (r1a0**4)).float())
        self.key = _uniform_linear(c, self.dim_ffn, 0.5 / c**0.5)
        self.value = _uniform_linear(self.dim_ffn, c, 0.0)


class RWKV7Block(Block[RWKV7BlockState], ValueLayer[RWKV7BlockState]):
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

    State = RWKV7BlockState
    _math = staticmethod(block)
    att: RWKV7TimeMix
    ffn: RWKV7ChannelMix

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
        super().__init__(n_embd, layer_id, n_layer)
        self._add_children(
            RWKV7TimeMix(
                n_embd, layer_id, n_layer, head_size=head_size,
                w_lora=w_lora, a_lora=a_lora, v_lora=v_lora, g_lora=g_lora,
            ),
            RWKV7ChannelMix(n_embd, layer_id, n_layer, dim_ffn=dim_ffn),
        )  # fmt: skip
