"""RWKV-7 WKV: the custom ops ``tipad::wkv7_forward`` and ``tipad::wkv7_backward`` (fakes and
autograd registered: they trace under ``torch.compile(fullgraph=True)`` and pass
``torch.library.opcheck``) and ``wkv7``.

The backward keeps no state per step: the forward saves the state every ``_CHUNK`` steps (when
a gradient is needed) and the backward recomputes one chunk's states at a time. Mixed input
dtypes are promoted as ``wkv7`` says; no autocast rule is registered, so eager, compiled and
autocast calls take the same path.
"""

from __future__ import annotations

from functools import reduce
from typing import Any, overload

import torch
from torch import Tensor

from ... import backends
from ..._checks import check_float, check_tensor
from ..._tracing import eager
from .._common import math_dtype, register_state_autograd

__all__ = ["MAX_HEAD_SIZE", "WKV7", "wkv7", "wkv7_backward", "wkv7_forward"]

#: The RWKV-7 family: ``forward(r, d, k, v, a, b, state, y, states, chunk)`` and
#: ``backward(r, d, k, v, a, b, state, saved, gy, gstate, grads, chunk)``.
WKV7 = backends.family("wkv7", __package__, "computing wkv7", ("forward", "backward"))

#: The largest head size ``N`` accepted (the released models use 64).
MAX_HEAD_SIZE = 128

# Steps between the forward's checkpoints of the state (what the backward starts each chunk
# from). Memory ~ T / _CHUNK + 2 * _CHUNK states per head: 32 balances them near T = 2048.
_CHUNK = 32

_NAMES = ("r", "w", "k", "v", "a", "b")
# Fresh row-major outputs (never views of another output, as custom ops require).
_DENSE = torch.contiguous_format


def _slots(t: Any, save: bool) -> Any:
    """The forward's saved states: a checkpoint per chunk and the final state, or the final."""
    return (t + _CHUNK - 1) // _CHUNK + 1 if save else 1


def _result_dtype(inputs: tuple[Tensor, ...]) -> torch.dtype:
    """The dtype of ``y``: the six inputs' float dtypes promoted as torch promotes them."""
    return reduce(torch.promote_types, (t.dtype for t in inputs))


def _check(inputs: tuple[Any, ...], state: Any) -> tuple[int, int, int, int]:
    """``(B, T, H, N)`` of valid arguments, else a TypeError/ValueError naming the culprit."""
    for name, t in zip(_NAMES, inputs, strict=True):
        check_float(name, t)  # a dense float tensor
    r = inputs[0]
    if r.dim() != 4:
        raise ValueError(f"r must be (B, T, H, N), got shape {tuple(r.shape)}")
    for name, t in zip(_NAMES[1:], inputs[1:], strict=True):
        if t.shape != r.shape:
            raise ValueError(f"{name} must have r's shape {tuple(r.shape)}, got {tuple(t.shape)}")
    b, t, h, n = r.shape
    if n > MAX_HEAD_SIZE:
        raise ValueError(
            f"the head size N must be at most {MAX_HEAD_SIZE}, got r of {tuple(r.shape)}"
        )
    named = list(zip(_NAMES[1:], inputs[1:], strict=True))
    if state is not None:
        if not isinstance(state, Tensor):
            raise TypeError(f"state must be a torch.Tensor or None, got {type(state).__name__}")
        check_tensor("state", state)
        if state.shape != (b, h, n, n):
            raise ValueError(
                f"state must be ({b}, {h}, {n}, {n}) for r of shape {tuple(r.shape)}, "
                f"got {tuple(state.shape)}"
            )
        dtype = _result_dtype(inputs)
        m = math_dtype(dtype)
        if state.dtype != m:
            raise TypeError(f"state must be {m} for {dtype} inputs, got {state.dtype}")
        named.append(("state", state))
    for name, p in named:
        if p.device != r.device:
            raise ValueError(f"{name} is on {p.device}, r on {r.device}: use one device")
    return b, t, h, n


