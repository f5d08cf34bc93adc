"""RWKV-4 WKV: the custom ops ``tipad::wkv_forward`` and ``tipad::wkv_backward`` (fakes and
autograd registered: they trace under ``torch.compile(fullgraph=True)`` and pass
``torch.library.opcheck``), ``wkv`` and ``init_wkv_state``.

The recurrence runs per (batch, channel) chain in RWKV-4's numerically stable form (numerator
``aa``, denominator ``bb``, running max ``pp``). The backward reads the state before every
step, saved by the forward when a gradient is needed (``3 * B * (T + 1) * C`` numbers) or
recomputed.
"""

from __future__ import annotations

from typing import overload

import torch
from torch import Tensor

from ... import backends
from ..._checks import check_device, check_float, check_tensor
from ..._tracing import eager
from .._common import check_meta, math_dtype, register_state_autograd

__all__ = ["WKV", "init_wkv_state", "wkv", "wkv_backward", "wkv_forward"]

#: The RWKV-4 family: ``forward(time_decay, time_first, state, k, v, y, states)`` and
#: ``backward(time_decay, w, u, k, v, state, saved, gy, gstate, gk, gv, grads)``.
WKV = backends.family("wkv", __package__, "computing wkv", ("forward", "backward"))

# Fresh row-major outputs (never views of another output, as custom ops require).
_DENSE = torch.contiguous_format


