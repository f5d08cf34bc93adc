"""The one record a padding call is described by, and the call of the op that runs it.

``Border`` holds what fills the border, in the canonical form of the ``tipad::pad`` and
``tipad::pad_stack`` ops (``tipad_transforms.ops``): built once by the functional from the
user's arguments, passed down whole. Coordinates: padding is ``(left, top, right, bottom)``, as
in torchvision; everything else is row-major, y before x: lattice offsets ``(oy, ox)``,
placements ``(top, left)``, regions ``(top, left, height, width)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .. import ops
from .._checks import INT64_MAX
from .._geometry import PadGeometry, check_bank_index
from .._tracing import eager, tracing
from .._value_cache import KeyedCache
from ..ops._pad import pad_direct
from ._convert import fill_values, per_sample, texture_bank

__all__ = ["Border", "launch"]

# Read-only constants of a call, made once: the empty stand-in texture per dtype and device,
# the default lattice (int32 zeros, which the op saves for a backward) per shape, and the
# lattice's periods (th * tw, tw) per tile size.
_EMPTY: KeyedCache[torch.Tensor] = KeyedCache(32)
_ZEROS: KeyedCache[torch.Tensor] = KeyedCache(32)
_PERIODS: KeyedCache[torch.Tensor] = KeyedCache(32)


def _empty(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return _EMPTY.get((dtype, device), lambda: torch.empty(0, dtype=dtype, device=device))


def _zeros(n: int, last: int, device: torch.device) -> torch.Tensor:
    shape = (n, last) if last else (n,)
    return _ZEROS.get(
        (n, last, device), lambda: torch.zeros(shape, dtype=torch.int32, device=device)
    )


@dataclass(frozen=True)
class Border:
    """What fills the border of ``N`` samples, in the op's canonical form.

    ``mode``: a canonical mode name (``_geometry.MODES``). ``fill``: ``(C,)`` in the image's
    dtype for ``"constant"``, else empty. ``texture``: the ``(K, Ct, th, tw)`` bank in the
    image's dtype for ``"texture"``, else empty. ``offset``: ``(N, 2)`` int32 ``(oy, ox)``,
    reduced modulo the pattern's periods; ``texture_index``: ``(N,)`` int32, checked against
    the bank; ``stagger``: reduced modulo ``tw``. All tensors on the image's device.
    """

    mode: str
    fill: torch.Tensor
    texture: torch.Tensor
    offset: torch.Tensor
    texture_index: torch.Tensor
    stagger: int

    @staticmethod
    def standard(
        mode: str, fill: Any, x: torch.Tensor, n: int, channels: int, fill_name: str = "fill"
    ) -> Border:
        """A standard mode's border (``mode`` canonical); ``fill`` is read for constant only."""
        empty = _empty(x.dtype, x.device)
        values = empty
        if mode == "constant":
            values = fill_values(fill, x.dtype, channels, fill_name).to(x.device)
        return Border(mode, values, empty, _zeros(n, 2, x.device), _zeros(n, 0, x.device), 0)

    @staticmethod
    def textured(
        texture: Any,
        x: torch.Tensor,
        lead: tuple[int, ...],
        channels: int,
        *,
        stagger: int,
        offset: Any,
        texture_index: Any,
        image_name: str = "inpt",
    ) -> Border:
        """A texture border for samples of leading shape ``lead`` (``N = prod(lead)``);
        ``image_name``: what the errors call the image."""
        bank = texture_bank(texture, x.dtype, x.device, channels, image_name)
        n = math.prod(lead)
        th, tw = bank.shape[-2], bank.shape[-1]
        if _is_zero(offset):
            offsets = _zeros(n, 2, x.device)
        else:
            # The pattern repeats every th*tw rows and tw columns, and the stagger acts mod tw:
            # reducing keeps the result exact and the kernel's int32 index arithmetic in range.
            offsets = per_sample(offset, lead, (2,), "offset")
            offsets = offsets.remainder(_periods(th, tw, offsets.device))
            offsets = offsets.to(device=x.device, dtype=torch.int32)
        if texture_index is None or (isinstance(texture_index, int) and texture_index == 0):
            index = _zeros(n, 0, x.device)
        else:
            index = per_sample(texture_index, lead, (), "texture_index")
            # Checked where the index lives (the host, unless the user gave a device tensor),
            # before it moves. A tracer cannot record the data-dependent check; traced, the
            # kernel's clamp keeps every read inside the bank.
            if not tracing():
                check_bank_index(bank.shape[0], index)
            index = index.clamp(-1, 2**31 - 1).to(device=x.device, dtype=torch.int32)
        empty = _empty(x.dtype, x.device)
        return Border("texture", empty, bank, offsets, index, stagger % tw)