Six = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


def _operands(inputs: Six) -> Six:
    """``r, d = exp(w), k, v, a, b``: detached, contiguous, in the math dtype of the promoted
    one. ``exp`` keeps NaN and inf."""
    m = math_dtype(_result_dtype(inputs))
    r, w, k, v, a, b = (t.detach().to(m).contiguous() for t in inputs)
    return r, torch.exp(w), k, v, a, b


@torch.library.custom_op("tipad::wkv7_forward", mutates_args=())
def wkv7_forward(
    r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor, save: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """``(y, new_state, saved)``: ``y`` ``(B, T, H, N)`` in the inputs' promoted dtype, the
    state after the last token ``(B, H, N, N)``, and ``saved`` ``(B, H, S, N, N)`` in the math
    dtype: with ``save`` (S = ceil(T / _CHUNK) + 1) the checkpoints ``wkv7_backward`` reads and
    the final state, else (S = 1) the final state. Arguments as ``wkv7`` (``state``
    required)."""
    y, new_state, states = _forward(r, w, k, v, a, b, state, save)
    return y, new_state.clone(memory_format=_DENSE) if not save else new_state, states


def _forward(
    r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor, save: bool,
    checked: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """``wkv7_forward``'s implementation, also run directly by ``wkv7`` without a graph to
    record (same code, same bits). Without ``save`` the new state it returns is a view of the
    states it returns (the op clones it: custom ops' outputs must not alias). ``checked``: the
    caller ran ``_check`` on these arguments (``wkv7`` does, before choosing the route)."""
    if not checked:
        _check((r, w, k, v, a, b), state)
    n_b, n_t, n_h, n_n = k.shape
    ops = _operands((r, w, k, v, a, b))
    s = state.detach().to(ops[0].dtype).contiguous()
    y = ops[0].new_empty(n_b, n_t, n_h, n_n)
    states = ops[0].new_empty(n_b, n_h, _slots(n_t, save), n_n, n_n)
    if y.numel() == 0:  # no step to take: the state passes through
        states.copy_(s.unsqueeze(2).expand(states.shape))
    else:
        WKV7.forward(*ops, s, y, states, _CHUNK)
    new_state = states[:, :, -1]
    if save:
        new_state = new_state.clone(memory_format=_DENSE)
    return y.to(_result_dtype((r, w, k, v, a, b))), new_state, states


@wkv7_forward.register_fake
def _(r, w, k, v, a, b, state, save):  # type: ignore[no-untyped-def]
    _check((r, w, k, v, a, b), state)
    n_b, n_t, n_h, n_n = r.shape
    dtype = _result_dtype((r, w, k, v, a, b))
    saved = r.new_empty(n_b, n_h, _slots(n_t, save), n_n, n_n, dtype=math_dtype(dtype))
    return r.new_empty(r.shape, dtype=dtype), state.new_empty(state.shape), saved


@torch.library.custom_op("tipad::wkv7_backward", mutates_args=())
def wkv7_backward(
    r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor, saved: Tensor,
    grad_y: Tensor, grad_state: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """Gradients of ``wkv7_forward`` w.r.t. ``(r, w, k, v, a, b, state)``, each in its input's
    dtype, given those of ``y`` and of the new state.

    ``saved``: the forward's third output; the checkpoints are recomputed when it holds only
    the final state. ``w``'s gradient is ``exp(w)`` times ``d``'s (``d = exp(w)``).
    """
    inputs = (r, w, k, v, a, b)
    _check(inputs, state)
    n_b, n_t, n_h, n_n = k.shape
    ops = _operands(inputs)
    m = ops[0].dtype
    gy = grad_y.detach().to(m).contiguous()
    gs = grad_state.detach().to(m).clone(memory_format=_DENSE)  # becomes the initial state's
    if gy.numel() == 0:  # no step: the state's gradient passes through
        grads = [torch.zeros_like(x) for x in ops]
    else:
        out = ops[0].new_empty(6, n_b, n_t, n_h, n_n)
        s = state.detach().to(m).contiguous()
        WKV7.backward(*ops, s, saved.detach().to(m).contiguous(), gy, gs, out, _CHUNK)
        grads = list(out.unbind(0))
        grads[1] = grads[1] * ops[1]  # d/dw = d/dd * exp(w)
    gr, gw, gk, gv, ga, gb = (
        g.to(x.dtype).clone(memory_format=_DENSE) for g, x in zip(grads, inputs, strict=True)
    )
    return gr, gw, gk, gv, ga, gb, gs.to(state.dtype).clone(memory_format=_DENSE)


@wkv7_backward.register_fake
def _(r, w, k, v, a, b, state, saved, grad_y, grad_state):  # type: ignore[no-untyped-def]
    return (*(x.new_empty(x.shape) for x in (r, w, k, v, a, b)), state.new_empty(state.shape))


register_state_autograd(wkv7_forward, wkv7_backward, y_like=0)


@overload
def wkv7(
    r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: None = None
) -> Tensor: ...


@overload
def wkv7(
    r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]: ...


def wkv7(
    r: Tensor, w: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor | None = None
) -> Tensor | tuple[Tensor, Tensor]:
    """RWKV-7 ("Goose", x070) WKV with a state in and out.

    Per batch and head, with the state ``S`` ``(N, N)`` indexed ``S[value, key]``:
    ``S_t = S_{t-1} diag(exp(w_t)) + (S_{t-1} a_t) b_t^T + v_t k_t^T`` and ``y_t = S_t r_t``
    (``y`` read after the update). In the x070 model ``a = -kk`` and ``b = kk * iclr``.

    Args:
        r, w, k, v, a, b: ``(B, T, H, N)`` dense float tensors (float16, bfloat16, float32 or
            float64; they may mix, as under ``torch.autocast``), any ``T`` (0 included),
            ``N <= 128``, on one device (cpu or cuda; meta tensors give meta results); any
            strides. ``w`` is the log of the per-step decay (the decay ``exp(w)`` is in (0, 1)
            for ``w < 0``; nothing is clamped, NaN and inf propagate).
        state: ``(B, H, N, N)`` to start from, float32 (float64 when the inputs' promoted
            dtype is float64); None: zeros, and only ``y`` is returned.

    Returns:
        ``y`` ``(B, T, H, N)`` in the inputs' promoted dtype (``torch.promote_types``: bfloat16
        for all-bfloat16 inputs, float32 for bfloat16 mixed with float32); the math runs in
        float32 (float64 for a float64 promoted dtype) whatever the inputs. With ``state``,
        ``(y, new_state)``, the new state differentiable too. Running the tokens in chunks,
        passing the state on, equals running them at once, gradients included (all seven
        arguments get them, each in its own dtype). Arguments are never modified. The
        backward's memory: ``B * H * N^2 * (ceil(T / 32) + 66)`` numbers of the math dtype
        (checkpoints every 32 steps and one chunk of scratch), not a state per step.

    Raises:
        TypeError: an argument is not a tensor, not floating point, sparse or nested, or
            ``state`` has the wrong dtype.
        ValueError: wrong shapes, ``N > 128``, or arguments on different devices.
    """
    inputs = (r, w, k, v, a, b)
    n_b, _, n_h, n_n = _check(inputs, state)
    s = state
    if s is None:
        s = r.new_zeros(n_b, n_h, n_n, n_n, dtype=math_dtype(_result_dtype(inputs)))
    if eager(*inputs, s):  # no graph to record: the implementation, without the dispatcher
        y, new_state, _ = _forward(r, w, k, v, a, b, s, False, checked=True)
    else:
        save = torch.is_grad_enabled() and any(t.requires_grad for t in (*inputs, s))
        y, new_state, _ = wkv7_forward(r, w, k, v, a, b, s, save)
    return y if state is None else (y, new_state)
