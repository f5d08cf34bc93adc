"""The Taichi backend (``TAICHI``): the one place that imports, starts and holds Taichi.

Which Taichi (upstream ``taichi`` or the ``taichi_forge`` fork, which has wheels for CPython
3.14) is decided once per process at its first use (``set_backend``). It is imported quietly
and initialised lazily, under a lock, on the arch of the first tensor it sees; devices it
cannot serve are refused; launches are ordered with torch's CUDA streams; a fork is survived.
The families' kernels (``ops/<family>/taichi.py``) enter ``TAICHI.session`` to launch.

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
from .._compat.cpython import seed_getmodule_cache
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
# Taichi's ``@ti.kernel``/``@ti.func`` ask ``inspect.getframeinfo`` about such frames at import
# and kernel-build time, and ``inspect`` never caches these names: every call rescans all of
# ``sys.modules``. ``load`` seeds inspect's cache with them (``seed_getmodule_cache``).
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


def _any_runtime() -> bool:
    """Whether an imported Taichi has a runtime initialised (by us or the user)."""
    return any(compat.runtime_arch(ti) is not None for ti in imported())


def _user_runtime(ti: Any, arch: str, device: torch.device) -> str | None:
    """Why a Taichi runtime the user initialised (on ``arch``) cannot serve ``device``'s
    tensors, else None."""
    if arch != device.type:
        return f"Taichi was initialised on {arch}, the tensor is on {device.type}"
    # The kernels' index arithmetic and int literals take the default integer type: under i64
    # LLVM aborts the process on their first compile, under i16 Taichi fails an assertion.
    ip = compat.default_ip(ti)
    if ip != ti.i32:
        return (
            f"this program initialised Taichi with default_ip={ip}, and tipad_transforms' "
            "kernels need default_ip=ti.i32 (Taichi's default): pass it to ti.init, or let "
            "tipad_transforms start Taichi"
        )
    return None


class TaichiBackend(Backend):
    """Taichi and its state in this process.

    ``ti``: the Taichi module once imported; ``choice``: ``set_backend``'s; ``arch``: the
    device type whose tensors the runtime we initialised serves, ``pid`` the process that did
    (or, for the user's runtime, the process it was found in before a fork); ``kernels``: each
    family's kernels, built at its first launch; ``gpu_order``: whether the families take their
    GPU loop order (set from the arch at start; tests switch it to check that order on the
    CPU); ``serial_bytes``: ``serial_launch``'s limit; ``cpu_iterations``: ``spread``'s.
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
            return f"{name} {importlib.metadata.version(name.replace('_', '-'))}"
        except importlib.metadata.PackageNotFoundError:
            return f"{name} (not installed)"

    def load(self) -> ModuleType:
        """Import the chosen Taichi quietly (once: no banner, version-check thread, log line or
        DeprecationWarning, so a first kernel call works under ``-W error``); starts nothing.

        Raises:
            ValueError: ``TIPAD_TAICHI`` names no known module.
            ModuleNotFoundError: the chosen Taichi is not installed (the message says what to
                install).
        """
        with self._load_lock:
            if self.ti is not None:
                return self.ti
            name = self.chosen()
            seed_getmodule_cache(FROZEN_FILES)
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
                # An interrupted import (Ctrl-C in a notebook) leaves the submodules it finished
                # in sys.modules but not the package: the next import would never bind
                # ``taichi.lang`` ("module 'taichi' has no attribute 'lang'"). Drop them.
                for left in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                    if left not in before:
                        del sys.modules[left]
                if not isinstance(exc, ModuleNotFoundError) or exc.name != name:
                    raise
                source = (
                    "set_backend" if self.choice is not None
                    else f"{ENV_VAR}={os.environ[ENV_VAR]}" if os.environ.get(ENV_VAR, "").strip()
                    else "the automatic choice"
                )  # fmt: skip
                raise ModuleNotFoundError(
                    f"tipad_transforms was told to run on {name} ({source}), which is not "
                    f"installed: pip install {name.replace('_', '-')}",
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
        return self.started() or _any_runtime()

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
        ti = self.ti
        # A runtime the user initialised: known here once Taichi is imported; one that starts
        # before a fork, or before `load`, is checked again by `_start`.
        if self.arch is None and ti is not None:
            arch = compat.runtime_arch(ti)
            if arch is not None:
                return _user_runtime(ti, arch, device)
        if self.arch is not None and self.arch != device.type:
            return f"Taichi runs on {self.arch} in this process, the tensor is on {device.type}"
        return None

    def _start(self, device: torch.device) -> None:
        """Initialise Taichi for ``device``'s tensors (once); the caller holds the lock and
        checked ``refusal``. The one place that picks Taichi's arch and the loop order."""
        ti = self.load()
        arch = compat.runtime_arch(ti)
        reason = None if arch is None else _user_runtime(ti, arch, device)
        if reason is not None:
            raise Refused(reason)
        if arch is None:
            wanted = os.environ.get(TEST_ARCH_ENV, "") if device.type == "cpu" else ""
            if wanted not in ("", "cpu", "vulkan"):
                raise ValueError(f"{TEST_ARCH_ENV} must be 'vulkan' or 'cpu', got {wanted!r}")
            with contextlib.redirect_stdout(io.StringIO()):
                ti.init(
                    arch=ti.cuda if device.type == "cuda" else getattr(ti, wanted or "cpu"),
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
            if wanted and arch != wanted:  # ti.init falls back to the CPU with a warning
                raise RuntimeError(
                    f"{TEST_ARCH_ENV}={wanted}: Taichi started on {arch} instead; is a "
                    f"{wanted} device installed (vulkaninfo --summary)?"
                )
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
        gives the kernels of ``family`` (``build(ti)`` makes them the first time), under the
        lock (Taichi launches are not thread safe), ordered after torch's current CUDA stream.

        Raises ``Refused`` when one of ``tensors`` holds more than ``MAX_ELEMENTS`` or
        ``refusal`` gives a reason.
        """
        return _Session(self, device, family, build, tensors)

    def _before_fork(self) -> None:
        # A runtime the user started (not through us) is inherited by the child just the same
        # and hangs there: record that it exists in this (the parent's) process.
        if self.pid is None and _any_runtime():
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
                # The launch (legacy default stream) goes after torch's current stream; a side
                # stream then waits for the default one after it (``__exit__``). Events only.
                current = torch.cuda.current_stream(device)
                default = torch.cuda.default_stream(device)
                if current != default:
                    default.wait_stream(current)
                    self._side = current
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
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    key = None if name is None else _normalize(name, "name")
    with TAICHI._load_lock:
        ti = TAICHI.ti
        if ti is not None and key is not None and key != ti.__name__:
            raise RuntimeError(
                f"tipad_transforms already runs its kernels on {ti.__name__} in this "
                f"process; choose {key} before the first kernel launch (or set {ENV_VAR})"
            )
        TAICHI.choice = key


def serial_launch(out: Tensor, limit: int | None = None) -> bool:
    """Whether a CPU launch writing at most ``limit`` bytes (default ``TAICHI.serial_bytes``)
    to ``out`` should run on the launching thread alone: waking Taichi's thread pool costs tens
    of microseconds on a quiet machine, milliseconds on a loaded one. CUDA: never."""
    limit = TAICHI.serial_bytes if limit is None else limit
    return out.device.type == "cpu" and out.numel() * out.element_size() <= limit


def spread(tasks: int, serial: bool = False) -> int:
    """How many loop iterations a kernel gives each of its ``tasks`` parallel tasks, so that
    Taichi's CPU range-for shares them among its threads.

    Taichi gives each CPU thread one contiguous run of at least ``compat.CPU_MIN_CHUNK``
    iterations, so a few hundred heavy tasks would run on one thread. Such a kernel loops over
    ``tasks * spread`` iterations and works on every ``spread``-th. 1 on a GPU arch, for a
    ``serial`` launch, or where the tasks already reach every thread.
    """
    need = TAICHI.cpu_iterations
    return 1 if serial or tasks <= 0 or tasks >= need else -(-need // tasks)


_HUGE = 1 << 21  # a transparent huge page on x86-64 and most arm64 kernels
_MADV_HUGEPAGE = 14
_libc: list[Any] = []  # [ctypes libc] once loaded, [None] where madvise is unavailable


def advise_huge_pages(out: Tensor, min_bytes: int = 4 * _HUGE) -> None:
    """Ask Linux to back a large, fresh CPU output with transparent huge pages.

    A fresh output's first touch costs a page fault per 4 KiB page: more than the kernel's work
    for a large canvas. ``madvise(MADV_HUGEPAGE)`` on the 2 MiB-aligned part of ``out`` makes
    the first writes fault 2 MiB at a time (where THP is ``madvise`` or ``always``). It never
    changes the contents. No-op off Linux, for CUDA and below ``min_bytes``.
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
