"""Whether a call runs eagerly or under a tracer: the one test (``tracing``) that decides both
whether a cache may be used and whether an op may skip the dispatcher (``eager``), and a way to
make a constant no tracer sees (``untraced``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from ._compat.torch import functorch_active, jit_tracing, mode_depth

__all__ = ["PLAIN", "eager", "tracing", "untraced"]

V = TypeVar("V")

#: The tensor types an eager call may hand a kernel directly (no subclass: FakeTensor,
#: FunctionalTensor, a tv_tensor).
PLAIN = (Tensor, torch.nn.Parameter)


def tracing() -> bool:
    """Whether torch may be recording or transforming what runs now, rather than running it:
    then a tensor made now may be fake, functional or traced, so no cache stores it and no op
    skips the dispatcher.

    Checked in this order (the first is the only one Dynamo can trace; the others would break
    its graph), each in tens of nanoseconds, each state pinned by ``tests/test_tracing.py``:

    * ``torch.compiler.is_compiling()``: Dynamo, ``torch.export`` (strict and non-strict).
    * ``_compat.torch.jit_tracing()``: ``torch.jit.trace``.
    * ``_compat.torch.functorch_active()``: vmap, grad, jvp, functionalize.
    * ``_compat.torch.mode_depth()``: every torch dispatch or function mode (fake, proxy,
      functional, ``make_fx`` in every mode, pre-dispatch tracing, ``torch.device`` contexts,
      users' modes).
    """
    return bool(
        torch.compiler.is_compiling() or jit_tracing() or functorch_active() or mode_depth()
    )


def eager(*tensors: Tensor) -> bool:
    """Whether a call on ``tensors`` may run an op's implementation directly, skipping the
    ``torch.ops`` dispatch (its Python costs more than a small kernel): only where the
    dispatcher could do nothing but call the CPU/CUDA implementation, i.e. not ``tracing()``,
    plain (``PLAIN``) CPU or CUDA tensors (meta ones go to the fake implementation), and no
    autograd to record. The ops and their direct callers share one implementation, so both give
    the same bits.
    """
    if tracing():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if type(t) not in PLAIN or not (t.is_cpu or t.is_cuda) or (grad and t.requires_grad):
            return False
    return True


def untraced(make: Callable[[], V]) -> V:
    """``make()``, run where no tracer sees it: for values that are pure functions of Python
    arguments (a rendered brick tile), which a tracer should record as a constant, not as the
    ops (and the seeded ``torch.Generator``) that make them.

    Eagerly, and under Dynamo (which cannot trace a thread; ``brick_tile`` bakes such values in
    through ``torch.compiler.assume_constant_result``), this is ``make()``. Under any other
    tracer ``make`` runs on a helper thread, where torch's modes, the JIT tracer, functorch's
    transforms, grad mode and autocast (all thread local) do not apply. Its exceptions are
    raised here.
    """
    if not tracing() or torch.compiler.is_dynamo_compiling():
        return make()
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, make()))
        except BaseException as exc:  # re-raised on the caller's thread
            outcome.append((False, exc))

    helper = threading.Thread(target=run, name="tipad-untraced", daemon=True)
    helper.start()
    helper.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    result: V = value
    return result
