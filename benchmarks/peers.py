"""Peer implementations the benchmarks compare tipad against, and an independent oracle.

* ``gather_texture_pad``: the seed article's torch approach to texture padding (pixel coordinates
  -> lattice cell -> pixel inside the tile -> one ``index_select`` from the flattened tile), run
  eagerly or through ``torch.compile``. Unlike the article's code it builds its coordinates afresh
  (the article overwrote its coordinate input, so a second call drew a different picture), puts the
  lattice origin on the image's top-left pixel and keeps the image in the centre: it produces the
  canvas of ``tipad_transforms.functional.texture_pad`` bit for bit.
* ``slices_constant_pad_``: a constant pad into a preallocated tensor with plain torch slicing
  (four border slabs filled, the interior copied once): the "same bytes out" yardstick for
  ``out=`` (``torch.nn.functional.pad`` has no ``out=``; ``out.copy_(F.pad(x))`` would write the
  canvas twice and is not a fair comparison).
* ``reference_pad``: the padding spec written out directly (``numpy.pad`` index maps for the
  standard modes, the texture formula per sample), for correctness checks. Slow; small inputs.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["fpad_order", "gather_texture_pad", "reference_pad", "slices_constant_pad_"]

Pads = tuple[int, int, int, int]  # (left, top, right, bottom), tipad's canonical order


def fpad_order(padding: Pads) -> tuple[int, int, int, int]:
    """tipad's ``(left, top, right, bottom)`` as ``torch.nn.functional.pad`` wants it."""
    left, top, right, bottom = padding
    return left, right, top, bottom


def gather_texture_pad(
    x: torch.Tensor, padding: Pads, tile: torch.Tensor, stagger: int
) -> torch.Tensor:
    """Texture padding as torch tensor ops (the article's method, its bugs fixed).

    Args:
        x: ``(..., C, H, W)`` image, any dtype and device.
        padding: ``(left, top, right, bottom)``.
        tile: ``(Ct, th, tw)`` in ``x``'s dtype and device, ``Ct`` in {1, C}.
        stagger: horizontal shift of each successive row of tiles.

    Returns:
        ``(..., C, H + top + bottom, W + left + right)``: ``texture_pad(x, padding, tile,
        stagger=stagger)``. Coordinates use broadcasting where they can (row quantities are
        ``(H', 1)``), which leaves fewer full-size temporaries than the article's ``(H', W', 2)``
        coordinate grid: a stronger baseline than the original, not a weaker one.
    """
    left, top, right, bottom = padding
    *lead, c, h, w = x.shape
    oh, ow = h + top + bottom, w + left + right
    ct, th, tw = tile.shape
    # Pixel -> coordinates, origin on the image's top-left pixel.
    y = (torch.arange(oh, device=x.device) - top)[:, None]
    xx = (torch.arange(ow, device=x.device) - left)[None, :]
    # Coordinates -> lattice cell (v: row of tiles, u: tile within the row shifted by v*stagger).
    v = torch.div(y, th, rounding_mode="floor")
    shifted = xx - v * stagger
    u = torch.div(shifted, tw, rounding_mode="floor")
    # Lattice cell -> pixel inside the tile -> flat index -> gather.
    idx = ((y - v * th) * tw + (shifted - u * tw)).reshape(-1)
    border = tile.reshape(ct, th * tw).index_select(1, idx).view(ct, oh, ow)
    # A no-op for a one-plane canvas; one copy per sample for a batch (as a torch user would).
    canvas = border.expand(*lead, c, oh, ow).contiguous()
    canvas[..., top : top + h, left : left + w] = x
    return canvas


def slices_constant_pad_(
    out: torch.Tensor, x: torch.Tensor, padding: Pads, value: float = 0
) -> torch.Tensor:
    """Constant-pad ``x`` into ``out`` with slicing: every output element written exactly once."""
    left, top = padding[:2]  # right and bottom follow from out's shape
    h, w = x.shape[-2:]
    out[..., :top, :].fill_(value)
    out[..., top + h :, :].fill_(value)
    middle = out[..., top : top + h, :]
    middle[..., :left].fill_(value)
    middle[..., left + w :].fill_(value)
    middle[..., left : left + w].copy_(x)
    return out


