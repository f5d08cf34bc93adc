"""A lean launcher for our Taichi kernels: the per-call work that never changes, done once.

Taichi 1.7.4's public call (``Kernel.__call__``) redoes on every launch what only depends on
the argument *types*: it extracts a template key from every argument (``extract_arg``: dtype,
ndim, grad), looks the compiled kernel up, walks ``recursive_set_args`` through isinstance
chains per argument, asks the program for the compiled code (``compile_kernel``: a cache
lookup) and only then launches. For a small image that Python costs more than the kernel.

``LeanKernel`` wraps one of our kernels. The first call of a signature (the template values
and each tensor's dtype and ndim) goes through the public call (which compiles), and records
the compiled kernel, its compiled code and, per argument slot, which launch-context setter
to use. Later calls of that signature build the launch context directly and launch.

This relies on internals of one Taichi version (``KNOWN``), checked by
``tests/test_lean_launch.py``: ``Kernel.arguments``/``template_slot_locations``/
``ensure_compiled``/``compiled_kernels``/``return_type``/``has_print``, the C++ kernel's
``make_launch_context``, the launch context's ``set_arg_external_array_with_shape``/
``set_arg_int``/``set_arg_float``, and the program's ``compile_kernel``/``launch_kernel``.
Any other Taichi (another version, the ``taichi_forge`` fork), a kernel those attributes do not
describe, an argument it does not know (a tensor with ``requires_grad``, a non-contiguous one,
a value of an unexpected type), a user's ``ti.ad.Tape`` or forward-mode manager, or
``TIPAD_LEAN_LAUNCH=0`` in the environment: the public call, always correct.

Callers hold the runtime lock (``_runtime.session``), as for the public call.
"""

# No `from __future__ import annotations`: nothing here is a Taichi kernel, but keep the
# convention of this package.
import os
from typing import Any

import torch

__all__ = ["KNOWN", "Bound", "LeanKernel", "Step", "Steps", "lean_supported"]

#: The (module name, version) pairs whose internals the lean path was written and tested for.
KNOWN = {("taichi", (1, 7, 4))}

# Argument kinds of a kernel slot.
_TEMPLATE, _ARRAY, _INT, _FLOAT = range(4)


def lean_supported(ti: Any) -> bool:
    """Whether the lean path may be used with Taichi module ``ti`` in this process."""
    if os.environ.get("TIPAD_LEAN_LAUNCH", "1") == "0":
        return False
    version = tuple(getattr(ti, "__version__", ()))
    return (getattr(ti, "__name__", ""), version) in KNOWN


class _Plan:
    """One signature's compiled kernel, compiled code and argument setters."""

    __slots__ = ("code", "kernel", "prog")

    def __init__(self, prog: Any, kernel: Any, code: Any) -> None:
        self.prog = prog
        self.kernel = kernel
        self.code = code


def _runnable(plan: _Plan, runtime: Any) -> bool:
    """Whether ``plan`` may launch in Taichi's ``runtime`` now: the program that compiled it is
    still the live one (a re-initialised Taichi dropped its code), and no autodiff tape or
    forward-mode manager wants to see the launch."""
    return (
        plan.prog is runtime.prog
        and runtime.target_tape is None
        and runtime.fwd_mode_manager is None
    )


