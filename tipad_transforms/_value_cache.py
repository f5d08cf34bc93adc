"""What the package caches across calls: values derived from a tensor, reused while it holds
the same bits (``ValueCache``), and the read-only constants of a call's signature in one
package-wide cache (``constant``). Nothing is read from or stored in a cache while
``_tracing.tracing()``, and a cached tensor is never an inference tensor (``normal_tensors``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor

from ._checks import unreadable
from ._tracing import PLAIN as _PLAIN
from ._tracing import tracing

V = TypeVar("V")


def normal_tensors() -> contextlib.AbstractContextManager[Any]:
    """A context in which new tensors are normal ones even in inference mode: a cached value
    may be saved for a later call's backward, and autograd refuses inference tensors. Nothing
    while compiling (Dynamo cannot trace the mode switch; a compiled graph keeps no cache)."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return torch.inference_mode(False)


def _bytes(t: Tensor) -> Tensor:
    """``t``'s values as flat bytes (of a contiguous copy when ``t`` is not contiguous):
    compared as bits, so -0.0 and 0.0 differ and a NaN equals itself."""
    c = t if t.is_contiguous() else t.contiguous()
    return c.reshape(-1).view(torch.uint8)


def _same(a: Tensor, b: Tensor) -> bool:
    """Whether byte tensors ``a`` and ``b`` are equal: as 8-byte words where both addresses
    allow (``torch.equal`` costs about the same per element whatever its size)."""
    if a.numel() != b.numel():
        return False
    n = a.numel() - a.numel() % 8
    if n and a.data_ptr() % 8 == 0 and b.data_ptr() % 8 == 0:
        return torch.equal(a[:n].view(torch.int64), b[:n].view(torch.int64)) and torch.equal(
            a[n:], b[n:]
        )
    return torch.equal(a, b)


class KeyedCache(Generic[V]):
    """Values made once per key (made under ``normal_tensors``), read and never written.

    At most ``size`` of them: when full it starts over, so the keys in use come back at once.
    While ``tracing()``, values are made afresh and not cached. Thread safe as dict operations
    are (two threads may both make a value; either is kept).
    """

    __slots__ = ("_entries", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: dict[Hashable, V] = {}

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value for ``key``, made by ``make()`` the first time (or after a start-over)."""
        if tracing():
            return make()
        value = self._entries.get(key)
        if value is None:
            with normal_tensors():
                value = make()
            if len(self._entries) >= self.size:
                self._entries.clear()
            self._entries[key] = value
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


class ValueCache(Generic[V]):
    """The ``size`` most recent tensors' derived values (first in, first out).

    Keyed by the tensor's memory (storage address, offset, shape, strides, dtype, device) and
    the derivation's parameters; each entry keeps a snapshot of the tensor's bytes and serves
    only a tensor with the same bytes (about a copy's cost: a version counter would be cheaper
    but misses writes through ``.data`` and in inference mode). Only plain, readable CPU/CUDA
    tensors outside ``tracing()`` are looked up; others get a value derived afresh. Thread safe
    as dict operations are (two threads may both derive a value).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        # key -> [snapshot of the tensor's bytes, value]
        self._entries: dict[tuple[Hashable, ...], list[Any]] = {}

    def get(self, t: Tensor, extra: Hashable, make: Callable[[], V]) -> V:
        """``make()`` for ``t`` as it is now (``extra``: what else the value depends on)."""
        if (
            type(t) not in _PLAIN
            or not (t.is_cpu or t.is_cuda)
            or unreadable(t) is not None  # a quantized tensor's bytes view crashes the process
            or tracing()
        ):
            return make()
        # A value made in inference mode is an inference tensor, which autograd outside the
        # mode refuses: the mode is part of the key.
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(),
               t.dtype, t.device, torch.is_inference_mode_enabled(), extra)  # fmt: skip
        entries = self._entries
        entry = entries.get(key)
        data = _bytes(t)
        if entry is not None and not _same(entry[0], data):
            entry = None  # other values at this address: another tensor, or written since
        if entry is None:
            if key not in entries and len(entries) >= self.size:
                try:  # another thread may evict the same entry, or insert while we look
                    entries.pop(next(iter(entries)), None)
                except (RuntimeError, StopIteration):
                    pass
            entry = entries[key] = [data.clone(), make()]
        value: V = entry[1]
        return value

    def values(self) -> list[V]:
        """The values held now (a list of its own: other threads may change the cache)."""
        return [entry[1] for entry in list(self._entries.values())]

    def clear(self) -> None:
        self._entries.clear()


# The constants of the signatures in use: a few per padding call, one per RWKV shape.
_CONSTANTS: KeyedCache[Any] = KeyedCache(256)


def constant(key: Hashable, make: Callable[[], V]) -> V:
    """The read-only constant ``make()`` for ``key`` (a tuple led by a name of what it is),
    made once (``KeyedCache``'s rules)."""
    value: V = _CONSTANTS.get(key, make)
    return value