_NUMPY_MODES = {"edge": "edge", "reflect": "reflect", "symmetric": "symmetric", "circular": "wrap"}
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def reference_pad(
    x: torch.Tensor,
    padding: Pads,
    mode: str,
    *,
    fill: torch.Tensor | None = None,
    bank: torch.Tensor | None = None,
    offset: torch.Tensor | None = None,
    texture_index: torch.Tensor | None = None,
    stagger: int = 0,
) -> torch.Tensor:
    """The spec, independent of tipad's code, on CPU; differentiable for float inputs.

    Args:
        x: ``(..., C, H, W)`` or ``(H, W)``.
        padding: ``(left, top, right, bottom)``.
        mode: ``constant``, ``edge``, ``reflect``, ``symmetric``, ``circular`` or ``texture``.
        fill: ``(C,)`` in ``x``'s dtype (constant mode).
        bank: ``(K, Ct, th, tw)`` in ``x``'s dtype, ``Ct`` in {1, C} (texture mode).
        offset: ``(N, 2)`` per-sample ``(oy, ox)``, ``N`` the product of the leading dims.
        texture_index: ``(N,)`` bank index per sample.
        stagger: texture row shift.

    Standard modes follow ``numpy.pad`` (repeated reflection / wrap for padding beyond the
    image). Texture: border pixel ``(Y, X)`` shows ``bank[k, :, ty, tx]`` with
    ``y = Y - top - oy``, ``v = floor(y / th)``, ``ty = y - v*th`` and
    ``tx = (X - left - ox - v*stagger) mod tw``.
    """
    left, top, right, bottom = padding
    shape = x.shape
    img = x.reshape(-1, *(shape[-3:] if x.dim() >= 3 else (1, *shape)))
    n, c, h, w = img.shape
    oh, ow = h + top + bottom, w + left + right
    # Bit views make index_select exact and dtype-agnostic (bool, bfloat16, NaN payloads);
    # a float tensor that needs gradients stays as it is.
    as_bits = not img.requires_grad
    src = img.contiguous().view(_BITS[img.element_size()]) if as_bits else img
    if mode in _NUMPY_MODES:
        rows = np.pad(np.arange(h), (top, bottom), mode=_NUMPY_MODES[mode])  # type: ignore[call-overload]
        cols = np.pad(np.arange(w), (left, right), mode=_NUMPY_MODES[mode])  # type: ignore[call-overload]
        canvas = src.index_select(2, torch.from_numpy(rows)).index_select(3, torch.from_numpy(cols))
    else:
        if mode == "constant":
            assert fill is not None
            values = fill.contiguous().view(_BITS[fill.element_size()]) if as_bits else fill
            canvas = values.reshape(1, c, 1, 1).expand(n, c, oh, ow).clone()
        elif mode == "texture":
            assert bank is not None and offset is not None and texture_index is not None
            tex = bank.contiguous().view(_BITS[bank.element_size()]) if as_bits else bank
            th, tw = tex.shape[-2:]
            planes = []
            for i in range(n):
                oy, ox = (int(v) for v in offset[i])
                y = torch.arange(oh) - top - oy
                v = torch.div(y, th, rounding_mode="floor")
                ty = y - v * th
                tx = torch.remainder(
                    torch.arange(ow)[None, :] - left - ox - v[:, None] * stagger, tw
                )
                plane = tex[int(texture_index[i])][:, ty[:, None], tx]  # (Ct, H', W')
                planes.append(plane.expand(c, oh, ow))
            canvas = torch.stack(planes)
        else:
            raise ValueError(f"unknown mode {mode!r}")
        canvas[:, :, top : top + h, left : left + w] = src
    if as_bits:
        canvas = canvas.view(x.dtype)
    return canvas.reshape(*shape[:-2], oh, ow) if x.dim() >= 3 else canvas.reshape(oh, ow)
