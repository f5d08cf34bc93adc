"""Argument checks shared by the transforms and the collate functions.

Each returns the value (normalised) or raises a TypeError/ValueError that names the argument
and what it received.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "Number",
    "check_flag",
    "check_generator",
    "check_mask_fill",
    "check_offset",
    "check_stagger",
    "is_int",
]

Number = int | float | bool


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_stagger(stagger: Any) -> int:
    if not is_int(stagger):
        raise TypeError(f"stagger must be an int, got {type(stagger).__name__}")
    return int(stagger)


def check_offset(offset: Any) -> tuple[int, int]:
    if is_int(offset):
        return int(offset), int(offset)
    if isinstance(offset, Sequence) and not isinstance(offset, str):
        if not all(is_int(v) for v in offset):
            raise TypeError(f"offset must be an int or a pair of ints (oy, ox), got {offset!r}")
        if len(offset) != 2:
            raise ValueError(f"offset must be a pair (oy, ox), got {len(offset)} values")
        return int(offset[0]), int(offset[1])
    raise TypeError(
        f"offset must be an int or a pair of ints (oy, ox), got {type(offset).__name__}"
    )


def check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_mask_fill(mask_fill: Any) -> Number:
    if not isinstance(mask_fill, (int, float, bool)):
        raise TypeError(f"mask_fill must be a number, got {type(mask_fill).__name__}")
    return mask_fill


def check_generator(generator: Any) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator)}")
    return generator
