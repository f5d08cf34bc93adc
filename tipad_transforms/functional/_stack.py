"""``pad_stack``: pad images of different sizes onto one canvas size and stack them.

The batch form of padding that a collate function needs: each image keeps its own size and
placement, every canvas gets the same size, and the border is a texture (per-sample lattice
offset and bank index) or a standard mode. One launch of the padding kernel pads them all
(``tipad::pad_stack``), each sample reading its own geometry record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .. import ops
from .._geometry import check_bank_index, check_mode, image_channels
from ._pad import Fill, _check_image, _fill_tensor, _per_sample, _texture_bank

__all__ = ["pad_stack"]


def _images(images: Any) -> list[torch.Tensor]:
    if isinstance(images, torch.Tensor) or not isinstance(images, Sequence) or not images:
        raise ValueError("images must be a non-empty sequence of (C, H, W) tensors")
    checked: list[torch.Tensor] = []
    for i, im in enumerate(images):
        if not isinstance(im, torch.Tensor):
            raise TypeError(f"images[{i}] must be a torch.Tensor, got {type(im).__name__}")
        im = _check_image(im)
        if im.dim() != 3:
            raise ValueError(f"images[{i}] must be (C, H, W), got shape {tuple(im.shape)}")
        first = checked[0] if checked else im
        if im.shape[0] != first.shape[0] or im.dtype != first.dtype or im.device != first.device:
            raise ValueError(
                f"images[{i}] is {tuple(im.shape)} {im.dtype} on {im.device}; images[0] is "
                f"{tuple(first.shape)} {first.dtype} on {first.device}: channels, dtype and "
                "device must match"
            )
        checked.append(im)
    return checked


def _placement(placement: Any, n: int) -> torch.Tensor:
    if not isinstance(placement, torch.Tensor):
        raise TypeError(f"placement must be an int tensor (N, 2), got {type(placement).__name__}")
    if placement.is_floating_point() or placement.is_complex() or placement.dtype == torch.bool:
        raise TypeError(f"placement must hold integers, got dtype {placement.dtype}")
    if tuple(placement.shape) != (n, 2):
        raise ValueError(
            f"placement must be ({n}, 2) (top, left) per image, got {tuple(placement.shape)}"
        )
    return placement.detach().to("cpu", torch.int64)


def _sizes(images: list[torch.Tensor], where: torch.Tensor, mode: str, size: Any) -> torch.Tensor:
    """The ``(N, 4)`` ``(h, w, top, left)`` table of ``tipad::pad_stack``, every image checked
    to fit (and, for a standard mode, to have pixels) with errors naming it."""
    if (
        not isinstance(size, Sequence)
        or len(size) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in size)
    ):
        raise ValueError(f"size must be (H, W) non-negative ints, got {size!r}")
    out_h, out_w = size
    for i, (im, (top, left)) in enumerate(zip(images, where.tolist(), strict=True)):
        h, w = im.shape[-2:]
        if min(top, left, out_w - left - w, out_h - top - h) < 0:
            raise ValueError(
                f"images[{i}] of size {(h, w)} at placement {(top, left)} does not fit in size "
                f"{(out_h, out_w)}"
            )
        if mode not in ("constant", "texture") and h * w == 0 and out_h * out_w > 0:
            raise ValueError(f"images[{i}] is empty, {tuple(im.shape)}: mode {mode!r} needs pixels")
    shapes = torch.tensor([im.shape[-2:] for im in images], dtype=torch.int64)
    return torch.cat([shapes, where], 1)


def _lattice(
    offset: Any, texture_index: Any, bank: torch.Tensor, stagger: int, n: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Per-sample ``(N, 2)`` offsets and ``(N,)`` bank indices, int64, and the stagger, reduced
    as ``texture_pad`` reduces them (the pattern's periods) and the indices checked."""
    offsets = _per_sample(offset, (n,), (2,), "offset")
    index = _per_sample(texture_index, (n,), (), "texture_index").clamp(-1, 2**31 - 1)
    th, tw = bank.shape[-2:]
    check_bank_index(bank.shape[0], index)
    return (
        offsets.remainder(torch.tensor([th * tw, tw], device=offsets.device)),
        index,
        stagger % tw,
    )


def pad_stack(
    images: Sequence[torch.Tensor],
    size: Sequence[int],
    placement: torch.Tensor,
    mode: str = "constant",
    fill: Fill = 0,
    *,
    texture: torch.Tensor | None = None,
    stagger: int = 0,
    offset: Sequence[int] | torch.Tensor = (0, 0),
    texture_index: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Pad each ``(C, h_i, w_i)`` image to ``size`` at its own ``placement``; stack the results.

    One kernel launch for the whole batch. The images are first packed into one flat tensor
    (``torch.cat``: one copy of the inputs), which the kernel reads with a per-image geometry.

    Args:
        images: ``N >= 1`` tensors ``(C, h_i, w_i)`` of one dtype, device and channel count.
        size: ``(H, W)`` of every canvas; each image must fit at its placement.
        placement: ``(N, 2)`` int tensor of ``(top, left)``: where image ``i``'s top-left pixel
            lands in canvas ``i``.
        mode: ``"texture"`` (needs ``texture``) or a standard mode of ``functional.pad``
            (which needs non-empty images; texture and constant modes take empty ones).
        fill: constant mode's value, as in ``functional.pad``.
        texture: as in ``functional.texture_pad``.
        stagger: as in ``functional.texture_pad``.
        offset: as in ``functional.texture_pad``, ``(2,)`` or ``(N, 2)``: the lattice is
            anchored at each image's own top-left pixel.
        texture_index: as in ``functional.texture_pad``, an int or ``(N,)``.

    Returns:
        ``(N, C, H, W)``: canvas ``i`` equals ``texture_pad``/``pad`` of image ``i`` with
        padding ``(left_i, top_i, W - left_i - w_i, H - top_i - h_i)``. Differentiable w.r.t.
        the images (and the texture).

    Raises:
        TypeError / ValueError: naming the argument (and the sample index for a bad image).
    """
    checked = _images(images)
    n, x = len(checked), checked[0]
    name = "texture" if mode == "texture" else check_mode(mode)
    sizes = _sizes(checked, _placement(placement, n), name, size)
    channels = image_channels(x.shape)
    empty = x.new_empty(0)
    fill_t = _fill_tensor(fill, x, channels) if name == "constant" else empty
    bank = empty
    offsets, index = torch.zeros(n, 2, dtype=torch.int64), torch.zeros(n, dtype=torch.int64)
    if name == "texture":
        if texture is None:
            raise ValueError("mode='texture' needs a texture")
        if isinstance(stagger, bool) or not isinstance(stagger, int):
            raise TypeError(f"stagger must be an int, got {type(stagger).__name__}")
        bank = _texture_bank(texture, x, channels)
        offsets, index, stagger = _lattice(
            offset, 0 if texture_index is None else texture_index, bank, stagger, n
        )
    packed = torch.cat([im.reshape(-1) for im in checked])
    return ops.pad_stack(
        packed,
        sizes,
        [channels, *size],
        name,
        fill_t,
        bank,
        offsets.to(device=x.device, dtype=torch.int32),
        index.to(device=x.device, dtype=torch.int32),
        stagger,
    )
