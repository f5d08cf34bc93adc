"""The Taichi backend: the one place that starts and holds Taichi (``TAICHI``).

Which Taichi: upstream ``taichi`` or the ``taichi_forge`` fork (which has wheels for CPython
3.14), decided once per process at its first use: ``set_backend(name)`` (exported as
``tipad_transforms.set_backend``), else ``TIPAD_TAICHI``, else a Taichi the process already
imported (one Taichi per process), else the installed one, upstream first. It is imported
quietly and initialised lazily (once per process, under a lock, on the arch of the first
tensor it sees); devices it cannot serve are refused; launches are ordered with torch's CUDA
streams; a fork is survived. The families' kernels live in ``ops/<family>/taichi.py`` and
enter ``TAICHI.session`` to launch.

Facts this is built on (taichi 1.7): ``ti.init`` resets the whole runtime, so it is called at
most once and never when the user already initialised Taichi; a process forked after
initialisation hangs on its first launch; CUDA work runs on device 0's primary context and the
legacy default stream; a CPU tensor given to a CUDA kernel (or the reverse) is silently copied;
any argument with ``requires_grad`` gets a ``.grad`` written; the first launch must come from
the thread that initialised.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import io
import os
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from .._compat import taichi as compat
from . import Backend, Refused

__all__ = [
    "ENV_VAR",
    "FORKSERVER_MAIN_ENV",
    "MAX_ELEMENTS",
    "MODULES",
    "TAICHI",
    "TEST_ARCH_ENV",
    "TaichiBackend",
    "advise_huge_pages",
    "serial_launch",
    "set_backend",
    "spread",
]

#: Import names of the Taichi modules the backend runs on, in the order of preference.
MODULES = ("taichi", "taichi_forge")
#: The environment variable that picks one (read at the first use, like ``set_backend``).
ENV_VAR = "TIPAD_TAICHI"
# pip's name for each, for the install hint and for the version without importing.
_DISTRIBUTIONS = {"taichi": "taichi", "taichi_forge": "taichi-forge"}
#: The environment variable through which ``data.worker_context`` hands a forkserver the main
#: module's path (``preload`` imports it there; CPython before gh-126631 never passes it).
FORKSERVER_MAIN_ENV = "TIPAD_FORKSERVER_MAIN"
#: Test-only: ``vulkan`` starts Taichi on Vulkan for CPU tensors, so the suite runs the GPU loop
#: orders through Taichi's GPU compiler on a machine without a GPU (``make test``'s Vulkan lane).
TEST_ARCH_ENV = "TIPAD_TEST_ARCH"
#: Taichi indexes ndarrays with 32-bit integers: a launch with a larger tensor is refused.
MAX_ELEMENTS = 2**31 - 1
#: Launches that move at most this many bytes run serially on the CPU (``serial_launch``).
SERIAL_BYTES = 1 << 19
# Code run by the import machinery carries these file names (frozen modules, no source file).
FROZEN_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def _normalize(name: str, origin: str) -> str | None:
    key = name.strip().lower().replace("-", "_")
    if key in ("", "auto"):
        return None
    if key not in MODULES:
        raise ValueError(
            f"{origin} must be one of {', '.join(map(repr, MODULES))} or 'auto', got {name!r}"
        )
    return key


def imported() -> list[ModuleType]:
    """The Taichi modules this process has imported (ours or the user's), in ``MODULES`` order."""
    return [m for m in map(sys.modules.get, MODULES) if m is not None]


class TaichiBackend(Backend):
    """Taichi and its state in this process.

    ``ti``: the Taichi module once imported; ``choice``: ``set_backend``'s; ``arch``: the
    device type (``"cpu"``/``"cuda"``) whose tensors the runtime we initialised serves, and
    ``pid`` the process that did (or, where the user initialised Taichi, the process it was
    found in before a fork); ``kernels``: each family's kernels, built at its first launch;
    ``gpu_order``: whether the families take their GPU loop order (one thread per element),
    set from the arch at initialisation, switched by tests to check that order on the CPU;
    ``serial_bytes``: ``serial_launch``'s limit; ``cpu_iterations``: the loop length that
    reaches every CPU thread (``spread``; 0 off the CPU arch), set at initialisation.
    """

    name = "taichi"
    module = "taichi"

    def __init__(self) -> None:
        self.ti: ModuleType | None = None
        self.choice: str | None = None
        self.arch: str | None = None
        self.pid: int | None = None
        self.kernels: dict[str, dict[str, Any]] = {}
        self.gpu_order: bool | None = None
        self.serial_bytes = SERIAL_BYTES
        self.cpu_iterations = 0
        self.lock = threading.RLock()
        self._load_lock = threading.Lock()
        os.register_at_fork(before=self._before_fork, after_in_child=self._after_fork)

    # -- which Taichi ---------------------------------------------------------------------------

    def choose(self, name: str | None) -> None:
        """``set_backend``: see there."""
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        key = None if name is None else _normalize(name, "name")
        with self._load_lock:
            if self.ti is not None and key is not None and key != self.ti.__name__:
                raise RuntimeError(
                    f"tipad_transforms already runs its kernels on {self.ti.__name__} in this "
                    f"process; choose {key} before the first kernel launch (or set {ENV_VAR})"
                )
            self.choice = key

    def chosen(self) -> str:
        """The import name of the Taichi that ``load`` imports (or imported); imports nothing.

        Raises:
            ValueError: ``TIPAD_TAICHI`` names no known module.
            ModuleNotFoundError: neither is installed.
        """
        if self.ti is not None:
            return self.ti.__name__
        if self.choice is not None:
            return self.choice
        explicit = _normalize(os.environ.get(ENV_VAR, ""), ENV_VAR)
        if explicit is not None:
            return explicit
        for module in imported():
            return module.__name__
        for name in MODULES:
            if importlib.util.find_spec(name) is not None:
                return name
        raise ModuleNotFoundError(
            "tipad_transforms needs Taichi: pip install taichi (CPython 3.10-3.13) or taichi-forge",
            name="taichi",
        )

    def describe(self) -> str:
        """``"<import name> <version>"`` of the chosen Taichi, e.g. ``"taichi 1.7.4"``, imports
        none; ``"no Taichi installed"``, or ``"<name> (not installed)"`` for a missing choice."""
        try:
            name = self.chosen()
        except (ModuleNotFoundError, ValueError) as exc:
            return f"no Taichi ({exc})" if isinstance(exc, ValueError) else "no Taichi installed"
        if self.ti is not None:
            return f"{name} {'.'.join(map(str, self.ti.__version__))}"
        try:
            return f"{name} {importlib.metadata.version(_DISTRIBUTIONS[name])}"
        except importlib.metadata.PackageNotFoundError:
            return f"{name} (not installed)"

    def version(self) -> str:
        """The Taichi module's own version, e.g. ``"1.7.4"`` (imports Taichi, starts nothing)."""
        return ".".join(map(str, self.load().__version__))

    def load(self) -> ModuleType:
        """Import the chosen Taichi quietly (once) and return it; starts no runtime.

        Quiet: no banner, no version-check thread, no log line, none of the
        DeprecationWarnings its import raises, so a first kernel call works under ``-W error``.

        Raises:
            ValueError: ``TIPAD_TAICHI`` names no known module.
            ModuleNotFoundError: the chosen Taichi is not installed (the message says what to
                install).
        """
        with self._load_lock:
            if self.ti is not None:
                return self.ti
            name = self.chosen()
            seed_frozen_frames()
            os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
            os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "0")
            # Under pytest or Jupyter (a replaced sys.stdout) Taichi logs a line at import.
            os.environ.setdefault("TI_LOG_LEVEL", "warn")
            before = set(sys.modules)
            try:
                with warnings.catch_warnings():
                    # Raised inside Taichi's own import, about its code: nothing to act on.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", PendingDeprecationWarning)
                    module = importlib.import_module(name)
            except BaseException as exc:
                _forget_partial_import(name, before)
                if not isinstance(exc, ModuleNotFoundError) or exc.name != name:
                    raise
                source = (
                    "set_backend" if self.choice is not None
                    else f"{ENV_VAR}={os.environ[ENV_VAR]}" if os.environ.get(ENV_VAR, "").strip()
                    else "the automatic choice"
                )  # fmt: skip
                raise ModuleNotFoundError(
                    f"tipad_transforms was told to run on {name} ({source}), which is not "
                    f"installed: pip install {_DISTRIBUTIONS[name]}",
                    name=name,
                ) from exc
            self.ti = module
            return module

    # -- the runtime ----------------------------------------------------------------------------

    def started(self) -> bool:
        """Whether this process initialised Taichi through this backend (no import)."""
        return self.arch is not None and self.pid == os.getpid()

    def running(self) -> bool:
        """Whether Taichi runs in this process: started here or by the user's own ``ti.init``
        (imports nothing). A forked child sees its parent's runtime as running (and
        ``refusal`` refuses it)."""
        return self.started() or any(compat.runtime_arch(ti) is not None for ti in imported())

    def runtime_arch(self) -> str | None:
        """``"cpu"``/``"cuda"`` once Taichi runs in this process (ours or the user's), else None."""
        return None if self.ti is None else compat.runtime_arch(self.ti)

    def refusal(self, device: torch.device) -> str | None:
        """Why the Taichi kernels cannot run on ``device`` in this process, or None if they can.

        Initialises nothing. The reasons are the cases where a launch would hang, be silently
        wrong, or go through Taichi's hidden host-copy path.
        """
        if device.type not in ("cpu", "cuda"):
            return f"Taichi kernels run on cpu and cuda tensors only, not {device.type}"
        if device.type == "cuda" and (device.index or 0) != 0:
            return (
                f"Taichi runs on the first visible CUDA device only; {device} would be read "
                "from the wrong device. Give each process one GPU: call "
                "tipad_transforms.distributed.bind_device() (it reads LOCAL_RANK) first thing "
                "in every process, before CUDA starts; the rank's GPU is then cuda:0"
            )
        if self.pid is not None and self.pid != os.getpid():
            return (
                "this process was forked after Taichi started in its parent, and Taichi hangs "
                "in such a child. Use multiprocessing_context='spawn' (or 'forkserver') for "
                "DataLoader workers to run the kernels there"
            )
        if self.pid is None and self.ti is not None:
            arch = compat.runtime_arch(self.ti)
            if arch is not None and arch != device.type:
                return f"Taichi was initialised on {arch}, the tensor is on {device.type}"
            if arch is not None:
                return self._foreign_config()
        if self.arch is not None and self.arch != device.type:
            return f"Taichi runs on {self.arch} in this process, the tensor is on {device.type}"
        return None

    def _foreign_config(self) -> str | None:
        """Why a Taichi runtime the user initialised cannot run our kernels, or None.

        The kernels are written for ``default_ip=i32`` (what ``_start`` passes): their index
        arithmetic and int literals take the default integer type, and under ``i64`` LLVM
        aborts the process on their first compile, under ``i16`` Taichi fails an assertion.
        """
        ti = self.ti
        assert ti is not None
        ip = compat.default_ip(ti)
        if ip != ti.i32:
            return (
                f"this program initialised Taichi with default_ip={ip}, and tipad_transforms' "
                "kernels need default_ip=ti.i32 (Taichi's default): pass it to ti.init, or let "
                "tipad_transforms start Taichi"
            )
        return None

    @staticmethod
    def _arch(ti: Any, device: torch.device) -> Any:
        """Taichi's arch for ``device``'s tensors: CUDA for CUDA, the CPU for the CPU unless
        ``TIPAD_TEST_ARCH`` names a GPU arch, which then compiles the GPU loop orders through
        Taichi's GPU compiler for CPU tensors (copied to and from it at each launch): the test
        lane that checks them on a machine without a GPU (Mesa's software Vulkan)."""
        if device.type == "cuda":
            return ti.cuda
        wanted = os.environ.get(TEST_ARCH_ENV, "")
        if wanted in ("", "cpu"):
            return ti.cpu
        if wanted != "vulkan":
            raise ValueError(f"{TEST_ARCH_ENV} must be 'vulkan' or 'cpu', got {wanted!r}")
        return ti.vulkan

    def _start(self, device: torch.device) -> None:
        """Initialise Taichi for ``device``'s tensors (once); the caller holds the lock and
        checked ``refusal``. The one place that picks Taichi's arch and the loop order."""
        ti = self.load()
        arch = compat.runtime_arch(ti)
        if arch is None:
            with contextlib.redirect_stdout(io.StringIO()):
                ti.init(
                    arch=self._arch(ti, device),
                    default_ip=ti.i32,
                    # Kernels read torch memory; Taichi's own pool only needs to be tiny.
                    device_memory_GB=0.25,
                    # taichi_forge compiles at compile_tier="fast" by default (no advanced IR
                    # passes: much slower RWKV kernels); "full" is upstream's pipeline.
                    **({"compile_tier": "full"}
                       if ti.__name__ == "taichi_forge" and not os.environ.get("TI_COMPILE_TIER")
                       else {}),
                )  # fmt: skip
            arch = compat.runtime_arch(ti)
            wanted = os.environ.get(TEST_ARCH_ENV) if device.type == "cpu" else None
            if wanted and arch != wanted:  # ti.init falls back to the CPU with a warning
                raise RuntimeError(
                    f"{TEST_ARCH_ENV}={wanted}: Taichi started on {arch} instead; is a "
                    f"{wanted} device installed (vulkaninfo --summary)?"
                )
        elif arch != device.type:
            raise Refused(f"Taichi was initialised on {arch}, the tensor is on {device.type}")
        else:
            foreign = self._foreign_config()
            if foreign is not None:
                raise Refused(foreign)
        # The device type served (Taichi's own arch may differ: a GPU arch for CPU tensors).
        self.arch, self.pid = device.type, os.getpid()
        self.cpu_iterations = compat.CPU_MIN_CHUNK * compat.cpu_threads(ti) if arch == "cpu" else 0
        if self.gpu_order is None:
            self.gpu_order = arch != "cpu"

    def session(
        self, device: torch.device, family: str, build: Callable[[Any], dict[str, Any]],
        tensors: tuple[Tensor, ...] = (),
    ) -> _Session:  # fmt: skip
        """Hold the runtime for launches on ``device``: ``with TAICHI.session(...) as kernels``
        gives the kernels of ``family`` (``build(ti)`` makes them the first time; Taichi
        compiles each on its first launch per signature).

        Raises ``Refused`` when one of ``tensors`` holds more than ``MAX_ELEMENTS`` or
        ``refusal`` gives a reason. Under the lock (the first call picks the arch; Taichi
        launches are not thread safe), the launches ordered after torch's current CUDA stream.
        """
        return _Session(self, device, family, build, tensors)

    def _before_fork(self) -> None:
        # A runtime the user started (not through us) is inherited by the child just the same
        # and hangs there: record that it exists in this (the parent's) process.
        if self.pid is None and any(compat.runtime_arch(ti) is not None for ti in imported()):
            self.pid = os.getpid()

    def _after_fork(self) -> None:
        # A lock held by another thread at fork time would stay held forever in the child.
        self.lock = threading.RLock()


