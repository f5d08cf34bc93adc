"""The warm-up: an exact operation prefers the torch backend until this process's budget is
spent (``set_warmup``). It never pays more than about twice what the better choice in hindsight
would have (the ski-rental bound)."""

from __future__ import annotations

import contextlib
import numbers
import os
from collections.abc import Iterator

from torch import Tensor
from torch.utils.data import get_worker_info

from .taichi import TAICHI

__all__ = [
    "MAX_BYTES",
    "WARMUP_ENV",
    "WORKER_WARMUP_ENV",
    "budget",
    "no_warmup",
    "prefers_torch",
    "set_warmup",
    "spend",
]

#: Seconds of torch route a process spends on exact ops before it starts Taichi.
WARMUP_ENV = "TIPAD_WARMUP"
#: The same for DataLoader workers; where set, it overrides ``TIPAD_WARMUP`` in them.
WORKER_WARMUP_ENV = "TIPAD_WORKER_WARMUP"
_DEFAULT_S = 0.5
#: Outputs larger than this launch at once: one torch-route call on them could cost more than
#: the whole budget (where no copy form applies, its index maps take temporaries as large).
MAX_BYTES = 1 << 26


class _State:
    """The torch-route time this process has spent instead of starting Taichi (its rent),
    its budget (resolved at the first use) and ``set_warmup``'s value."""

    spent = 0.0
    budget: float | None = None
    chosen: float | None = None


def _reset() -> None:
    # A forked child (a DataLoader worker) is a process of its own: it has spent nothing, and
    # may be a worker where its parent was not, so it reads the environment at its first use.
    _State.spent, _State.budget, _State.chosen = 0.0, None, None


os.register_at_fork(after_in_child=_reset)


def set_warmup(seconds: float | None) -> None:
    """Set how many seconds of torch route this process spends on padding before it starts
    Taichi: ``0`` starts Taichi at the next padding call, ``None`` goes back to the environment
    (``TIPAD_WARMUP``; in DataLoader workers ``TIPAD_WORKER_WARMUP`` first) or the default, 0.5.

    Starting Taichi costs a process about a second (import, ``ti.init``, the kernel's compile):
    more than a notebook's few calls or a short-lived DataLoader worker spend padding. So a CPU
    padding call in a process that has not started it takes the torch route, which gives the
    kernel's bits, until that route has cost the process this budget; the next call starts
    Taichi. Set 0 before timing the kernel or where a run should pay the start at once; a
    budget spent already is spent. Per process: DataLoader workers (forked or spawned) read the
    environment, or call this in their ``worker_init_fn``.

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
    _State.chosen, _State.budget = seconds, None


@contextlib.contextmanager
def no_warmup() -> Iterator[None]:
    """Within: padding starts Taichi at once (``set_warmup(0)``); after: the setting before.
    For code that times the kernel (``tipad demo``'s table)."""
    saved = _State.chosen, _State.budget
    _State.chosen, _State.budget = 0.0, None
    try:
        yield
    finally:
        _State.chosen, _State.budget = saved


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
            from . import warn_at_user

            warn_at_user(
                f"tipad_transforms: {name}={raw!r} is not a number of seconds; using {_DEFAULT_S}",
                RuntimeWarning,
            )
            return _DEFAULT_S
        return max(seconds, 0.0)
    return _DEFAULT_S


def budget() -> float:
    """This process's budget in seconds (resolved once: ``set_warmup``, else the environment)."""
    if _State.budget is None:
        _State.budget = _from_environment() if _State.chosen is None else _State.chosen
    return _State.budget


def spend(seconds: float) -> None:
    """Count ``seconds`` of torch route against the budget."""
    _State.spent += seconds


def prefers_torch(out: Tensor) -> bool:
    """Whether an exact operation writing ``out`` should run on the torch backend: a CPU output
    of at most ``MAX_BYTES``, Taichi not running (ours or the user's), the budget not spent, and
    Taichi would serve the launch (a refused one keeps its warning)."""
    return (
        not TAICHI.running()
        and out.device.type == "cpu"
        and _State.spent < budget()
        and out.numel() * out.element_size() <= MAX_BYTES
        and TAICHI.refusal(out.device) is None
    )
