"""A padding call as one record (``PadCall``: its geometry and border), and the index maps of
the standard modes, shared by the op, its Taichi kernel and its torch reference.

Coordinates: ``padding`` is ``(left, top, right, bottom)``, as in torchvision; every other pair
is row-major, y before x: lattice offsets ``(oy, ox)``, placements ``(top, left)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..._checks import PADDING_MODES

__all__ = [
    "MAX_PAD",
    "MODES",
    "PadCall",
    "PadGeometry",
    "StackGeometry",
    "check_bank_index",
    "fold_index",
    "image_channels",
]

#: Every mode: the standard ones (``functional.pad``), then texture (``functional.texture_pad``).
MODES: tuple[str, ...] = (*PADDING_MODES, "texture")
#: One side's padding: what the kernel's 32-bit index arithmetic can place.
MAX_PAD = 2**31 - 1


def image_channels(shape: Sequence[int]) -> int:
    """``C`` of an image of ``shape`` ``(..., C, H, W)``; 1 for an ``(H, W)`` image."""
    return int(shape[-3]) if len(shape) >= 3 else 1


@dataclass(frozen=True)
class PadGeometry:
    """Shapes of one padding call on an input flattened to ``(N, C, H, W)``.

    ``N`` is the product of the leading dims (1 for ``(C, H, W)`` and ``(H, W)`` inputs). Output
    pixel ``(Y, X)`` of a plane reads image pixel ``(Y - top, X - left)`` when that is inside the
    image; otherwise it is a border pixel.
    """

    n: int
    c: int
    h: int
    w: int
    left: int
    top: int
    right: int
    bottom: int

    @property
    def out_h(self) -> int:
        return self.h + self.top + self.bottom

    @property
    def out_w(self) -> int:
        return self.w + self.left + self.right

    @staticmethod
    def of(shape: Sequence[int], padding: Sequence[int]) -> PadGeometry:
        """Geometry of an input of ``shape`` (``(..., C, H, W)`` or ``(H, W)``)."""
        h, w = int(shape[-2]), int(shape[-1])
        # A list, not a generator: Dynamo cannot trace math.prod over a generator (fullgraph).
        n = math.prod([int(s) for s in shape[:-3]]) if len(shape) > 3 else 1
        left, top, right, bottom = (int(p) for p in padding)
        return PadGeometry(n, image_channels(shape), h, w, left, top, right, bottom)

    def out_shape(self, shape: Sequence[int]) -> list[int]:
        return [*(int(s) for s in shape[:-2]), self.out_h, self.out_w]


@dataclass(frozen=True)
class StackGeometry:
    """``N`` packed images of different sizes, each padded to one ``(C, out_h, out_w)`` canvas.

    ``sizes``: ``(N, 4)`` int64 CPU ``(h_i, w_i, top_i, left_i)``, checked: image ``i`` fits
    its canvas at ``(top_i, left_i)``. The images are flattened and concatenated in order.
    """

    sizes: Tensor
    c: int
    out_h: int
    out_w: int

    @property
    def n(self) -> int:
        return int(self.sizes.shape[0])

    def each(self) -> list[tuple[PadGeometry, int]]:
        """Each image's own geometry and the flat index of its first element."""
        result, start = [], 0
        for h, w, top, left in self.sizes.tolist():
            right, bottom = self.out_w - left - w, self.out_h - top - h
            result.append((PadGeometry(1, self.c, h, w, left, top, right, bottom), start))
            start += self.c * h * w
        return result


@dataclass(frozen=True)
class PadCall:
    """One padding call in the ops' canonical form, built once (by the functional layer, or by
    the op from its arguments) and passed whole to the backends.

    ``geometry``: where each image lands. ``mode``: a name of ``MODES``. ``fill``: ``(C,)`` in
    the image's dtype for ``"constant"``, else empty. ``texture``: the ``(K, Ct, th, tw)`` bank
    (``Ct`` in {1, C}) in the image's dtype for ``"texture"``, else empty. ``offset``: ``(N, 2)``
    int32 ``(oy, ox)``; ``texture_index``: ``(N,)`` int32 in the bank (the kernel clamps it);
    ``stagger``: an int32. Tensors contiguous, on the image's device."""

    geometry: PadGeometry | StackGeometry
    mode: str
    fill: Tensor
    texture: Tensor
    offset: Tensor
    texture_index: Tensor
    stagger: int


def fold_index(i: Tensor, n: int, mode: str) -> Tensor:
    """Source index along an axis of length ``n >= 1`` for positions ``i`` (any integers).

    The ``numpy.pad`` meaning, periodic beyond the first reflection: ``edge`` clamps,
    ``reflect`` has period ``2n - 2`` (edge not repeated), ``symmetric`` period ``2n`` (edge
    repeated), ``circular`` period ``n``. The kernel's index maps and the reference read it.
    """
    if mode == "edge":
        return i.clamp(0, n - 1)
    if mode == "reflect":
        if n == 1:
            return torch.zeros_like(i)
        r = i.remainder(2 * n - 2)
        return torch.where(r >= n, 2 * n - 2 - r, r)
    if mode == "symmetric":
        r = i.remainder(2 * n)
        return torch.where(r >= n, 2 * n - 1 - r, r)
    if mode == "circular":
        return i.remainder(n)
    raise ValueError(f"fold_index: no index map for mode {mode!r}")


def check_bank_index(bank_size: int, texture_index: Tensor) -> None:
    """Raise ValueError unless every value of ``texture_index`` lies in ``[0, bank_size)``.

    Reads the values: a host synchronisation when the tensor lives on a GPU.
    """
    if texture_index.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(texture_index))
    if lo < 0 or hi >= bank_size:
        raise ValueError(
            f"texture_index must lie in [0, {bank_size}) for a texture bank of {bank_size} "
            f"tile(s), got values in [{lo}, {hi}]"
        )
