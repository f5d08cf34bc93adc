"""Padding functionals: ``texture_pad``, ``brick_pad`` and ``pad`` on tensors, tv_tensors and PIL.

Each function parses user arguments into the canonical form of the ``tipad::pad`` custom op
(``tipad_transforms.ops``) and dispatches on the input type: plain tensors and tv_tensors
``Image``/``Video`` go straight to the op, PIL images round-trip through a tensor and come back in
their own mode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

import PIL.Image
import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as tvF

from .. import ops
from .._geometry import (
    PadGeometry,
    check_bank_index,
    check_mode,
    image_channels,
    parse_padding,
)
from ._brick import brick_channels, make_brick_texture, running_bond_stagger
from ._pil import pil_apply

__all__ = ["brick_pad", "pad", "texture_pad"]

Padding = int | Sequence[int]
Fill = int | float | bool | Sequence[int | float | bool]
T = TypeVar("T", torch.Tensor, PIL.Image.Image)


def _check_image(x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor or PIL image, got {type(x).__name__}")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., C, H, W) or (H, W), got {tuple(x.shape)}")
    if x.is_complex():
        raise TypeError(f"x must be a real or bool tensor, got dtype {x.dtype}")
    return x.as_subclass(torch.Tensor) if type(x) is not torch.Tensor else x


def _lead(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape[:-3])


def _cast_values(values: torch.Tensor, dtype: torch.dtype, what: str) -> torch.Tensor:
    """Convert ``values`` to ``dtype`` exactly, or raise ValueError naming ``what``."""
    if values.dtype == dtype:
        return values
    if dtype == torch.bool:
        if not bool(((values == 0) | (values == 1)).all()):
            raise ValueError(f"{what} for a bool image must be 0/1 or False/True")
        return values != 0
    if dtype.is_floating_point:
        return values.to(dtype)
    info = torch.iinfo(dtype)
    v = values.double()
    if not bool(torch.isfinite(v).all()) or bool((v < info.min).any() | (v > info.max).any()):
        raise ValueError(f"{what} must lie in [{info.min}, {info.max}] for a {dtype} image")
    if not bool((v == v.round()).all()):
        raise ValueError(f"{what} must be integral for a {dtype} image, got {values.tolist()}")
    return values.to(dtype)


def _number_tensor(values: list[int | float | bool], device: torch.device) -> torch.Tensor:
    # torch.tensor would make Python floats float32 (0.1 for a float64 image would come out as
    # 0.10000000149) and raise RuntimeError for ints beyond int64: pick an exact dtype instead,
    # and let _cast_values reject what the image's dtype cannot hold.
    if all(isinstance(v, bool) for v in values):
        dtype = torch.bool
    elif all(isinstance(v, int) and -(2**63) <= v < 2**63 for v in values):
        dtype = torch.int64
    else:
        dtype = torch.float64
    return torch.tensor(values, dtype=dtype, device=device)


def _fill_tensor(fill: Fill, x: torch.Tensor, channels: int) -> torch.Tensor:
    # Built and checked on the host, moved once: checks on a CUDA tensor would sync each call.
    if isinstance(fill, torch.Tensor):
        values = fill.detach().reshape(-1).cpu()
    elif isinstance(fill, (int, float, bool)):
        values = _number_tensor([fill], torch.device("cpu"))
    elif isinstance(fill, Sequence) and not isinstance(fill, str):
        if not all(isinstance(f, (int, float, bool)) for f in fill):
            raise TypeError(f"fill must be a number or a sequence of numbers, got {fill!r}")
        values = _number_tensor(list(fill), torch.device("cpu"))
    else:
        raise TypeError(
            f"fill must be a number or a sequence of numbers, got {type(fill).__name__}"
        )
    if values.numel() == 1:
        values = values.expand(channels)
    elif values.numel() != channels:
        raise ValueError(f"fill must have 1 or {channels} (channel) values, got {values.numel()}")
    return _cast_values(values, x.dtype, "fill").contiguous().to(x.device)


def as_bank(texture: Any) -> torch.Tensor:
    """A user texture as a ``(K, C, th, tw)`` view, or TypeError/ValueError naming ``texture``."""
    if not isinstance(texture, torch.Tensor):
        raise TypeError(f"texture must be a torch.Tensor, got {type(texture).__name__}")
    if texture.is_complex():
        raise TypeError(f"texture must be real, got dtype {texture.dtype}")
    if texture.dim() == 2:
        bank = texture[None, None]
    elif texture.dim() == 3:
        bank = texture[None]
    elif texture.dim() == 4:
        bank = texture
    else:
        raise ValueError(
            f"texture must have shape (th, tw), (C, th, tw) or (K, C, th, tw), "
            f"got {tuple(texture.shape)}"
        )
    if bank.numel() == 0:
        raise ValueError(f"texture must not be empty, got shape {tuple(texture.shape)}")
    return bank


def _texture_bank(texture: Any, x: torch.Tensor, channels: int) -> torch.Tensor:
    """User texture -> ``(K, Ct, th, tw)`` in x's dtype and device, Ct in {1, C}."""
    bank = as_bank(texture)
    ct = bank.shape[1]
    if ct not in (1, channels):
        raise ValueError(
            f"texture has {ct} channels; the image has {channels}: give 1 (broadcast) "
            f"or {channels} texture channels"
        )
    if type(bank) is not torch.Tensor:
        # Dynamo cannot trace as_subclass(torch.Tensor) on a plain tensor (fullgraph break).
        bank = bank.as_subclass(torch.Tensor)
    bank = bank.to(x.device)
    if bank.dtype == x.dtype:
        return bank
    if x.dtype == torch.bool or bank.dtype == torch.bool:
        return _cast_values(bank, x.dtype, "texture")
    if bank.is_floating_point() and not x.is_floating_point():
        # torchvision's convention: float images hold [0, 1], integer images the dtype's range.
        lo, hi = torch.aminmax(bank.detach())
        if not (float(lo) >= 0.0 and float(hi) <= 1.0):  # NaN fails too
            raise ValueError(
                f"a float texture for a {x.dtype} image must hold values in [0, 1] (they are "
                f"scaled to the dtype's range), got [{float(lo):g}, {float(hi):g}]"
            )
    return _scale_texture(bank, x.dtype)


