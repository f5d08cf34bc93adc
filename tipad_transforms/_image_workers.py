"""Worker processes for ``tipad pad``: every core decodes, pads and encodes its own files.

Decoding and encoding are most of the work and Pillow holds the GIL for much of it, so each
worker process runs the whole path for a file (:class:`~._image_padding.Painter`), and the
parent only hands out paths and counts. Each worker starts Taichi itself: the parent never
launches a kernel, so on Linux the workers can be forked (fast; a process forked after Taichi
started would hang, see ``_runtime``). Where Taichi or CUDA already run in this process, or
``fork`` does not exist, the workers are spawned instead (each imports torch: seconds).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from types import TracebackType

from ._image_inputs import FileJob
from ._image_padding import Outcome, PadSpec, Painter

__all__ = ["Workers", "default_workers"]

_painter: Painter | None = None  # the worker process's own


def default_workers() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _start_method() -> str:
    if "fork" not in multiprocessing.get_all_start_methods() or sys.platform == "darwin":
        return "spawn"  # macOS: fork is unsafe with system frameworks
    from . import _runtime

    taichi_started = "taichi" in sys.modules and _runtime.runtime_arch() is not None
    torch = sys.modules.get("torch")
    cuda_started = torch is not None and torch.cuda.is_initialized()
    return "spawn" if taichi_started or cuda_started else "fork"


def _init_worker(spec: PadSpec) -> None:
    global _painter
    # One thread per worker: the workers are the parallelism (as in DataLoader workers).
    os.environ["TI_CPU_MAX_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    _painter = Painter(spec)


def _check(job: FileJob) -> Outcome | str:
    assert _painter is not None
    return _painter.check(job)


def _pad_file(job: FileJob) -> Outcome | str:
    assert _painter is not None
    return _painter.pad_file(job)


class Workers:
    """``workers`` processes (0 or 1: this process) that check and pad files for ``spec``.

    Use as a context manager; :meth:`check` and :meth:`pad` yield one result per job, in
    order.
    """

    def __init__(self, spec: PadSpec, workers: int) -> None:
        self.spec = spec
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._painter: Painter | None = None

    def __enter__(self) -> Workers:
        if self.workers <= 1:
            self._painter = Painter(self.spec)
        else:
            method = _start_method()
            if method == "fork":
                # Import torch, the package and Taichi (without starting it) once, here: forked
                # workers inherit them instead of each importing them again (seconds apiece).
                from . import _runtime, functional  # noqa: F401

                _runtime.taichi_version()
            # An executor, not multiprocessing.Pool: a worker that dies (killed, out of memory)
            # raises BrokenProcessPool here instead of leaving the parent waiting forever.
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context(method),
                initializer=_init_worker,
                initargs=(self.spec,),
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=exc_type is None, cancel_futures=True)
            self._pool = None

    def _map(
        self,
        jobs: Sequence[FileJob],
        local: Callable[[FileJob], Outcome | str],
        remote: Callable[[FileJob], Outcome | str],
    ) -> Iterator[Outcome | str]:
        if self._pool is None:
            yield from map(local, jobs)
            return
        # Chunks small enough for a live progress count and a balanced end, large enough that
        # the inter-process round trips do not dominate small images.
        chunk = max(1, min(16, len(jobs) // (self.workers * 8)))
        yield from self._pool.map(remote, jobs, chunksize=chunk)

    def check(self, jobs: Sequence[FileJob]) -> Iterator[Outcome | str]:
        """:meth:`Painter.check` of every job."""
        painter = self._painter
        return self._map(jobs, painter.check if painter else _check, _check)

    def pad(self, jobs: Sequence[FileJob]) -> Iterator[Outcome | str]:
        """:meth:`Painter.pad_file` of every job."""
        painter = self._painter
        return self._map(jobs, painter.pad_file if painter else _pad_file, _pad_file)
