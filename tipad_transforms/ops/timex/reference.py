"""The causal depthwise time convolution with ``F.conv1d``: the torch backend of
``ops.time_conv`` (conv1d's own gradient formulas, called explicitly: this runs inside a
custom op's implementation, where autograd is off)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from torch.nn.grad import conv1d_input, conv1d_weight

__all__ = ["backward", "forward", "hand_over"]


def forward(w: Tensor, k: Tensor, out: Tensor, eps: float) -> None:
    """``taichi.forward``'s contract."""
    if k.numel() == 0:  # conv1d refuses an input shorter than the kernel (T = 0)
        out.resize_(k.shape).fill_(eps)
        return
    length = w.shape[-1]
    result = F.conv1d(F.pad(k, (length - 1, 0)), w.unsqueeze(1), groups=w.shape[0])
    if eps:
        result.add_(eps)
    hand_over(result, out)


def hand_over(result: Tensor, out: Tensor) -> None:
    """Give ``out`` the values of ``result`` (a fresh tensor of ``out``'s dtype, and its shape
    unless ``out`` is empty): a whole contiguous ``out`` (its storage holds just its elements,
    as the ops' fresh outputs do, or nothing) takes over ``result``'s storage (``Tensor.set_``:
    no copy, no first-touch page faults; another view of ``out``'s old storage would not see
    the values), anything else a copy.
    """
    whole = (
        out.is_contiguous()
        and out.storage_offset() == 0
        and out.untyped_storage().nbytes() == out.numel() * out.element_size()
    )
    shaped = result.shape == out.shape or out.numel() == 0
    if whole and shaped and result.is_contiguous() and result.dtype == out.dtype:
        out.set_(result.untyped_storage(), result.storage_offset(), result.shape, result.stride())
    else:  # resize_ sizes an empty out and leaves one of result's shape as it is (a view too)
        out.resize_(result.shape).copy_(result)


def backward(
    grad: Tensor, w: Tensor, k: Tensor, dw: Tensor, dk: Tensor, grad_w: bool, grad_k: bool
) -> None:
    """``taichi.backward``'s contract."""
    if k.numel() == 0:
        dw.zero_()
        dk.resize_(k.shape).zero_()
        return
    length, channels = w.shape[-1], w.shape[0]
    padded = F.pad(k, (length - 1, 0))
    weight = w.unsqueeze(1)
    if grad_k:
        dk.resize_(k.shape).copy_(
            conv1d_input(padded.shape, weight, grad, groups=channels)[..., length - 1 :]
        )
    if grad_w:
        dw.copy_(conv1d_weight(padded, weight.shape, grad, groups=channels).squeeze(1))
