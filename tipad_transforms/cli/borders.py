"""Padded PIL images built from PIL's own copies (crop, flip, paste), for ``tipad pad``: exactly
what ``functional.pad`` / ``texture_pad`` return (``tests/cli/test_borders.py`` compares them
mode by mode), without the tensor round trip that costs a small image more than the padding."""

from __future__ import annotations

import PIL.Image

__all__ = ["KEPT_INFO", "MODES", "finish", "mirror_pad", "on_wall"]

#: The PIL modes padded here (each compared with the functional API by the tests); the others
#: go through the functional API, which refuses those without an array form.
MODES = frozenset(
    ("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB",
     "HSV", "I", "I;16", "I;16L", "I;16B", "I;16N", "F")
)  # fmt: skip

#: The metadata ``functional.pad`` keeps on a padded PIL image (the rest, EXIF included, is
#: bound to the input's size).
KEPT_INFO = ("dpi", "icc_profile", "gamma", "transparency")
_FLIP = {0: PIL.Image.Transpose.FLIP_LEFT_RIGHT, 1: PIL.Image.Transpose.FLIP_TOP_BOTTOM}


def finish(out: PIL.Image.Image, img: PIL.Image.Image) -> PIL.Image.Image:
    """``out`` with ``img``'s palette and kept metadata, as ``functional.pad`` gives them."""
    if img.mode in ("P", "PA"):
        palette_mode = img.palette.mode if img.palette is not None else "RGB"
        out.putpalette(img.getpalette(palette_mode) or [], palette_mode)
    out.info = {k: img.info[k] for k in KEPT_INFO if k in img.info}
    return out


def _strip(
    img: PIL.Image.Image, axis: int, span: tuple[int, int], n: int, mode: str, end: bool
) -> PIL.Image.Image:
    """The ``n`` px wide border strip along ``axis`` (0: columns, 1: rows) after the last pixel
    (``end``) or before the first of the image that lies at ``span = (first, size)`` of
    ``img`` along that axis, in ``mode``."""
    first, size = span
    if mode == "edge":
        edge = first + size - 1 if end else first
        wide = (n, img.height) if axis == 0 else (img.width, n)
        return _band(img, axis, edge, edge + 1).resize(wide, PIL.Image.Resampling.NEAREST)
    if mode == "circular":
        lo = first if end else first + size - n
        return _band(img, axis, lo, lo + n)
    skip = 1 if mode == "reflect" else 0  # reflect leaves out the edge pixel, symmetric not
    lo = first + size - skip - n if end else first + skip
    return _band(img, axis, lo, lo + n).transpose(_FLIP[axis])


def mirror_pad(
    img: PIL.Image.Image, padding: tuple[int, int, int, int], mode: str
) -> PIL.Image.Image | None:
    """``img`` padded by ``(left, top, right, bottom)`` in ``mode`` (edge, reflect, symmetric
    or circular); None for an image without pixels, or one pixel wide or high in reflect mode.
    A side wider than the image tiles its period (the image and its mirror image, or the image
    alone), as ``numpy.pad`` (and so ``functional.pad``) repeats the reflection or the wrap."""
    short = 1 if mode == "reflect" else 0  # a reflected strip leaves out the edge pixel
    w, h = img.size
    if min(w, h) <= short:
        return None
    left, top, right, bottom = padding
    if mode == "edge" or (max(left, right) <= w - short and max(top, bottom) <= h - short):
        return finish(_pad_once(img, padding, mode), img)
    out = img
    for axis, before, after in ((0, left, right), (1, top, bottom)):
        n = out.size[axis]
        unit = out
        if mode != "circular":  # the period: the image, then its mirror image
            inner = _band(out, axis, short, n - short)
            unit = _join(out, inner.transpose(_FLIP[axis]), axis)
        start = -before % unit.size[axis]
        while unit.size[axis] < start + before + n + after:
            unit = _join(unit, unit, axis)
        out = _band(unit, axis, start, start + before + n + after)
    return finish(out, img)


def _band(img: PIL.Image.Image, axis: int, lo: int, hi: int) -> PIL.Image.Image:
    """Columns (``axis`` 0) or rows (1) ``lo`` to ``hi`` of ``img``."""
    return img.crop((lo, 0, hi, img.height) if axis == 0 else (0, lo, img.width, hi))


def _join(a: PIL.Image.Image, b: PIL.Image.Image, axis: int) -> PIL.Image.Image:
    """``a`` and then ``b`` along ``axis``."""
    size = (a.width + b.width, a.height) if axis == 0 else (a.width, a.height + b.height)
    out = PIL.Image.new(a.mode, size)
    out.paste(a, (0, 0))
    out.paste(b, (a.width, 0) if axis == 0 else (0, a.height))
    return out


def _pad_once(
    img: PIL.Image.Image, padding: tuple[int, int, int, int], mode: str
) -> PIL.Image.Image:
    """:func:`mirror_pad` where every side is at most one strip wide."""
    left, top, right, bottom = padding
    w, h = img.size
    out = PIL.Image.new(img.mode, (w + left + right, h + top + bottom))
    out.paste(img, (left, top))
    if left:
        out.paste(_strip(img, 0, (0, w), left, mode, end=False), (0, top))
    if right:
        out.paste(_strip(img, 0, (0, w), right, mode, end=True), (left + w, top))
    # The rows of the padded width: the corners mirror the left and right strips.
    if top:
        out.paste(_strip(out, 1, (top, h), top, mode, end=False), (0, 0))
    if bottom:
        out.paste(_strip(out, 1, (top, h), bottom, mode, end=True), (0, top + h))
    return out


def on_wall(
    img: PIL.Image.Image, padding: tuple[int, int, int, int], wall: PIL.Image.Image
) -> PIL.Image.Image:
    """``img`` pasted at ``(left, top)`` into the top-left crop of ``wall`` of the padded size.

    For a border that does not depend on the image (a constant, or a texture whose conversion
    reads no pixel): ``wall`` is a 1x1 image of ``img``'s mode padded by ``(left, top)`` and at
    least the right and bottom padding any output needs.
    """
    left, top, right, bottom = padding
    out = wall.crop((0, 0, img.width + left + right, img.height + top + bottom))
    out.paste(img, (left, top))
    return finish(out, img)
