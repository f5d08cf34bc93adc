"""Taichi's private APIs, each behind a function with a safe default (see ``_compat``), and
the lean launcher, which is made of them.

Read of a Taichi module ``ti`` (upstream ``taichi`` or the ``taichi_forge`` fork, which shares
these): whether a runtime is initialised and on which arch, its default integer type, its CPU
threads, and which objects are kernels.

The lean launcher (``LeanKernel``): Taichi 1.7.4's public ``Kernel.__call__`` redoes on every
launch what depends only on the argument *types* (template key, compiled-kernel lookup,
``recursive_set_args``, ``compile_kernel``), which for a small image costs more than the
kernel. The first call of a signature goes through the public call and records the compiled
kernel, its code and each slot's setter; later calls build the launch context directly. It
relies on the internals of the versions in ``KNOWN`` (``Kernel.arguments``/``ensure_compiled``/
``compiled_kernels``, ``make_launch_context`` and its setters, the program's
``compile_kernel``/``launch_kernel``, the runtime's ``target_tape``/``fwd_mode_manager``;
``tests/backends/test_compat_taichi.py`` fails loudly when one moves). Any other Taichi, an
argument it does not know (``requires_grad``, non-contiguous), an autodiff tape, or
``TIPAD_LEAN_LAUNCH=0``: the public call. Callers hold the Taichi backend's lock.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from torch import Tensor

__all__ = [
    "CPU_MIN_CHUNK",
    "KNOWN",
    "LEAN_ENV",
    "MISSING",
    "Bound",
    "LeanKernel",
    "Steps",
    "cpu_threads",
    "default_ip",
    "is_kernel",
    "lean_supported",
    "runtime_arch",
]

#: The private names the Taichi in use lacks (``tests/backends/test_compat_taichi.py``
#: requires it to be empty).
MISSING: list[str] = []
#: The (module name, version) pairs whose internals the lean launcher was written for.
KNOWN = {("taichi", (1, 7, 4))}
#: ``TIPAD_LEAN_LAUNCH=0``: always the public call.
LEAN_ENV = "TIPAD_LEAN_LAUNCH"

# Argument kinds of a kernel slot.
_TEMPLATE, _ARRAY, _INT, _FLOAT = range(4)


def _missing(name: str) -> None:
    if name not in MISSING:
        MISSING.append(name)


def _impl(ti: Any) -> Any:
    impl = getattr(getattr(ti, "lang", None), "impl", None)
    if impl is None or not hasattr(impl, "get_runtime") or not hasattr(impl, "current_cfg"):
        _missing("ti.lang.impl.get_runtime/current_cfg")
        return None
    return impl


def runtime_arch(ti: Any) -> str | None:
    """``"cpu"``/``"cuda"`` (else Taichi's own name) of the runtime initialised in ``ti`` (by
    anyone), or None when none is (default: None, as for a module not initialised)."""
    impl = _impl(ti)
    if impl is None or getattr(impl.get_runtime(), "prog", None) is None:
        return None
    arch = impl.current_cfg().arch
    return "cuda" if arch == ti.cuda else ("cpu" if arch in (ti.x64, ti.arm64) else arch.name)


def default_ip(ti: Any) -> Any:
    """The default integer type of ``ti``'s initialised runtime (default: ``ti.i32``, what the
    kernels need)."""
    impl = _impl(ti)
    return ti.i32 if impl is None else impl.current_cfg().default_ip


#: Taichi's CPU range-for (1.7.4's and taichi_forge 0.7's ``make_cpu_multithreaded_range_for``
#: pass) gives each thread one contiguous run of at least this many iterations, whatever
#: ``ti.loop_config(block_dim=...)`` asks: a loop of at most this many runs on one thread.
#: ``tests/backends/test_compat_taichi.py`` reads it from the compiled IR.
CPU_MIN_CHUNK = 512


def cpu_threads(ti: Any) -> int:
    """The CPU threads of ``ti``'s initialised runtime (default: ``os.cpu_count()``, what
    Taichi starts with)."""
    impl = _impl(ti)
    threads = getattr(impl.current_cfg(), "cpu_max_num_threads", 0) if impl is not None else 0
    return threads if isinstance(threads, int) and threads > 0 else (os.cpu_count() or 1)


def is_kernel(value: Any) -> bool:
    """Whether ``value`` is a ``@ti.kernel`` (default: False: the lean launcher is not used)."""
    return bool(getattr(value, "_is_wrapped_kernel", False))


def lean_supported(ti: Any) -> bool:
    """Whether the lean path may be used with Taichi module ``ti`` in this process."""
    if os.environ.get(LEAN_ENV, "1") == "0":
        return False
    if (getattr(ti, "__name__", ""), tuple(getattr(ti, "__version__", ()))) not in KNOWN:
        return False
    # Its launches hand Taichi raw pointers that the device must read in place: a GPU arch
    # serving CPU tensors (the Vulkan test lane) copies them through the public call instead.
    return runtime_arch(ti) in (None, "cpu", "cuda")


class _Plan(NamedTuple):
    """One signature's compiled kernel and compiled code, and the program they belong to."""

    prog: Any
    kernel: Any
    code: Any


