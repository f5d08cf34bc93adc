"""Where a kernel family's operation runs: the backends, the family registry, THE policy.

A **backend** (``TAICHI``: the Taichi kernels; ``TORCH``: each family's plain-torch
``reference.py``) implements every operation of a **family** (``ops/<family>/``, registered once
with ``family(...)``) as a function of the operation's name in its module. An ``Operation`` runs
by one rule:

1. the backends in order (``TAICHI``, then ``TORCH``); one that cannot serve the call raises
   ``Refused`` (a forked worker, ``cuda:1``, too many elements), having written nothing;
2. a refusal warns once per (operation, reason), at the user's line, and the next backend runs;
3. an exact operation (padding's forward: the torch route gives the kernel's bits) prefers
   ``TORCH`` while Taichi has not started and the warm-up budget is not spent (``warmup.py``).

Tests choose backends through ``use``, ``forbid`` and ``record``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

from .._compat.cpython import warn_at_caller

__all__ = [
    "TAICHI",
    "TORCH",
    "Backend",
    "Forbidden",
    "Operation",
    "Refused",
    "family",
    "forbid",
    "record",
    "set_backend",
    "set_warmup",
    "use",
    "warn_once",
]


class Refused(RuntimeError):
    """A backend cannot serve this call; the message says why (the warning's reason)."""


class Forbidden(RuntimeError):
    """A backend a test forbade (``forbid``) was about to run."""


class Backend:
    """A way to run the families' operations: ``name`` (``"taichi"``, ``"torch"``) and the
    file of a family folder holding its implementations (``ops/<family>/<module>.py``)."""

    name = ""
    module = ""

    def refusal(self, device: torch.device) -> str | None:
        """Why this backend cannot run on ``device`` in this process, or None (starts nothing;
        a launch may still raise ``Refused``, for its size)."""
        return None


# Frames of these packages sit between the user's call and an operation, how many depends on
# the path taken (functional, transform, torch.compile, autograd, a DataLoader worker's loop).
_SITE = os.path.dirname(os.path.dirname(torch.__file__ or ""))
_INTERNAL = (
    os.path.dirname(os.path.dirname(__file__)) + os.sep,  # tipad_transforms
    os.path.join(_SITE, "torch") + os.sep,  # torch.utils.data's worker loop and fetchers too
    os.path.join(_SITE, "torchvision") + os.sep,
)
# The standard library's runners of other code: a DataLoader worker's stack starts in
# multiprocessing's bootstrap, a thread's in threading, an executor's in concurrent.futures.
_STDLIB = os.path.dirname(os.__file__) + os.sep
_RUNNERS = (
    os.path.join(_STDLIB, "multiprocessing") + os.sep,
    os.path.join(_STDLIB, "concurrent") + os.sep,
    os.path.join(_STDLIB, "threading.py"),
)
_warned: set[tuple[str, str]] = set()


def warn_at_user(message: str, category: type[Warning]) -> None:
    """Warn at the user's line: the first frame (going out) outside tipad_transforms, torch,
    torchvision and the standard library's runners (the transform call, a Dataset's
    ``__getitem__``); where the stack holds none (a DataLoader worker), the first frame outside
    tipad_transforms."""
    warn_at_caller(message, category, _INTERNAL, _RUNNERS)


def warn_once(reason: str, what: str) -> None:
    """Warn once per (``what``, ``reason``) that ``what`` takes the torch route."""
    if (what, reason) not in _warned:
        _warned.add((what, reason))
        warn_at_user(
            f"tipad_transforms: the Taichi kernel cannot run here ({reason}); {what} with the "
            "slower torch route instead",
            RuntimeWarning,
        )


class Operation:
    """One operation of a family (``pad.forward``, ...): ``op(*args)`` runs it by this
    module's policy and returns the name of the backend that did (``family``'s arguments)."""

    __slots__ = ("_chain", "exact", "family", "name", "package", "what")

    def __init__(self, family: str, name: str, package: str, what: str, exact: int | None) -> None:
        self.family = family
        self.name = name
        self.package = package
        self.what = what
        self.exact = exact
        self._chain: tuple[tuple[Backend, ModuleType], ...] = ()

    def _resolve(self) -> tuple[tuple[Backend, ModuleType], ...]:
        """(backend, the family's module of it) in the order of use, imported at the first call
        (a process that only pads never imports the RWKV kernels)."""
        self._chain = tuple(
            (b, importlib.import_module(f"{self.package}.{b.module}")) for b in _order
        )
        return self._chain

    def __call__(self, *args: Any) -> str:
        chain = self._chain or self._resolve()
        start = 0.0
        if self.exact is not None and warmup.prefers_torch(args[self.exact]):
            chain = tuple(c for c in chain if c[0] is TORCH) or chain
            start = time.perf_counter()
        reasons = []
        for backend, module in chain:
            if backend.name in _forbidden:
                raise Forbidden(
                    f"the {backend.name} backend ran {self.family}.{self.name} where a test "
                    "forbade it (backends.forbid)"
                )
            try:
                getattr(module, self.name)(*args)
            except Refused as refused:
                reasons.append(f"{backend.name}: {refused}")
                warn_once(str(refused), self.what)
                continue
            if start:
                warmup.spend(time.perf_counter() - start)
            for log in _logs:
                log.append((self.family, self.name, backend.name))
            return backend.name
        raise Refused(f"no backend in use could run {self.what}: {'; '.join(reasons)}")


_operations: list[Operation] = []


def family(
    name: str,
    package: str,
    what: str,
    operations: tuple[str, ...],
    exact: dict[str, int] | None = None,
) -> Any:
    """Register the kernel family ``name`` (the folder ``package``) and its ``operations``
    (each backend's is the function of that name in ``<package>.<backend.module>``, read at
    each call, so a test may replace it). ``what`` names the family's work in the refusal
    warning (``"computing wkv7"``); ``exact`` maps the operations whose torch route gives the
    kernel's bits to the position of their output argument (the warm-up may serve them).
    """
    ops = {op: Operation(name, op, package, what, (exact or {}).get(op)) for op in operations}
    _operations.extend(ops.values())
    return SimpleNamespace(**ops)


# The policy's state: the backends in order of use, those a test forbade, a record of runs.
_order: tuple[Backend, ...] = ()
_forbidden: frozenset[str] = frozenset()
_logs: tuple[list[Any], ...] = ()


def _set_order(backends: tuple[Backend, ...]) -> None:
    global _order
    _order = backends
    for op in _operations:
        op._chain = ()


@contextlib.contextmanager
def use(*names: str) -> Iterator[None]:
    """Within: only the backends ``names`` (``"taichi"``, ``"torch"``), in that order, run
    the operations; a call none of them serves raises ``Refused``. A backend chosen here is
    not a fallback, so ``forbid`` does not stop it within."""
    global _forbidden
    known = {b.name: b for b in _BACKENDS}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"backends must be some of {sorted(known)}, got {names}")
    saved, saved_forbidden = _order, _forbidden
    _set_order(tuple(known[n] for n in names))
    _forbidden = saved_forbidden - set(names)
    try:
        yield
    finally:
        _set_order(saved)
        _forbidden = saved_forbidden


@contextlib.contextmanager
def forbid(*names: str) -> Iterator[None]:
    """Within: running one of the backends ``names`` raises ``Forbidden`` (tests that must
    not be served by the torch route: it gives the kernel's values, so results cannot tell),
    unless a ``use`` inside chose it."""
    global _forbidden
    saved = _forbidden
    _forbidden = saved | set(names)
    try:
        yield
    finally:
        _forbidden = saved


@contextlib.contextmanager
def record(into: list[Any] | None = None) -> Iterator[list[Any]]:
    """Within: every run is appended to the yielded list (``into``, else a new one) as
    ``(family, operation, backend)``, e.g. ``("pad", "forward", "taichi")``; records nest."""
    global _logs
    log = [] if into is None else into
    saved, _logs = _logs, (*_logs, log)
    try:
        yield log
    finally:
        _logs = saved


from . import warmup  # noqa: E402
from .taichi import TAICHI, set_backend  # noqa: E402
from .torch import TORCH  # noqa: E402
from .warmup import set_warmup  # noqa: E402

_BACKENDS = (TAICHI, TORCH)
_set_order(_BACKENDS)