class _Session:
    """``session``'s context manager: a class, not a generator, because every launch enters
    one and a small launch's whole budget is tens of microseconds."""

    __slots__ = ("_backend", "_build", "_device", "_family", "_lock", "_side")

    def __init__(
        self, backend: TaichiBackend, device: torch.device, family: str,
        build: Callable[[Any], dict[str, Any]], tensors: tuple[Tensor, ...],
    ) -> None:  # fmt: skip
        for t in tensors:
            if t.numel() > MAX_ELEMENTS:
                raise Refused(f"more than {MAX_ELEMENTS} elements in one call")
        self._backend = backend
        self._device = device
        self._family = family
        self._build = build
        self._side: torch.cuda.Stream | None = None

    def __enter__(self) -> dict[str, Any]:
        backend, device = self._backend, self._device
        # The backend's lock now: a forked child replaced it.
        self._lock = lock = backend.lock
        lock.acquire()
        try:
            reason = backend.refusal(device)
            if reason is not None:
                raise Refused(reason)
            if backend.arch is None:
                backend._start(device)
            kernels = backend.kernels.get(self._family)
            if kernels is None:
                ti = backend.ti
                kernels = backend.kernels[self._family] = {
                    name: compat.LeanKernel(ti, k) if compat.is_kernel(k) else k
                    for name, k in self._build(ti).items()
                }
            if device.type == "cuda":
                self._side = _order_before(device)
        except BaseException:
            lock.release()
            raise
        return kernels

    def __exit__(self, *exc: object) -> None:
        try:
            if self._side is not None:
                self._side.wait_stream(torch.cuda.default_stream(self._device))
        finally:
            self._lock.release()


