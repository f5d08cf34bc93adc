"""Argument checks shared by every public layer (functionals, transforms, collate, ops, nn).

Each returns the value (normalised) or raises a TypeError/ValueError that names the argument
and what it received. The public entry point of a call checks the user's arguments once with
these; the layers below trust what it passes down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "FLOATS",
    "INT32_MAX",
    "INT64_MAX",
    "PADDING_MODES",
    "Number",
    "check_dense",
    "check_device",
    "check_flag",
    "check_float",
    "check_generator",
    "check_int",
    "check_mode",
    "check_number",
    "check_offset",
    "check_tensor",
    "is_int",
    "parse_padding",
    "unreadable",
]

Number = int | float | bool

#: The float dtypes the RWKV ops and layers take.
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

#: Also one side's padding at most: what the kernel's 32-bit index arithmetic can place.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def is_int(value: Any) -> bool:
    """True for Python ints (and ``torch.SymInt`` while tracing), False for bools."""
    return isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)


def check_int(
    value: Any, name: str, *, minimum: int = -INT64_MAX - 1, maximum: int = INT64_MAX
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


def check_device(device: Any) -> torch.device | None:
    """``device`` (a ``torch.device``, a str or None) as a ``torch.device`` or None; TypeError
    for another type, ValueError for a string torch does not know."""
    if device is not None and not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a torch.device, a str or None, got {device!r}")
    try:
        return None if device is None else torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device={device!r} is not a device: {exc}") from None


def check_generator(generator: Any) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    return generator


def unreadable(t: Tensor) -> str | None:
    """What makes ``t`` unreadable as strided memory (``"a quantized torch.quint8 tensor"``,
    ``"a nested tensor"``, ``"a torch.sparse_coo tensor"``), else None: such tensors have no
    flat element buffer (or one whose bytes are not the values), and a few torch calls on them
    crash the process instead of raising."""
    if t.is_quantized:
        return f"a quantized {t.dtype} tensor"
    if t.is_nested:
        return "a nested tensor"
    if t.layout != torch.strided:
        return f"a {t.layout} tensor"
    return None


def check_dense(t: Tensor, name: str, *, meta: bool = False) -> Tensor:
    """``t`` if it is a dense (strided) tensor holding data, else an error naming ``name``.

    Raises:
        TypeError: ``t`` is quantized, nested or sparse (any layout but ``torch.strided``).
        ValueError: ``t`` is on the meta device (no data), unless ``meta``. A FakeTensor of a
            tracer reports its real device and passes.
    """
    kind = unreadable(t)
    if kind is not None:
        raise TypeError(f"{name} must be a dense (strided) tensor, got {kind}")
    if not meta and t.is_meta:
        raise ValueError(
            f"{name} is a meta tensor (shape only, no data): give a CPU or CUDA tensor"
        )
    return t


def check_tensor(name: str, t: object) -> Tensor:
    """``t`` if it is a dense (strided) tensor, else a TypeError naming it (the public
    functions' check). Meta tensors pass: the ops' fake implementations give their shapes."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return check_dense(t, name, meta=True)


def check_float(name: str, t: object) -> Tensor:
    """``t`` if it is a float16/bfloat16/float32/float64 tensor, else a TypeError naming it."""
    t = check_tensor(name, t)
    if t.dtype not in FLOATS:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    return t


#: The standard padding modes (``functional.pad``), canonical names.
PADDING_MODES = ("constant", "edge", "reflect", "symmetric", "circular")
_ALIASES = {"replicate": "edge", "wrap": "circular"}
# Sequences of characters or bytes: never a padding (bytes iterate as ints).
_TEXT = (str, bytes, bytearray, memoryview)


def check_mode(mode: Any, name: str = "padding_mode") -> str:
    """Canonical name of a standard padding mode (``replicate`` -> ``edge``, ``wrap`` ->
    ``circular``), else a TypeError/ValueError naming ``name``."""
    if not isinstance(mode, str):
        raise TypeError(f"{name} must be a str, got {type(mode).__name__}")
    canonical = _ALIASES.get(mode, mode)
    if canonical not in PADDING_MODES:
        allowed = ", ".join([*PADDING_MODES, *_ALIASES])
        raise ValueError(f"{name} must be one of {allowed}; got {mode!r}")
    return canonical


def _as_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        if isinstance(value, Tensor) and value.numel() == 1 and not value.is_floating_point():
            return int(value.item())
        raise TypeError(f"padding must contain ints, got {value!r} ({type(value).__name__})")
    return int(value)


def parse_padding(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """Normalise torchvision's padding forms (``p``, ``(lr, tb)``, ``(left, top, right,
    bottom)``) to ``(left, top, right, bottom)``; negative values crop, as in torchvision.
    Raises ``TypeError`` for non-integers and ``ValueError`` for a sequence of another length
    or a value beyond ``INT32_MAX`` pixels.
    """
    if isinstance(padding, (int, torch.SymInt)) and not isinstance(padding, bool):
        values: list[int] = [int(padding)] * 4
    elif isinstance(padding, Sequence) and not isinstance(padding, _TEXT):
        ints = [_as_int(p) for p in padding]
        if len(ints) not in (1, 2, 4):
            raise ValueError(
                f"padding must be an int or a sequence of 1, 2 or 4 ints, got {len(ints)} values"
            )
        values = ints * 4 if len(ints) == 1 else ints * 2 if len(ints) == 2 else ints
    else:
        raise TypeError(
            f"padding must be an int or a sequence of ints, got {type(padding).__name__}"
        )
    if not all(-INT32_MAX <= v <= INT32_MAX for v in values):
        raise ValueError(
            f"padding must lie in [-{INT32_MAX}, {INT32_MAX}] pixels per side, got {tuple(values)}"
        )
    left, top, right, bottom = values
    return left, top, right, bottom