def _runnable(plan: _Plan, runtime: Any) -> bool:
    """Whether ``plan`` may launch now: the program that compiled it is still the live one (a
    re-initialised Taichi dropped its code), and no autodiff tape or forward-mode manager wants
    to see the launch."""
    return (
        plan.prog is runtime.prog
        and runtime.target_tape is None
        and runtime.fwd_mode_manager is None
    )


class LeanKernel:
    """``LeanKernel(ti, kernel)(*args)`` runs ``kernel(*args)`` as the public call does, with
    less per-call work for positional arguments: contiguous tensors without ``requires_grad``
    for ndarray slots, Python ints/floats for scalars, hashable template values."""

    def __init__(self, ti: Any, kernel: Any) -> None:
        self.public = kernel
        self._ti = ti
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        slots = self._slot_kinds(ti, kernel) if lean_supported(ti) else None
        self.enabled = slots is not None
        self._kinds = tuple(kind for kind, _ in slots or ())
        # Per slot: the element dims of a vector-typed ndarray (stripped from its shape).
        self._edims = tuple(edim for _, edim in slots or ())

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
        if len(args) != len(self._kinds):
            return None
        key: list[Any] = []
        for kind, edim, a in zip(self._kinds, self._edims, args, strict=True):
            if kind == _ARRAY:
                if type(a) is not Tensor or a.requires_grad or not a.is_contiguous():
                    return None
                key += (a.dtype, a.dim(), a.shape[-edim:]) if edim else (a.dtype, a.dim())
            elif kind == _TEMPLATE:
                key.append(a)
            elif type(a) not in ((int,) if kind == _INT else (int, float)):
                return None
        return tuple(key)

    def __call__(self, *args: Any) -> None:
        if not self.enabled:
            self.public(*args)
            return
        runtime = self._ti.lang.impl.get_runtime()
        key = self._key(args)
        plan = self._plans.get(key) if key is not None else None
        if plan is None or not _runnable(plan, runtime):
            self.public(*args)  # compiles this signature, which is then recorded
            if key is not None and runtime.target_tape is None:
                primal = self.public._primal
                prog = self._ti.lang.impl.get_runtime().prog
                kernel = primal.compiled_kernels[primal.ensure_compiled(*args)]
                code = prog.compile_kernel(prog.config(), prog.get_device_caps(), kernel)
                self._plans[key] = _Plan(prog, kernel, code)
            return
        ctx = plan.kernel.make_launch_context()
        slot = 0
        for kind, edim, a in zip(self._kinds, self._edims, args, strict=True):
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

    def bind(self, args: tuple[Any, ...]) -> Bound | None:
        """A launcher for later calls of ``args``' signature that takes raw arrays, or None
        (disabled, a scalar slot, an unknown argument). Call it after a call with ``args``."""
        key = self._key(args) if self.enabled else None
        plan = self._plans.get(key) if key is not None else None
        if plan is None or _INT in self._kinds or _FLOAT in self._kinds:
            return None
        return Bound(self, plan, sum(kind == _ARRAY for kind in self._kinds))


