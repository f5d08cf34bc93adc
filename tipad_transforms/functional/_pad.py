"""Padding functionals ``texture_pad``, ``brick_pad`` and ``pad``, and their kernels per input
type (the dispatch rules: ``_registry``)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

import PIL.Image
import torch
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as tvF

from .._checks import Number, check_dense, check_int, check_mode, parse_padding
from .._tracing import untraced
from .._value_cache import constant
from ..ops.padding import PadCall, image_channels, pad_direct
from ._brick import brick_channels, brick_options, make_brick_texture, running_bond_stagger
from ._convert import Fill, plain, scale_texture
from ._pil import pil_apply, pil_fill
from ._record import cropped, pad_call, standard, textured
from ._registry import get_kernel, register_kernel

__all__ = ["brick_pad", "pad", "texture_pad"]

Padding = int | Sequence[int]
Offset = int | Sequence[int] | Tensor
T = TypeVar("T")


def check_image(x: Any, name: str = "inpt") -> Tensor:
    """``x`` as a plain tensor of shape ``(..., C, H, W)`` or ``(H, W)``, real or bool, dense
    and holding data (not quantized, sparse, nested or meta: ``_checks.check_dense``)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or PIL image, got {type(x).__name__}")
    check_dense(x, name)
    if x.dim() < 2:
        raise ValueError(f"{name} must have shape (..., C, H, W) or (H, W), got {tuple(x.shape)}")
    if x.is_complex():
        raise TypeError(f"{name} must be a real or bool tensor, got dtype {x.dtype}")
    return plain(x)


def _check_out(out: Any, *inputs: Any) -> None:
    # What the user controls here; the op checks the output's shape, dtype, device, layout.
    if out is None:
        return
    if not isinstance(out, Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    check_dense(out, "out")
    if torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in (out, *inputs)
    ):
        raise ValueError("out= does not support autograd; call without out= to get gradients")


def _no_out(out: Any) -> None:
    if out is not None:
        raise TypeError("out= takes tensor inputs only; a PIL image is returned as a new image")


# -- texture_pad -----------------------------------------------------------------------------


def texture_pad(
    inpt: T,
    padding: Padding,
    texture: Tensor,
    *,
    stagger: int = 0,
    offset: Offset = (0, 0),
    texture_index: int | Tensor | None = None,
    fill: Fill = 0,
    mask_fill: Number | None = None,
    out: Tensor | None = None,
) -> T:
    """Pad an image with a tiled texture, in one kernel launch.

    Args:
        inpt: a ``(..., C, H, W)`` or ``(H, W)`` tensor (any real or bool dtype, any layout,
            CPU or CUDA), a tv_tensors ``Image``/``Video`` (returned as the same type), a PIL
            image (returned in its mode), a ``Mask`` (a constant border of ``fill``),
            ``BoundingBoxes`` or ``KeyPoints`` (shifted by ``(left, top)``, ``canvas_size``
            grown); other tv_tensors are returned unchanged.
        padding: ``p``, ``(lr, tb)`` or ``(left, top, right, bottom)`` pixels; negative values
            crop, as in ``torchvision.transforms.v2.functional.pad``.
        texture: ``(th, tw)`` or ``(C', th, tw)`` tile with ``C'`` in {1, C} (one channel is
            broadcast to all), or a bank ``(K, C', th, tw)`` indexed by ``texture_index``.
            Converted to the image's dtype: float textures for integer images hold ``[0, 1]``.
        stagger: horizontal shift, in pixels, of each successive row of tiles (a brick wall's
            running bond); any int.
        offset: ``(oy, ox)`` shift of the tile lattice, or a tensor broadcastable to
            ``(*inpt.shape[:-3], 2)`` for one offset per sample (per clip for a ``Video``:
            ``(*inpt.shape[:-4], 2)``, so a clip's frames share one lattice).
        texture_index: which bank texture each sample uses: an int or a tensor broadcastable
            to ``inpt.shape[:-3]`` (per clip for a ``Video``); default 0.
        fill: the border of a ``tv_tensors.Mask`` (e.g. 255, an "ignore" label) and of any
            registered type whose kernel reads it, converted as ``pad`` converts it.
        mask_fill: the older name of ``fill`` for masks (an alias): where given, it wins.
        out: optional preallocated contiguous output (the result's shape, dtype, device); tensor
            inputs only, not differentiable, must not overlap any input.

    Returns:
        ``(..., C, H + top + bottom, W + left + right)``: the image in the middle, unchanged
        (bit exact) and, at border pixel ``(Y, X)``, ``texture[:, ty, tx]`` with
        ``y = Y - top - oy``, ``x = X - left - ox``, ``v = floor(y / th)``, ``ty = y - v*th``,
        ``tx = (x - v*stagger) mod tw``. So texture pixel ``(0, 0)`` sits on the image's
        top-left pixel when ``offset`` is zero. Differentiable w.r.t. the image and ``texture``.

    Raises:
        TypeError: an input of another type; non-tensor ``texture``; non-integer padding,
            stagger, offsets or indices; a quantized, sparse or nested tensor argument.
        ValueError: bad shapes, a channel mismatch, an empty texture, values the image's dtype
            cannot hold, ``texture_index`` outside the bank, padding that crops more than the
            image or overflows, a bad ``out``, a meta tensor (no data to pad).

    Under a tracer (``torch.compile``, ``torch.export``, ``torch.jit.trace``) the checks that
    read tensor values (a float texture's range, ``texture_index`` within the bank) are not
    made; the kernel clamps the index.
    """
    kernel = get_kernel(texture_pad, type(inpt))
    return kernel(
        inpt, padding, texture, stagger=stagger, offset=offset, texture_index=texture_index,
        fill=fill, mask_fill=mask_fill, out=out,
    )  # fmt: skip


