"""The one place that talks to Taichi.

Everything Taichi-specific lives in this package: importing it quietly, initialising it lazily
(once per process, under a lock, on the arch of the first tensor it sees), refusing the devices
it cannot serve, ordering its launches with torch's CUDA streams, surviving ``fork`` (this file)
and the kernels themselves, one file per family (``_pad``: padding; ``_wkv`` and ``_time_conv``:
the RWKV operators). The rest of the package hands in contiguous torch tensors and gets them
written; it never imports ``taichi``. Another backend could replace this package.

Facts this module is built on (taichi 1.7): ``ti.init`` resets the whole runtime, so it is called
at most once and never when the user already initialised Taichi; a process forked after
initialisation hangs on its first launch; CUDA work runs on device 0's primary context and the
legacy default stream; a CPU tensor given to a CUDA kernel (or the reverse) is silently copied;
any argument with ``requires_grad`` gets a ``.grad`` written; the first launch must come from the
thread that initialised.
"""

# No `from __future__ import annotations`: Taichi reads the kernels' annotations at runtime.
import contextlib
import importlib
import io
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from . import _backend
from ._backend import set_backend

__all__ = [
    "MAX_ELEMENTS",
    "RuntimeUnavailable",
    "launch_pad",
    "launch_pad_stack",
    "launch_time_conv",
    "launch_wkv7_backward",
    "launch_wkv7_forward",
    "launch_wkv_backward",
    "launch_wkv_forward",
    "refusal",
    "running",
    "runtime_arch",
    "session",
    "set_backend",
    "started",
    "taichi_backend",
    "taichi_version",
]


class RuntimeUnavailable(RuntimeError):
    """The Taichi runtime of this process cannot serve this launch (device, process, size)."""


#: The environment variable through which ``data.worker_context`` hands a forkserver the main
#: module's path (``_preload`` imports it there; CPython before gh-126631 never passes it).
FORKSERVER_MAIN_ENV = "TIPAD_FORKSERVER_MAIN"

#: Taichi indexes ndarrays with 32-bit integers: a launch with a larger tensor is refused.
MAX_ELEMENTS = 2**31 - 1


_lock = threading.RLock()
# "kernels": family name -> the kernels its builder made (compiled on first launch, per dtype).
_state: dict[str, Any] = {"ti": None, "arch": None, "pid": None, "kernels": {}, "per_pixel": None}


def _before_fork() -> None:
    # A runtime the user started (not through us) is inherited by the child just the same and
    # hangs there: record that it exists in this (the parent's) process.
    if _state["pid"] is not None:
        return
    # Either Taichi (upstream or taichi_forge), whichever the user started.
    for ti in _backend.imported():
        if hasattr(ti, "lang") and _existing_arch(ti) is not None:
            _state["pid"] = os.getpid()


def _reset_after_fork() -> None:
    # A lock held by another thread at fork time would stay held forever in the child.
    global _lock
    _lock = threading.RLock()


os.register_at_fork(before=_before_fork, after_in_child=_reset_after_fork)


def _import_taichi() -> Any:
    if _state["ti"] is None:
        # Upstream taichi or taichi_forge, imported quietly; _backend says which and why.
        _state["ti"] = _backend.load()
    return _state["ti"]


def _existing_arch(ti: Any) -> str | None:
    """The arch of a runtime the user (or we) already initialised, else None."""
    impl = ti.lang.impl
    if impl.get_runtime().prog is None:
        return None
    arch = impl.current_cfg().arch
    return "cuda" if arch == ti.cuda else ("cpu" if arch in (ti.x64, ti.arm64) else str(arch))


def _foreign_config(ti: Any) -> str | None:
    """Why a Taichi runtime the user initialised cannot run our kernels, or None.

    The kernels are written for ``default_ip=i32`` (what ``_ensure`` passes): their index
    arithmetic and int literals take the default integer type, and under ``i64`` LLVM aborts
    the process on their first compile ("Invalid cast!"; a hang with ``debug=True``), under
    ``i16`` Taichi fails an assertion. So another one is refused, before any compile.
    """
    ip = ti.lang.impl.current_cfg().default_ip
    if ip != ti.i32:
        return (
            f"this program initialised Taichi with default_ip={ip}, and tipad_transforms' "
            "kernels need default_ip=ti.i32 (Taichi's default): pass it to ti.init, or let "
            "tipad_transforms start Taichi"
        )
    return None


def taichi_version() -> str:
    """The Taichi module's own version, e.g. ``"1.7.4"`` (imports Taichi, starts nothing).

    taichi_forge numbers its releases itself (``"0.7.0"``): ``taichi_backend`` names both.
    """
    return ".".join(map(str, _import_taichi().__version__))


