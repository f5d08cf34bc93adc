"""The padding family's Taichi backend: one kernel body for every mode, forward and backward,
for batches of equal images and for packed images of different sizes."""

# No `from __future__ import annotations`: Taichi reads the kernels' annotations at runtime
# (annotated with calls, ti.types.ndarray(...), which mypy cannot read; no "-> None").
import sys
from typing import Any

import torch
from torch import Tensor

from ..._compat.torch import tensor_version
from ..._value_cache import ValueCache, constant
from ...backends import Refused
from ...backends.taichi import MAX_ELEMENTS, TAICHI, advise_huge_pages, serial_launch, spread
from . import copies
from .geometry import PadCall, PadGeometry, fold_index

# Layout of the kernel's int32 `meta` argument: a header of scalars; the geometry records; for
# standard modes the row and column index maps (one pair per record); then the per-sample
# lattice offsets (oy, ox) and bank indices, at meta[_OFFSETS] (host-made parts first, so
# device-resident offsets need no round trip). No mode: the mode family is a kernel template,
# a standard mode lives in its index maps. _PHASE: the image's address mod 8, in pixels (image
# pixel p is pixel p + phase of its word view). _SPAN: threads per canvas row in the GPU row
# order (_row_span). _SPREAD: the CPU order's loop iterations per block of rows (spread).
(_N_ROWS, _C, _OUT_H, _OUT_W, _TEX_C, _TH, _TW, _STAGGER, _USE_WORDS, _TEX_GRAD,
 _SAMPLES, _BANK, _REC_STEP, _IMG_STEP, _PHASE, _SPAN, _SPREAD, _OFFSETS,
 _HEADER) = range(19)  # fmt: skip
# A geometry record: the image's height and width, where its top-left pixel lands on the
# canvas, the flat index of its first element, and where its row index map starts in meta (its
# column map follows out_h entries later). Sample b reads the record at _HEADER + b *
# meta[_REC_STEP] and its image starts at record[_RSTART] + b * meta[_IMG_STEP]: steps (0, C*h*w)
# let one record serve a batch of equal images, (_RECORD, 0) give packed images one each.
_RH, _RW, _RTOP, _RLEFT, _RSTART, _RMAPS, _RECORD = range(7)
# Canvas rows per CPU task: enough to amortise a task's divisions, few enough to balance.
_ROW_BLOCK = 16
# The GPU row order's block (four warps) and the columns each thread writes of its row.
_GPU_BLOCK = 128
_GPU_COLUMNS = 8
#: The GPU loop order: a span of threads per canvas row (True) or a thread per pixel (False).
GPU_ROW_BLOCKS = True


