"""``pad_stack``: pad images of different sizes onto one canvas size, in one launch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from .._checks import check_dense, check_int, check_mode, unreadable
from ..ops.padding import (
    PadCall,
    PadGeometry,
    StackGeometry,
    image_channels,
    pad_direct,
    pad_samples_direct,
    pad_stack_direct,
)
from ._convert import Fill
from ._pad import check_image
from ._record import check_size, standard, textured

__all__ = ["pad_stack"]


def _images(images: Any) -> list[Tensor]:
    if isinstance(images, Tensor) or not isinstance(images, Sequence) or not images:
        raise ValueError("images must be a non-empty sequence of (C, H, W) tensors")
    if _alike(images):
        return list(images)
    checked: list[Tensor] = []
    for i, im in enumerate(images):
        if not isinstance(im, Tensor):
            raise TypeError(f"images[{i}] must be a torch.Tensor, got {type(im).__name__}")
        im = check_image(im, f"images[{i}]")
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


def _alike(images: Sequence[Any]) -> bool:
    """The common case in a few steps per image (a collate's 64 samples): plain dense
    ``(C, H, W)`` tensors holding data, real or bool, of ``images[0]``'s channels, dtype and
    device; where it fails, ``_images`` finds the image to name."""
    x = images[0]
    if not (type(x) is Tensor and x.dim() == 3 and unreadable(x) is None):
        return False
    if x.is_meta or x.is_complex():
        return False
    c, dtype, device = x.shape[0], x.dtype, x.device
    return all(
        type(im) is Tensor and im.dim() == 3 and im.shape[0] == c and im.dtype == dtype
        and im.device == device and unreadable(im) is None
        for im in images
    )  # fmt: skip


def _placement(placement: Any, n: int) -> Tensor:
    if not isinstance(placement, Tensor):
        raise TypeError(f"placement must be an int tensor (N, 2), got {type(placement).__name__}")
    check_dense(placement, "placement")
    if placement.is_floating_point() or placement.is_complex() or placement.dtype == torch.bool:
        raise TypeError(f"placement must hold integers, got dtype {placement.dtype}")
    if tuple(placement.shape) != (n, 2):
        raise ValueError(
            f"placement must be ({n}, 2), one (top, left) per image of images, got "
            f"{tuple(placement.shape)}"
        )
    return placement.detach().to("cpu", torch.int64)


def _sizes(images: list[Tensor], where: Tensor, mode: str, size: Any) -> Tensor:
    """The ``(N, 4)`` ``(h, w, top, left)`` table of ``tipad::pad_stack``, every image checked
    to fit (and, for a standard mode, to have pixels) with errors naming it."""
    if (
        not isinstance(size, Sequence)
        or len(size) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in size)
    ):
        raise ValueError(f"size must be (H, W) non-negative ints, got {size!r}")
    out_h, out_w = size
    shapes = [(im.shape[1], im.shape[2]) for im in images]  # (C, H, W), checked
    needs_pixels = mode not in ("constant", "texture") and out_h * out_w > 0
    for i, ((h, w), (top, left)) in enumerate(zip(shapes, where.tolist(), strict=True)):
        if min(top, left, out_w - left - w, out_h - top - h) < 0:
            raise ValueError(
                f"images[{i}] of size {(h, w)} at placement {(top, left)} does not fit in size "
                f"{(out_h, out_w)}"
            )
        if needs_pixels and h * w == 0:
            shape = tuple(images[i].shape)
            raise ValueError(f"images[{i}] is empty, {shape}: mode {mode!r} needs pixels")
    return torch.cat([torch.tensor(shapes, dtype=torch.int64).view(-1, 2), where], 1)


def pad_stack(
    images: Sequence[Tensor], size: Sequence[int], placement: Tensor, fill: Fill = 0,
    padding_mode: str = "constant", *, texture: Tensor | None = None, stagger: int = 0,
    offset: Sequence[int] | Tensor = (0, 0), texture_index: int | Tensor | None = None,
) -> Tensor:  # fmt: skip
    """Pad each ``(C, h_i, w_i)`` image to ``size`` at its own ``placement``; stack the results.

    One kernel launch for the whole batch (``tipad::pad_stack``), on the images packed into one
    flat tensor (one copy). Images of one size at one placement are padded as a batch
    (``tipad::pad``) instead, where the op's CPU forms may copy them straight from the list.

    Args:
        images: ``N >= 1`` tensors ``(C, h_i, w_i)`` of one dtype, device and channel count.
        size: ``(H, W)`` of every canvas; each image must fit at its placement.
        placement: ``(N, 2)`` int tensor of ``(top, left)``: where image ``i``'s top-left pixel
            lands in canvas ``i``.
        fill: constant mode's value, as in ``functional.pad``.
        padding_mode: ``"texture"`` (needs ``texture``) or a standard mode of
            ``functional.pad`` (which needs non-empty images; texture and constant modes take
            empty ones).
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
    mode = "texture" if padding_mode == "texture" else check_mode(padding_mode)
    sizes = _sizes(checked, _placement(placement, n), mode, size)
    channels = image_channels(x.shape)
    check_size([n, channels, *size], x.element_size(), "size")
    if mode == "texture":
        if texture is None:
            raise ValueError("padding_mode='texture' needs a texture")
        border = textured(
            texture, x, (n,), channels, stagger=check_int(stagger, "stagger"), offset=offset,
            texture_index=texture_index, image_name="images",
        )  # fmt: skip
    else:
        border = standard(mode, fill, x, n, channels)
    if bool((sizes == sizes[0]).all()):  # one geometry: a batch, and the batch's fast forms
        h, w, top, left = sizes[0].tolist()
        g = PadGeometry(n, channels, h, w, left, top, size[1] - left - w, size[0] - top - h)
        call = PadCall(g, *border)
        padded = pad_samples_direct(checked, call)  # one border for all: no batch assembled
        if padded is not None:
            return padded
        packed = torch.cat([im.reshape(-1) for im in checked])
        return pad_direct(packed.view(n, channels, h, w), call)
    packed = torch.cat([im.reshape(-1) for im in checked])
    return pad_stack_direct(packed, PadCall(StackGeometry(sizes, channels, *size), *border))