def _scale_texture(bank: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """torchvision's ``to_dtype(scale=True)`` for a (non-bool) texture, minus its failures."""
    if bank.dtype == dtype:
        return bank
    if bank.is_floating_point() and not dtype.is_floating_point:
        if dtype in (torch.int32, torch.int64):
            # torchvision refuses these; scale the same way (v * (max + 1 - 1e-3), truncated)
            # in float64, where 1.0 may round up to max + 1: saturate it rather than wrap.
            info = torch.iinfo(dtype)
            scaled = (bank.double() * (info.max + 1.0 - 1e-3)).floor()
            top = scaled >= float(info.max)
            return scaled.masked_fill(top, 0).to(dtype).masked_fill(top, info.max)
        if bank.dtype in (torch.float16, torch.bfloat16):
            # In half precision max + 1 - 1e-3 rounds to max + 1, so torchvision would turn 1.0
            # into 0 (uint8) or the minimum (int8, int16): scale in float32 instead.
            bank = bank.float()
    elif dtype in (torch.float16, torch.bfloat16) and not bank.is_floating_point():
        # An int32/int64 texture's maximum overflows half precision before the division
        # (max -> inf): scale in float32, then round once.
        return tvF.to_dtype(bank, torch.float32, scale=True).to(dtype)
    return tvF.to_dtype(bank, dtype, scale=True)


def _per_sample(
    value: Any, lead: tuple[int, ...], last: tuple[int, ...], what: str
) -> torch.Tensor:
    """Broadcast ``value`` (int(s) or tensor of ``lead_prefix + last``) to ``(N, *last)`` int64."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{what} must hold integers, got dtype {t.dtype}")
    elif isinstance(value, int) and not isinstance(value, bool):
        t = torch.tensor(value)
    elif isinstance(value, Sequence) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        t = torch.tensor(list(value), dtype=torch.long)
    else:
        raise TypeError(
            f"{what} must be an int, a sequence of ints or an int tensor, got {value!r}"
        )
    try:
        t = (
            t.to(torch.int64).broadcast_to((*lead, *last))
            if t.dim() <= len(lead) + len(last)
            else t
        )
        if tuple(t.shape) != (*lead, *last):
            raise RuntimeError
    except RuntimeError:
        raise ValueError(
            f"{what} must broadcast to {(*lead, *last)} (one per sample of the leading dims), "
            f"got shape {tuple(value.shape) if isinstance(value, torch.Tensor) else value!r}"
        ) from None
    return t.reshape(math.prod(lead), *last).contiguous()


def _check_out(out: Any, shape: list[int], x: torch.Tensor, *needs_grad: torch.Tensor) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if list(out.shape) != shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"out must have shape {tuple(shape)}, dtype {x.dtype} and device {x.device}; got "
            f"{tuple(out.shape)}, {out.dtype}, {out.device}"
        )
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (out, x, *needs_grad)):
        raise ValueError("out= does not support autograd; call without out= to get gradients")
    if (
        # Dynamo cannot trace storage pointers (fullgraph fails); a compiled graph
        # functionalizes the write to out anyway.
        not torch.compiler.is_compiling()
        and out.numel()
        and x.numel()
        and out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    ):
        raise ValueError("out must not share memory with x")


def _launch(
    x: torch.Tensor,
    padding: Padding,
    mode: str,
    *,
    fill: torch.Tensor | None = None,
    texture: torch.Tensor | None = None,
    offset: Any = 0,
    texture_index: Any = 0,
    stagger: int = 0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    pads = list(parse_padding(padding))
    g = PadGeometry.of(x.shape, pads)
    if mode not in ("constant", "texture") and (g.h == 0 or g.w == 0) and any(pads):
        raise ValueError(f"mode {mode!r} needs a non-empty image, got shape {tuple(x.shape)}")
    lead = _lead(x)
    empty = x.new_empty(0)
    offsets = _per_sample(offset, lead, (2,), "offset")
    # Out-of-bank values must stay out of the bank (for the op's check), not wrap into int32.
    index = _per_sample(texture_index, lead, (), "texture_index").clamp(-1, 2**31 - 1)
    if texture is not None:
        # The pattern repeats every th*tw rows and tw columns, and the stagger acts mod tw:
        # reducing keeps the result exact and the kernel's int32 index arithmetic in range.
        th, tw = texture.shape[-2], texture.shape[-1]
        offsets = offsets.remainder(torch.tensor([th * tw, tw], device=offsets.device))
        stagger = stagger % tw
        # Checked where the index lives (the host, unless the user gave a device tensor), before
        # it moves: the op skips the check for device-resident indices. Dynamo cannot trace the
        # data-dependent check; compiled, the op's own host check (or the kernel's clamp) stays.
        if not torch.compiler.is_compiling():
            check_bank_index(texture.shape[0], index)
    offsets = offsets.to(device=x.device, dtype=torch.int32)
    index = index.to(device=x.device, dtype=torch.int32)
    args = (
        x,
        pads,
        mode,
        empty if fill is None else fill,
        empty if texture is None else texture,
        offsets,
        index,
        stagger,
    )
    if out is None:
        return ops.pad(*args)
    _check_out(out, g.out_shape(x.shape), x, *(t for t in (texture,) if t is not None))
    ops.pad_out(*args, out)
    return out


def _no_out_for_pil(out: torch.Tensor | None) -> None:
    if out is not None:
        raise TypeError("out= takes tensor inputs only; a PIL image is returned as a new image")


def _rewrap(result: torch.Tensor, like: Any) -> torch.Tensor:
    if isinstance(like, (tv_tensors.Image, tv_tensors.Video)):
        return tv_tensors.wrap(result, like=like)
    return result


def texture_pad(
    x: T,
    padding: Padding,
    texture: torch.Tensor,
    *,
    stagger: int = 0,
    offset: int | Sequence[int] | torch.Tensor = (0, 0),
    texture_index: int | torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> T:
    """Pad an image with a tiled texture, in one kernel launch.

    Args:
        x: ``(..., C, H, W)`` or ``(H, W)`` tensor (any dtype: uint8, int16/32/64, float16,
            bfloat16, float32, float64, bool; any layout; CPU or CUDA), a tv_tensors
            ``Image``/``Video`` (returned as the same type) or a PIL image (returned in its mode).
        padding: ``p``, ``(lr, tb)`` or ``(left, top, right, bottom)`` pixels, non-negative.
        texture: ``(th, tw)`` or ``(C', th, tw)`` tile with ``C'`` in {1, C} (one channel is
            broadcast to all), or a bank ``(K, C', th, tw)`` indexed by ``texture_index``.
            Converted to ``x``'s dtype: float textures for integer images hold ``[0, 1]``.
        stagger: horizontal shift, in pixels, of each successive row of tiles (a brick wall's
            running bond); any int.
        offset: ``(oy, ox)`` shift of the tile lattice, or a tensor broadcastable to
            ``(*x.shape[:-3], 2)`` for one offset per sample.
        texture_index: which bank texture each sample uses: an int or a tensor broadcastable to
            ``x.shape[:-3]``; default 0.
        out: optional preallocated contiguous output (the result's shape, dtype, device). Not
            differentiable.

    Returns:
        ``(..., C, H + top + bottom, W + left + right)``: the image in the middle, unchanged
        (bit exact) and, at border pixel ``(Y, X)``, ``texture[:, ty, tx]`` with
        ``y = Y - top - oy``, ``x = X - left - ox``, ``v = floor(y / th)``, ``ty = y - v*th``,
        ``tx = (x - v*stagger) mod tw``. So texture pixel ``(0, 0)`` sits on the image's top-left
        pixel when ``offset`` is zero. Differentiable w.r.t. ``x`` and ``texture``.

    Raises:
        TypeError: non-tensor ``x``/``texture``, non-integer padding, offsets or indices.
        ValueError: bad shapes, negative padding, channel mismatch, empty texture, values that
            the image's dtype cannot hold, ``texture_index`` outside the bank, a bad ``out``.
    """
    if isinstance(x, PIL.Image.Image):
        _no_out_for_pil(out)
        return pil_apply(
            x,
            lambda t: texture_pad(
                t, padding, texture, stagger=stagger, offset=offset, texture_index=texture_index
            ),
        )
    image = _check_image(x)
    if isinstance(stagger, bool) or not isinstance(stagger, int):
        raise TypeError(f"stagger must be an int, got {type(stagger).__name__}")
    channels = image_channels(image.shape)
    bank = _texture_bank(texture, image, channels)
    result = _launch(
        image,
        padding,
        "texture",
        texture=bank,
        offset=offset,
        texture_index=0 if texture_index is None else texture_index,
        stagger=stagger,
        out=out,
    )
    return _rewrap(result, x)


def pad(
    x: T,
    padding: Padding,
    mode: str = "constant",
    fill: Fill = 0,
    *,
    out: torch.Tensor | None = None,
) -> T:
    """Pad with a standard mode, in the same engine as ``texture_pad``.

    Args:
        x: as in ``texture_pad``.
        padding: ``p``, ``(lr, tb)`` or ``(left, top, right, bottom)``.
        mode: ``"constant"`` (``fill``), ``"edge"`` (alias ``"replicate"``), ``"reflect"``
            (``[1, 2, 3, 4]`` padded by 2 -> ``[3, 2, 1, 2, 3, 4, 3, 2]``), ``"symmetric"``
            (-> ``[2, 1, 1, 2, 3, 4, 4, 3]``) or ``"circular"`` (alias ``"wrap"``; -> ``[3, 4, 1,
            2, 3, 4, 1, 2]``). Equal to ``torchvision.transforms.v2.functional.pad`` and
            ``torch.nn.functional.pad`` wherever they accept the input; for padding larger than
            the image, equal to ``numpy.pad`` (repeated reflection or wrap).
        fill: constant mode's value, a number or one per channel, exactly representable in
            ``x``'s dtype.
        out: optional preallocated output, as in ``texture_pad``.

    Returns:
        ``(..., C, H + top + bottom, W + left + right)``, same dtype and device.
        Differentiable w.r.t. ``x`` (border gradients accumulate on the pixels they copy).

    Raises:
        TypeError / ValueError: as ``texture_pad``; an unknown ``mode``; a non-constant mode on
            an empty image.
    """
    if isinstance(x, PIL.Image.Image):
        _no_out_for_pil(out)
        return pil_apply(x, lambda t: pad(t, padding, mode, fill))
    image = _check_image(x)
    name = check_mode(mode)
    channels = image_channels(image.shape)
    fill_t = _fill_tensor(fill, image, channels) if name == "constant" else None
    return _rewrap(_launch(image, padding, name, fill=fill_t, out=out), x)


# Converted brick tiles, one per (options, dtype, device). The same tensor on every call lets the
# runtime reuse its word table for the tile; nothing outside brick_pad ever sees these tensors.
_BRICK_TILES: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}


@torch.compiler.assume_constant_result
def _brick_tile(dtype: torch.dtype, device: torch.device, **brick: Any) -> torch.Tensor:
    # make_brick_texture seeds a torch.Generator, which Dynamo cannot create inside a graph
    # (fullgraph=True fails); the tile is a pure function of its arguments, so a compiled caller
    # may bake it in as a constant.
    key = (repr(sorted(brick.items())), dtype, device)
    tile = _BRICK_TILES.get(key)
    if tile is None:
        tile = make_brick_texture(**brick).to(device)
        if dtype == torch.bool:
            # A bool image (a mask) gets the wall's light parts as True: the mortar, by default.
            tile = tile >= 0.5
        else:
            # In [0, 1] by construction, so texture_pad's data-dependent range check (which
            # torch.compile(fullgraph=True) cannot trace) is not needed.
            tile = _scale_texture(tile, dtype)
        if len(_BRICK_TILES) >= 16:
            _BRICK_TILES.clear()
        _BRICK_TILES[key] = tile
    return tile


def brick_pad(
    x: T,
    padding: Padding,
    *,
    stagger: int | None = None,
    offset: int | Sequence[int] | torch.Tensor = (0, 0),
    out: torch.Tensor | None = None,
    **brick: Any,
) -> T:
    """Pad with a procedural brick wall: ``texture_pad`` with ``make_brick_texture(**brick)``.

    ``stagger`` defaults to half a brick (brick width plus mortar, halved), the running bond of
    a real wall. ``brick`` takes ``make_brick_texture``'s keyword arguments; the texture gets as
    many channels as ``brick_channels`` gives for ``x`` (1-4 as ``x``, else 1 broadcast); bool
    images get it thresholded at 0.5. The tile is rendered and converted once per options,
    dtype and device. Shapes, dtypes, errors: as ``texture_pad``.
    """
    if isinstance(x, PIL.Image.Image):
        _no_out_for_pil(out)
        return pil_apply(
            x, lambda t: brick_pad(t, padding, stagger=stagger, offset=offset, **brick)
        )
    image = _check_image(x)
    channels = image_channels(image.shape)
    brick.setdefault("channels", brick_channels(channels))
    tile = _brick_tile(image.dtype, image.device, **brick)
    if stagger is None:
        stagger = running_bond_stagger(**brick)
    return texture_pad(x, padding, tile, stagger=stagger, offset=offset, out=out)
