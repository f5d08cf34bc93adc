"""How the CPU order writes a large canvas forward with bulk torch copies, where these beat the
kernel (whose per-row setup and scalar moves dominate small dtypes); docs/padding-guide.md
describes each form and its switch. Every copy runs on same-size integer views (``BITS``), so
the canvas holds the kernel's bits, NaN payloads included.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..._value_cache import KeyedCache, ValueCache
from . import reference
from .geometry import PadCall, PadGeometry, StackGeometry, fold_index

__all__ = [
    "CONSTANT", "LATTICES", "STANDARD", "TEXTURE", "borders", "crop_walls", "fill_samples",
    "first_sample", "repeat_first", "shares_border", "shares_texture", "write", "write_any",
]  # fmt: skip

# The switches of the forms (each off: the kernel's), and their thresholds.
#: Constant mode as copies (vectorised passes cost less than the kernel on every dtype).
CONSTANT = True
#: Edge, reflect, symmetric and circular as copies, for elements up to ``STANDARD_MAX_BYTES``
#: wide: on wider elements the kernel's word moves carry most of a row, and where the canvas
#: does not fit the caches its one pass beats the copies' several (their flipped borders read
#: and write again).
STANDARD = True
STANDARD_MAX_BYTES = 2
#: A canvas the kernel would write on the launching thread alone (``serial_launch``) is the
#: standard modes' and the walls' (``LATTICES``) from this many elements: below, the kernel's
#: one pass, whose cost goes with the pixels it moves, costs no more than the copies'
#: dispatches.
SERIAL_MIN_ELEMENTS = 1 << 17
#: The textured batches' forms (``shares_border``, ``shares_texture``) for elements up to this
#: wide: their copies are whole canvases or crops, no flipped border.
TEXTURE_MAX_BYTES = 4
#: A stack's constant mode runs as copies where its canvases average at least this many bytes:
#: a copy per image costs microseconds of dispatch, which small images do not repay.
STACK_MIN_BYTES = 16 << 10
#: A texture batch of one lattice and bank index as the kernel's first canvas and copies.
TEXTURE = True
#: A texture batch of one bank index, per-sample offsets, as crops of one wall (``crop_walls``),
#: a single image too, where the wall (a canvas and a tile each way) has at most
#: ``WALL_MAX_PIXELS``, a batch's or an image's: drawing it takes an index of 8 bytes a pixel,
#: and it stays cached.
LATTICES = True
WALL_MAX_PIXELS = 1 << 21
#: The walls of all textures together, in bytes, before a new one: past it the cache drops
#: every wall it holds (8 textures of two walls of ``WALL_MAX_PIXELS`` could take 800 MB).
WALLS_MAX_BYTES = 128 << 20
#: Canvases (all of a call's together) from this many bytes, with window rows of at least
#: ``BORDERS_MIN_ROW_BYTES``, have their border written around their windows (``borders``),
#: not over them: below either, the windows' second write costs less than the border views'
#: dispatch or the gaps' short rows.
BORDERS_MIN_BYTES = 1 << 20
BORDERS_MIN_ROW_BYTES = 192
# The most runs per border side: beyond it, a copy per run costs more than the kernel's pass.
_MAX_RUNS = 4

# A run: (first canvas index, length, first source index, step of the source index).
Run = tuple[int, int, int, int]
# Runs of a (mode, geometry): left/right columns, top/bottom rows; () when a side has too many.
_runs_cache: KeyedCache[tuple[list[Run], list[Run]] | tuple[()]] = KeyedCache(256)


def write(call: PadCall, image: Tensor, canvas: Tensor, any_width: bool = False) -> bool:
    """Write ``canvas`` (every element) from ``image`` with torch copies; True when done,
    False where this call is the kernel's: texture mode, a switch off, a stack of small images
    or in a standard mode, too many runs, or wide elements unless ``any_width`` (the torch
    backend, which has no kernel to leave them to).

    ``image`` is ``N*C*H*W`` contiguous (a stack: its images flat, concatenated), ``canvas``
    ``N*C*H'*W'`` contiguous, both on the CPU, same dtype; ``call.fill`` is ``(C,)`` in that dtype.
    """
    g = call.geometry
    if call.mode == "constant":
        return CONSTANT and _constant(g, call.fill, image, canvas)
    if not isinstance(g, PadGeometry):
        return False
    if call.mode == "texture" or not STANDARD:
        return False
    if canvas.element_size() > STANDARD_MAX_BYTES and not any_width:
        return False
    return _standard(call.mode, g, image, canvas)


#: The same-size integer of each element size: padding moves data, so every dtype runs as one
#: (copies and kernel alike), bit exact, bool, bfloat16 and unsigned types included.
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: Tensor) -> Tensor:
    """``t`` flat as the integer of its element size (``BITS``)."""
    return t.reshape(-1).view(BITS[t.element_size()])


def _planes(g: PadGeometry | StackGeometry, canvas: Tensor) -> Tensor:
    """``canvas`` (contiguous) as ``(N, C, H', W')`` of its integer kind: a view, so writes
    reach ``canvas`` (``view`` raises where ``bits``' reshape would copy)."""
    return canvas.view(BITS[canvas.element_size()]).view(g.n, g.c, g.out_h, g.out_w)


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
    after): no window, or too few bytes or too short window rows for ``borders`` to pay."""
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


def _into_windows(
    g: PadGeometry, planes: Tensor, images: Tensor | Sequence[Tensor], first: int = 0
) -> None:
    """The images of samples ``first`` on into their windows of ``planes`` (``_planes``).
    ``images``: the batch ``N*C*H*W`` contiguous, or its ``N`` images ``(C, H, W)`` one by one
    (a collate's samples, any strides: no batch assembled first)."""
    if g.h * g.w == 0:
        return
    # Few, cheap views (narrow, not indexing; none that changes nothing): a small image's
    # whole call is a few of them.
    windows = planes.narrow(2, g.top, g.h).narrow(3, g.left, g.w)
    if first:
        windows = windows.narrow(0, first, g.n - first)
    if isinstance(images, Tensor):
        src = images.view(planes.dtype).view(g.n, g.c, g.h, g.w)
        windows.copy_(src.narrow(0, first, g.n - first) if first else src)
        return
    # One call for every window: torch.stack writes into the strided view in place. A view
    # per image costs a microsecond or more: none where they already are of the kind.
    kind = planes.dtype
    listed = images[first:] if images[0].dtype == kind else [i.view(kind) for i in images[first:]]
    torch.stack(list(listed), out=windows)


def _constant(g: PadGeometry | StackGeometry, fill: Tensor, image: Tensor, canvas: Tensor) -> bool:
    """The fill around the windows, then the images into them: one copy for a batch of equal
    images; for a stack, the fill over every canvas and a copy per run of consecutive
    same-geometry images (where images are large enough to repay a copy's dispatch)."""
    planes = _planes(g, canvas)
    fill = fill.view(planes.dtype)
    if isinstance(g, PadGeometry):
        _fill_borders(g, fill, planes)
        _into_windows(g, planes, image)
        return True
    if planes.numel() * planes.element_size() < g.n * STACK_MIN_BYTES:
        return False
    planes.copy_(fill.view(1, g.c, 1, 1).expand_as(planes))
    src, start, first = bits(image), 0, 0
    for (h, w, top, left), same in itertools.groupby(g.sizes.tolist()):
        count = len(list(same))
        window = planes.narrow(0, first, count).narrow(2, top, h).narrow(3, left, w)
        size = count * g.c * h * w
        window.copy_(src.narrow(0, start, size).view(count, g.c, h, w))
        start, first = start + size, first + count
    return True


def _standard(mode: str, g: PadGeometry, image: Tensor, canvas: Tensor) -> bool:
    """The image into its window; its rows' left and right borders from it as a few runs (a
    slice, a flipped slice, an expanded column); then the rows above and below as runs of the
    rows just written. False where a side folds into too many runs (``_MAX_RUNS``)."""
    if g.h * g.w == 0:  # nothing to read: the op refuses it before a backend runs
        return False
    runs = _runs_cache.get((mode, g), lambda: _plan_runs(mode, g))
    if not runs:
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


def _plan_runs(mode: str, g: PadGeometry) -> tuple[list[Run], list[Run]] | tuple[()]:
    """The column runs of the left and right borders and the row runs of the top and bottom
    ones (row sources relative to the image's first row); () when a side has too many."""
    cols = fold_index(torch.arange(-g.left, g.out_w - g.left), g.w, mode).tolist()
    rows = fold_index(torch.arange(-g.top, g.out_h - g.top), g.h, mode).tolist()
    sides = [
        _runs(cols, 0, g.left), _runs(cols, g.left + g.w, g.out_w),
        _runs(rows, 0, g.top), _runs(rows, g.top + g.h, g.out_h),
    ]  # fmt: skip
    if any(len(side) > _MAX_RUNS for side in sides):
        return ()
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


def _one_value(t: Tensor) -> bool:
    return torch.equal(t, t[:1].expand_as(t))


def _texture_batch(call: PadCall, switch: bool, any_width: bool) -> bool:
    """A texture-mode batch that a form's ``switch`` allows, of elements up to
    ``TEXTURE_MAX_BYTES`` wide unless ``any_width``: images given one by one (which the kernel
    could only read once packed into a batch, a pass the copies do not need), or the torch
    backend's call."""
    return (
        switch
        and call.mode == "texture"
        and isinstance(call.geometry, PadGeometry)
        and (any_width or call.texture.element_size() <= TEXTURE_MAX_BYTES)
    )


def shares_border(call: PadCall, any_width: bool = False) -> bool:
    """Whether every canvas of ``call``, a batch, has sample 0's border, so that the others can
    copy it (``repeat_first``): constant mode (``CONSTANT`` on), or texture mode where every
    sample has sample 0's lattice offset and bank index (``TEXTURE``, ``_texture_batch``)."""
    if call.mode == "constant":
        g = call.geometry
        return CONSTANT and isinstance(g, PadGeometry) and g.n > 1
    return (
        _texture_batch(call, TEXTURE, any_width)
        and call.geometry.n > 1
        and _one_value(call.offset)
        and _one_value(call.texture_index)
    )


def shares_texture(call: PadCall, any_width: bool = False) -> bool:
    """Whether every sample of ``call`` (texture mode; a batch or one image) reads one texture
    (lattice offsets any), so that ``crop_walls`` serves it (``LATTICES``, ``_texture_batch``,
    ``WALL_MAX_PIXELS``). The wall is cached by its texture's bytes, compared on every call: a
    tile larger than the call's canvases together would cost more to compare (and to keep)
    than the kernel's work."""
    if not _texture_batch(call, LATTICES, any_width):
        return False
    g = call.geometry
    th, tw = call.texture.shape[-2:]
    return (
        th * tw <= g.n * g.out_h * g.out_w
        and (g.out_h + th) * (g.out_w + tw) <= WALL_MAX_PIXELS
        and _one_value(call.texture_index)
    )


def write_any(
    call: PadCall, image: Tensor, canvas: Tensor,
    first: Callable[[PadCall, Tensor, Tensor], None],
    any_width: bool = False, large: bool = True, pool: bool = True,
) -> bool:  # fmt: skip
    """Write ``canvas`` by the first CPU copy form that serves ``call``, in this order: ``write``
    (constant mode; the standard modes where ``large``), a textured batch's first canvas
    repeated (``shares_border``, where ``pool``; ``first(first_sample(call), image, canvas)``
    writes that canvas), crops of its texture's wall (``shares_texture``, where ``large``).
    False where none serves it. ``large``: copies beat the kernel at this canvas's size;
    ``pool``: the kernel would run on the thread pool; ``any_width``: as ``write``'s."""
    if (large or call.mode == "constant") and write(call, image, canvas, any_width):
        return True
    if pool and shares_border(call, any_width):
        first(first_sample(call), image, canvas)
        repeat_first(call, image, canvas)
        return True
    if large and shares_texture(call, any_width):
        crop_walls(call, image, canvas)
        return True
    return False


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
    ``(C, H, W)`` given one by one: the fill around (or under) every window, then the images
    (``_into_windows``); no canvas copied from another."""
    g = call.geometry
    assert isinstance(g, PadGeometry) and call.mode == "constant"
    planes = _planes(g, canvas)
    _fill_borders(g, call.fill.view(planes.dtype), planes)
    _into_windows(g, planes, images)


def repeat_first(call: PadCall, images: Tensor | Sequence[Tensor], canvas: Tensor) -> None:
    """Complete ``canvas`` whose first canvas is written (``shares_border(call)``): that
    canvas's ``borders`` over the others' (its whole canvas where ``_whole``), then their
    images into their windows (``_into_windows``)."""
    g = call.geometry
    assert isinstance(g, PadGeometry)
    planes = _planes(g, canvas)
    if _whole(g, planes):
        planes[1:].copy_(planes[:1].expand(g.n - 1, -1, -1, -1))
    else:
        for part, first in zip(borders(g, planes[1:]), borders(g, planes[:1]), strict=True):
            part.copy_(first.expand_as(part))
    _into_windows(g, planes, images, first=1)


# The walls of recent textures (the brick tile of a collate, a transform's tile), by the
# texture's bytes and the stagger: a wall serves every canvas it covers, so the newest is grown
# to the canvas that needs more, and images of many sizes share it; where growing would pass
# WALL_MAX_PIXELS (tall and wide images in turn), the canvas gets a wall of its own, and a
# texture keeps the newest _WALLS_PER_TEXTURE.
_walls: ValueCache[list[Tensor]] = ValueCache(8)
_WALLS_PER_TEXTURE = 2


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
    of the bank's texture, then the images into their windows (``_into_windows``).

    Sample ``i``'s canvas pixel ``(Y, X)`` has lattice coordinates ``y = Y - top - oy_i``,
    ``x = X - left - ox_i``. Shifting a lattice by whole tiles down shifts it by the stagger
    across, so the wall's pixel ``(Y + dy, X + dx)`` has the same ones where ``dy = -(top +
    oy_i) mod th`` (so ``Y + dy = y + m*th``, ``m = (dy + top + oy_i) / th``) and ``dx =
    (m*stagger - left - ox_i) mod tw``. A wall of ``(out_h + th, out_w + tw)`` holds every crop.
    """
    g = call.geometry
    assert isinstance(g, PadGeometry)
    planes = _planes(g, canvas)
    bank = call.texture.view(planes.dtype)
    th, tw = int(bank.shape[-2]), int(bank.shape[-1])
    texture = bank[int(call.texture_index[0])]
    height, width = g.out_h + th, g.out_w + tw
    stagger = call.stagger
    kept = _walls.get(texture, stagger, list)
    # One read: another thread may change the list meanwhile (each of its walls stays whole).
    walls = kept[:]
    wall = next((w for w in walls if w.shape[1] >= height and w.shape[2] >= width), None)
    if wall is None:
        last = walls[-1] if walls else None
        grown = (height, width)
        if last is not None:  # the newest wall grown to serve this canvas too, if allowed
            grown = (max(height, last.shape[1]), max(width, last.shape[2]))
        if grown[0] * grown[1] <= WALL_MAX_PIXELS:
            walls = walls[:-1]
        else:  # a wall of its own beside the others: tall and wide canvases take turns
            grown = (height, width)
        wall = _wall(call, texture, *grown)
        held = sum(w.nbytes for texture_walls in _walls.values() for w in texture_walls)
        if held + wall.nbytes > WALLS_MAX_BYTES:
            _walls.clear()
            kept, walls = _walls.get(texture, stagger, list), []
        kept[:] = [*walls, wall][-_WALLS_PER_TEXTURE:]
    height, width = wall.shape[1], wall.shape[2]
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
    _into_windows(g, planes, images)
