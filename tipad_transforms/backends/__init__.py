"""Kernel or torch route: the one place an op decides, and warns once, where it runs.

Every op tries its Taichi launcher first; the runtime seam refuses (``RuntimeUnavailable``) the
cases it cannot serve (a forked worker, ``cuda:N > 0``, more elements than one launch can
index, ...). The op then computes the same result with its torch route, and the user hears about
it once per (operation, reason), at their own line of code.
"""

from __future__ import annotations

import contextlib
import numbers
import os
import time
from collections.abc import Callable, Iterator

import torch
from torch.utils.data import get_worker_info

from .. import _runtime
from .._compat.cpython import warn_at_caller

__all__ = [
    "WARMUP_ENV",
    "WARMUP_MAX_BYTES",
    "WORKER_WARMUP_ENV",
    "exact_route",
    "kernel_ran",
    "no_warmup",
    "set_warmup",
    "warn_once",
]

_warned: set[tuple[str, str]] = set()
# Frames of these packages sit between the user's call and the op's implementation, how many
# depends on the path taken (functional, transform, torch.compile, autograd, a DataLoader
# worker's loop).
_PACKAGE = os.path.dirname(os.path.dirname(__file__)) + os.sep  # tipad_transforms
_SITE = os.path.dirname(os.path.dirname(torch.__file__ or ""))
_INTERNAL = (
    _PACKAGE,
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


def warn_at_user(message: str, category: type[Warning]) -> None:
    """Warn at the user's line: the first frame (going out) outside tipad_transforms, torch,
    torchvision and the standard library's runners (the user's transform call,
    Dataset.__getitem__ or loop); where the stack holds none (a tipad transform run by a
    DataLoader worker), the first frame outside tipad_transforms."""
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


def kernel_ran(what: str, launch: Callable[[], object]) -> bool:
    """Run ``launch`` (a call of a ``_runtime.launch_*``); False if the runtime refused it.

    On False nothing was written and the caller computes the result on its torch route;
    ``what`` names the operation in the one warning (e.g. ``"padding"``, ``"computing wkv"``).
    """
    try:
        launch()
    except _runtime.RuntimeUnavailable as refused:
        warn_once(str(refused), what)
        return False
    return True


#: Seconds of torch route a process spends on exact ops before it starts Taichi.
WARMUP_ENV = "TIPAD_WARMUP"
#: The same for DataLoader workers; where set, it overrides ``TIPAD_WARMUP`` in them.
WORKER_WARMUP_ENV = "TIPAD_WORKER_WARMUP"
_DEFAULT_WARMUP_S = 0.5


class _Warmup:
    """The torch-route time this process has spent instead of starting Taichi (its rent, in
    the ski-rental sense), its budget (``set_warmup``'s, else read from the environment at the
    first use) and ``set_warmup``'s value. A forked child starts afresh (``_reset``)."""

    spent = 0.0
    budget: float | None = None
    chosen: float | None = None


def _reset() -> None:
    # A forked child (a DataLoader worker, say) is a process of its own: it has spent nothing,
    # and may be a worker where its parent was not, so its budget is read from the environment
    # at its first use (the parent's set_warmup is the parent's, as in a spawned child).
    _Warmup.spent = 0.0
    _Warmup.budget = None
    _Warmup.chosen = None


os.register_at_fork(after_in_child=_reset)


def set_warmup(seconds: float | None) -> None:
    """Set how many seconds of torch route this process spends on padding before it starts
    Taichi: ``0`` starts Taichi at the next padding call, ``None`` goes back to the environment
    (``TIPAD_WARMUP``; in DataLoader workers ``TIPAD_WORKER_WARMUP`` first) or the default, 0.5.

    Starting Taichi costs a process about a second (import, ``ti.init``, turning the kernel's
    cached LLVM IR into machine code: 0.9-1.3 s on a 2-core machine). So a CPU padding call in
    a process that has not started it takes the torch route, which gives the kernel's bits,
    until that route has cost the process this budget; the next call starts Taichi and
    launches from then on. Set 0 before timing the kernel or where a run should pay the start
    at once (a server's start-up); a budget spent already is spent. Per process: DataLoader
    workers (forked or spawned) read the environment, or call this in their
    ``worker_init_fn``.

    Raises:
        TypeError: ``seconds`` is not a real number or None.
        ValueError: ``seconds`` is negative or NaN.
    """
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
            raise TypeError(f"seconds must be a number or None, got {type(seconds).__name__}")
        if not seconds >= 0:  # NaN too
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        seconds = float(seconds)
    _Warmup.chosen = seconds
    _Warmup.budget = None


@contextlib.contextmanager
def no_warmup() -> Iterator[None]:
    """Within: padding starts Taichi at once (``set_warmup(0)``); after: the setting before.
    For code that times the kernel (``tipad demo``'s table)."""
    saved = _Warmup.chosen, _Warmup.budget
    _Warmup.chosen, _Warmup.budget = 0.0, None
    try:
        yield
    finally:
        _Warmup.chosen, _Warmup.budget = saved


def _from_environment() -> float:
    names = (WORKER_WARMUP_ENV, WARMUP_ENV) if get_worker_info() is not None else (WARMUP_ENV,)
    for name in names:
        raw = os.environ.get(name, "")
        if not raw.strip():
            continue
        try:
            seconds = float(raw)
            if seconds != seconds:  # NaN: every comparison false, the warm-up silently off
                raise ValueError(raw)
        except ValueError:
            warn_at_user(
                f"tipad_transforms: {name}={raw!r} is not a number of seconds; "
                f"using {_DEFAULT_WARMUP_S}",
                RuntimeWarning,
            )
            return _DEFAULT_WARMUP_S
        return max(seconds, 0.0)
    return _DEFAULT_WARMUP_S


def _warmup_budget() -> float:
    if _Warmup.budget is None:
        chosen = _Warmup.chosen
        _Warmup.budget = _from_environment() if chosen is None else chosen
    return _Warmup.budget


#: Outputs larger than this launch at once: one torch-route call on them could cost more than
#: the whole budget (about 0.1 s for 64 MiB here) and needs a second canvas.
WARMUP_MAX_BYTES = 1 << 26


def _warming_up(out: torch.Tensor) -> bool:
    """Whether an exact op writing ``out`` should take the torch route to spare this process
    Taichi's start-up: a CPU output of at most ``WARMUP_MAX_BYTES``, in a process where Taichi
    does not run yet (neither ours nor the user's), while its torch-route time is under its
    budget, and where the runtime would serve the launch (a refused one keeps its warning)."""
    return (
        out.device.type == "cpu"
        and not _runtime.running()
        and _Warmup.spent < _warmup_budget()
        and out.numel() * out.element_size() <= WARMUP_MAX_BYTES
        and _runtime.refusal(out.device) is None
    )


def exact_route(
    what: str, out: torch.Tensor, launch: Callable[[], object], route: Callable[[], object]
) -> None:
    """Run ``launch`` or, when the runtime refuses it, ``route`` (the torch route), both of
    which write ``out``; for ops whose torch route gives the kernel's bits (padding's forward:
    data movement only).

    Starting Taichi costs a new process its import, ``ti.init`` and the per-process compile of
    the kernel (0.9-1.3 s on a 2-core machine): more than a notebook's few calls or a short-lived
    DataLoader worker (every epoch's, unless ``persistent_workers=True``) spends padding on the
    torch route. So a process takes the torch route until that route has cost it its warm-up
    budget (``set_warmup``; default 0.5 s), then starts Taichi and launches from then on: it
    never pays more than about twice what the better choice in hindsight would have (the
    ski-rental bound). Same bits either way.
    """
    if _warming_up(out):
        start = time.perf_counter()
        route()
        _Warmup.spent += time.perf_counter() - start
    elif not kernel_ran(what, launch):
        route()
