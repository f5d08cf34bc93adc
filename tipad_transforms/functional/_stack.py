"""``pad_stack``: pad images of different sizes onto one canvas size and stack them.

The batch form of padding that a collate function needs: each image keeps its own size and
placement, every canvas gets the same size, and the border is a texture (per-sample lattice
offset and bank index) or a standard mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .._geometry import check_mode, image_channels
from ._pad import Fill, _check_image, pad, texture_pad

__all__ = ["pad_stack"]


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

    Args:
        images: ``N >= 1`` tensors ``(C, h_i, w_i)`` of one dtype, device and channel count.
        size: ``(H, W)`` of every canvas; each image must fit at its placement.
        placement: ``(N, 2)`` int tensor of ``(top, left)``: where image ``i``'s top-left pixel
            lands in canvas ``i``.
        mode: ``"texture"`` (needs ``texture``) or a standard mode of ``functional.pad``.
        fill: constant mode's value, as in ``functional.pad``.
        texture, stagger, offset, texture_index: as in ``functional.texture_pad``, with
            ``offset`` ``(2,)`` or ``(N, 2)`` and ``texture_index`` an int or ``(N,)``: the
            lattice is anchored at each image's own top-left pixel.

    Returns:
        ``(N, C, H, W)``: canvas ``i`` equals ``texture_pad``/``pad`` of image ``i`` with
        padding ``(left_i, top_i, W - left_i - w_i, H - top_i - h_i)``. Differentiable w.r.t.
        the images (and the texture).

    Raises:
        TypeError / ValueError naming the argument (and the sample index for a bad image).
    """
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
    if (
        not isinstance(size, Sequence)
        or len(size) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in size)
    ):
        raise ValueError(f"size must be (H, W) non-negative ints, got {size!r}")
    out_h, out_w = int(size[0]), int(size[1])
    n = len(checked)
    where = _placement(placement, n)
    name = "texture" if mode == "texture" else check_mode(mode)
    if name == "texture" and texture is None:
        raise ValueError("mode='texture' needs a texture")
    offsets = (
        torch.as_tensor(offset).broadcast_to((n, 2))
        if not isinstance(offset, torch.Tensor)
        else offset.broadcast_to((n, 2))
    )
    index = (
        texture_index
        if isinstance(texture_index, torch.Tensor)
        else torch.full((n,), texture_index or 0)
    )
    image_channels(checked[0].shape)
    canvases = []
    for i, im in enumerate(checked):
        top, left = int(where[i, 0]), int(where[i, 1])
        h, w = im.shape[-2:]
        right, bottom = out_w - left - w, out_h - top - h
        if min(top, left, right, bottom) < 0:
            raise ValueError(
                f"images[{i}] of size {(h, w)} at placement {(top, left)} does not fit in size "
                f"{(out_h, out_w)}"
            )
        padding = [left, top, right, bottom]
        if name == "texture":
            assert texture is not None
            canvases.append(
                texture_pad(
                    im,
                    padding,
                    texture,
                    stagger=stagger,
                    offset=offsets[i],
                    texture_index=index[i] if index.dim() else index,
                )
            )
        else:
            canvases.append(pad(im, padding, name, fill))
    return torch.stack(canvases)
