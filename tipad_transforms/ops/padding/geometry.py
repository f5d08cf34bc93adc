"""Argument parsing and the shared description of a padding: no kernels, no Taichi.

Everything here is plain Python so the functional layer, the custom ops, both backends and the
transforms agree on one meaning of ``padding``, ``mode`` and the texture mapping.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "MODES",
    "MODE_CODES",
    "PadGeometry",
    "check_bank_index",
    "check_mode",
    "fold_index",
    "image_channels",
    "parse_padding",
]

#: Standard modes, in the order of their integer codes, then the texture mode.
MODES: tuple[str, ...] = ("constant", "edge", "reflect", "symmetric", "circular", "texture")
MODE_CODES: dict[str, int] = {name: code for code, name in enumerate(MODES)}
_ALIASES = {"replicate": "edge", "wrap": "circular"}


def image_channels(shape: Sequence[int]) -> int:
    """``C`` of an image of ``shape`` ``(..., C, H, W)``; 1 for an ``(H, W)`` image."""
    return int(shape[-3]) if len(shape) >= 3 else 1


def check_mode(mode: Any, name: str = "padding_mode") -> str:
    """Canonical name of a padding mode (``replicate`` -> ``edge``, ``wrap`` -> ``circular``)."""
    if not isinstance(mode, str):
        raise TypeError(f"{name} must be a str, got {type(mode).__name__}")
    canonical = _ALIASES.get(mode, mode)
    if canonical not in MODE_CODES or canonical == "texture":
        allowed = ", ".join([*MODES[:-1], *_ALIASES])
        raise ValueError(f"{name} must be one of {allowed}; got {mode!r}")
    return canonical


# One side's padding: what the kernel's 32-bit index arithmetic can place.
MAX_PAD = _MAX_PAD = 2**31 - 1


def _as_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
            return int(value.item())
        raise TypeError(f"padding must contain ints, got {value!r} ({type(value).__name__})")
    return int(value)


# Sequences of characters or bytes: never a padding (bytes iterate as ints).
_TEXT = (str, bytes, bytearray, memoryview)


def parse_padding(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """Normalise torchvision's padding forms to ``(left, top, right, bottom)``.

    ``p`` pads every side by ``p``; ``(lr, tb)`` pads left/right by ``lr`` and top/bottom by
    ``tb``; ``(left, top, right, bottom)`` is taken as is. Negative values crop (torchvision's
    and ``torch.nn.functional.pad``'s meaning). Raises ``TypeError`` for non-integers and
    ``ValueError`` for a sequence of another length or a value beyond ``2**31 - 1`` pixels.
    """
    if isinstance(padding, (int, torch.SymInt)) and not isinstance(padding, bool):
        values: list[int] = [int(padding)] * 4
    elif isinstance(padding, Sequence) and not isinstance(padding, _TEXT):
        ints = [_as_int(p) for p in padding]
        if len(ints) == 1:
            values = ints * 4
        elif len(ints) == 2:
            values = [ints[0], ints[1], ints[0], ints[1]]
        elif len(ints) == 4:
            values = ints
        else:
            raise ValueError(
                f"padding must be an int or a sequence of 1, 2 or 4 ints, got {len(ints)} values"
            )
    else:
        raise TypeError(
            f"padding must be an int or a sequence of ints, got {type(padding).__name__}"
        )
    if not all(-_MAX_PAD <= v <= _MAX_PAD for v in values):
        raise ValueError(
            f"padding must lie in [-{_MAX_PAD}, {_MAX_PAD}] pixels per side, got {tuple(values)}"
        )
    left, top, right, bottom = values
    return left, top, right, bottom


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
        if len(shape) < 2:
            raise ValueError(f"x must have shape (..., C, H, W) or (H, W), got {tuple(shape)}")
        h, w = int(shape[-2]), int(shape[-1])
        c = image_channels(shape)
        # A list, not a generator: Dynamo cannot trace math.prod over a generator (fullgraph).
        n = math.prod([int(s) for s in shape[:-3]]) if len(shape) > 3 else 1
        left, top, right, bottom = (int(p) for p in padding)
        return PadGeometry(n, c, h, w, left, top, right, bottom)

    def out_shape(self, shape: Sequence[int]) -> list[int]:
        return [*(int(s) for s in shape[:-2]), self.out_h, self.out_w]


def fold_index(i: torch.Tensor, n: int, mode: str) -> torch.Tensor:
    """Source index along an axis of length ``n >= 1`` for positions ``i`` (any integers).

    The ``numpy.pad`` meaning, periodic beyond the first reflection: ``edge`` clamps,
    ``reflect`` has period ``2n - 2`` (edge not repeated), ``symmetric`` period ``2n`` (edge
    repeated), ``circular`` period ``n``. Both backends take their index maps from here.
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


def check_bank_index(bank_size: int, texture_index: torch.Tensor) -> None:
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
