"""PIL round trip: image -> ``(C, H, W)`` CPU tensor -> padded tensor -> image of the same mode.

The tensor per mode:

* ``1``: uint8, 0 or 255 (torchvision's ``pil_to_tensor`` convention); back: white where >= 128.
* ``L``, ``LA``, ``La``, ``RGB``, ``RGBA``, ``RGBa``, ``RGBX``, ``CMYK``, ``YCbCr``, ``LAB``,
  ``HSV``: uint8, the image's own bands (so CMYK fills and textures are CMYK values, and so on).
* ``P``, ``PA``: with ``indices`` (``pad``: moving pixels only), uint8 palette indices (``PA``:
  and the A band), the palette kept; else uint8 RGB, or RGBA when the palette has transparency
  (``PA``: the A band), mapped back to each colour's exact palette entry, else the nearest
  (alpha-premultiplied) one, on the same palette.
* ``I``: int32; ``I;16``, ``I;16L``, ``I;16B``, ``I;16N``: uint16 (native byte order); ``F``:
  float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import PIL.Image
import torch
from torch import Tensor

from ._convert import is_numbers

__all__ = ["pil_apply", "pil_fill", "pil_texture"]

# Image metadata that stays true after padding; size-bound metadata such as EXIF is dropped.
_KEPT_INFO = ("dpi", "icc_profile", "gamma", "transparency")
_CHUNK = 4096  # colours matched against a palette at a time: (4096, 256) int64 distances


def pil_apply(
    img: PIL.Image.Image, fn: Callable[[Tensor], Tensor], *, indices: bool = False
) -> PIL.Image.Image:
    """Apply ``fn`` (``(C, H, W)`` -> ``(C, H', W')`` tensor) to a PIL image, keeping its mode.

    ``fn`` gets a fresh copy (its dtype per mode: the module docstring) and must return the
    same dtype and channel count. Pixels ``fn`` copies come back bit exact, palette indices
    included (for palettes without duplicate colours; always with ``indices``, as torchvision
    pads a palette image). The result keeps ``img``'s palette, ``dpi``, ICC profile, gamma and
    ``transparency``.

    Raises:
        TypeError: ``img`` is not a PIL image or has a mode with no array form (``BGR;15``,
            ...); ``fn`` returned something other than a tensor.
        ValueError: ``fn`` changed the dtype or the number of channels.
    """
    if not isinstance(img, PIL.Image.Image):
        raise TypeError(f"x must be a PIL image, got {type(img).__name__}")
    if img.mode in ("P", "PA") and not indices:
        out = _apply_palette(img, fn)
    else:
        out = _apply_direct(img, fn)
        if img.mode in ("P", "PA"):
            _copy_palette(img, out)
    out.info.update({k: img.info[k] for k in _KEPT_INFO if k in img.info})
    return out


def _palette(img: PIL.Image.Image) -> tuple[str, list[int]]:
    """``img``'s palette mode and its entries, flat."""
    mode = img.palette.mode if img.palette is not None else "RGB"
    return mode, img.getpalette(mode) or []


def _copy_palette(img: PIL.Image.Image, to: PIL.Image.Image) -> None:
    mode, entries = _palette(img)
    to.putpalette(entries, mode)


def _to_tensor(arr: npt.NDArray[np.generic]) -> Tensor:
    t = torch.from_numpy(np.ascontiguousarray(arr))
    return t.permute(2, 0, 1) if t.dim() == 3 else t[None]


def _run(fn: Callable[[Tensor], Tensor], t: Tensor) -> npt.NDArray[np.generic]:
    """``fn(t)`` checked and back as an ``(H', W', C)`` array (``(H', W')`` for one channel)."""
    result = fn(t)
    if not isinstance(result, Tensor):
        raise TypeError(f"fn must return a torch.Tensor, got {type(result).__name__}")
    if result.dim() != 3 or result.shape[0] != t.shape[0] or result.dtype != t.dtype:
        raise ValueError(
            f"fn must map a {tuple(t.shape)} {t.dtype} tensor to ({t.shape[0]}, H', W') "
            f"{t.dtype}; got {tuple(result.shape)} {result.dtype}"
        )
    out = result.detach().cpu()
    out = out[0] if out.shape[0] == 1 else out.permute(1, 2, 0)
    return out.contiguous().numpy()


