"""Padding with plain torch ops: the torch backend's implementation of the padding family.

It builds the kernel's index maps (``geometry.fold_index``, the texture mapping of ``_lattice``)
with a few torch ops, so its results are the kernel's bit for bit. Every process runs
``forward`` for its first CPU calls (the warm-up), and every call Taichi cannot serve: on the
CPU it writes through the bulk copies of ``copies`` wherever one applies (as the Taichi backend
does), elsewhere it builds index vectors and writes the canvas once.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from ...backends.taichi import advise_huge_pages
from . import copies
from .geometry import PadCall, PadGeometry, fold_index

__all__ = ["backward", "forward", "tile_index"]


def _lattice(call: PadCall, g: PadGeometry) -> tuple[Tensor, Tensor]:
    """``(N, H')`` tile row ``ty`` and tile column ``tx`` at ``X = 0`` of every canvas row: ``y = Y
    - top - oy``, ``v = floor(y / th)``, ``ty = y - v*th``, ``tx = (X - left - ox - v*stagger) mod
    tw`` (the texture mapping; the kernel's too)."""
    dev = call.texture.device
    th, tw = call.texture.shape[-2:]
    off = call.offset.to(device=dev, dtype=torch.long)
    y = (torch.arange(g.out_h, device=dev) - g.top)[None, :] - off[:, :1]
    v = torch.div(y, th, rounding_mode="floor")
    return y - v * th, (-g.left - off[:, 1:] - v * call.stagger).remainder(tw)


def tile_index(call: PadCall, g: PadGeometry) -> Tensor:
    """``(N, 1, H'*W')`` flat ``ty * tw + tx`` of every canvas pixel (``copies`` draws its
    walls with it too)."""
    ty, tx0 = _lattice(call, g)
    tw = call.texture.shape[-1]
    tx = (tx0[:, :, None] + torch.arange(g.out_w, device=ty.device)).remainder(tw)
    return (ty[:, :, None] * tw + tx).reshape(g.n, 1, -1)


def _texture_rows(call: PadCall, g: PadGeometry) -> Tensor:
    """``(N, Ct, H', W')``: every canvas pixel's texture value, indexed per row.

    Along a canvas row the tile column advances by one per pixel, wrapping at ``tw``: the row is
    the window ``[s, s + W')`` of its tile row repeated ``ceil((tw + W' - 1) / tw)`` times, so
    the canvas is one ``index_select`` of contiguous windows.
    """
    texture = call.texture
    dev = texture.device
    _, ct, th, tw = texture.shape
    ty, s = _lattice(call, g)
    reps = -(-(tw + g.out_w - 1) // tw)
    chosen = texture[call.texture_index.to(device=dev, dtype=torch.long)]  # (N, Ct, th, tw)
    wide = chosen.unsqueeze(3).expand(g.n, ct, th, reps, tw).reshape(-1)  # rows of reps * tw
    plane = torch.arange(g.n * ct, device=dev).view(g.n, ct, 1) * th  # (n, c)'s first tile row
    starts = (plane + ty[:, None, :]) * (reps * tw) + s[:, None, :]  # (N, Ct, H')
    windows = wide.unfold(0, g.out_w, 1)  # window i: wide[i : i + W'], a view
    return windows.index_select(0, starts.reshape(-1)).view(g.n, ct, g.out_h, g.out_w)


def _pad(call: PadCall, g: PadGeometry, image: Tensor, canvas: Tensor) -> None:
    """``(N, C, H, W)`` image -> ``canvas`` ``(N, C, H', W')`` contiguous (``g`` one geometry
    of ``call``), by index maps: the definition the copies below must match."""
    dev = image.device
    if canvas.numel() == 0:  # no index maps for a canvas that holds nothing
        return
    if call.mode not in ("texture", "constant"):
        # The row and column maps cover the interior too: they fold an inside index to itself.
        rows = fold_index(torch.arange(g.out_h, device=dev) - g.top, g.h, call.mode)
        cols = fold_index(torch.arange(g.out_w, device=dev) - g.left, g.w, call.mode)
        torch.index_select(image.index_select(2, rows), 3, cols, out=canvas)
        return
    if call.mode == "texture":
        border = _texture_rows(call, g)
    else:
        border = call.fill.reshape(1, g.c, 1, 1)
    canvas.copy_(border.to(image.dtype).expand_as(canvas))
    canvas[:, :, g.top : g.top + g.h, g.left : g.left + g.w] = image  # padding is >= 0 here


def _write(call: PadCall, g: PadGeometry, image: Tensor, canvas: Tensor) -> None:
    """``_pad``, or on the CPU the bulk copies that give its bits (``copies``: each element
    written once, no index map and no gather where a form applies)."""
    if (
        canvas.is_cpu
        and canvas.numel()
        and copies.write_any(call, image, canvas, _first, any_width=True)
    ):
        return
    _pad(call, g, image, canvas)


def _first(one: PadCall, image: Tensor, canvas: Tensor) -> None:
    """``_pad`` of a batch's first sample (``one``, ``copies.first_sample``)."""
    assert isinstance(one.geometry, PadGeometry)
    _pad(one, one.geometry, image[:1], canvas[:1])


def _parts(call: PadCall) -> list[tuple[PadCall, PadGeometry, int, int]]:
    """``call`` as calls of one geometry, each with its first image element and first canvas:
    the whole batch, or for a ``pad_stack`` call one per image."""
    g = call.geometry
    if isinstance(g, PadGeometry):
        return [(call, g, 0, 0)]
    return [
        (replace(call, geometry=gi, offset=call.offset[i : i + 1],
                 texture_index=call.texture_index[i : i + 1]), gi, start, i)
        for i, (gi, start) in enumerate(g.each())
    ]  # fmt: skip


def forward(call: PadCall, image: Tensor, canvas: Tensor) -> None:
    """Write every element of ``canvas`` (``N*C*H'*W'`` contiguous) from ``image``
    (``N*C*H*W`` contiguous; for a stack the packed images), the texture or the fill."""
    g = call.geometry
    advise_huge_pages(canvas)
    canvases = canvas.view(g.n, g.c, g.out_h, g.out_w)
    if isinstance(g, PadGeometry):  # no per-image views: a small call's cost is its torch ops
        _write(call, g, image.view(g.n, g.c, g.h, g.w), canvases)
        return
    if canvas.is_cpu and copies.write(call, image, canvas):  # a constant stack of large images
        return
    flat = image.reshape(-1)
    for one, gi, start, i in _parts(call):
        image_i = flat[start : start + gi.n * g.c * gi.h * gi.w].view(gi.n, g.c, gi.h, gi.w)
        _write(one, gi, image_i, canvases[i : i + gi.n])


def _backward(
    call: PadCall, g: PadGeometry, grad: Tensor, grad_image: Tensor,
    grad_texture: Tensor,
) -> None:  # fmt: skip
    """Add the canvas gradient ``grad`` ``(N, C, H'*W')`` into ``grad_image`` ``(N, C, H*W)``
    and, in texture mode, ``grad_texture`` along the forward index map (explicit scatter-adds:
    this runs inside a custom op's implementation, where autograd is off)."""
    dev = grad.device
    iy = torch.arange(g.out_h, device=dev) - g.top
    ix = torch.arange(g.out_w, device=dev) - g.left
    inside = (((iy >= 0) & (iy < g.h))[:, None] & ((ix >= 0) & (ix < g.w))[None, :]).reshape(-1)
    if call.mode in ("constant", "texture"):
        src = (iy[:, None] * g.w + ix[None, :]).reshape(-1)
        grad_image.index_add_(2, src[inside], grad[:, :, inside])
    else:
        src = fold_index(iy, g.h, call.mode)[:, None] * g.w + fold_index(ix, g.w, call.mode)
        grad_image.index_add_(2, src.reshape(-1), grad)
    if call.mode == "texture" and grad_texture.numel() > 0:
        _, ct, th, tw = grad_texture.shape
        border = ~inside
        channel = torch.arange(g.c, device=dev) * (1 if ct == g.c else 0)  # Ct = 1: all read 0
        plane = call.texture_index.to(device=dev, dtype=torch.long)[:, None] * ct + channel
        flat = tile_index(call, g)[:, :, border]  # (N, 1, B)
        target = plane[:, :, None] * (th * tw) + flat  # (N, C, B)
        grad_texture.view(-1).index_add_(0, target.reshape(-1), grad[:, :, border].reshape(-1))


def backward(call: PadCall, canvas_grad: Tensor, grad_image: Tensor, grad_texture: Tensor) -> None:
    """Add ``canvas_grad`` (the output's gradient, contiguous float) into ``grad_image`` (zeros:
    ``(N, C, H, W)``, or flat for a stack) and, in texture mode, ``grad_texture`` (zeros of the
    bank's shape): every image and texture pixel gets the sum over the canvas pixels it fed."""
    g = call.geometry
    if canvas_grad.numel() == 0:
        return
    grads, flat = canvas_grad.reshape(g.n, g.c, g.out_h * g.out_w), grad_image.view(-1)
    for one, gi, start, i in _parts(call):
        part = flat[start : start + gi.n * g.c * gi.h * gi.w].view(gi.n, g.c, gi.h * gi.w)
        _backward(one, gi, grads[i : i + gi.n], part, grad_texture)