class LeanKernel:
    """Call a Taichi kernel (``@ti.kernel``) as the public call does, with less per-call work.

    ``LeanKernel(ti, kernel)(*args)`` runs ``kernel(*args)``: positional arguments only, torch
    tensors (contiguous, ``requires_grad=False``, on the runtime's device) for ndarray slots,
    Python ints/floats for scalar slots, hashable values for template slots.
    """

    def __init__(self, ti: Any, kernel: Any) -> None:
        self.public = kernel
        self._ti = ti
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._kinds: tuple[int, ...] | None = None
        # Per slot: the element dims of a vector-typed ndarray (stripped from its shape).
        self._edims: tuple[int, ...] = ()
        self.enabled = lean_supported(ti)
        if self.enabled:
            slots = self._slot_kinds(ti, kernel)
            self.enabled = slots is not None
            if slots is not None:
                self._kinds = tuple(kind for kind, _ in slots)
                self._edims = tuple(edim for _, edim in slots)

    @staticmethod
    def _slot_kinds(ti: Any, kernel: Any) -> list[tuple[int, int]] | None:
        """Each argument's kind and element dims, or None when the kernel has a slot the lean
        path cannot set."""
        primal = getattr(kernel, "_primal", None)
        if primal is None or primal.return_type or getattr(primal, "has_print", True):
            return None
        from taichi.lang.enums import Layout
        from taichi.lang.matrix import VectorType
        from taichi.lang.util import cook_dtype
        from taichi.types import ndarray_type, primitive_types
        from taichi.types.utils import is_signed

        kinds: list[tuple[int, int]] = []
        for arg in primal.arguments:
            anno = arg.annotation
            if isinstance(anno, ti.template):
                kinds.append((_TEMPLATE, 0))
            elif isinstance(anno, ndarray_type.NdarrayType) and (
                anno.dtype is None or id(anno.dtype) in primitive_types.type_ids
            ):
                kinds.append((_ARRAY, 0))
            elif (
                isinstance(anno, ndarray_type.NdarrayType)
                and isinstance(anno.dtype, VectorType)
                and anno.layout == Layout.AOS
            ):
                kinds.append((_ARRAY, 1))  # a vector per element, in the last dim
            elif id(anno) in primitive_types.integer_type_ids and is_signed(cook_dtype(anno)):
                kinds.append((_INT, 0))
            elif id(anno) in primitive_types.real_type_ids:
                kinds.append((_FLOAT, 0))
            else:
                return None
        return kinds

    def _key(self, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The signature of ``args``, or None when the lean path must not take them."""
        kinds = self._kinds
        assert kinds is not None
        if len(args) != len(kinds):
            return None
        key: list[Any] = []
        for kind, edim, a in zip(kinds, self._edims, args, strict=True):
            if kind == _ARRAY:
                if type(a) is not torch.Tensor or a.requires_grad or not a.is_contiguous():
                    return None
                key.append(a.dtype)
                key.append(a.dim())
                if edim:
                    key.append(a.shape[-edim:])
            elif kind == _TEMPLATE:
                key.append(a)
            elif kind == _INT:
                if type(a) is not int:
                    return None
            elif type(a) not in (int, float):
                return None
        return tuple(key)

    def _plan(self, args: tuple[Any, ...]) -> _Plan:
        """Compile (the public call already did) and record this signature's launch plan."""
        primal = self.public._primal
        impl = self._ti.lang.impl
        prog = impl.get_runtime().prog
        key = primal.ensure_compiled(*args)
        kernel = primal.compiled_kernels[key]
        code = prog.compile_kernel(prog.config(), prog.get_device_caps(), kernel)
        return _Plan(prog, kernel, code)

    def __call__(self, *args: Any) -> None:
        if not self.enabled:
            self.public(*args)
            return
        runtime = self._ti.lang.impl.get_runtime()
        key = self._key(args)
        plan = self._plans.get(key) if key is not None else None
        if plan is None or not _runnable(plan, runtime):
            self.public(*args)
            if key is not None and runtime.target_tape is None:
                self._plans[key] = self._plan(args)
            return
        ctx = plan.kernel.make_launch_context()
        slot = 0
        kinds = self._kinds
        assert kinds is not None
        for kind, edim, a in zip(kinds, self._edims, args, strict=True):
            if kind == _TEMPLATE:
                continue
            if kind == _ARRAY:
                shape = a.shape[:-1] if edim else a.shape
                ctx.set_arg_external_array_with_shape(
                    (slot,), a.data_ptr(), a.element_size() * a.numel(), shape, 0
                )
            elif kind == _INT:
                ctx.set_arg_int((slot,), a)
            else:
                ctx.set_arg_float((slot,), float(a))
            slot += 1
        plan.prog.launch_kernel(plan.code, ctx)

    def bind(self, args: tuple[Any, ...]) -> "Bound | None":
        """A launcher for later calls of ``args``' signature that takes raw arrays, or None.

        Call it after a call with ``args`` (which compiled and recorded the plan); None when the
        lean path does not take them (disabled, a scalar slot, an unknown argument).
        """
        if not self.enabled:
            return None
        key = self._key(args)
        plan = self._plans.get(key) if key is not None else None
        kinds = self._kinds
        if plan is None or kinds is None or _INT in kinds or _FLOAT in kinds:
            return None
        return Bound(self, plan, sum(kind == _ARRAY for kind in kinds))


class Bound:
    """One signature of a ``LeanKernel`` which has no scalar slots: ``launch`` sets each
    ndarray slot from ``(data_ptr, nbytes, shape)`` (the shape in elements of the slot's type:
    a vector-typed slot's without its vector dims) and launches,
    so the caller needs no tensor views of the right dtype on every call (each costs a torch
    call), and no signature is extracted. The caller keeps the arrays' dtypes, ndims and
    template values those of the ``args`` it was bound with (its cache key says so).

    On the CPU, where a launch runs to its end before it returns, one launch context serves
    every launch and a slot is set only when its array differs from the last launch's (a
    kernel's constants, a model's parameters, and outputs the allocator hands out again at the
    same address): each set costs about 1.5 us. On CUDA every launch gets a fresh context.
    """

    __slots__ = ("_arrays", "_ctx", "_kernel", "_last", "_plan")

    def __init__(self, kernel: LeanKernel, plan: _Plan, arrays: int) -> None:
        self._kernel = kernel
        self._plan = plan
        self._arrays = arrays
        self._ctx: Any = None
        # The array each slot of the reused context holds (None: unset); stays None on CUDA.
        self._last: list[tuple[int, int, tuple[int, ...]] | None] | None = None
        ti = kernel._ti
        if ti.lang.impl.current_cfg().arch in (ti.x64, ti.arm64):
            self._ctx = plan.kernel.make_launch_context()
            self._last = [None] * arrays

    def launch(self, arrays: list[tuple[int, int, tuple[int, ...]]]) -> bool:
        """Launch with ``arrays`` (one ``(data_ptr, nbytes, shape)`` per ndarray slot, in
        order); False, launching nothing, when the lean path may not run now (disabled, Taichi
        re-initialised, an autodiff tape or forward-mode manager active): use the public call.
        """
        kernel, plan = self._kernel, self._plan
        if not (kernel.enabled and _runnable(plan, kernel._ti.lang.impl.get_runtime())):
            return False
        assert len(arrays) == self._arrays
        last = self._last
        if last is None:
            ctx = plan.kernel.make_launch_context()
            for slot, (ptr, nbytes, shape) in enumerate(arrays):
                ctx.set_arg_external_array_with_shape((slot,), ptr, nbytes, shape, 0)
        else:
            ctx = self._ctx
            for slot, array in enumerate(arrays):
                if array != last[slot]:
                    last[slot] = None  # unknown until the set succeeds
                    ctx.set_arg_external_array_with_shape((slot,), *array, 0)
                    last[slot] = array
        plan.prog.launch_kernel(plan.code, ctx)
        return True


class Step:
    """A ``Bound`` launcher whose arrays' sizes its signature fixes: a launcher keyed by every
    tensor's shape (a one-token step) passes only data pointers per call.

    Made from the arguments of a call that went through the kernel: the first ``n`` are the
    caller's tensors (as the slots take them: flat, or packed into vectors), the other ndarray
    arguments are constants of the signature (``meta``), held here so their addresses stay
    valid.
    """

    __slots__ = ("bound", "held", "raw_held", "sizes")

    def __init__(self, bound: Bound, args: tuple[Any, ...], n: int) -> None:
        self.bound = bound
        # Every slot is 1-D, or (N, width) for a vector-typed one, whose shape counts vectors.
        self.sizes = [(t.numel() * t.element_size(), tuple(t.shape[:1])) for t in args[:n]]
        self.held = [a for a in args[n:] if isinstance(a, torch.Tensor)]
        self.raw_held = [(t.data_ptr(), t.numel() * t.element_size(), tuple(t.shape[:1]))
                         for t in self.held]  # fmt: skip

    def launch(self, tensors: tuple[torch.Tensor, ...]) -> bool:
        """Launch on ``tensors`` (contiguous, the signature's shapes and dtypes, in the order
        of the call it was made from); False when the lean path may not run now."""
        arrays = [(t.data_ptr(), *size) for t, size in zip(tensors, self.sizes, strict=True)]
        return self.bound.launch(arrays + self.raw_held)


class Steps:
    """The ``Step`` launchers of a family's recent signatures (``size``, first in first out).

    ``launch(key, tensors)`` runs the one recorded for ``key``, or returns False: then the
    caller launches through the kernel and calls ``record``. Callers hold the runtime lock."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._steps: dict[tuple[Any, ...], Step] = {}

    def launch(self, key: tuple[Any, ...], tensors: tuple[torch.Tensor, ...]) -> bool:
        step = self._steps.get(key)
        return step is not None and step.launch(tensors)

    def record(self, key: tuple[Any, ...], kernel: Any, args: tuple[Any, ...], n: int) -> None:
        """After ``kernel(*args)``: keep a ``Step`` for ``key`` when the kernel binds one."""
        bind = getattr(kernel, "bind", None)  # a LeanKernel; the public kernel has none
        bound = bind(args) if bind is not None else None
        if bound is None:
            return
        if len(self._steps) >= self.size:
            self._steps.pop(next(iter(self._steps)))
        self._steps[key] = Step(bound, args, n)

    def keys(self) -> list[tuple[Any, ...]]:
        return list(self._steps)

    def clear(self) -> None:
        self._steps.clear()