def taichi_backend() -> str:
    """The Taichi the kernels run on, e.g. ``"taichi 1.7.4"`` or ``"taichi_forge 0.7.0"``.

    Imports nothing: the choice (``set_backend``, ``TIPAD_TAICHI``, else the installed one) is
    resolved as the first launch will resolve it.
    """
    return _backend.describe()


def started() -> bool:
    """Whether this process has initialised Taichi through this package (cheap: no import)."""
    return _state["arch"] is not None and _state["pid"] == os.getpid()


def running() -> bool:
    """Whether Taichi runs in this process: started here (``started``) or by the user's own
    ``ti.init`` (cheap: imports nothing). A forked child sees its parent's runtime as running
    (and ``refusal`` refuses it)."""
    if started():
        return True
    return any(hasattr(ti, "lang") and _existing_arch(ti) is not None for ti in _backend.imported())


def runtime_arch() -> str | None:
    """``"cpu"``/``"cuda"`` once Taichi runs in this process (ours or the user's), else None."""
    ti = _state["ti"]
    if ti is None:
        return None
    return _existing_arch(ti)


def refusal(device: torch.device) -> str | None:
    """Why the Taichi kernels cannot run on ``device`` in this process, or None if they can.

    Never initialises anything. The reasons are the cases where a launch would hang, be silently
    wrong, or go through Taichi's hidden host-copy path.
    """
    if device.type not in ("cpu", "cuda"):
        return f"Taichi kernels run on cpu and cuda tensors only, not {device.type}"
    if device.type == "cuda" and (device.index or 0) != 0:
        return (
            f"Taichi runs on the first visible CUDA device only; {device} would be read from "
            "the wrong device. Give each process one GPU: call "
            "tipad_transforms.distributed.bind_device() (it reads LOCAL_RANK) first thing in "
            "every process, before CUDA starts; the rank's GPU is then cuda:0"
        )
    pid = _state["pid"]
    if pid is not None and pid != os.getpid():
        return (
            "this process was forked after Taichi started in its parent, and Taichi hangs in "
            "such a child. Use multiprocessing_context='spawn' (or 'forkserver') for DataLoader "
            "workers to run the kernels there"
        )
    if pid is None and _state["ti"] is not None:
        arch = _existing_arch(_state["ti"])
        if arch is not None and arch != device.type:
            return f"Taichi was initialised on {arch}, the tensor is on {device.type}"
        if arch is not None:
            foreign = _foreign_config(_state["ti"])
            if foreign is not None:
                return foreign
    arch = _state["arch"]
    if arch is not None and arch != device.type:
        return f"Taichi runs on {arch} in this process, the tensor is on {device.type}"
    return None


def _ensure(device: torch.device) -> Any:
    """Initialise Taichi (once) and return it; caller holds the lock and checked ``refusal``."""
    ti = _import_taichi()
    if _state["arch"] is not None:
        return ti
    arch = _existing_arch(ti)
    if arch is None:
        with contextlib.redirect_stdout(io.StringIO()):
            ti.init(
                arch=ti.cuda if device.type == "cuda" else ti.cpu,
                default_ip=ti.i32,
                # Kernels read torch memory; Taichi's own pool only needs to be tiny.
                device_memory_GB=0.25,
                **_backend.init_options(ti),
            )
        arch = _existing_arch(ti)
    elif arch != device.type:
        raise RuntimeUnavailable(
            f"Taichi was initialised on {arch}, the tensor is on {device.type}"
        )
    else:
        foreign = _foreign_config(ti)
        if foreign is not None:
            raise RuntimeUnavailable(foreign)
    _state["arch"] = arch
    _state["pid"] = os.getpid()
    if _state["per_pixel"] is None:
        _state["per_pixel"] = arch == "cuda"
    return ti


class _Session:
    """``session``'s context manager: a class, not a generator, because every launch enters
    one and a small launch's whole budget is tens of microseconds."""

    __slots__ = ("_build", "_device", "_family", "_lock", "_side")

    def __init__(
        self,
        device: torch.device,
        family: str,
        build: Callable[[Any], dict[str, Any]],
        tensors: tuple[torch.Tensor, ...],
    ) -> None:
        for t in tensors:
            if t.numel() > MAX_ELEMENTS:
                raise RuntimeUnavailable(f"more than {MAX_ELEMENTS} elements in one call")
        self._device = device
        self._family = family
        self._build = build
        self._side: torch.cuda.Stream | None = None

    def __enter__(self) -> dict[str, Any]:
        device = self._device
        # The module's lock now: a forked child replaced it (_reset_after_fork).
        self._lock = lock = _lock
        lock.acquire()
        try:
            reason = refusal(device)
            if reason is not None:
                raise RuntimeUnavailable(reason)
            if _state["arch"] is None:
                _ensure(device)
            kernels = _state["kernels"].get(self._family)
            if kernels is None:
                ti = _state["ti"]
                kernels = _state["kernels"][self._family] = _lean_kernels(ti, self._build(ti))
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