def _order_before(device: torch.device) -> torch.cuda.Stream | None:
    """Order a Taichi launch (legacy default stream) after torch's current stream; returns the
    current stream when it is a side stream, which must then wait for the default one after
    the launch (``_Session.__exit__``). Events, not host syncs."""
    current = torch.cuda.current_stream(device)
    default = torch.cuda.default_stream(device)
    if current == default:
        return None
    default.wait_stream(current)
    return current


#: The Taichi backend of this process.
TAICHI = TaichiBackend()


def set_backend(name: str | None) -> None:
    """Choose the Taichi module the kernels run on: ``"taichi"`` or ``"taichi_forge"``.

    Call it before the first kernel launch (or set ``TIPAD_TAICHI``): a process runs one Taichi.
    ``None`` or ``"auto"`` goes back to the automatic choice (``TIPAD_TAICHI``, else a Taichi
    the process already imported, else the installed one, upstream ``taichi`` first). Choosing
    the module already in use does nothing.

    Raises:
        ValueError: ``name`` is not one of the names above.
        RuntimeError: another Taichi module already runs tipad's kernels in this process.
    """
    TAICHI.choose(name)


def _forget_partial_import(name: str, before: set[str]) -> None:
    """Drop from ``sys.modules`` what an interrupted import of ``name`` left there.

    An import stopped half-way (Ctrl-C caught in a notebook) leaves the submodules it finished
    in ``sys.modules`` while the package itself is dropped: the next ``import taichi`` finds
    ``taichi.lang`` imported and never binds it as an attribute, and every later kernel call
    fails with "module 'taichi' has no attribute 'lang'". Without the leftovers the next call
    imports Taichi afresh (its compiled extension, already loaded, is reused).
    """
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        if module not in before:
            del sys.modules[module]


