"""Causal depthwise time convolution (RWKV-2/3's "timex"): the custom ops
``tipad::time_conv_forward`` and ``tipad::time_conv_backward`` (fakes and autograd registered:
they trace under ``torch.compile(fullgraph=True)`` and pass ``torch.library.opcheck``) and the
public ``time_conv``, ``F.conv1d(F.pad(k, (L - 1, 0)), w.unsqueeze(1), groups=C) + eps``.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor

from ... import backends
from ..._checks import check_float, check_tensor
from .._common import check_meta, math_dtype

__all__ = ["TIME_CONV", "time_conv", "time_conv_backward", "time_conv_forward"]

#: The time_conv family: ``forward(w, k, out, eps)`` and
#: ``backward(grad, w, k, dw, dk, grad_w, grad_k)``.
TIME_CONV = backends.family(
    "time_conv", __package__, "computing time_conv", ("forward", "backward")
)


def _check(w: Tensor, k: Tensor) -> None:
    """TypeError/ValueError naming the argument unless ``w`` is ``(C, L)`` and ``k`` ``(B, C, T)``
    float tensors on one device with ``L >= 1`` (metadata only: the fake implementations run
    it too)."""
    check_float("w", w)
    check_float("k", k)
    if w.dim() != 2:
        raise ValueError(f"w must be (C, L) or (C, 1, L), got shape {tuple(w.shape)}")
    if k.dim() != 3:
        raise ValueError(f"k must be (B, C, T), got shape {tuple(k.shape)}")
    if w.shape[0] != k.shape[1]:
        raise ValueError(
            f"w has {w.shape[0]} channels (shape {tuple(w.shape)}), k has {k.shape[1]} "
            f"(shape {tuple(k.shape)}): they must match"
        )
    if w.shape[1] < 1:
        raise ValueError(f"w must hold at least one tap (L >= 1), got shape {tuple(w.shape)}")
    check_meta("w", w, device=k.device, like="k")


def _operand(t: Tensor, dtype: torch.dtype) -> Tensor:
    return t.detach().to(dtype).contiguous()


@torch.library.custom_op("tipad::time_conv_forward", mutates_args=())
def time_conv_forward(w: Tensor, k: Tensor, eps: float) -> Tensor:
    """``time_conv`` for ``w`` ``(C, L)`` (checked as ``time_conv`` checks): a new ``(B, C, T)``
    tensor of dtype ``promote_types(w.dtype, k.dtype)``."""
    _check(w, k)
    m = math_dtype(w.dtype, k.dtype)
    kk = _operand(k, m)
    # Sized by the backend, or rebound to F.conv1d's result: a buffer made here and dropped
    # unused would change glibc's heap so that every call's buffers page-fault afresh.
    out = kk.new_empty(0)
    TIME_CONV.forward(_operand(w, m), kk, out, eps)
    return out.to(torch.promote_types(w.dtype, k.dtype))


@time_conv_forward.register_fake
def _(w, k, eps):  # type: ignore[no-untyped-def]
    _check(w, k)
    return k.new_empty(k.shape, dtype=torch.promote_types(w.dtype, k.dtype))


def _check_backward(grad: Tensor, w: Tensor, k: Tensor) -> None:
    _check(w, k)
    check_float("grad", grad)
    check_meta("grad", grad, shape=k.shape, device=k.device, like="k")


@torch.library.custom_op("tipad::time_conv_backward", mutates_args=())
def time_conv_backward(
    grad: Tensor, w: Tensor, k: Tensor, grad_w: bool, grad_k: bool
) -> tuple[Tensor, Tensor]:
    """Gradients of ``time_conv_forward``: ``(dw, dk)`` with ``w``'s and ``k``'s shapes and dtypes.

    ``grad``: ``(B, C, T)``. ``dk[b,c,u] = sum_t grad[b,c,t] w[c, L-1-(t-u)]`` and
    ``dw[c, L-1-j] = sum_{b,t} grad[b,c,t] k[b,c,t-j]``; one not asked for (``grad_w``,
    ``grad_k`` false) is returned as zeros without being computed.
    """
    _check_backward(grad, w, k)
    m = math_dtype(grad.dtype, w.dtype, k.dtype)
    g = _operand(grad, m)
    # dk as the forward's output (sized by the form, or its result taken over) where asked for.
    dw, dk = g.new_zeros(w.shape), g.new_empty(0) if grad_k else g.new_zeros(k.shape)
    TIME_CONV.backward(g, _operand(w, m), _operand(k, m), dw, dk, grad_w, grad_k)
    return dw.to(w.dtype), dk.to(k.dtype)


@time_conv_backward.register_fake
def _(grad, w, k, grad_w, grad_k):  # type: ignore[no-untyped-def]
    _check_backward(grad, w, k)
    return w.new_empty(w.shape), k.new_empty(k.shape)


def _setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
    w, k, _eps = inputs
    ctx.save_for_backward(w, k)


def _backward(ctx, grad):  # type: ignore[no-untyped-def]
    w, k = ctx.saved_tensors
    needs_w, needs_k = ctx.needs_input_grad[:2]
    dw, dk = time_conv_backward(grad, w, k, needs_w, needs_k)
    return dw if needs_w else None, dk if needs_k else None, None


time_conv_forward.register_autograd(_backward, setup_context=_setup_context)


def time_conv(w: Tensor, k: Tensor, eps: float = 0.0) -> Tensor:
    """Causal depthwise time convolution (RWKV's "timex"), differentiable in ``w`` and ``k``.

    ``out[b,c,t] = eps + sum_{j=0..min(t, L-1)} w[c, L-1-j] * k[b,c,t-j]``, i.e.
    ``F.conv1d(F.pad(k, (L - 1, 0)), w.unsqueeze(1), groups=C) + eps``.

    Args:
        w: ``(C, L)`` or ``(C, 1, L)`` per-channel kernel, any ``L >= 1`` (RWKV uses ``L == T``;
            ``L > T`` is allowed, its oldest taps then see only the zero padding).
        k: ``(B, C, T)`` input; same device as ``w`` (CPU, or CUDA device 0 for the kernels).
        eps: a constant added to every output (no gradient).

    Both tensors float16, bfloat16, float32 or float64, any strides. The kernels compute in
    float64 if either is float64, else in float32; the result has dtype
    ``torch.promote_types(w.dtype, k.dtype)`` and gradients have their input's dtype.

    Returns:
        ``(B, C, T)``.

    Raises:
        TypeError: ``w`` or ``k`` not a dense (strided) float tensor (quantized, nested and
            sparse tensors are refused); ``eps`` not a real number.
        ValueError: wrong number of dims, channel counts that differ, ``L < 1``, ``w`` and
            ``k`` on different devices.

    Where the Taichi backend cannot serve the device (a forked worker, ``cuda:1``), the torch
    backend (``F.conv1d``) computes the same values after one RuntimeWarning.
    """
    # Python types and the (C, 1, L) form here; the op checks dtypes, shapes and devices.
    check_tensor("w", w)
    check_tensor("k", k)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__} {eps!r}")
    if w.dim() == 3:
        if w.shape[1] != 1:
            raise ValueError(f"w must be (C, L) or (C, 1, L), got shape {tuple(w.shape)}")
        w = w.squeeze(1)
    out: Tensor = torch.ops.tipad.time_conv_forward(w, k, float(eps))
    return out