# fmt: off
def _build_kernels(ti: Any) -> dict[str, Any]:
    """Compile-on-demand kernels: one body for every mode, forward and backward.

    Every tensor is flat; the canvas is ``N*C*H'`` rows of ``W'``. Constant mode runs as a 1x1
    texture per channel; standard modes read precomputed row/column index maps. Two loop orders
    share the index math (``record``, ``row_setup``, ``move``): on the CPU a task walks a block
    of rows, advancing image row, texture row and tile column incrementally (no division per row
    or pixel) and moving 8-byte words where aligned; on a GPU a span of threads per canvas row
    (``GPU_ROW_BLOCKS``) or a thread per pixel, so a warp writes contiguous memory.

    The mode family is a template (``tiled``: texture and constant, else the standard modes): a
    process compiles only the family it uses, and a smaller body starts faster (Taichi's offline
    cache keeps LLVM IR, compiled again in every process). A run's head and tail loops stay
    separate: one loop with a branch per pixel is slower for small dtypes.
    """
    nd = ti.types.ndarray

    @ti.func
    def move(src: ti.template(), i: ti.i32, canvas: ti.template(), o: ti.i32,
             backward: ti.template()):
        # The one data movement: canvas[o] <- src[i] forward, src[i] += canvas[o] backward
        # (atomic: several canvas pixels can read one image or texture pixel).
        if ti.static(backward):
            src[i] += canvas[o]
        else:
            canvas[o] = src[i]

    @ti.func
    def record(meta: ti.template(), b: ti.i32):
        # Sample b's geometry (layout beside _RECORD), its image start made absolute.
        at = _HEADER + b * meta[_REC_STEP]
        return ti.Vector([meta[at + _RH], meta[at + _RW], meta[at + _RTOP], meta[at + _RLEFT],
                          meta[at + _RSTART] + b * meta[_IMG_STEP], meta[at + _RMAPS]])

    @ti.func
    def row_setup(plane: ti.i32, y: ti.i32, rec: ti.template(), meta: ti.template(),
                  c_count: ti.i32, tiled: ti.template(), tex_channels: ti.i32, th: ti.i32,
                  tw: ti.i32, stagger: ti.i32):
        # What row y of canvas plane `plane` (sample geometry `rec`) reads, whatever the column:
        # the image row iy (outside [0, h) for border rows), the flat start of the source row
        # (the mapped image row, or the texture row), the tile column tx0 of canvas column 0
        # and tile row ty (the texture mapping of reference._lattice), the plane's first image
        # element. Indices fit int32 (the runtime refuses larger); sums with offsets run in i64.
        h, w, top, left, start, maps = rec[0], rec[1], rec[2], rec[3], rec[4], rec[5]
        b = plane // c_count
        c = plane - b * c_count
        iy = y - top
        first = start + c * h * w  # the plane's first image element
        src_row = 0
        tx0 = 0
        ty = 0
        if ti.static(not tiled):
            src_row = first + meta[maps + y] * w
        else:
            offset = meta[_OFFSETS]  # (oy, ox) of sample b at meta[offset + 2b]
            yy = ti.cast(iy, ti.i64) - meta[offset + 2 * b]
            v = yy // th  # floor division: rows above the image get negative tile rows
            ty = ti.cast(yy - v * th, ti.i32)
            tc = c if tex_channels == c_count else 0
            # Clamped into the bank: whatever index reaches the kernel, it reads no memory
            # outside the texture (texture_pad has already refused out-of-bank values).
            index = offset + 2 * meta[_SAMPLES]  # bank index of sample b at meta[index + b]
            k = ti.min(ti.max(meta[index + b], 0), meta[_BANK] - 1)
            src_row = ((k * tex_channels + tc) * th + ty) * tw
            shift = -ti.cast(left, ti.i64) - meta[offset + 2 * b + 1] - v * stagger
            tx0 = ti.cast(shift % tw, ti.i32)
        return ti.Vector([iy, src_row, tx0, ty, first])

    @ti.func
    def pixel(img: ti.template(), tex: ti.template(), canvas: ti.template(),
              meta: ti.template(), rec: ti.template(), s: ti.template(), X: ti.i32, o: ti.i32,
              out_h: ti.i32, tw: ti.i32, tex_grad: ti.i32, tiled: ti.template(),
              backward: ti.template()):
        # The GPU orders' canvas pixel o, column X of a row set up by row_setup (s).
        h, w, left, maps = rec[0], rec[1], rec[3], rec[5]
        if 0 <= s[0] < h and left <= X < left + w:
            move(img, s[4] + s[0] * w + X - left, canvas, o, backward)
        elif ti.static(tiled):
            if ti.static(not backward) or tex_grad:
                move(tex, s[1] + (s[2] + X % tw) % tw, canvas, o, backward)
        else:  # the column map follows the row map
            move(img, s[1] + meta[maps + out_h + X], canvas, o, backward)

    @ti.func
    def copy_run(img: ti.template(), canvas: ti.template(), img_w: ti.template(),
                 canvas_w: ti.template(), src: ti.i32, dst: ti.i32, n: ti.i32, phase: ti.i32,
                 lanes: ti.template(), backward: ti.template()):
        # Interior: n contiguous pixels, as pixels up to the canvas's next word boundary, then
        # whole canvas words of `lanes` pixels (a power of two), then pixels. An image row that
        # starts inside a word gives each canvas word the high pixels of one image word and the
        # low pixels of the next (little-endian), one load per word. The image's word view
        # (_word_span) ends at its last whole word: the image's last words move as pixels.
        head = n
        body = 0
        ws = 0
        d = 0
        if ti.static(lanes > 1 and not backward):
            head = ti.min((lanes - (dst & (lanes - 1))) & (lanes - 1), n)
            at = ti.cast(src, ti.i64) + phase + head  # the first body pixel in the word view
            ws = ti.cast(at // lanes, ti.i32)
            d = ti.cast(at & (lanes - 1), ti.i32)
            body = (n - head) // lanes
            # Words read: ws .. ws + body - 1, and ws + body when the row straddles words.
            body = ti.max(ti.min(body, img_w.shape[0] - ws - ti.cast(d != 0, ti.i32)), 0)
        for j in range(head):
            move(img, src + j, canvas, dst + j, backward)
        if ti.static(lanes > 1 and not backward):
            wd = (dst + head) // lanes
            if d == 0:
                for j in range(body):
                    canvas_w[wd + j] = img_w[ws + j]
            elif body > 0:  # (img_w[ws] may be the partial word past the view when body is 0)
                low = d * (64 // lanes)  # bits of the first word's pixels that precede the run
                word = img_w[ws]
                for j in range(body):
                    after = img_w[ws + j + 1]
                    canvas_w[wd + j] = ti.bit_shr(word, low) | (after << (64 - low))
                    word = after
        for j in range(head + body * lanes, n):
            move(img, src + j, canvas, dst + j, backward)

    @ti.func
    def texture_run(tex: ti.template(), words: ti.template(), canvas: ti.template(),
                    canvas_w: ti.template(), tex_row: ti.i32, tx: ti.i32, dst: ti.i32, n: ti.i32,
                    tw: ti.i32, use_words: ti.i32, tex_grad: ti.i32, lanes: ti.template(),
                    backward: ti.template()):
        # n border pixels of one row from one texture row, starting at tile column tx.
        # words[tex_row + tx] holds the `lanes` texture pixels from column tx on (wrapping),
        # so aligned stretches are written a word at a time.
        if ti.static(backward):
            if tex_grad:
                for j in range(n):
                    move(tex, tex_row + tx, canvas, dst + j, backward)
                    tx += 1
                    if tx == tw:
                        tx = 0
        else:
            head = n
            body = 0
            if ti.static(lanes > 1):
                if use_words:
                    head = ti.min((lanes - (dst & (lanes - 1))) & (lanes - 1), n)
                    body = (n - head) // lanes
            # The head (up to a word, or without a word table the whole run) as stretches of
            # consecutive texture columns: a copy loop each, no wrap test per pixel.
            done = 0
            while done < head:
                m = ti.min(head - done, tw - tx)
                for q in range(m):
                    canvas[dst + done + q] = tex[tex_row + tx + q]
                done += m
                tx += m
                if tx == tw:
                    tx = 0
            if ti.static(lanes > 1):
                step = lanes % tw
                wd = (dst + head) // lanes
                for j in range(body):
                    canvas_w[wd + j] = words[tex_row + tx]
                    tx += step
                    if tx >= tw:
                        tx -= tw
            for j in range(head + body * lanes, n):
                canvas[dst + j] = tex[tex_row + tx]
                tx += 1
                if tx == tw:
                    tx = 0

    @ti.kernel
    def pad_canvas(img: nd(ndim=1), canvas: nd(ndim=1), img_w: nd(ndim=1),
                   canvas_w: nd(ndim=1), tex: nd(ndim=1), words: nd(ndim=1),
                   meta: nd(dtype=ti.i32, ndim=1), lanes: ti.template(),
                   backward: ti.template(), per_pixel: ti.template(), serial: ti.template(),
                   tiled: ti.template(),
                   row_blocks: ti.template()):
        # Forward: canvas <- image, texture. Backward: img += canvas and (if tex_grad)
        # tex += canvas, along the same index map. Scalars arrive packed in `meta` (layout
        # beside _HEADER): each kernel argument costs tens of microseconds of Python per launch.
        n_rows, c_count, out_h, out_w = meta[_N_ROWS], meta[_C], meta[_OUT_H], meta[_OUT_W]
        tex_channels, th, tw = meta[_TEX_C], meta[_TH], meta[_TW]
        stagger, use_words, tex_grad = meta[_STAGGER], meta[_USE_WORDS], meta[_TEX_GRAD]
        phase = meta[_PHASE]
        if ti.static(per_pixel and row_blocks):
            # `span` threads per canvas row: thread t writes columns t, t + span, ..., so a warp
            # writes consecutive columns (coalesced) and the row's setup is made once per
            # thread for about _GPU_COLUMNS pixels. The texture is not staged in shared memory:
            # a warp reads consecutive columns of one texture row, which stays in L1/L2; staging
            # would add a copy and a barrier per block for no fewer memory transactions.
            span = meta[_SPAN]
            ti.loop_config(block_dim=_GPU_BLOCK)
            for r, t in ti.ndrange(n_rows, span):
                plane = r // out_h
                rec = record(meta, plane // c_count)
                s = row_setup(plane, r - plane * out_h, rec, meta, c_count, tiled, tex_channels,
                              th, tw, stagger)
                # A count, not X < out_w: X + span would overflow int32 near its limit.
                columns = 0
                if t < out_w:
                    columns = (out_w - 1 - t) // span + 1
                for k in range(columns):
                    X = t + k * span
                    pixel(img, tex, canvas, meta, rec, s, X, r * out_w + X, out_h, tw,
                          tex_grad, tiled, backward)
        elif ti.static(per_pixel):  # the simple order: a thread per pixel
            for r, X in ti.ndrange(n_rows, out_w):
                plane = r // out_h
                rec = record(meta, plane // c_count)
                s = row_setup(plane, r - plane * out_h, rec, meta, c_count, tiled, tex_channels,
                              th, tw, stagger)
                pixel(img, tex, canvas, meta, rec, s, X, r * out_w + X, out_h, tw, tex_grad,
                      tiled, backward)
        else:
            blocks = (out_h - 1) // _ROW_BLOCK + 1  # per plane (out_h >= 1; no int32 overflow)
            row_shift = stagger % tw  # tile-column step from one tile row to the next
            # A small canvas runs on the launching thread: waking the pool costs more.
            ti.loop_config(serialize=serial)
            spread_rows = meta[_SPREAD]
            for it in range(n_rows // out_h * blocks * spread_rows):
                if it % spread_rows == 0:  # see backends.taichi.spread
                    t = it // spread_rows
                    plane = t // blocks
                    y0 = (t - plane * blocks) * _ROW_BLOCK
                    rec = record(meta, plane // c_count)
                    h, w, left, maps = rec[0], rec[1], rec[3], rec[5]
                    right_dx = (left + w) % tw  # tile-column step from canvas column 0 to left + w
                    s = row_setup(plane, y0, rec, meta, c_count, tiled, tex_channels, th, tw,
                                  stagger)
                    iy, src_row, tx0, ty, first = s[0], s[1], s[2], s[3], s[4]
                    for big_y in range(y0, y0 + ti.min(_ROW_BLOCK, out_h - y0)):
                        row = (plane * out_h + big_y) * out_w
                        # Standard modes: every canvas row is an image row (the row map's), whose
                        # columns [left, left + w) map to themselves: one run for every row.
                        inside = 0 <= iy < h
                        if ti.static(not tiled):
                            src_row = first + meta[maps + big_y] * w
                            inside = True
                        if inside:
                            copy_run(img, canvas, img_w, canvas_w,
                                     src_row if ti.static(not tiled) else first + iy * w,
                                     row + left, w, phase, lanes, backward)  # fmt: skip
                        # The border: [0, left) and [left + w, out_w) beside the image, the whole
                        # row above or below it; one call site with a trip count LLVM cannot fold
                        # keeps it from unrolling the call twice (a smaller kernel).
                        for part in range(2 if inside else 1):
                            x0 = 0
                            x1 = out_w if part == 0 else 0
                            tx = tx0
                            if inside:
                                x0 = 0 if part == 0 else left + w
                                x1 = left if part == 0 else out_w
                                if part == 1:
                                    tx += right_dx
                                    if tx >= tw:
                                        tx -= tw
                            if ti.static(tiled):
                                texture_run(tex, words, canvas, canvas_w, src_row, tx, row + x0,
                                            x1 - x0, tw, use_words, tex_grad, lanes, backward)
                            else:
                                for X in range(x0, x1):
                                    move(img, src_row + meta[maps + out_h + X], canvas, row + X,
                                         backward)
                        # Next canvas row: one image row down; in texture mode one tile row down,
                        # and past the tile's last row, the next row of tiles, shifted by stagger.
                        iy += 1
                        if ti.static(tiled):
                            ty += 1
                            src_row += tw
                            if ty == th:
                                ty = 0
                                src_row -= th * tw
                                tx0 -= row_shift
                                if tx0 < 0:
                                    tx0 += tw

    return {"pad_canvas": pad_canvas}


def _word_span(t: Tensor, before: bool) -> tuple[int, int] | None:
    """``(address, bytes)`` of the 8-byte words the kernel may read (``before``: an image) or
    write (a canvas) for ``t``, or None when there is not one whole word.

    Only in a storage that starts on a word (``torch.frombuffer``'s need not), so that the phase
    is a whole number of pixels. A canvas's words start at its first byte, which must be
    aligned (the kernel writes no byte outside it); an image's at the aligned word holding its
    first byte (read only: the bytes before it are shifted out). Both end at the last whole
    word; the kernel moves the tail as pixels.
    """
    address = t.data_ptr()
    start = address - address % 8
    if (start != address and not before) or t.untyped_storage().data_ptr() % 8:
        return None
    size = (address + t.numel() * t.element_size()) // 8 * 8 - start
    return (start, size) if size >= 8 else None


def _word_view(t: Tensor, span: tuple[int, int]) -> Tensor:
    """The int64 words of ``t``'s storage at ``span`` (``_word_span``)."""
    storage = t.untyped_storage()
    bytes_ = torch.empty(0, dtype=torch.uint8, device=t.device)
    bytes_.set_(storage, span[0] - storage.data_ptr(), (span[1],), (1,))
    return bytes_.view(torch.int64)


# Recent textures' word tables, checked against the texture's bits on every use.
_words_cache: ValueCache[Tensor] = ValueCache(8)


def _texture_words(tex: Tensor, tw: int, lanes: int) -> Tensor:
    """The word table of ``tex`` (flat rows of ``tw``): ``(R, tw)`` int64 where word ``[r, t]``
    packs pixels ``t .. t+lanes-1`` of row ``r`` (wrapping) in memory order, so one store
    writes them all. Made once per texture (``_words_cache``)."""

    def make() -> Tensor:
        rows = tex.reshape(-1, tw)
        wrapped = rows.repeat(1, -(-(tw + lanes - 1) // tw))[:, : tw + lanes - 1]
        packed = wrapped.unfold(1, lanes, 1).contiguous()  # (R, tw, lanes): sliding windows
        return packed.reshape(-1).view(torch.uint8).view(torch.int64).reshape(rows.shape[0], tw)

    return _words_cache.get(tex, (tw, lanes), make)


def _fold_maps(mode: str, g: PadGeometry) -> list[Tensor]:
    """Where each canvas row and column of a standard mode reads the image (``fold_index``)."""
    if mode in ("constant", "texture"):
        return []
    return [
        fold_index(torch.arange(-g.top, g.out_h - g.top), g.h, mode),
        fold_index(torch.arange(-g.left, g.out_w - g.left), g.w, mode),
    ]


def _stack_records(call: PadCall) -> tuple[Tensor, list[Tensor]]:
    """A ``pad_stack`` call's records (one per image, its image start made absolute) and its
    index maps (each image's pair, for standard modes)."""
    g = call.geometry
    assert not isinstance(g, PadGeometry)
    h, w, top, left = g.sizes.unbind(1)
    size = g.c * h * w
    records = torch.stack([h, w, top, left, size.cumsum(0) - size, torch.zeros_like(h)], 1)
    maps: list[Tensor] = []
    if call.mode not in ("constant", "texture"):
        records[:, _RMAPS] = _HEADER + g.n * _RECORD + torch.arange(g.n) * (g.out_h + g.out_w)
        for gi, _ in g.each():
            maps += _fold_maps(call.mode, gi)
    return records, maps


# Launch plans of recent single-geometry calls (first in, first out): a plan costs more to make
# than a small image's launch and holds a few KB, so 1,024 of them cover a dataset's sizes.
_plans: dict[tuple[Any, ...], "_Plan"] = {}
_PLANS_SIZE = 1024
# Lean raw-pointer launchers (``_compat.taichi.Bound``) per kernel signature, for every plan.
_bounds: dict[tuple[Any, ...], Any] = {}
# How a tensor goes to an ndarray slot: as the plan's element type (a same-size integer view
# forward, the float gradient backward) or as it is; a word span (``_word_span``) as int64 words.
_AS_ELEMENTS, _AS_IS = range(2)


def _plan(
    call: PadCall, image: Tensor, canvas: Tensor, texture: Tensor, backward: bool
) -> "_Plan":
    """The launch plan of this call: cached for a single geometry, made for a stack."""
    g = call.geometry
    gpu = bool(TAICHI.gpu_order)
    if not isinstance(g, PadGeometry):
        records, maps = _stack_records(call)
        return _Plan(call, image, canvas, texture, backward, gpu, records, _RECORD, 0, maps)
    key = (call.mode, g, image.numel(), canvas.dtype, canvas.device, texture.shape,
           texture.dtype, call.stagger, backward, gpu, TAICHI.serial_bytes)  # fmt: skip
    plan = _plans.get(key)
    if plan is None:
        # One record serves every sample: the image of sample b starts b * C*H*W further on.
        record = torch.tensor([[g.h, g.w, g.top, g.left, 0, _HEADER + _RECORD]], dtype=torch.int32)
        maps = _fold_maps(call.mode, g)
        plan = _Plan(call, image, canvas, texture, backward, gpu, record, 0, g.c * g.h * g.w, maps)
        if len(_plans) >= _PLANS_SIZE:
            _plans.pop(next(iter(_plans)))
        _plans[key] = plan
    return plan


class _Plan:
    """What a ``pad_canvas`` launch takes from its signature (mode, shapes, dtypes, device,
    padding, texture shape, stagger, direction): the host part of ``meta`` (a variant per use
    of the word table and image phase, made when first needed), the lane width and whether
    words can pay. A call adds its word spans, phase, word table and lattice (``forward``)."""

    def __init__(
        self, call: PadCall, image: Tensor, canvas: Tensor, texture: Tensor, backward: bool,
        gpu: bool, records: Tensor, record_step: int, image_step: int,
        maps: list[Tensor],
    ) -> None:  # fmt: skip
        g = call.geometry
        n, c, out_h, out_w = g.n, g.c, g.out_h, g.out_w
        mode, stagger, texture_grad = call.mode, call.stagger, call.mode == "texture"
        self.device = canvas.device
        self.constant = mode == "constant"
        self.c = c
        if self.constant:  # a 1x1 texture per channel, lattice at the origin
            mode, stagger, texture_grad = "texture", 0, False
            bank, tex_channels, th, tw = 1, c, 1, 1
        elif texture.dim() == 4:
            bank, tex_channels, th, tw = texture.shape
        else:
            bank, tex_channels, th, tw = 1, 1, 1, 1
        self.texture_mode = mode == "texture"
        self.tw = tw
        # Float gradients are accumulated, not moved: no integer views backward.
        self.dtype = canvas.dtype if backward else copies.BITS[canvas.element_size()]
        self.lanes = 8 // canvas.element_size()
        # Word moves serve the CPU's row walk (the GPU order has no use for them) and need a
        # whole word in the image and the canvas; joining two image words assumes little-endian.
        self.words = (
            not (backward or self.lanes == 1 or gpu)
            and sys.byteorder == "little"
            and image.numel() * image.element_size() >= 8
            and canvas.numel() * canvas.element_size() >= 8
        )
        tex_numel = c if self.constant else texture.numel()
        # The word table costs `lanes` times the texture; it pays only for a larger border.
        border = canvas.numel() - image.numel()
        self.table = self.words and self.texture_mode and tex_numel * self.lanes * 2 <= border
        self.serial = serial_launch(canvas)
        self.gpu = gpu
        self.span = _row_span(out_w)
        tasks = n * c * -(-out_h // _ROW_BLOCK)  # the CPU order's blocks of rows
        header = [n * c * out_h, c, out_h, out_w, tex_channels, th, tw, stagger, 0,
                  int(texture_grad), n, bank, record_step, image_step, 0, self.span,
                  spread(tasks, self.serial or gpu)]  # fmt: skip
        host_size = _HEADER + records.numel() + sum(m.numel() for m in maps)
        if host_size + 3 * n > MAX_ELEMENTS:  # meta is indexed (and its values) in int32
            raise Refused(f"more than {MAX_ELEMENTS} index map entries")
        parts = [torch.tensor([*header, host_size], dtype=torch.int32), records.reshape(-1)]
        host = torch.cat(parts + maps).to(device=self.device, dtype=torch.int32, non_blocking=True)
        self.n = n
        self.rows = n * c * out_h
        # Per (use of the word table, image phase): ``_add``'s pair.
        self.variants: dict[tuple[bool, int], tuple[Tensor, Tensor | None]] = {}
        self._add((False, 0), host)
        # The last call's lattice tensors, their versions and the meta made of them.
        self.last: tuple[Any, ...] = ()

    def _add(self, variant: tuple[bool, int], host: Tensor) -> tuple[Tensor, Tensor | None]:
        # The host part of meta and, where calls add nothing to it, the whole meta: standard
        # modes never read the lattice, constant mode's is zeros (texture mode: ``meta``).
        whole = None if self.texture_mode else host
        if self.constant:
            n, device = 3 * self.n, self.device
            zeros = constant(("lattice", n, 0, device),
                             lambda: torch.zeros(n, dtype=torch.int32, device=device))  # fmt: skip
            whole = torch.cat([host, zeros])
        self.variants[variant] = (host, whole)
        return host, whole

    def meta(
        self, variant: tuple[bool, int], offset: Tensor, texture_index: Tensor
    ) -> Tensor:
        """``meta`` for this variant (word table, image phase) and lattice."""
        entry = self.variants.get(variant)
        if entry is None:  # first asked for now
            host = self.variants[False, 0][0].clone()
            host[_USE_WORDS], host[_PHASE] = int(variant[0]), variant[1]
            entry = self._add(variant, host)
        host, meta = entry
        if meta is not None:
            return meta
        inference = offset.is_inference() or texture_index.is_inference()
        versions = () if inference else (tensor_version(offset), tensor_version(texture_index))
        last = self.last
        same = last and last[0] is offset and last[1] is texture_index
        if same and last[2:4] == (variant, versions):
            last_meta: Tensor = last[4]
            return last_meta
        meta = torch.cat([host, offset.reshape(-1), texture_index.reshape(-1)])
        if not inference:
            # Holds the tensors, so their memory cannot be reused by others meanwhile.
            self.last = (offset, texture_index, variant, versions, meta)
        return meta

    def view(self, t: Tensor, how: int | tuple[int, int]) -> Tensor:
        if isinstance(how, tuple):
            return _word_view(t, how)
        flat = t.reshape(-1)
        return flat.view(self.dtype) if how == _AS_ELEMENTS else flat


def _raw(t: Tensor, how: int | tuple[int, int]) -> tuple[int, int, tuple[int, ...]]:
    """``_Plan.view(t, how)`` as ``(data_ptr, nbytes, shape)``: a same-size view keeps all
    three; a word view is its span (``_word_span``)."""
    if isinstance(how, tuple):
        return how[0], how[1], (how[1] // 8,)
    return t.data_ptr(), t.numel() * t.element_size(), (t.numel(),)


def forward(
    call: PadCall, image: Tensor, canvas: Tensor, backward: bool = False,
    texture: Tensor | None = None, kernel_only: bool = False,
) -> None:  # fmt: skip
    """Write every element of ``canvas`` (``N*C*H'*W'`` contiguous, any shape) from ``image``
    (``N*C*H*W`` contiguous, or the packed images of a stack), the texture or the fill.

    With ``backward`` (``backward`` below): add ``canvas`` (the gradient) into ``image`` and,
    in texture mode, into ``texture`` along the same index map. ``kernel_only``: no CPU copy
    form (``copies.write_any``), the kernel. Raises ``Refused`` where the Taichi backend cannot
    serve the call.
    """
    texture = call.texture if texture is None else texture
    with TAICHI.session(canvas.device, "pad", _build_kernels, (image, canvas, texture)) as kernels:
        if canvas.numel() == 0:  # reads nothing: no maps, however large the padding
            return
        if not backward:
            advise_huge_pages(canvas)
        if not (backward or kernel_only or TAICHI.gpu_order):
            # The CPU forms of ``copies``: constant mode at every size (cheaper than even a
            # serial launch), the others for canvases the thread pool would write or of
            # ``SERIAL_MIN_ELEMENTS``; a textured batch's first canvas (the kernel's) repeated
            # only where the pool would write.
            pool = not serial_launch(canvas)
            large = pool or canvas.numel() >= copies.SERIAL_MIN_ELEMENTS
            if copies.write_any(call, image, canvas, _first, large=large, pool=pool):
                return
        plan = _plan(call, image, canvas, texture, backward)
        kernel = kernels["pad_canvas"]
        if plan.constant:
            texture = call.fill if not backward else canvas.new_zeros(plan.c)
        # The image's and the canvas's word spans, where words can be moved.
        image_span = _word_span(image, True) if plan.words else None
        canvas_span = _word_span(canvas, False) if image_span else None
        spans = (image_span, canvas_span) if image_span and canvas_span else None
        table = None
        if spans is not None and plan.table:
            table = _texture_words(copies.bits(texture), plan.tw, plan.lanes)
        phase = (image.data_ptr() % 8) // image.element_size() if spans is not None else 0
        no_words = _dummy(torch.int64, plan.device)
        dummy = _dummy(plan.dtype, plan.device)
        # Taichi needs non-empty arguments; a one-element dummy is never read.
        slots = [
            (image, _AS_ELEMENTS) if image.numel() else (dummy, _AS_IS),
            (canvas, _AS_ELEMENTS),
            (image, spans[0]) if spans is not None else (no_words, _AS_IS),
            (canvas, spans[1]) if spans is not None else (no_words, _AS_IS),
            (texture, _AS_ELEMENTS) if texture.numel() else (dummy, _AS_IS),
            (table, _AS_IS) if table is not None else (no_words, _AS_IS),
            (plan.meta((table is not None, phase), call.offset, call.texture_index), _AS_IS),
        ]
        lanes = plan.lanes if spans is not None else 1
        # The kernel's signature: its arrays' dtypes (all 1-D) and its template values. Images
        # of new sizes get new plans, not new signatures: one lean launcher serves them all.
        # The row order launches plan.span threads per canvas row, indexed in int32.
        rows = plan.gpu and GPU_ROW_BLOCKS and plan.rows * plan.span <= MAX_ELEMENTS
        signature = (kernel, plan.dtype, lanes, backward, plan.gpu, plan.serial,
                     plan.texture_mode, rows)  # fmt: skip
        bound = _bounds.get(signature)
        if bound is None or not bound.launch([_raw(t, how) for t, how in slots]):
            args = (*(plan.view(t, how) for t, how in slots), lanes, backward, plan.gpu,
                    plan.serial, plan.texture_mode, rows)  # fmt: skip
            kernel(*args)
            bind = getattr(kernel, "bind", None)
            if bind is not None:
                if len(_bounds) >= _PLANS_SIZE:
                    _bounds.clear()
                _bounds[signature] = bind(args)


def _first(one: PadCall, image: Tensor, canvas: Tensor) -> None:
    """The kernel's canvas for a batch's first sample (``one``, ``copies.first_sample``), on
    the first sample's part of the flat ``image`` and ``canvas``."""
    g = one.geometry
    assert isinstance(g, PadGeometry)
    views = (image.reshape(-1)[: g.c * g.h * g.w], canvas.reshape(-1)[: g.c * g.out_h * g.out_w])
    forward(one, *views, kernel_only=True)


def _row_span(out_w: int) -> int:
    """Threads per canvas row in the GPU row order: about one per ``_GPU_COLUMNS`` columns, in
    whole warps (32), so that rows of any width keep the device busy."""
    return max(1, -(-out_w // (_GPU_COLUMNS * 32))) * 32


def backward(
    call: PadCall, canvas_grad: Tensor, grad_image: Tensor, grad_texture: Tensor
) -> None:
    """Add ``canvas_grad`` (float32/float64, contiguous) into ``grad_image`` (zeros of the
    image's elements) and, in texture mode, ``grad_texture`` (zeros of the bank's shape)."""
    forward(call, grad_image, canvas_grad, True, grad_texture)


def _dummy(dtype: torch.dtype, device: torch.device) -> Tensor:
    """A read-only one-element stand-in for an empty argument (never read by the kernel)."""
    return constant(("dummy", dtype, device), lambda: torch.zeros(1, dtype=dtype, device=device))