def seed_frozen_frames() -> None:
    """Let ``inspect.getmodule`` answer at once for frames of the import machinery.

    Taichi's ``@ti.kernel`` and ``@ti.func`` ask ``inspect.getframeinfo`` about a frame a few
    levels up. At import time, and when our kernels are built, that frame is often
    ``<frozen importlib._bootstrap>``: a file name ``inspect`` never caches, so every such call
    rescans all of ``sys.modules`` (thousands of modules after torch, hundreds of times) and
    finds nothing. Recording the file names under a module name no module has caches that same
    answer (``getmodule`` still returns None for them), without the scan.
    """
    from .._compat.cpython import seed_getmodule_cache

    seed_getmodule_cache(FROZEN_FILES)


def serial_launch(out: Tensor, limit: int | None = None) -> bool:
    """Whether a CPU launch writing ``out`` should run on the launching thread alone.

    Waking Taichi's thread pool costs tens of microseconds on a quiet machine and milliseconds on
    a loaded one; a small launch (at most ``limit`` bytes of output, default
    ``TAICHI.serial_bytes``) finishes sooner on one thread. CUDA: never.
    """
    limit = TAICHI.serial_bytes if limit is None else limit
    return out.device.type == "cpu" and out.numel() * out.element_size() <= limit


def spread(tasks: int, serial: bool = False) -> int:
    """How many loop iterations a kernel gives each of its ``tasks`` parallel tasks, so that
    Taichi's CPU range-for shares them among its threads.

    Taichi gives each CPU thread one contiguous run of at least ``compat.CPU_MIN_CHUNK``
    iterations, so a kernel with a few hundred heavy tasks (a chain per (batch, channel group),
    a row group per head) ran on one thread. Such a kernel loops over ``tasks * spread``
    iterations and works on every ``spread``-th; each thread's run then holds its share. 1 on
    a GPU arch, for a ``serial`` launch, or where the tasks already reach every thread.
    """
    need = TAICHI.cpu_iterations
    return 1 if serial or tasks <= 0 or tasks >= need else -(-need // tasks)


_HUGE = 1 << 21  # a transparent huge page on x86-64 and most arm64 kernels
_MADV_HUGEPAGE = 14
_libc: list[Any] = []  # [ctypes libc] once loaded, [None] where madvise is unavailable


def advise_huge_pages(out: Tensor, min_bytes: int = 4 * _HUGE) -> None:
    """Ask Linux to back a large, fresh CPU output with transparent huge pages.

    A fresh output's first touch costs a page fault per 4 KiB page: more than the kernel's own
    work for a large canvas. ``madvise(MADV_HUGEPAGE)`` on the 2 MiB-aligned part of ``out``'s
    memory makes the first writes fault 2 MiB at a time where THP is set to ``madvise`` or
    ``always`` (what a fresh output still pays is Linux zeroing each page on its first touch).
    It never changes the contents, so an output already written (``out=``) is fine. No-op off
    Linux, for CUDA and for outputs below ``min_bytes``.
    """
    nbytes = out.numel() * out.element_size()
    if out.device.type != "cpu" or nbytes < min_bytes or not sys.platform.startswith("linux"):
        return
    if not _libc:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _libc.append(libc)
        except (OSError, AttributeError):
            _libc.append(None)
    libc = _libc[0]
    if libc is None:
        return
    start = -(-out.data_ptr() // _HUGE) * _HUGE
    end = (out.data_ptr() + nbytes) // _HUGE * _HUGE
    if end > start:
        libc.madvise(start, end - start, _MADV_HUGEPAGE)  # advice only: failure is harmless
