"""Argument checks shared by every public layer (functionals, transforms, collate, ops, nn).

Each returns the value (normalised) or raises a TypeError/ValueError that names the argument
and what it received. The public entry point of a call checks the user's arguments once with
these; the layers below trust what it passes down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "Number",
    "check_flag",
    "check_generator",
    "check_int",
    "check_number",
    "check_offset",
    "is_int",
]

Number = int | float | bool

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def is_int(value: Any) -> bool:
    """True for Python ints (and ``torch.SymInt`` while tracing), False for bools."""
    return isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)


def check_int(
    value: Any,
    name: str,
    *,
    minimum: int = -INT64_MAX - 1,
    maximum: int = INT64_MAX,
) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (default: what an int64 holds)."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if isinstance(value, torch.SymInt):
        return value  # type: ignore[return-value]  # a traced size: checked when it is real
    if not minimum <= value <= maximum:
        if minimum == -INT64_MAX - 1 and maximum == INT64_MAX:
            raise ValueError(f"{name} must fit in 64 bits, got {value}")
        raise ValueError(f"{name} must lie in [{minimum}, {maximum}], got {value}")
    return int(value)


def check_offset(offset: Any) -> tuple[int, int]:
    """A fixed lattice offset: an int (both axes) or a pair ``(oy, ox)`` of ints."""
    if is_int(offset):
        value = check_int(offset, "offset")
        return value, value
    if isinstance(offset, Sequence) and not isinstance(offset, str):
        if not all(is_int(v) for v in offset):
            raise TypeError(f"offset must be an int or a pair of ints (oy, ox), got {offset!r}")
        if len(offset) != 2:
            raise ValueError(f"offset must be a pair (oy, ox), got {len(offset)} values")
        return check_int(offset[0], "offset"), check_int(offset[1], "offset")
    raise TypeError(
        f"offset must be an int or a pair of ints (oy, ox), got {type(offset).__name__}"
    )


def check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_number(value: Any, name: str) -> Number:
    if not isinstance(value, (int, float, bool)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    return value


def check_generator(generator: Any) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator)}")
    return generator
