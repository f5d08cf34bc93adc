"""Worker processes for ``tipad pad``: each decodes, pads and encodes whole files (Pillow holds
the GIL for much of it); the parent sends index ranges of the job list each worker got at its
start. The parent never launches a kernel, so on Linux the workers are forked, unless Taichi
or CUDA already run here (a process forked after them would hang) or fork is missing.

A worker never outlives the run: SIGTERM (sent by the parent when the run is interrupted or
fails) removes the file it is writing and ends it; SIGINT and SIGHUP are left to the parent
(Ctrl-C reaches the whole process group); a thread ends it the same way when the parent is
gone (killed with SIGKILL, it could not tell its workers).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from types import FrameType, TracebackType

from .inputs import FileJob
from .painter import Outcome, PadSpec, Painter
from .signals import STOP_SIGNALS
from .writing import discard_temporary

__all__ = ["Workers", "default_workers"]

_painter: Painter | None = None  # the worker process's own
_jobs: Sequence[FileJob] = ()  # the run's jobs: chunks name them by index
_stopping: Event | None = None  # set by the parent's Workers.stop(): start no more files
#: How often a worker looks whether its parent is still there, and how long an interrupted
#: run waits for its workers to end on SIGTERM before it kills them.
_PARENT_POLL_S = 0.2
_TERMINATE_WAIT_S = 5.0
Result = tuple[int, "Outcome | str"]  # a job's index, and its outcome or why it failed


def default_workers() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _start_method() -> str:
    if "fork" not in multiprocessing.get_all_start_methods() or sys.platform == "darwin":
        return "spawn"  # macOS: fork is unsafe with system frameworks
    from ..backends.taichi import TAICHI

    taichi_started = "taichi" in sys.modules and TAICHI.runtime_arch() is not None
    torch = sys.modules.get("torch")
    cuda_started = torch is not None and torch.cuda.is_initialized()
    return "spawn" if taichi_started or cuda_started else "fork"


def _end_worker(signum: int, frame: FrameType | None = None) -> None:
    """End this worker now: remove the file it is writing, exit with 128 + ``signum``.

    ``os._exit``, not an exception: the executor's worker loop would catch one and carry on.
    """
    discard_temporary()
    os._exit(128 + signum)


def _watch_parent(parent: int) -> None:
    """End this worker when its parent process ``parent`` is gone (the parent id changes)."""
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_S)
    _end_worker(signal.SIGTERM)


def _init_worker(spec: PadSpec, jobs: Sequence[FileJob], parent: int, stopping: Event) -> None:
    global _painter, _jobs, _stopping
    _jobs, _stopping = jobs, stopping
    signal.signal(signal.SIGTERM, _end_worker)
    # Ctrl-C and a closed terminal signal the whole process group: the parent decides, and
    # ends the workers with SIGTERM (a KeyboardInterrupt here would print a traceback).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    # One thread per worker: the workers are the parallelism (as in DataLoader workers).
    os.environ["TI_CPU_MAX_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    _painter = Painter(spec)


def _work(
    painter: Painter,
    jobs: Sequence[FileJob],
    phase: str,
    indices: Sequence[int],
    stopped: Callable[[], bool],
) -> Iterator[Result]:
    """Check (``phase`` "check") or pad the jobs at ``indices``, until ``stopped()`` (the files
    not started are left out)."""
    work = painter.check if phase == "check" else painter.pad_file
    for i in indices:
        if stopped():
            return
        yield i, work(jobs[i])


def _run_chunk(phase: str, indices: Sequence[int]) -> list[Result]:
    """:func:`_work` in a worker process."""
    assert _painter is not None and _stopping is not None
    return list(_work(_painter, _jobs, phase, indices, _stopping.is_set))


class Workers:
    """``workers`` processes (0 or 1: this process) that check and pad ``jobs`` for ``spec``.

    A context manager: leaving it on an exception (a stop signal, a broken pipe, an error) ends
    the worker processes at once (:meth:`terminate`), leaving it normally waits for them.
    """

    def __init__(self, spec: PadSpec, jobs: Sequence[FileJob], workers: int) -> None:
        self.spec = spec
        self.jobs = jobs
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._painter: Painter | None = None
        self._others: set[BaseProcess] = set()
        self._stopped = False
        self._stopping: Event | None = None

    def __enter__(self) -> Workers:
        # The children this process had before: the rest are this pool's workers (public
        # multiprocessing API; the executor's own list of them is private).
        self._others = set(multiprocessing.active_children())
        if self.workers <= 1:
            self._painter = Painter(self.spec)
            return self
        method = _start_method()
        if method == "fork":
            # Import torch and the package once, here: forked workers inherit them instead of
            # each importing them again.
            from .. import functional  # noqa: F401
        context = multiprocessing.get_context(method)
        self._stopping = context.Event()
        # An executor, not multiprocessing.Pool: a worker that dies (killed, out of memory)
        # raises BrokenProcessPool here instead of leaving the parent waiting forever.
        self._pool = ProcessPoolExecutor(
            self.workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(self.spec, self.jobs, os.getpid(), self._stopping),
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._painter is not None:
            self._painter.close()
        if self._pool is not None:
            if exc_type is not None:
                self.terminate()
            # Wait even after terminate(): with the workers gone the executor's thread ends at
            # once, and one still ending at exit races the interpreter's own clean-up (an
            # OSError traceback on Python 3.11). No future is ever cancelled: there, a
            # cancelled one makes that thread fail (InvalidStateError) when workers are gone.
            self._pool.shutdown(wait=True)
            self._pool = None

    def terminate(self) -> None:
        """End the worker processes now: SIGTERM (each removes the file it is writing and
        exits), then SIGKILL for any still running after a few seconds (stuck in a long
        encode; the file it leaves is removed by the next run)."""
        procs = [p for p in multiprocessing.active_children() if p not in self._others]
        for p in procs:
            p.terminate()
        deadline = time.monotonic() + _TERMINATE_WAIT_S
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()

    def stop(self) -> None:
        """Start no more files: the pad under way yields the results of the files already in
        progress (each completely written or not at all), then ends."""
        self._stopped = True
        if self._stopping is not None:
            self._stopping.set()

    def run(self, phase: str, indices: Sequence[int]) -> Iterator[Result]:
        """``(index, result)`` of :meth:`Painter.check` (``phase`` "check") or
        :meth:`Painter.pad_file` ("pad") for the jobs at ``indices``, in order."""
        self._stopped = False
        if self._painter is not None:
            yield from _work(self._painter, self.jobs, phase, indices, lambda: self._stopped)
            return
        assert self._pool is not None
        # Chunks large enough that the round trips between processes do not count, small
        # enough for a live progress count and a balanced end (8 a worker).
        size = max(1, min(64, len(indices) // (self.workers * 8)))
        chunks = [indices[i : i + size] for i in range(0, len(indices), size)]
        # The workers start at the first submit (each inherits this thread's signal mask,
        # even through spawn's exec; _init_worker unblocks): no stop signal reaches a worker
        # half started.
        blocks = hasattr(signal, "pthread_sigmask")
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if blocks else set()
        try:
            futures = [self._pool.submit(_run_chunk, phase, chunk) for chunk in chunks]
        finally:
            if blocks:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for future in futures:
            yield from future.result()  # after stop(), the chunks left end at once