def init_wkv_state(
    batch_size: int, channels: int, *, device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:  # fmt: skip
    """The WKV state before the first token: ``(batch_size, 3, channels)``.

    Rows: numerator ``aa = 0``, denominator ``bb = 0``, running max ``pp = -1e38``. ``dtype``:
    float32 (for float16, bfloat16 and float32 inputs) or float64 (for float64 inputs).

    Raises:
        TypeError: non-int sizes, another dtype, a ``device`` that is not a device, str or None.
        ValueError: negative sizes, a state too large to allocate (naming both sizes), a
            device string torch does not know.
    """
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    for name, value in (("batch_size", batch_size), ("channels", channels)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    device = check_device(device)
    nbytes = batch_size * 3 * channels * (8 if dtype == torch.float64 else 4)
    try:
        if nbytes >= 2**63:
            raise RuntimeError("more than 2**63 bytes")
        state = torch.zeros(batch_size, 3, channels, device=device, dtype=dtype)
    except RuntimeError as exc:  # the allocator's refusal (CUDA's OutOfMemoryError is one)
        raise ValueError(
            f"batch_size={batch_size} and channels={channels} give a state of {nbytes} bytes, "
            f"which cannot be allocated: {str(exc).splitlines()[0]}"
        ) from None
    state[:, 2] = -1e38
    return state


def _check(
    time_decay: Tensor, time_first: Tensor, k: Tensor, v: Tensor, state: Tensor
) -> tuple[int, int, int]:
    """``(B, T, C)`` of arguments the kernels can take, else a TypeError/ValueError naming the
    culprit (metadata only: the fake implementations run it too)."""
    for name, x in (("time_decay", time_decay), ("time_first", time_first), ("k", k), ("v", v)):
        check_float(name, x)
    if k.dim() != 3:
        raise ValueError(f"k must be (B, T, C), got shape {tuple(k.shape)}")
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if v.dtype != k.dtype:
        raise TypeError(f"v must have k's dtype {k.dtype}, got {v.dtype}")
    b, t, c = k.shape
    for name, p in (("time_decay", time_decay), ("time_first", time_first)):
        if p.shape != (c,):
            raise ValueError(
                f"{name} must be ({c},) for k of shape {tuple(k.shape)}, got {tuple(p.shape)}"
            )
    if state.shape != (b, 3, c):
        raise ValueError(
            f"state must be ({b}, 3, {c}) for k of shape {tuple(k.shape)}, got {tuple(state.shape)}"
        )
    m = math_dtype(k.dtype)
    if state.dtype != m:
        raise TypeError(f"state must be {m} for {k.dtype} inputs, got {state.dtype}")
    named = [("time_decay", time_decay), ("time_first", time_first), ("v", v), ("state", state)]
    for name, p in named:
        if p.device != k.device:
            raise ValueError(f"{name} is on {p.device}, k on {k.device}: use one device")
    return b, t, c


def _operands(
    time_decay: Tensor, time_first: Tensor, k: Tensor, v: Tensor, state: Tensor
) -> tuple[Tensor, ...]:
    """``w = -exp(time_decay)``, ``u``, ``k``, ``v``, ``state``: detached, contiguous, in the
    math dtype."""
    m = math_dtype(k.dtype)
    w = -torch.exp(time_decay.detach().to(m))
    return tuple(_operand(t, m) for t in (w, time_first, k, v, state))


def _operand(t: Tensor, m: torch.dtype) -> Tensor:
    # Most calls (one-token steps included) pass tensors that need nothing: skip three calls.
    if t.dtype == m and not t.requires_grad and t.is_contiguous():
        return t
    return t.detach().to(m).contiguous()


def _forward(
    time_decay: Tensor, time_first: Tensor, k: Tensor, v: Tensor, state: Tensor, save: bool
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``wkv_forward``'s implementation, also run directly by ``wkv`` without a graph to
    record (same code, same bits): ``y``, the new state, and with ``save`` the states before
    every step, else None. Converts only the inputs that are not contiguous math-dtype
    tensors (the kernel computes ``w = -exp(time_decay)`` itself)."""
    b, t, c = _check(time_decay, time_first, k, v, state)
    m = math_dtype(k.dtype)
    kk, vv, s = _operand(k, m), _operand(v, m), _operand(state, m)
    y = kk.new_empty(b, t, c)
    states = kk.new_empty(3, b, t + 1, c) if save else kk.new_empty(b, 3, c)
    if t == 0 or b == 0 or c == 0:  # no step to take: the state passes through
        states.copy_(s.transpose(0, 1).unsqueeze(2).expand(3, b, t + 1, c) if save else s)
    else:
        WKV.forward(_operand(time_decay, m), _operand(time_first, m), s, kk, vv, y, states)
    if y.dtype != k.dtype:  # half-precision inputs: y was computed in float32
        y = y.to(k.dtype)
    if save:
        new_state = states[:, :, -1].transpose(0, 1).clone(memory_format=_DENSE)
        return y, new_state, states
    return y, states, None


@torch.library.custom_op("tipad::wkv_forward", mutates_args=())
def wkv_forward(
    time_decay: Tensor, time_first: Tensor, k: Tensor, v: Tensor, state: Tensor, save: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """``(y, new_state, saved)``: ``y`` ``(B, T, C)`` in ``k``'s dtype, the state after the last
    token ``(B, 3, C)``, and ``saved`` ``(3, B, S, C)`` in the math dtype: with ``save`` (S = T
    + 1) the state before every step, what ``wkv_backward`` reads, else empty (S = 0: the
    backward recomputes them). Arguments and errors as ``wkv``'s (``state`` required)."""
    y, new_state, saved = _forward(time_decay, time_first, k, v, state, save)
    if saved is None:
        saved = y.new_empty(3, k.shape[0], 0, k.shape[2], dtype=new_state.dtype)
    return y, new_state, saved


@wkv_forward.register_fake
def _(time_decay, time_first, k, v, state, save):  # type: ignore[no-untyped-def]
    b, t, c = _check(time_decay, time_first, k, v, state)
    saved = k.new_empty(3, b, t + 1 if save else 0, c, dtype=math_dtype(k.dtype))
    return k.new_empty(k.shape), state.new_empty(state.shape), saved


def _check_backward(
    time_decay: Tensor, time_first: Tensor, k: Tensor, v: Tensor, state: Tensor, saved: Tensor,
    grad_y: Tensor, grad_state: Tensor,
) -> tuple[int, int, int]:  # fmt: skip
    b, t, c = _check(time_decay, time_first, k, v, state)
    if saved.dim() != 4 or tuple(saved.shape) not in ((3, b, 0, c), (3, b, t + 1, c)):
        raise ValueError(
            f"saved must be (3, {b}, 0 or {t + 1}, {c}) (wkv_forward's third output), got "
            f"{tuple(saved.shape)}"
        )
    check_meta("saved", saved, dtype=math_dtype(k.dtype), device=k.device, like="k")
    for name, g, shape in (("grad_y", grad_y, (b, t, c)), ("grad_state", grad_state, (b, 3, c))):
        check_float(name, g)
        check_meta(name, g, shape=shape, device=k.device, like="k")
    return b, t, c


@torch.library.custom_op("tipad::wkv_backward", mutates_args=())
def wkv_backward(
    time_decay: Tensor, time_first: Tensor, k: Tensor, v: Tensor, state: Tensor, saved: Tensor,
    grad_y: Tensor, grad_state: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """Gradients of ``wkv_forward`` w.r.t. ``(time_decay, time_first, k, v, state)``, each in
    its input's dtype, given those of ``y`` and of the new state.

    ``saved``: the forward's third output (the states recomputed when it is empty). The
    per-chain gradients of ``w`` and ``u`` are summed over the batch here (a fixed order:
    deterministic); ``time_decay``'s is ``w``'s times ``w`` (``w = -exp(time_decay)``).
    """
    b, _, c = _check_backward(time_decay, time_first, k, v, state, saved, grad_y, grad_state)
    w, u, kk, vv, s = _operands(time_decay, time_first, k, v, state)
    m = kk.dtype
    gy = grad_y.detach().to(m).contiguous()
    gs = grad_state.detach().to(m).contiguous()
    if kk.numel() == 0:  # no step: the state's gradient passes through
        gw, gu = kk.new_zeros(b, c), kk.new_zeros(b, c)
        gk, gv, gs_in = kk.new_zeros(kk.shape), kk.new_zeros(kk.shape), gs
    else:
        gk, gv, grads = kk.new_empty(kk.shape), kk.new_empty(kk.shape), kk.new_empty(5 * b * c)
        td = _operand(time_decay, m)
        WKV.backward(td, w, u, kk, vv, s, saved.detach().contiguous(), gy, gs, gk, gv, grads)
        gw, gu = grads[: b * c].view(b, c), grads[b * c : 2 * b * c].view(b, c)
        gs_in = grads[2 * b * c :].view(b, 3, c)
    return (
        (gw.sum(0) * w).to(time_decay.dtype),
        gu.sum(0).to(time_first.dtype),
        gk.to(k.dtype),
        gv.to(v.dtype),
        gs_in.to(state.dtype).clone(memory_format=_DENSE),
    )


@wkv_backward.register_fake
def _(time_decay, time_first, k, v, state, saved, grad_y, grad_state):  # type: ignore[no-untyped-def]
    _check_backward(time_decay, time_first, k, v, state, saved, grad_y, grad_state)
    return (
        time_decay.new_empty(time_decay.shape),
        time_first.new_empty(time_first.shape),
        k.new_empty(k.shape),
        v.new_empty(v.shape),
        state.new_empty(state.shape),
    )


register_state_autograd(wkv_forward, wkv_backward, y_like=2)


@overload
def wkv(
    time_decay: Tensor, time_first: Tensor, k: Tensor, v: Tensor, state: None = None
) -> Tensor: ...


@overload
def wkv(
    time_decay: Tensor, time_first: Tensor, k: Tensor, v: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]: ...


def wkv(
    time_decay: Tensor, time_first: Tensor, k: Tensor, v: Tensor, state: Tensor | None = None
) -> Tensor | tuple[Tensor, Tensor]:
    """RWKV-4 WKV: ``y[b,t,c]``, the softmax-like mix of past ``v`` weighted by decayed ``k``.

    ``y_t = (sum_{i<t} e^{(t-1-i)w + k_i} v_i + e^{u+k_t} v_t) / (same without v)`` per channel,
    with ``w = -exp(time_decay)`` and ``u = time_first``, computed as the stable recurrence.

    Args:
        time_decay: ``(C,)``, any float dtype.
        time_first: ``(C,)``, any float dtype.
        k: ``(B, T, C)``, one float dtype (float16, bfloat16, float32 or float64), on the
            device of every other argument (cpu or cuda).
        v: as ``k``.
        state: ``(B, 3, C)`` (numerator, denominator, running max) to continue from, float32
            (float64 for float64 inputs), e.g. ``init_wkv_state`` or a previous call's.

    Returns:
        ``y`` ``(B, T, C)`` in ``k``'s dtype; with ``state``, ``(y, new_state)``, a new tensor
        (``state`` is never modified). Running the tokens in chunks, passing the state on,
        equals running them at once, gradients included (all five arguments get them).
        Without a graph to record (``torch.no_grad``, or no argument requiring grad; eager,
        not under ``torch.compile``), the custom op's implementation runs directly, skipping
        the dispatcher: same bits, and ``y`` and ``new_state`` are the only tensors a
        one-token step allocates.

    Raises:
        TypeError: an argument is not a tensor, is quantized, nested or sparse, not floating
            point, ``v``'s dtype differs from ``k``'s, or ``state`` has the wrong dtype.
        ValueError: wrong shapes, or arguments on different devices.
    """
    # Python types here; the op checks shapes, dtypes and devices (once per call).
    for name, t in (("time_decay", time_decay), ("time_first", time_first), ("k", k), ("v", v)):
        check_tensor(name, t)
    if state is None:
        # The op reports a k that is not (B, T, C) or not floating point before this state.
        b, c = (k.shape[0], k.shape[2]) if k.dim() == 3 else (0, 0)
        dtype = math_dtype(k.dtype) if k.is_floating_point() else torch.float32
        s = init_wkv_state(b, c, device=k.device, dtype=dtype)
    elif not isinstance(state, Tensor):
        raise TypeError(f"state must be a torch.Tensor or None, got {type(state).__name__}")
    else:
        s = check_tensor("state", state)
    if eager(time_decay, time_first, k, v, s):  # no graph to record: skip the dispatcher
        y, new_state, _ = _forward(time_decay, time_first, k, v, s, False)
    else:
        save = torch.is_grad_enabled() and any(
            t.requires_grad for t in (time_decay, time_first, k, v, s)
        )
        y, new_state, _ = wkv_forward(time_decay, time_first, k, v, s, save)
    return y if state is None else (y, new_state)