def session(
    device: torch.device,
    family: str,
    build: Callable[[Any], dict[str, Any]],
    tensors: tuple[torch.Tensor, ...] = (),
) -> _Session:
    """Hold the runtime for launches on ``device``: ``with session(...) as kernels`` gives the
    kernels of ``family``.

    Refuses (``RuntimeUnavailable``) a launch over ``tensors`` when one holds more than
    ``MAX_ELEMENTS``. Under the lock (the first call picks the arch, so two threads must not
    both pick; Taichi launches are not thread safe), after ``refusal`` (raises
    ``RuntimeUnavailable``), with the launches ordered with torch's current CUDA stream.
    ``build(ti)`` makes the family's kernels the first time; Taichi compiles each on its first
    launch per dtype.
    """
    return _Session(device, family, build, tensors)


#: Launches that move at most this many bytes run serially on the CPU (see ``serial_launch``).
SERIAL_BYTES = 1 << 19


def serial_launch(out: torch.Tensor, limit: int | None = None) -> bool:
    """Whether a CPU launch writing ``out`` should run on the launching thread alone.

    Waking Taichi's thread pool costs tens of microseconds on a quiet machine and milliseconds on
    a loaded one; a small launch (at most ``limit`` bytes of output, default ``SERIAL_BYTES``)
    finishes sooner on one thread. CUDA: never.
    """
    limit = SERIAL_BYTES if limit is None else limit
    return out.device.type == "cpu" and out.numel() * out.element_size() <= limit


_HUGE = 1 << 21  # a transparent huge page on x86-64 and most arm64 kernels
_MADV_HUGEPAGE = 14
_libc: list[Any] = []  # [ctypes libc] once loaded, [None] where madvise is unavailable


def advise_huge_pages(out: torch.Tensor, min_bytes: int = 4 * _HUGE) -> None:
    """Ask Linux to back a large, fresh CPU output with transparent huge pages.

    A fresh output's first touch costs a page fault per 4 KiB page: more than the kernel's own
    work for a large canvas (torch's allocator does this only under THP_MEM_ALLOC_ENABLE=1).
    ``madvise(MADV_HUGEPAGE)`` on the 2 MiB-aligned part of ``out``'s memory makes the kernel's
    first writes fault 2 MiB at a time where THP is set to ``madvise`` or ``always``. It never
    changes the contents, so an output already written (``out=``) is fine. No-op off Linux, for
    CUDA and for outputs below ``min_bytes``.

    What a fresh output still pays is Linux zeroing each huge page on its first touch (about
    12 ms of system time for the 136 MB seed canvas on the 2-core dev box, what torch's ``fill_``
    pays with the same advice): the floor for memory new to the process. Measured there and not
    kept: a 2 MiB-aligned output (over-allocated, so a returned tensor would carry a storage
    offset) saves the ~500 small faults of the partial head and tail pages, about 0.5 ms;
    ``MADV_POPULATE_WRITE`` on the launching thread moves the zeroing there and saves nothing.
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


def _lean_kernels(ti: Any, kernels: dict[str, Any]) -> dict[str, Any]:
    """``kernels`` with each Taichi kernel wrapped in a ``LeanKernel`` (same call, less work)."""
    return {
        name: LeanKernel(ti, k) if getattr(k, "_is_wrapped_kernel", False) else k
        for name, k in kernels.items()
    }


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


# The kernel families; imported last, as they use the names above. Padding (what most
# processes, DataLoader workers included, run) now; the RWKV families on their first use, so a
# process that only pads does not import them (module __getattr__, PEP 562).
from ._lean import LeanKernel  # noqa: E402
from ._pad import launch_pad, launch_pad_stack  # noqa: E402

if TYPE_CHECKING:
    from ._time_conv import launch_time_conv
    from ._wkv import launch_wkv_backward, launch_wkv_forward
    from ._wkv7 import launch_wkv7_backward, launch_wkv7_forward

_FAMILIES = {
    "launch_time_conv": "._time_conv",
    "launch_wkv_backward": "._wkv",
    "launch_wkv_forward": "._wkv",
    "launch_wkv7_backward": "._wkv7",
    "launch_wkv7_forward": "._wkv7",
}


def __getattr__(name: str) -> Any:
    where = _FAMILIES.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value
