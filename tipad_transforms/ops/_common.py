"""The ops' argument checks: what each kernel needs, on tensor metadata only (shape, dtype,
device), so the fake implementations run them too. Errors name the schema's argument."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from .._checks import check_tensor

_INT32 = (-(2**31), 2**31 - 1)


def math_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """The kernels' dtype for inputs of ``dtypes``: float64 if one is, else float32 (the kernels
    take no bfloat16, and half precision loses the recurrences)."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


def register_state_autograd(forward_op: Any, backward_op: Callable[..., Any], y_like: int) -> None:
    """Autograd for an RWKV forward op ``(*inputs, state, save) -> (y, new_state, saved)``
    through ``backward_op(*inputs, state, saved, grad_y, grad_state)``, which returns the
    inputs' and the state's gradients. A missing ``grad_y`` is zeros like ``inputs[y_like]``."""

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        ctx.save_for_backward(*inputs[:-1], output[2])
        # Unused outputs' gradients arrive as None, not as zeros that autograd would fill:
        # saved's is never read and as large as the saved states themselves; grad_y's and
        # grad_state's zeros are made below where one is missing.
        ctx.set_materialize_grads(False)

    def backward(
        ctx: Any, grad_y: Tensor | None, grad_state: Tensor | None, _grad_saved: Any
    ) -> tuple[Tensor | None, ...]:
        *tensors, saved = ctx.saved_tensors
        if grad_y is None:
            grad_y = torch.zeros_like(tensors[y_like])
        if grad_state is None:
            grad_state = torch.zeros_like(tensors[-1])
        grads = backward_op(*tensors, saved, grad_y, grad_state)
        needs = ctx.needs_input_grad[: len(grads)]
        return (*(g if need else None for g, need in zip(grads, needs, strict=True)), None)

    forward_op.register_autograd(backward, setup_context=setup_context)


def check_dense(**tensors: Tensor) -> None:
    """``check_tensor`` on each named tensor (the public pad ops' check, before the dispatch:
    quantized, nested and sparse tensors would otherwise meet torch's "could not run" or a
    crash in their own dispatch keys)."""
    for name, t in tensors.items():
        check_tensor(name, t)


def check_meta(
    name: str,
    t: Tensor,
    *,
    shape: Sequence[int] | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
    like: str = "x",
) -> None:
    """ValueError/TypeError naming ``name`` unless ``t`` has this shape, dtype and device
    (``like`` names the argument whose device it must share)."""
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {t.dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device}, {like} on {device}: use one device")


def check_int32(name: str, value: int) -> None:
    if not _INT32[0] <= value <= _INT32[1]:
        raise ValueError(f"{name} must fit in int32, got {value}")


def _span(t: Tensor) -> tuple[int, int]:
    """The byte range ``[start, end)`` that ``t``'s elements lie in."""
    start = t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    return start, start + (last + 1) * t.element_size()


def check_no_overlap(out: Tensor, **inputs: Tensor) -> None:
    """ValueError naming the first input whose memory overlaps ``out``'s (by address range:
    interleaved views of one buffer count as overlapping). Skipped while compiling (Dynamo
    cannot trace pointers; a compiled graph functionalizes the write to out)."""
    if torch.compiler.is_compiling() or out.numel() == 0:
        return
    lo, hi = _span(out)
    for name, t in inputs.items():
        if t.numel() == 0:
            continue
        start, end = _span(t)
        if start < hi and lo < end:
            raise ValueError(f"out must not overlap {name} in memory")


def check_ints(name: str, value: object, length: int | None = None) -> None:
    """TypeError/ValueError naming ``name`` unless ``value`` is a list or tuple of ``length``
    ints that fit in 64 bits (bools are not ints here), what a schema's ``int[]`` takes."""
    if not isinstance(value, (list, tuple)) or not all(_is_int(v) for v in value):
        raise TypeError(f"{name} must be a list of ints, got {value!r}")
    if length is not None and len(value) != length:
        raise ValueError(f"{name} must hold {length} ints, got {len(value)}")
    for v in value:
        _check_int64(name, v)


def check_scalar_int(name: str, value: object) -> None:
    """TypeError/ValueError naming ``name`` unless ``value`` is an int of 64 bits (not a bool)."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    _check_int64(name, value)


def check_str(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)


def _check_int64(name: str, value: object) -> None:
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ValueError(f"{name} must fit in 64 bits, got {value}")