class Bound:
    """One signature of a ``LeanKernel`` without scalar slots, launched from raw arrays
    ``(data_ptr, nbytes, shape)`` (no tensor views, no signature extracted); the caller keeps
    the dtypes, ndims and template values it was bound with. On the CPU, where a launch ends
    before it returns, one launch context serves every launch and a slot is set only when its
    array changed (constants, parameters, reused outputs); on CUDA each gets a fresh context.
    """

    __slots__ = ("_ctx", "_kernel", "_last", "_plan")

    def __init__(self, kernel: LeanKernel, plan: _Plan, arrays: int) -> None:
        self._kernel = kernel
        self._plan = plan
        self._ctx: Any = None
        # The array each slot of the reused context holds (None: unset); None on CUDA.
        self._last: list[tuple[int, int, tuple[int, ...]] | None] | None = None
        ti = kernel._ti
        if ti.lang.impl.current_cfg().arch in (ti.x64, ti.arm64):
            self._ctx = plan.kernel.make_launch_context()
            self._last = [None] * arrays

    def launch(self, arrays: list[tuple[int, int, tuple[int, ...]]]) -> bool:
        """Launch with ``arrays`` (one ``(data_ptr, nbytes, shape)`` per ndarray slot, in
        order); False, launching nothing, when the lean path may not run now (disabled, Taichi
        re-initialised, an autodiff tape active): then use the public call."""
        kernel, plan = self._kernel, self._plan
        if not (kernel.enabled and _runnable(plan, kernel._ti.lang.impl.get_runtime())):
            return False
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
    """A ``Bound`` whose arrays' sizes its signature fixes (a one-token step): each call passes
    only data pointers. Made from a call that went through the kernel: its first ``n``
    arguments are the caller's tensors, the other ndarrays constants of the signature (held here
    so their addresses stay valid)."""

    __slots__ = ("bound", "held", "raw_held", "sizes")

    def __init__(self, bound: Bound, args: tuple[Any, ...], n: int) -> None:
        self.bound = bound
        # Every slot is 1-D, or (N, width) for a vector-typed one, whose shape counts vectors.
        self.sizes = [(t.numel() * t.element_size(), tuple(t.shape[:1])) for t in args[:n]]
        self.held = [a for a in args[n:] if isinstance(a, Tensor)]
        self.raw_held = [(t.data_ptr(), t.numel() * t.element_size(), tuple(t.shape[:1]))
                         for t in self.held]  # fmt: skip

    def launch(self, tensors: tuple[Tensor, ...]) -> bool:
        """Launch on ``tensors`` (contiguous, the signature's shapes and dtypes, in the order
        of the call it was made from); False when the lean path may not run now."""
        arrays = [(t.data_ptr(), *size) for t, size in zip(tensors, self.sizes, strict=True)]
        return self.bound.launch(arrays + self.raw_held)


class Steps(dict[tuple[Any, ...], Step]):
    """The ``Step``s of a family's recent signatures (at most ``size``, first in first out),
    by key; ``record`` keeps one after a call through the kernel."""

    size = 64

    def record(self, key: tuple[Any, ...], kernel: Any, args: tuple[Any, ...], n: int) -> None:
        """After ``kernel(*args)``: keep a ``Step`` for ``key`` when the kernel binds one."""
        bind = getattr(kernel, "bind", None)  # a LeanKernel; the public kernel has none
        bound = bind(args) if bind is not None else None
        if bound is None:
            return
        if len(self) >= self.size:
            self.pop(next(iter(self)))
        self[key] = Step(bound, args, n)