@register_kernel(texture_pad, Tensor)
@register_kernel(texture_pad, tv_tensors.Image)
def texture_pad_image(
    image: Tensor,
    padding: Padding,
    texture: Tensor,
    *,
    stagger: int = 0,
    offset: Offset = (0, 0),
    texture_index: int | Tensor | None = None,
    fill: Fill = 0,
    mask_fill: Number | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """``texture_pad``'s kernel for plain tensors and images (the texture pads: no fill)."""
    x = check_image(image)
    call, crop = _texture_call(x, padding, texture, stagger, offset, texture_index, out)
    return cropped(x, call, crop, out) if any(crop) else pad_direct(x, call, out)


def _texture_call(
    x: Tensor, padding: Padding, texture: Any, stagger: int, offset: Offset,
    texture_index: int | Tensor | None, out: Any,
) -> tuple[PadCall, tuple[int, int, int, int]]:  # fmt: skip
    """The record (and crop) of a texture padding of ``x``, the user's arguments checked
    (``padding`` first, as ``pad`` checks it)."""
    pads = parse_padding(padding)
    _check_out(out, x, texture)
    border = textured(
        texture, x, tuple(x.shape[:-3]), image_channels(x.shape),
        stagger=check_int(stagger, "stagger"), offset=offset, texture_index=texture_index,
    )  # fmt: skip
    return pad_call(x, pads, border)


@register_kernel(texture_pad, tv_tensors.Video)
def _texture_pad_video(
    video: Tensor, padding: Padding, texture: Tensor, *, offset: Offset = (0, 0),
    texture_index: int | Tensor | None = None, **kwargs: Any,
) -> Tensor:  # fmt: skip
    # Per-clip draws (*S, 2) / (*S,) get the time dim inserted, so one broadcasts over frames.
    if isinstance(offset, Tensor) and offset.dim() > 1:
        offset = offset.unsqueeze(-2)
    if isinstance(texture_index, Tensor) and texture_index.dim() > 0 and video.dim() > 4:
        texture_index = texture_index.unsqueeze(-1)
    return texture_pad_image(
        video, padding, texture, offset=offset, texture_index=texture_index, **kwargs
    )


@register_kernel(texture_pad, PIL.Image.Image)
def _texture_pad_pil(
    img: PIL.Image.Image, padding: Padding, texture: Tensor, *, out: Any = None, **kw: Any
) -> PIL.Image.Image:
    _no_out(out)
    kernel = functools.partial(texture_pad_image, padding=padding, texture=texture, **kw)
    return pil_apply(img, kernel)


@register_kernel(texture_pad, tv_tensors.Mask)
def _texture_pad_mask(
    mask: Tensor, padding: Padding, texture: Any = None, *, fill: Fill = 0,
    mask_fill: Number | None = None, **_: Any,
) -> Tensor:  # fmt: skip
    if mask_fill is None:
        return pad_image(mask, padding, fill=fill)
    return pad_image(mask, padding, fill=mask_fill, fill_name="mask_fill")


@register_kernel(texture_pad, tv_tensors.BoundingBoxes, wrap=False)
@register_kernel(texture_pad, tv_tensors.KeyPoints, wrap=False)
def _texture_pad_points(inpt: Any, padding: Padding, *args: Any, **kwargs: Any) -> Any:
    return tvF.pad(inpt, padding=list(parse_padding(padding)), padding_mode="constant")


# -- pad ---------------------------------------------------------------------------------------


def pad(
    inpt: T,
    padding: Padding,
    fill: Fill = 0,
    padding_mode: str = "constant",
    *,
    out: Tensor | None = None,
) -> T:
    """Pad with a standard mode: ``torchvision.transforms.v2.functional.pad``, plus more.

    Same arguments, order and results as torchvision's for every input it accepts; in
    addition ``"circular"`` (alias ``"wrap"``), padding larger than the image in every mode
    (repeated reflection or wrap, as ``numpy.pad``), every dtype, and ``out=``.

    Args:
        inpt: as in ``texture_pad``; a ``Mask`` is padded like an image (type kept),
            ``BoundingBoxes``/``KeyPoints`` are shifted (constant mode only, as torchvision).
        padding: ``p``, ``(lr, tb)`` or ``(left, top, right, bottom)``; negative values crop.
        fill: constant mode's value: a number or one per channel, converted to the image's
            dtype as torchvision converts it (``20.2`` -> ``20`` on uint8, ``255`` -> ``True``
            on bool, a per-channel ``300`` -> ``44`` on uint8); integers on integer images are
            exact (torchvision casts them through float64). ``None`` means 0.
        padding_mode: ``"constant"``, ``"edge"`` (alias ``"replicate"``), ``"reflect"``
            (``[1, 2, 3, 4]`` padded by 2 -> ``[3, 2, 1, 2, 3, 4, 3, 2]``), ``"symmetric"``
            (-> ``[2, 1, 1, 2, 3, 4, 4, 3]``) or ``"circular"`` (alias ``"wrap"``; -> ``[3, 4,
            1, 2, 3, 4, 1, 2]``).
        out: optional preallocated output, as in ``texture_pad``.

    Returns:
        ``(..., C, H + top + bottom, W + left + right)``, same dtype and device. Integer images
        are padded exactly in every mode (torchvision casts them through float32 for reflect
        and edge). Differentiable w.r.t. the image (border gradients accumulate on the pixels
        they copy).

    Raises:
        TypeError / ValueError: as ``texture_pad``; an unknown ``padding_mode``; a fill the
            dtype cannot hold; a non-constant mode on an empty image.
    """
    kernel = get_kernel(pad, type(inpt))
    return kernel(inpt, padding, fill=fill, padding_mode=padding_mode, out=out)


@register_kernel(pad, Tensor)
@register_kernel(pad, tv_tensors.Image)
@register_kernel(pad, tv_tensors.Video)
@register_kernel(pad, tv_tensors.Mask)
def pad_image(
    image: Tensor,
    padding: Padding,
    fill: Fill | Tensor = 0,
    padding_mode: str = "constant",
    *,
    out: Tensor | None = None,
    fill_name: str = "fill",
) -> Tensor:
    """``pad``'s kernel for plain tensors, images, videos and masks (``fill`` may also be a
    tensor of 1 or C values, cast with ``.to(dtype)``)."""
    x = check_image(image)
    pads = parse_padding(padding)
    mode = check_mode(padding_mode, "padding_mode")
    _check_out(out, x)
    n = 1
    for s in x.shape[:-3]:  # (Dynamo cannot trace math.prod of a generator)
        n *= int(s)
    border = standard(mode, fill, x, n, image_channels(x.shape), fill_name)
    call, crop = pad_call(x, pads, border)
    return cropped(x, call, crop, out) if any(crop) else pad_direct(x, call, out)


@register_kernel(pad, PIL.Image.Image)
def _pad_pil(
    img: PIL.Image.Image, padding: Padding, fill: Fill = 0, padding_mode: str = "constant", *,
    out: Any = None,
) -> PIL.Image.Image:  # fmt: skip
    _no_out(out)
    # As torchvision pads a PIL image: palette images as their indices, a constant fill as the
    # pixel PIL makes of it in the image's mode (pil_fill), every other mode as numpy.pad does.
    mode = check_mode(padding_mode, "padding_mode")
    value = pil_fill(img, fill) if mode == "constant" else None
    return pil_apply(
        img,
        functools.partial(pad_image, padding=padding, fill=value, padding_mode=mode),
        indices=True,
    )


@register_kernel(pad, tv_tensors.BoundingBoxes, wrap=False)
@register_kernel(pad, tv_tensors.KeyPoints, wrap=False)
def _pad_points(
    inpt: Any, padding: Padding, fill: Fill = 0, padding_mode: str = "constant", **_: Any
) -> Any:
    mode = check_mode(padding_mode, "padding_mode")
    if mode != "constant":
        # torchvision's rule, in the words of this function's arguments.
        raise ValueError(
            f"padding_mode {mode!r} cannot pad {type(inpt).__name__} (inpt): boxes and "
            "keypoints are shifted by constant padding only, as torchvision does"
        )
    return tvF.pad(inpt, padding=list(parse_padding(padding)), padding_mode=mode)


# -- brick_pad ---------------------------------------------------------------------------------


@torch.compiler.assume_constant_result
def brick_tile(dtype: torch.dtype, device: torch.device, **brick: Any) -> Tensor:
    """The brick tile ``brick_pad`` uses for an image of ``dtype`` on ``device``:
    ``make_brick_texture(**brick)`` scaled to the dtype's range (torchvision's convention), or,
    for bool images (masks), True on the wall's light parts (the mortar, by default).

    Cached per options, dtype and device: the same tensor on every call lets the Taichi backend
    reuse its word table for the tile. ``make_brick_texture`` seeds a ``torch.Generator``, which
    Dynamo cannot create in a graph; the tile is a pure function of its arguments, so a compiled
    caller bakes it in as a constant, and under export, ``jit.trace`` or a mode it is made where
    no tracer sees it (``untraced``).
    """
    key = ("brick tile", repr(sorted(brick.items())), dtype, device)

    def make() -> Tensor:
        tile = make_brick_texture(**brick).to(device)
        # In [0, 1] by construction: no data-dependent range check is needed.
        return tile >= 0.5 if dtype == torch.bool else scale_texture(tile, dtype)

    return untraced(lambda: constant(key, make))


def brick_pad(
    inpt: T,
    padding: Padding,
    *,
    stagger: int | None = None,
    offset: Offset = (0, 0),
    fill: Fill = 0,
    mask_fill: Number | None = None,
    out: Tensor | None = None,
    **brick: Any,
) -> T:
    """Pad with a procedural brick wall: ``texture_pad`` with ``make_brick_texture(**brick)``.

    ``stagger`` defaults to ``running_bond_stagger(**brick)``, which continues the tile's
    running bond. ``brick`` takes ``make_brick_texture``'s keyword arguments (TypeError naming
    an unknown one); the tile's channels are ``brick_channels`` of the image's unless
    ``channels`` is given; bool images get it thresholded at 0.5 (``brick_tile``). Inputs,
    ``fill``, ``mask_fill``, shapes, dtypes, errors: as ``texture_pad``.
    """
    brick_options(brick, "brick_pad",
                  ("inpt", "padding", "stagger", "offset", "fill", "mask_fill", "out"))  # fmt: skip
    kernel = get_kernel(brick_pad, type(inpt))
    return kernel(
        inpt, padding, stagger=stagger, offset=offset, fill=fill, mask_fill=mask_fill, out=out,
        **brick,
    )  # fmt: skip


def _brick(x: Tensor, stagger: int | None, brick: dict[str, Any]) -> tuple[Tensor, int]:
    """The tile for image ``x`` and the stagger (default: the tile's running bond)."""
    options = {"channels": brick_channels(image_channels(x.shape)), **brick}
    tile = brick_tile(x.dtype, x.device, **options)
    return tile, running_bond_stagger(**brick) if stagger is None else stagger


@register_kernel(brick_pad, Tensor)
@register_kernel(brick_pad, tv_tensors.Image)
def brick_pad_image(
    image: Tensor,
    padding: Padding,
    *,
    stagger: int | None = None,
    offset: Offset = (0, 0),
    fill: Fill = 0,
    mask_fill: Number | None = None,
    out: Tensor | None = None,
    **brick: Any,
) -> Tensor:
    """``brick_pad``'s kernel for plain tensors and images (the wall pads: no fill)."""
    x = check_image(image)
    tile, stagger = _brick(x, stagger, brick)
    call, crop = _texture_call(x, padding, tile, stagger, offset, None, out)
    return cropped(x, call, crop, out) if any(crop) else pad_direct(x, call, out)


@register_kernel(brick_pad, tv_tensors.Video)
def _brick_pad_video(
    video: Tensor, padding: Padding, *, stagger: int | None = None, offset: Offset = (0, 0),
    fill: Fill = 0, mask_fill: Number | None = None, out: Tensor | None = None, **brick: Any,
) -> Tensor:  # fmt: skip
    tile, stagger = _brick(check_image(video), stagger, brick)
    return _texture_pad_video(video, padding, tile, stagger=stagger, offset=offset, out=out)


@register_kernel(brick_pad, PIL.Image.Image)
def _brick_pad_pil(
    img: PIL.Image.Image, padding: Padding, *, out: Any = None, **kw: Any
) -> PIL.Image.Image:
    _no_out(out)
    return pil_apply(img, functools.partial(brick_pad_image, padding=padding, **kw))


# No wall on targets: brick_pad's kernels for them are texture_pad's (the texture unread).
register_kernel(brick_pad, tv_tensors.Mask)(_texture_pad_mask)
register_kernel(brick_pad, tv_tensors.BoundingBoxes, wrap=False)(_texture_pad_points)
register_kernel(brick_pad, tv_tensors.KeyPoints, wrap=False)(_texture_pad_points)
