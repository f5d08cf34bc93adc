"""The one place where the command line (and ``docs/make_figures.py``) pads in a named mode.

``functional.pad``'s signature is changing to torchvision's ``pad(x, padding, fill=0,
padding_mode="constant")``; every caller that picks a mode goes through :func:`pad_in_mode`, so
the switch is one line here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import PIL.Image

if TYPE_CHECKING:
    import torch

__all__ = ["pad_in_mode"]

T = TypeVar("T", "torch.Tensor", PIL.Image.Image)


def pad_in_mode(
    x: T, padding: int | Sequence[int], mode: str, fill: float | Sequence[float] = 0
) -> T:
    """``functional.pad(x, padding)`` in ``mode`` with ``fill`` (used by ``"constant"`` only).

    ``x`` is anything ``functional.pad`` takes (a ``(..., H, W)`` tensor or a PIL image) and the
    result has its type; errors are ``functional.pad``'s (TypeError/ValueError naming the
    argument).
    """
    from .functional import pad

    return pad(x, padding, mode, fill)
