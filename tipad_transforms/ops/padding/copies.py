"""Constant and standard modes as a few bulk torch copies, and a textured batch as its first
canvas and copies: how the CPU order writes a large canvas, forward.

Taichi's CPU code moves scalars (a byte at a time for uint8 borders, 8-byte words inside),
and its per-row work (index setup, head and tail runs, a gather per border pixel) dominates
small dtypes; torch's copies are vectorised passes over its own thread pool. Every copy runs on
same-size integer views, so the canvas holds the same bits as the kernel's (NaN payloads
included); ``tests/ops/padding/test_copies.py`` checks both against the reference.

Constant mode writes the fill around each window (``borders``: three strided views that
hold every element outside the windows), then the images into their windows.

A standard mode's canvas is written in three steps: the image into its window; the left and
right borders of the image's rows from the image, as a few *runs* (stretches of canvas columns
whose source columns step by +1, -1 or 0: a slice, a flipped slice, an expanded column); then
the rows above and below as runs of whole canvas rows read from the rows just written. Index
maps that fold into many short runs (a border many times the image) stay with the kernel.

A texture-mode batch whose samples share one lattice and bank index has one border: the kernel
writes the first canvas, whose borders the others copy before their images go into their
windows. Samples of one bank index but their own lattice offsets are crops of one *wall*, the
texture's lattice rendered once a little larger than a canvas (``crop_walls``): shifting a
lattice by whole tiles down shifts it by the stagger across, so every sample's canvas is the
wall seen from a corner within one tile of its origin.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from ..._value_cache import ValueCache
from . import reference
from .geometry import PadCall, PadGeometry, StackGeometry, fold_index

__all__ = [
    "CONSTANT", "LATTICES", "STANDARD", "TEXTURE", "borders", "crop_walls", "fill_samples",
    "first_sample", "repeat_first", "shares_border", "shares_texture", "write",
]  # fmt: skip

#: Whether constant mode runs as copies: the fill (around the window on large canvases, see
#: ``BORDERS_MIN_BYTES``), then the image into it (vectorised passes cost less than the kernel
#: on every dtype).
CONSTANT = True
#: Whether edge, reflect, symmetric and circular run as copies (``_standard``), for canvases of
#: elements up to ``STANDARD_MAX_BYTES`` wide (textured batches too, ``TEXTURE``): on 4- and
#: 8-byte elements the kernel's word moves already carry most of a row, and its one pass is as
#: fast as the copies' several.
STANDARD = True
STANDARD_MAX_BYTES = 2
#: A stack's constant mode runs as copies where its canvases average at least this many bytes:
#: a copy per image costs microseconds of dispatch, which small images do not repay.
STACK_MIN_BYTES = 16 << 10
#: Whether a texture-mode batch whose samples share one lattice and bank index (every canvas
#: the same border) runs as the kernel on its first sample and copies (``repeat_first``).
TEXTURE = True
#: Whether a texture-mode batch whose samples share one bank index but have their own lattice
#: offsets runs as crops of one rendered wall (``crop_walls``): a copy of every canvas from
#: the wall, where the kernel computes each border pixel's lattice cell. Batches of elements up
#: to ``STANDARD_MAX_BYTES`` wide, and images given one by one of any width (``shares_texture``).
LATTICES = True
#: Canvases (all of a call's together) from this many bytes, with window rows of at least
#: ``BORDERS_MIN_ROW_BYTES``, have the constant fill or the first canvas's border written
#: around their windows (``borders``), not over them. Below the first, the windows' second
#: write costs less than the border views' dispatch; below the second, less than the gaps'
#: short rows, each a pass of torch's inner loop, where a whole-canvas fill is one stretch.
BORDERS_MIN_BYTES = 1 << 20
BORDERS_MIN_ROW_BYTES = 192
# The most runs per border side: beyond it, a copy per run costs more than the kernel's pass.
_MAX_RUNS = 4

# A run: (first canvas index, length, first source index, step of the source index).
Run = tuple[int, int, int, int]
# Runs of recent (mode, geometry)s: left/right columns, top/bottom rows; None: too many runs.
_runs_cache: dict[tuple[str, PadGeometry], tuple[list[Run], list[Run]] | None] = {}
_RUNS_CACHE_SIZE = 256


def write(call: PadCall, image: Tensor, canvas: Tensor) -> bool:
    """Write ``canvas`` (every element) from ``image`` with torch copies; True when done,
    False where this call is the kernel's (texture mode, a switch off, a stack of small images
    or in a standard mode, wide elements, too many runs).

    ``image`` is ``N*C*H*W`` contiguous (a stack: its images flat, concatenated), ``canvas``
    ``N*C*H'*W'`` contiguous, both on the CPU, same dtype; ``call.fill`` is ``(C,)`` in that dtype.
    """
    g = call.geometry
    if call.mode == "constant":
        return CONSTANT and _constant(g, call.fill, image, canvas)
    if not isinstance(g, PadGeometry):
        return False
    if call.mode == "texture" or not STANDARD or canvas.element_size() > STANDARD_MAX_BYTES:
        return False
    return _standard(call.mode, g, image, canvas)


#: The same-size integer of each element size: padding moves data, so every dtype runs as one
#: (copies and kernel alike), bit exact, bool, bfloat16 and unsigned types included.
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: Tensor) -> Tensor:
    """``t`` flat as the integer of its element size (``BITS``)."""
    return t.reshape(-1).view(BITS[t.element_size()])


def borders(g: PadGeometry, planes: Tensor) -> list[Tensor]:
    """What of ``planes`` ``(n, c, out_h, out_w)`` (contiguous) lies outside the image windows,
    as three views: each plane's head (the rows above the window and its first row's left
    border), the gaps between the window's rows (a row's right border and the next row's left
    one, adjacent in memory: one stretch, not two) and the tail (the last row's right border
    and the rows below). Writing these and the windows writes each element once, where a fill
    over the whole canvas writes the windows twice. Needs ``g.h * g.w > 0``."""
    n, c = planes.shape[:2]
    plane = g.out_h * g.out_w
    base = planes.storage_offset()
    first = g.top * g.out_w + g.left  # the window's first element
    last = first + (g.h - 1) * g.out_w + g.w  # one past its last
    # as_strided: one view each (a chain of narrow and view costs microseconds per link).
    return [
        planes.as_strided((n, c, first), (c * plane, plane, 1), base),
        planes.as_strided((n, c, g.h - 1, g.out_w - g.w), (c * plane, plane, g.out_w, 1),
                          base + first + g.w),
        planes.as_strided((n, c, plane - last), (c * plane, plane, 1), base + last),
    ]  # fmt: skip


def _whole(g: PadGeometry, planes: Tensor) -> bool:
    """Whether ``planes``' borders are written as whole canvases (the windows written over
    after): canvases with no window, or too small, or with window rows too short, for the
    border views to pay (``BORDERS_MIN_BYTES``, ``BORDERS_MIN_ROW_BYTES``)."""
    size = planes.element_size()
    return (
        g.h * g.w == 0
        or planes.numel() * size < BORDERS_MIN_BYTES
        or g.w * size < BORDERS_MIN_ROW_BYTES
    )


def _fill_borders(g: PadGeometry, fill: Tensor, planes: Tensor) -> None:
    """``fill`` (``(C,)`` contiguous, ``planes``' integer kind) over every canvas outside its
    window."""
    if _whole(g, planes):
        planes.copy_(fill.view(1, g.c, 1, 1).expand_as(planes))
        return
    for part in borders(g, planes):
        part.copy_(fill.as_strided(part.shape, (0, 1) + (0,) * (part.dim() - 2)))


def _constant(g: PadGeometry | StackGeometry, fill: Tensor, image: Tensor, canvas: Tensor) -> bool:
    """The fill around the windows, then the images into them: one copy for a batch of equal
    images; for a stack, the fill over every canvas and a copy per run of consecutive
    same-geometry images (where images are large enough to repay a copy's dispatch)."""
    if isinstance(g, StackGeometry) and canvas.numel() * canvas.element_size() < (
        g.n * STACK_MIN_BYTES
    ):
        return False
    # Few, cheap views (narrow, not indexing): a small image's whole call is a few of them.
    kind = BITS[canvas.element_size()]
    canvases = canvas.view(kind).view(g.n, g.c, g.out_h, g.out_w)
    fill = fill.view(kind)
    if isinstance(g, PadGeometry):
        _fill_borders(g, fill, canvases)
        if g.h * g.w:
            window = canvases.narrow(2, g.top, g.h).narrow(3, g.left, g.w)
            window.copy_(image.view(kind).view(g.n, g.c, g.h, g.w))
        return True
    canvases.copy_(fill.view(1, g.c, 1, 1).expand(g.n, g.c, g.out_h, g.out_w))
    groups: list[tuple[int, int, int, int, int, int]] = []
    for i, (h, w, top, left) in enumerate(g.sizes.tolist()):
        if groups and groups[-1][2:] == (h, w, top, left):
            groups[-1] = (groups[-1][0], groups[-1][1] + 1, h, w, top, left)
        else:
            groups.append((i, 1, h, w, top, left))
    src, start = image.view(kind).view(-1), 0
    for first, count, h, w, top, left in groups:
        window = canvases.narrow(0, first, count).narrow(2, top, h).narrow(3, left, w)
        size = count * g.c * h * w
        window.copy_(src.narrow(0, start, size).view(count, g.c, h, w))
        start += size
    return True


def _standard(mode: str, g: PadGeometry, image: Tensor, canvas: Tensor) -> bool:
    if g.h * g.w == 0:  # nothing to read: the op refuses it before a backend runs
        return False
    key = (mode, g)
    if key not in _runs_cache:
        if len(_runs_cache) >= _RUNS_CACHE_SIZE:
            _runs_cache.pop(next(iter(_runs_cache)))
        _runs_cache[key] = _plan_runs(mode, g)
    runs = _runs_cache[key]
    if runs is None:
        return False
    columns, rows = runs
    src = bits(image).view(g.n * g.c, g.h, g.w)
    planes = bits(canvas).view(g.n * g.c, g.out_h, g.out_w)
    middle = planes[:, g.top : g.top + g.h]  # the image's rows, border columns included
    middle[:, :, g.left : g.left + g.w].copy_(src)
    for x0, n, s0, step in columns:
        middle[:, :, x0 : x0 + n].copy_(_source(src, 2, s0, n, step))
    for y0, n, s0, step in rows:  # whole rows, from the image's rows just completed
        planes[:, y0 : y0 + n].copy_(_source(middle, 1, s0, n, step))
    return True


def _plan_runs(mode: str, g: PadGeometry) -> tuple[list[Run], list[Run]] | None:
    """The column runs of the left and right borders and the row runs of the top and bottom
    ones (row sources relative to the image's first row); None when a side has too many."""
    cols = fold_index(torch.arange(-g.left, g.out_w - g.left), g.w, mode).tolist()
    rows = fold_index(torch.arange(-g.top, g.out_h - g.top), g.h, mode).tolist()
    sides = [
        _runs(cols, 0, g.left), _runs(cols, g.left + g.w, g.out_w),
        _runs(rows, 0, g.top), _runs(rows, g.top + g.h, g.out_h),
    ]  # fmt: skip
    if any(len(side) > _MAX_RUNS for side in sides):
        return None
    return sides[0] + sides[1], sides[2] + sides[3]


def _runs(index: Sequence[int], start: int, stop: int) -> list[Run]:
    """``index[start:stop]`` as maximal runs whose values step by +1, -1 or 0 (a lone entry is
    a run of step +1)."""
    runs: list[Run] = []
    i = start
    while i < stop:
        j = i + 1
        step = index[j] - index[i] if j < stop else 1
        if step not in (1, -1, 0):
            step = 1
        while j < stop and index[j] - index[j - 1] == step:
            j += 1
        runs.append((i, j - i, index[i], step))
        i = j
    return runs


def _source(t: Tensor, dim: int, first: int, n: int, step: int) -> Tensor:
    """The ``n`` slices of ``t`` along ``dim`` a run reads: ``first, first + step, ...``."""
    if step == 1:
        return t.narrow(dim, first, n)
    if step == -1:
        return t.narrow(dim, first - n + 1, n).flip(dim)
    shape = list(t.shape)
    shape[dim] = n
    return t.narrow(dim, first, 1).expand(shape)


def shares_border(call: PadCall, listed: bool = False) -> bool:
    """Whether every canvas of ``call``, a batch, has sample 0's border, so that the others can
    copy it (``repeat_first``): constant mode (``CONSTANT`` on), or texture mode where every
    sample has sample 0's lattice offset and bank index (``TEXTURE`` on, elements up to
    ``STANDARD_MAX_BYTES`` wide unless ``listed``: images given one by one, which the kernel
    could only read once packed into a batch, a pass the copies do not need)."""
    g = call.geometry
    if not (isinstance(g, PadGeometry) and g.n > 1):
        return False
    if call.mode == "constant":
        return CONSTANT
    if not (TEXTURE and call.mode == "texture"):
        return False
    if not listed and call.texture.element_size() > STANDARD_MAX_BYTES:  # as STANDARD's
        return False
    offset, index = call.offset, call.texture_index
    return torch.equal(offset, offset[:1].expand_as(offset)) and torch.equal(
        index, index[:1].expand_as(index)
    )


def first_sample(call: PadCall) -> PadCall:
    """``call`` for its first sample only (a single-geometry call)."""
    g = call.geometry
    assert isinstance(g, PadGeometry)
    return dataclasses.replace(
        call, geometry=dataclasses.replace(g, n=1), offset=call.offset[:1],
        texture_index=call.texture_index[:1],
    )  # fmt: skip


def fill_samples(call: PadCall, images: Sequence[Tensor], canvas: Tensor) -> None:
    """Write ``canvas``, a constant-mode batch (``shares_border(call)``), from its ``N`` images
    ``(C, H, W)`` given one by one (a collate's samples, any strides): the fill around (or
    under) every window, then every image into its window with one ``torch.stack`` (no batch
    assembled first, no canvas copied from another)."""
    g = call.geometry
    assert isinstance(g, PadGeometry) and call.mode == "constant"
    kind = BITS[canvas.element_size()]
    planes = canvas.view(kind).view(g.n, g.c, g.out_h, g.out_w)
    _fill_borders(g, call.fill.view(kind), planes)
    if g.h * g.w:
        windows = planes[:, :, g.top : g.top + g.h, g.left : g.left + g.w]
        torch.stack(_as_kind(images, kind), out=windows)


def repeat_first(call: PadCall, images: Tensor | Sequence[Tensor], canvas: Tensor) -> None:
    """Complete ``canvas`` whose first canvas is written (``shares_border(call)``): that
    canvas's ``borders`` over the others' (its whole canvas where ``_whole``), then their
    images into their windows. ``images``: the batch ``N*C*H*W`` contiguous, or its
    ``N`` images ``(C, H, W)`` one by one (a collate's samples, any strides: no batch
    assembled first)."""
    g = call.geometry
    assert isinstance(g, PadGeometry)
    planes = bits(canvas).view(g.n, g.c, g.out_h, g.out_w)
    if _whole(g, planes):
        planes[1:].copy_(planes[:1].expand(g.n - 1, -1, -1, -1))
    else:
        for part, first in zip(borders(g, planes[1:]), borders(g, planes[:1]), strict=True):
            part.copy_(first.expand_as(part))
    if g.h * g.w == 0:
        return
    windows = planes[:, :, g.top : g.top + g.h, g.left : g.left + g.w]
    if isinstance(images, Tensor):
        windows[1:].copy_(bits(images).view(g.n, g.c, g.h, g.w)[1:])
        return
    # One call for every window: torch.stack writes into the strided view in place.
    torch.stack(_as_kind(images[1:], BITS[canvas.element_size()]), out=windows[1:])


def _as_kind(images: Sequence[Tensor], kind: torch.dtype) -> list[Tensor]:
    """``images`` as ``kind`` views (a view per image costs a microsecond or more: none where
    they already are)."""
    if images[0].dtype == kind:  # one dtype for all, checked by the caller
        return list(images)
    return [image.view(kind) for image in images]


def shares_texture(call: PadCall, listed: bool = False) -> bool:
    """Whether every sample of ``call``, a texture-mode batch, reads one texture (lattice
    offsets any), so that ``crop_walls`` serves it: ``LATTICES`` on, a tile no larger than the
    batch's canvases together, elements up to ``STANDARD_MAX_BYTES`` wide unless ``listed``
    (images given one by one, which the kernel could only read once packed into a batch: a
    pass the crops do not need)."""
    g = call.geometry
    if not (LATTICES and call.mode == "texture" and isinstance(g, PadGeometry) and g.n > 1):
        return False
    if not listed and call.texture.element_size() > STANDARD_MAX_BYTES:
        return False
    # The wall is cached by its texture's bytes, compared on every call: a tile larger than
    # the batch's canvases would cost more to compare (and to keep) than the kernel's work.
    if call.texture.shape[-2] * call.texture.shape[-1] > g.n * g.out_h * g.out_w:
        return False
    index = call.texture_index
    return torch.equal(index, index[:1].expand_as(index))


# Walls of recent textures (the brick tile of a collate, a transform's tile), by the texture's
# bytes and the wall's shape.
_walls: ValueCache[Tensor] = ValueCache(8)


def _wall(call: PadCall, texture: Tensor, height: int, width: int) -> Tensor:
    """The lattice of ``texture`` (``(Ct, th, tw)``, an integer kind; ``call``'s stagger) at
    offset 0 over ``(Ct, height, width)``, by the torch backend's index map."""
    at_origin = PadGeometry(1, 1, 0, 0, 0, 0, width, height)  # an empty image, all border
    origin = dataclasses.replace(call, offset=call.offset.new_zeros(1, 2))
    index = reference.tile_index(origin, at_origin).reshape(-1)
    ct = texture.shape[0]
    return texture.reshape(ct, -1)[:, index].view(ct, height, width)


def crop_walls(call: PadCall, images: Tensor | Sequence[Tensor], canvas: Tensor) -> None:
    """Write ``canvas`` (``shares_texture(call)``): every canvas copied from its crop of the wall
    of the bank's texture, then the images into their windows. ``images``: the batch
    ``N*C*H*W`` contiguous, or its ``N`` images ``(C, H, W)`` one by one (any strides).

    Sample ``i``'s canvas pixel ``(Y, X)`` has lattice coordinates ``y = Y - top - oy_i``,
    ``x = X - left - ox_i``. The wall's pixel ``(Y + dy, X + dx)`` has the same ones where
    ``dy = -(top + oy_i) mod th`` (so ``Y + dy = y + m*th``, ``m = (dy + top + oy_i) / th``)
    and ``dx = (m*stagger - left - ox_i) mod tw``: ``m`` tiles down, ``m*stagger`` across. A
    wall of ``(out_h + th, out_w + tw)`` holds every crop.
    """
    g = call.geometry
    assert isinstance(g, PadGeometry)
    kind = BITS[canvas.element_size()]
    bank = call.texture.view(kind)
    th, tw = int(bank.shape[-2]), int(bank.shape[-1])
    texture = bank[int(call.texture_index[0])]
    height, width = g.out_h + th, g.out_w + tw
    stagger = call.stagger
    wall = _walls.get(texture, (stagger, height, width),
                      lambda: _wall(call, texture, height, width))  # fmt: skip
    planes = canvas.view(kind).view(g.n, g.c, g.out_h, g.out_w)
    shape = (g.c, g.out_h, g.out_w)
    # A one-channel texture serves every channel: its crops repeat the one plane.
    strides = (0 if wall.shape[0] == 1 else height * width, width, 1)
    base = wall.storage_offset()
    crops = []
    for oy, ox in call.offset.tolist():
        dy = -(g.top + oy) % th
        m = (dy + g.top + oy) // th
        dx = (m * stagger - g.left - ox) % tw
        crops.append(wall.as_strided(shape, strides, base + dy * width + dx))
    torch.stack(crops, out=planes)
    if g.h * g.w == 0:
        return
    windows = planes[:, :, g.top : g.top + g.h, g.left : g.left + g.w]
    if isinstance(images, Tensor):
        windows.copy_(bits(images).view(g.n, g.c, g.h, g.w))
    else:
        torch.stack(_as_kind(images, kind), out=windows)