def _work_tensor(img: PIL.Image.Image) -> tuple[Tensor, np.dtype[Any]]:
    """``img``'s pixels as the module docstring's tensor (palette images as their indices),
    and the array dtype they are stored in."""
    try:
        arr = np.array(img)  # a writable copy: torch refuses read-only buffers
    except Exception as e:  # Pillow raises several types for modes numpy cannot take
        raise TypeError(f"x has PIL mode {img.mode!r}, which has no array form") from e
    if arr.dtype == object or arr.ndim not in (2, 3):
        raise TypeError(f"x has PIL mode {img.mode!r}, which has no array form")
    if img.mode == "1":
        return _to_tensor(arr.astype(np.uint8) * np.uint8(255)), arr.dtype
    stored = arr.dtype  # I;16B keeps its big-endian byte order for the way back
    return _to_tensor(arr.astype(stored.newbyteorder("="), copy=False)), stored


def _apply_direct(img: PIL.Image.Image, fn: Callable[[Tensor], Tensor]) -> PIL.Image.Image:
    work, stored = _work_tensor(img)
    out = _run(fn, work)
    if img.mode == "1":
        return PIL.Image.fromarray(np.asarray(out) >= 128)
    h, w = out.shape[:2]
    return PIL.Image.frombytes(img.mode, (w, h), out.astype(stored, copy=False).tobytes())


def pil_fill(img: PIL.Image.Image, fill: Any, name: str = "fill") -> Tensor:
    """The constant border of ``img`` for ``fill`` as torchvision pads a PIL image, as the
    ``(C,)`` tensor ``pil_apply(img, ..., indices=True)``'s function works in.

    torchvision (``transforms._functional_pil.pad``) parses ``fill`` with ``_parse_fill``
    (``None`` is 0, a number serves every band, a sequence holds 1 or one value per band, each
    value truncated to an int except in mode ``F``), then the border is what
    ``PIL.Image.new(img.mode, size, fill)`` holds: PIL's own conversion (palette index 7 of a
    ``P`` image, white for any non-zero fill on ``1``, ``LAB``'s a and b offset by 128, ``L``
    clipped). So this builds that pixel with PIL and reads it back. A tensor ``fill`` is taken
    as its values (beyond torchvision).

    Raises:
        TypeError: ``fill`` is not a number, a sequence of numbers, a tensor or None.
        ValueError: a sequence of another length than 1 or the image's bands; a value that is
            not finite (no int) or that PIL cannot put into the mode.
    """
    if isinstance(fill, Tensor):
        fill = fill.detach().cpu().reshape(-1).tolist()
    bands = len(img.getbands())
    if fill is None:
        fill = 0
    if isinstance(fill, (bool, int, float)):
        values = [fill] * bands
    elif is_numbers(fill) and not isinstance(fill, (bytes, bytearray)):
        values = list(fill) * bands if len(fill) == 1 else list(fill)
        if len(values) != bands:
            counts = "1 value" if bands == 1 else f"1 or {bands} values (one per band)"
            raise ValueError(
                f"{name} must have {counts} for a PIL {img.mode!r} image, got {len(fill)}"
            )
    else:
        raise TypeError(
            f"{name} must be a number, a sequence of numbers or None, got {type(fill).__name__}"
        )
    try:
        color: Any = [float(v) if img.mode == "F" else int(v) for v in values]
        color = color[0] if bands == 1 else tuple(color)
        pixel = PIL.Image.new(img.mode, (1, 1), color)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{name}={fill!r} cannot fill a PIL {img.mode!r} image: {exc}") from None
    return _work_tensor(pixel)[0].reshape(-1)


def _palette_colours(img: PIL.Image.Image, mode: str) -> npt.NDArray[np.uint8]:
    """``(256, len(mode))``: what ``img.convert(mode)`` turns each palette index into."""
    lut = PIL.Image.frombytes("P", (256, 1), bytes(range(256)))
    _copy_palette(img, lut)
    if "transparency" in img.info:
        lut.info["transparency"] = img.info["transparency"]
    return np.array(lut.convert(mode))[0]


