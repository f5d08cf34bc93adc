"""The one record of a padding call (``ops.padding.PadCall``: geometry and border, in the op's
canonical form), built once from the user's arguments by the image kernels and ``pad_stack``."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .._checks import INT64_MAX
from .._tracing import tracing
from .._value_cache import constant
from ..ops.padding import PadCall, PadGeometry, check_bank_index, pad_direct
from ._convert import fill_values, per_sample, texture_bank

__all__ = ["Border", "check_size", "cropped", "pad_call", "standard", "textured"]

#: What fills the border: ``(mode, fill, texture, offset, texture_index, stagger)`` as
#: ``PadCall`` holds them.
Border = tuple[str, Tensor, Tensor, Tensor, Tensor, int]


def _empty(x: Tensor) -> Tensor:
    return constant(("empty", x.dtype, x.device), lambda: x.new_empty(0))


def _zeros(n: int, last: int, device: torch.device) -> Tensor:
    """The default lattice: int32 zeros ``(n, last)`` (``(n,)`` for ``last == 0``), which the
    op saves for a backward."""
    shape = (n, last) if last else (n,)
    return constant(("lattice", n, last, device),
                    lambda: torch.zeros(shape, dtype=torch.int32, device=device))  # fmt: skip


def standard(
    mode: str, fill: Any, x: Tensor, n: int, channels: int, fill_name: str = "fill"
) -> Border:
    """A standard mode's border (``mode`` canonical); ``fill`` is read for constant only."""
    empty = _empty(x)
    values = (
        fill_values(fill, x.dtype, channels, fill_name).to(x.device)
        if mode == "constant"
        else empty
    )
    return mode, values, empty, _zeros(n, 2, x.device), _zeros(n, 0, x.device), 0


def textured(
    texture: Any, x: Tensor, lead: tuple[int, ...], channels: int, *, stagger: int, offset: Any,
    texture_index: Any, image_name: str = "inpt",
) -> Border:  # fmt: skip
    """A texture border for samples of leading shape ``lead``; errors call the image
    ``image_name``."""
    bank = texture_bank(texture, x.dtype, x.device, channels, image_name).contiguous()
    n = math.prod(lead)
    th, tw = bank.shape[-2], bank.shape[-1]
    if (isinstance(offset, int) and offset == 0) or (
        isinstance(offset, tuple) and offset == (0, 0)
    ):
        offsets = _zeros(n, 2, x.device)
    else:
        # The pattern repeats every th*tw rows and tw columns, and the stagger acts mod tw:
        # reducing keeps the result exact and the kernel's int32 index arithmetic in range.
        offsets = per_sample(offset, lead, (2,), "offset")
        periods = constant(("periods", th, tw, offsets.device),
                           lambda: torch.tensor([th * tw, tw], device=offsets.device))  # fmt: skip
        offsets = offsets.remainder(periods).to(device=x.device, dtype=torch.int32)
    if texture_index is None or (isinstance(texture_index, int) and texture_index == 0):
        index = _zeros(n, 0, x.device)
    else:
        index = per_sample(texture_index, lead, (), "texture_index")
        # Checked where the index lives, before it moves; traced (no data-dependent check),
        # the kernel's clamp keeps every read inside the bank.
        if not tracing():
            check_bank_index(bank.shape[0], index)
        index = index.clamp(-1, 2**31 - 1).to(device=x.device, dtype=torch.int32).contiguous()
    return "texture", _empty(x), bank, offsets.contiguous(), index, stagger % tw


def check_size(shape: list[int], itemsize: int, name: str = "padding") -> None:
    """Refuse an output whose byte size overflows 64 bits, naming ``name``."""
    if math.prod(shape) * itemsize > INT64_MAX:
        raise ValueError(f"{name} gives an output of shape {tuple(shape)}: too large to allocate")


def pad_call(
    x: Tensor, pads: tuple[int, int, int, int], border: Border
) -> tuple[PadCall, tuple[int, int, int, int]]:
    """The record of padding ``x`` (``(..., C, H, W)`` or ``(H, W)``, plain) by ``pads``
    (``(left, top, right, bottom)``, negative values crop) with ``border``, and the crop
    (``(left, top, right, bottom)`` cut from the grown canvas afterwards)."""
    left, top, right, bottom = (max(-p, 0) for p in pads)
    g = PadGeometry.of(x.shape, [max(p, 0) for p in pads])
    if top + bottom > g.out_h or left + right > g.out_w:
        raise ValueError(
            f"padding {tuple(pads)} crops more than the image of shape {tuple(x.shape)} holds"
        )
    check_size(g.out_shape(x.shape), x.element_size())
    if g.h * g.w == 0 and border[0] not in ("constant", "texture") and max(pads) > 0:
        raise ValueError(
            f"inpt of shape {tuple(x.shape)} holds no pixels: padding_mode {border[0]!r} "
            "needs a non-empty image"
        )
    return PadCall(g, *border), (left, top, right, bottom)


def cropped(
    x: Tensor, call: PadCall, crop: tuple[int, int, int, int], out: Tensor | None
) -> Tensor:
    """``pad_direct`` of ``call`` with ``crop`` cut off (into ``out`` when given)."""
    g = call.geometry
    assert isinstance(g, PadGeometry)
    left, top, right, bottom = crop
    if out is not None:
        # out gets the op's checks on a canvas of its own shape first (copy_ would broadcast or
        # cast where the op refuses).
        shape = [*x.shape[:-2], g.out_h - top - bottom, g.out_w - left - right]
        if list(out.shape) != shape or out.dtype != x.dtype or out.device != x.device:
            raise ValueError(
                f"out must have shape {tuple(shape)}, dtype {x.dtype} and device {x.device}; "
                f"got {tuple(out.shape)}, {out.dtype}, {out.device}"
            )
    window = pad_direct(x, call)[..., top : g.out_h - bottom, left : g.out_w - right]
    return window.contiguous() if out is None else out.copy_(window)
