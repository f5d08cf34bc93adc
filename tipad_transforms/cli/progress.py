"""A one-line progress display (count, rate, ETA) for long ``tipad`` runs on a terminal."""

from __future__ import annotations

import time
from typing import TextIO

__all__ = ["Progress"]


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class Progress:
    """``label: done/total  rate img/s  ETA m:ss``, redrawn in place on ``stream``.

    Disabled (``enabled=False``) it writes nothing, so callers need no branches. Redraws at most
    ten times a second; :meth:`finish` leaves the final line with the elapsed time.
    """

    def __init__(self, stream: TextIO, total: int, label: str, *, enabled: bool) -> None:
        self.stream = stream
        self.total = total
        self.label = label
        self.enabled = enabled
        self.done = 0
        self._start = time.perf_counter()
        self._last_draw = -1.0
        self._width = 0

    def advance(self) -> None:
        self.done += 1
        now = time.perf_counter()
        if self.enabled and (now - self._last_draw >= 0.1 or self.done == self.total):
            self._last_draw = now
            self._draw(now)

    def _draw(self, now: float, final: bool = False) -> None:
        elapsed = now - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        images = "image" if self.total == 1 else "images"
        text = f"{self.label}: {self.done}/{self.total} {images}  {rate:,.0f} img/s"
        if final:
            text += f"  in {_clock(elapsed)}"
        elif rate > 0:
            text += f"  ETA {_clock((self.total - self.done) / rate)}"
        pad = " " * max(0, self._width - len(text))  # wipe the tail of a longer previous line
        self._width = len(text)
        self.stream.write("\r" + text + pad + ("\n" if final else ""))
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self._draw(time.perf_counter(), final=True)