def _premultiplied(colours: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    c = colours.astype(np.int64)
    if c.shape[-1] == 4:
        # Alpha-weighted, so a fully transparent pixel of any colour finds a transparent entry.
        c[..., :3] = (c[..., :3] * c[..., 3:] + 127) // 255
    return c


def _nearest_index(
    pixels: npt.NDArray[np.uint8], palette: npt.NDArray[np.uint8]
) -> npt.NDArray[np.uint8]:
    """Palette index of each pixel (``(..., k)`` uint8): the first exact match, else the nearest."""
    k = palette.shape[1]
    flat = pixels.reshape(-1, k)
    weights = (256 ** np.arange(k - 1, -1, -1)).astype(np.int64)
    codes = flat.astype(np.int64) @ weights
    unique, inverse = np.unique(codes, return_inverse=True)
    pal_codes = palette.astype(np.int64) @ weights
    sorted_codes, first = np.unique(pal_codes, return_index=True)
    pos = np.searchsorted(sorted_codes, unique).clip(0, len(sorted_codes) - 1)
    exact = sorted_codes[pos] == unique
    index = np.where(exact, first[pos], 0)
    missing = np.flatnonzero(~exact)
    if missing.size:
        # Decode the unmatched colours and compare them with every entry, a chunk at a time.
        digits = (unique[missing, None] // weights[None, :]) % 256
        a = _premultiplied(digits.astype(np.uint8))
        b = _premultiplied(palette)
        b2 = (b * b).sum(1)
        for start in range(0, len(missing), _CHUNK):
            part = a[start : start + _CHUNK]
            dist = b2[None, :] - 2 * part @ b.T
            index[missing[start : start + _CHUNK]] = dist.argmin(1)
    return index[inverse.reshape(-1)].astype(np.uint8).reshape(pixels.shape[:-1])


def _palette_work_mode(img: PIL.Image.Image) -> str:
    has_alpha = img.mode == "PA" or "transparency" in img.info or _palette(img)[0] == "RGBA"
    return "RGBA" if has_alpha else "RGB"


def pil_texture(img: PIL.Image.Image, texture: PIL.Image.Image) -> Tensor:
    """A texture image as the ``(C, th, tw)`` tensor that suits ``pil_apply(img, ...)``.

    Converted as PIL converts colours into ``img``'s mode, in the dtype and channels
    ``pil_apply`` works in for ``img``, so ``texture_pad(img, padding, pil_texture(img, tex))``
    draws ``tex`` as it looks: CMYK textures are CMYK, palette images get RGB(A), ``1`` gets
    gray levels (thresholded on the way back), 16-bit images ``L * 257``; ``I`` and ``F``
    images have no fixed white, so the gray levels span the image's own value range.

    Raises:
        TypeError: ``img`` or ``texture`` is not a PIL image.
        ValueError: PIL cannot convert ``texture`` to ``img``'s mode.
    """
    for value, what in ((img, "img"), (texture, "texture")):
        if not isinstance(value, PIL.Image.Image):
            raise TypeError(f"{what} must be a PIL image, got {type(value).__name__}")
    mode = img.mode
    if texture.mode in ("P", "PA", "1", "I", "F") or texture.mode.startswith("I;16"):
        # Normalise exotic texture modes first; PIL converts these to RGBA reliably.
        texture = texture.convert("RGBA" if texture.mode in ("P", "PA") else "L")
    if mode.startswith("I;16") or mode in ("I", "F"):
        gray = np.array(texture.convert("L"), dtype=np.float64) / 255.0
        if mode.startswith("I;16"):
            arr: npt.NDArray[np.generic] = np.round(gray * 65535.0).astype(np.uint16)
        else:
            extrema = np.array(img.getextrema(), dtype=np.float64).reshape(-1)
            lo, hi = float(extrema[0]), float(extrema[-1])
            if not hi > lo:
                lo, hi = (0.0, 1.0) if mode == "F" else (0.0, 255.0)
            values = lo + gray * (hi - lo)
            arr = values.astype(np.float32) if mode == "F" else np.round(values).astype(np.int32)
        return _to_tensor(arr)
    if mode in ("P", "PA"):
        target = _palette_work_mode(img)
    else:
        target = "L" if mode == "1" else mode
    try:
        converted = texture.convert(target)
    except ValueError as e:
        raise ValueError(f"texture cannot be converted to mode {target!r}: {e}") from None
    return _to_tensor(np.array(converted))


def _apply_palette(img: PIL.Image.Image, fn: Callable[[Tensor], Tensor]) -> PIL.Image.Image:
    colours = _palette_colours(img, _palette_work_mode(img))
    arr = np.array(img)
    if img.mode == "PA":
        work = np.concatenate([colours[arr[..., 0], :3], arr[..., 1:]], axis=-1)
    else:
        work = colours[arr]
    out = np.asarray(_run(fn, _to_tensor(work)), dtype=np.uint8)
    palette_mode, entries = _palette(img)  # only the palette's own entries are candidates
    usable = colours[: max(1, min(256, len(entries) // len(palette_mode)))]
    if img.mode == "PA":
        index = _nearest_index(out[..., :3], usable[:, :3])
        data = np.stack([index, out[..., 3]], axis=-1)
    else:
        data = _nearest_index(out, usable)
    h, w = data.shape[:2]
    result = PIL.Image.frombytes(img.mode, (w, h), np.ascontiguousarray(data).tobytes())
    _copy_palette(img, result)
    return result
