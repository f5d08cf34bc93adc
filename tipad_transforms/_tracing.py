"""Whether a call runs eagerly or under a tracer: the one test (``tracing``) that decides both
whether a cache may be used and whether an op may skip the dispatcher (``eager``), and a way to
make a constant no tracer sees (``untraced``).

Tracers: ``torch.compile`` (Dynamo), ``torch.export`` (strict and non-strict), ``torch.jit.trace``,
functorch transforms, and every torch dispatch or function mode (fake, proxy, functional,
pre-dispatch, ``torch.device`` contexts, users' modes). The private APIs this needs are read in
``_compat.torch``.
"""

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
    """Whether torch may be recording or transforming what runs now, rather than running it.

    True under ``torch.compile`` and ``torch.export.export`` (strict and non-strict: torch sets
    ``torch.compiler.is_compiling()`` for both), ``torch.jit.trace``, a functorch transform
    (``vmap``, ``grad``, ``functionalize``), and any torch dispatch or torch function mode
    (``FakeTensorMode``, ``make_fx`` in every tracing mode, pre-dispatch tracing, a
    ``FunctionalTensorMode``, a ``torch.device`` context, a user's mode). Under any of these a
    tensor made now may be a fake, functional or traced one, or a value the tracer records: no
    cache stores it, and no op skips the dispatcher.

    What it relies on (checked in this order, the first one also being the only call Dynamo
    can trace; the others would break its graph):

    * ``torch.compiler.is_compiling()`` (public): Dynamo, ``torch.export`` (both modes).
    * ``_compat.torch.jit_tracing()`` (private API behind it): the ``torch.jit.trace`` tracer.
    * ``_compat.torch.functorch_active()``: vmap, grad, jvp, functionalize.
    * ``_compat.torch.mode_depth()``: fake, proxy, functional and users'
      ``TorchDispatchMode``s; ``TorchFunctionMode``s, pre-dispatch tracing (``torch.export``,
      ``make_fx(pre_dispatch=True)``) and device contexts.

    Each costs tens of nanoseconds; ``tests/test_tracing.py`` checks every state above.
    """
    return bool(
        torch.compiler.is_compiling() or jit_tracing() or functorch_active() or mode_depth()
    )


def eager(*tensors: Tensor) -> bool:
    """Whether a call on ``tensors`` may run an op's implementation directly, skipping the
    ``torch.ops`` dispatch (its Python costs more than a small kernel).

    The one check of this: only where the dispatcher could do nothing but call the op's
    CPU/CUDA implementation. Not while ``tracing()`` (``torch.compile``,
    ``torch.export``, ``torch.jit.trace``, functorch transforms, any torch dispatch or torch
    function mode: its docstring lists what it relies on), plain CPU or CUDA tensors (``Tensor``
    or ``Parameter``; no subclass such as FakeTensor, FunctionalTensor or a tv_tensor; no meta
    tensor) and no autograd to record (grad mode off, or no tensor requires grad). The ops and
    their direct callers share one implementation, so both give the same bits; everything else
    goes through ``torch.ops``, where a tracer records the op.
    """
    if tracing():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if (
            type(t) not in PLAIN
            or not (t.is_cpu or t.is_cuda)  # meta tensors go to the fake implementation
            or (grad and t.requires_grad)
        ):
            return False
    return True


def untraced(make: Callable[[], V]) -> V:
    """``make()``, run where no tracer sees it: for values that are pure functions of Python
    arguments (a rendered brick tile), which a tracer should record as a constant, not as the
    ops (and the seeded ``torch.Generator``) that make them.

    Eagerly (not ``tracing()``), and in code Dynamo traces (which cannot trace a thread; it
    bakes such values in through ``torch.compiler.assume_constant_result``, as ``brick_tile``
    does), this is ``make()``. Under any other tracer it runs ``make`` on a helper thread and
    waits for it: torch's dispatch and function modes (fake, proxy, functional), the
    ``torch.jit.trace`` tracer, functorch's transforms, grad mode and autocast are all thread
    local, so there it makes plain tensors, as in eager mode (public APIs only). Its exceptions
    are raised here.
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