def _periods(th: int, tw: int, device: torch.device) -> torch.Tensor:
    return _PERIODS.get((th, tw, device), lambda: torch.tensor([th * tw, tw], device=device))


def _is_zero(offset: Any) -> bool:
    return (isinstance(offset, int) and offset == 0) or (
        isinstance(offset, tuple) and offset == (0, 0)
    )


def check_size(shape: list[int], itemsize: int, name: str = "padding") -> None:
    """Refuse an output whose byte size overflows 64 bits, naming ``name``."""
    numel = math.prod(shape)
    if numel * itemsize > INT64_MAX:
        raise ValueError(f"{name} gives an output of shape {tuple(shape)}: too large to allocate")


def launch(
    x: torch.Tensor,
    pads: tuple[int, int, int, int],
    border: Border,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pad ``x`` (``(..., C, H, W)`` or ``(H, W)``, plain tensor) by ``pads`` (``(left, top,
    right, bottom)``, negative values crop) with ``border``; into ``out`` when given."""
    grow = [max(p, 0) for p in pads]
    crop = [max(-p, 0) for p in pads]
    g = PadGeometry.of(x.shape, grow)
    if any(crop):
        left, top, right, bottom = crop
        if top + bottom > g.out_h or left + right > g.out_w:
            raise ValueError(
                f"padding {tuple(pads)} crops more than the image of shape {tuple(x.shape)} holds"
            )
    shape = g.out_shape(x.shape)
    check_size(shape, x.element_size())
    if g.h * g.w == 0 and border.mode not in ("constant", "texture") and any(grow):
        raise ValueError(
            f"inpt of shape {tuple(x.shape)} holds no pixels: padding_mode {border.mode!r} "
            "needs a non-empty image"
        )
    args = (x, grow, border.mode, border.fill, border.texture, border.offset,
            border.texture_index, border.stagger)  # fmt: skip
    if not any(crop):
        # Eager plain tensors without autograd: the op's implementation, minus the dispatch and
        # the checks that the border and the geometry above already made.
        if eager(x, border.fill, border.texture, border.offset, border.texture_index) and (
            out is None or eager(out)
        ):
            return pad_direct(x, g, border.mode, border.fill, border.texture, border.offset,
                              border.texture_index, border.stagger, out)  # fmt: skip
        if out is None:
            return ops.pad(*args)
        ops.pad_out(*args, out)
        return out
    left, top, right, bottom = crop
    if out is None:
        return ops.pad(*args)[..., top : g.out_h - bottom, left : g.out_w - right].contiguous()
    # A crop pads the grown canvas, then copies the kept window: out gets the op's checks on a
    # canvas of its own shape first (copy_ would broadcast or cast where the op refuses).
    shape = [*shape[:-2], g.out_h - top - bottom, g.out_w - left - right]
    if list(out.shape) != shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"out must have shape {tuple(shape)}, dtype {x.dtype} and device {x.device}; got "
            f"{tuple(out.shape)}, {out.dtype}, {out.device}"
        )
    result = ops.pad(*args)[..., top : g.out_h - bottom, left : g.out_w - right]
    out.copy_(result)
    return out
