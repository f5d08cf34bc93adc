"""Kernel or torch route: the one place an op decides, and warns once, where it runs.

Every op tries its Taichi launcher first; the runtime seam refuses (``RuntimeUnavailable``) the
cases it cannot serve (a forked worker, ``cuda:N > 0``, more elements than one launch can
index, ...). The op then computes the same result with its torch route, and the user hears about
it once per (operation, reason), at their own line of code.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from collections.abc import Callable

import torch

from .. import _runtime

__all__ = ["kernel_ran", "warn_once"]

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
