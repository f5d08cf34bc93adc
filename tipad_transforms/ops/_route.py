"""Kernel or torch route: the one place an op decides, and warns once, where it runs.

Every op tries its Taichi launcher first; the runtime seam refuses (``RuntimeUnavailable``) the
cases it cannot serve (a forked worker, ``cuda:N > 0``, more elements than one launch can
index, ...). The op then computes the same result with its torch route, and the user hears about
it once per (operation, reason), at their own line of code.
"""

from __future__ import annotations

import os
import sys
import time
import types
import warnings
from collections.abc import Callable

import torch
from torch.utils.data import get_worker_info

from .. import _runtime

__all__ = ["WORKER_WARMUP_ENV", "exact_route", "kernel_ran", "warn_once"]

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


def _user_stacklevel() -> int:
    """``stacklevel`` for a warning issued by our caller that points at the user's code.

    The first frame (going out) outside tipad_transforms, torch, torchvision and the standard
    library's runners: the user's transform call, Dataset.__getitem__ or loop. Where the stack
    holds none (a tipad transform run by a DataLoader worker), the first frame outside
    tipad_transforms.
    """
    frame: types.FrameType | None = sys._getframe(1)  # level 1: the caller of warnings.warn
    level = 1
    fallback = None
    while frame is not None:
        name = frame.f_code.co_filename
        if fallback is None and not name.startswith(_PACKAGE):
            fallback = level
        if not name.startswith(_INTERNAL + _RUNNERS):
            return level
        frame, level = frame.f_back, level + 1
    return fallback if fallback is not None else 1


def warn_once(reason: str, what: str) -> None:
    """Warn once per (``what``, ``reason``) that ``what`` takes the torch route."""
    if (what, reason) not in _warned:
        _warned.add((what, reason))
        warnings.warn(
            f"tipad_transforms: the Taichi kernel cannot run here ({reason}); {what} with the "
            "slower torch route instead",
            RuntimeWarning,
            stacklevel=_user_stacklevel(),
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


#: Seconds of torch route a DataLoader worker spends on exact ops before it starts Taichi.
WORKER_WARMUP_ENV = "TIPAD_WORKER_WARMUP"
_DEFAULT_WARMUP_S = 0.5


class _Warmup:
    """The torch-route time this process has spent instead of starting Taichi (a worker's
    rent, in the ski-rental sense), and its budget (read from the environment once)."""

    spent = 0.0
    budget: float | None = None


def _warmup_budget() -> float:
    if _Warmup.budget is None:
        raw = os.environ.get(WORKER_WARMUP_ENV, "")
        try:
            seconds = float(raw) if raw.strip() else _DEFAULT_WARMUP_S
            if seconds != seconds:  # NaN: every comparison false, the warm-up silently off
                raise ValueError(raw)
            _Warmup.budget = max(seconds, 0.0)
        except ValueError:
            warnings.warn(
                f"tipad_transforms: {WORKER_WARMUP_ENV}={raw!r} is not a number of seconds; "
                f"using {_DEFAULT_WARMUP_S}",
                RuntimeWarning,
                stacklevel=_user_stacklevel(),
            )
            _Warmup.budget = _DEFAULT_WARMUP_S
    return _Warmup.budget


def _warming_up(device: torch.device) -> bool:
    """Whether an exact op on ``device`` should take the torch route to spare this process
    Taichi's start-up: a CPU call in a DataLoader worker that has not started Taichi, while
    the worker's torch-route time is under its budget, and where the runtime would serve the
    launch (a refused one keeps its warning)."""
    return (
        device.type == "cpu"
        and get_worker_info() is not None
        and not _runtime.started()
        and _Warmup.spent < _warmup_budget()
        and _runtime.refusal(device) is None
    )


def exact_route(
    what: str, device: torch.device, launch: Callable[[], object], route: Callable[[], object]
) -> None:
    """Run ``launch`` or, when the runtime refuses it, ``route`` (the torch route); for ops
    whose torch route gives the kernel's bits (padding's forward: data movement only).

    Starting Taichi costs a new process its import, ``ti.init`` and the per-process compile of
    the kernel (0.5-1 s on a 2-core machine): more than a short-lived DataLoader worker (every
    epoch's, unless ``persistent_workers=True``) spends padding its samples on the torch route.
    So a worker takes the torch route until that route has cost it ``TIPAD_WORKER_WARMUP``
    seconds (default 0.5; 0 starts Taichi on the first call), then starts Taichi and launches
    from then on: it never pays more than about twice what the better choice in hindsight
    would have (the ski-rental bound). Same bits either way; other processes launch at once.
    """
    if _warming_up(device):
        start = time.perf_counter()
        route()
        _Warmup.spent += time.perf_counter() - start
    elif not kernel_ran(what, launch):
        route()


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def eager(*tensors: torch.Tensor) -> bool:
    """Whether a call on ``tensors`` may run an op's implementation directly, skipping the
    ``torch.ops`` dispatch (its Python costs more than a small kernel).

    Only where the dispatcher could do nothing but call the op's CPU/CUDA implementation: not
    compiling or tracing, no functorch transform (vmap, grad, functionalize), no torch dispatch
    or torch function mode (FakeTensorMode, make_fx, a user's mode), plain CPU or CUDA tensors
    (``Tensor`` or ``Parameter``; no subclass such as FakeTensor, FunctionalTensor or a
    tv_tensor; no meta tensor) and no autograd to record (grad mode off, or no tensor requires
    grad). The ops and their direct callers share one implementation, so both give the same
    bits; everything else goes through ``torch.ops``.
    """
    if (
        torch.compiler.is_compiling()
        or torch._C._are_functorch_transforms_active()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._len_torch_function_stack()
    ):
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if (
            type(t) not in _PLAIN
            or not (t.is_cpu or t.is_cuda)  # meta tensors go to the fake implementation
            or (grad and t.requires_grad)
        ):
            return False
    return True
