"""How a run stops: the first SIGINT, SIGTERM or SIGHUP unwinds the main thread (the file being
written is removed, the workers are ended) and the run exits 128 + N; a closed stdout (``|
head``) ends it quietly, 141, as a tool killed by SIGPIPE."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["SIGPIPE", "STOP_SIGNALS", "Interrupted", "quiet_closed_pipes", "stop_signals"]

STOP_SIGNALS = frozenset(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
SIGPIPE = getattr(signal, "SIGPIPE", 13)


class Interrupted(BaseException):
    """Raised in the main thread by the first stop signal, ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stop_signals() -> Iterator[list[int]]:
    """Turn the first stop signal into :class:`Interrupted` (the list gets every signal
    received); later ones are only recorded while the first one's clean-up runs (it is
    bounded). Handlers are restored afterwards; outside the main thread nothing is installed."""
    received: list[int] = []
    closing = False
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1 and not closing:
            raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield received
    finally:
        closing = True
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def quiet_closed_pipes() -> None:
    """Point stdout (and stderr, if it is the closed pipe too, as with ``2>&1 | head``) at
    /dev/null, so that the interpreter's last flush does not print an error either."""
    streams = [sys.stdout]
    try:
        sys.stderr.flush()
    except OSError:
        streams.append(sys.stderr)
    for stream in streams:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
