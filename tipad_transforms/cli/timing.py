"""The ``tipad demo`` timing table: every padding against ``torch.nn.functional.pad``.

:func:`time_paddings` measures (median wall times, a batch and one image), :func:`timing_table`
formats the rows as the plain-text table the demo prints.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .arguments import STANDARD_MODES
from .demo import stripes

__all__ = ["Timing", "time_paddings", "timing_table"]

if TYPE_CHECKING:  # imported lazily: `tipad --help` stays instant
    import torch


@dataclass
class Timing:
    """One row of the table: median ms for the batch and for one image."""

    label: str
    batch_ms: float
    image_ms: float


def _median_ms(fn: Callable[[], Any], runs: int, sync: Callable[[], None]) -> float:
    """Median wall time of ``fn`` in ms: at least ``runs`` runs, more (up to 200) for fast calls
    until 0.2 s have passed, so microsecond timings are not one scheduler hiccup."""
    # Warm-up: the first call compiles the kernel; the next few still pay the thread pool's
    # start and fresh outputs' first page touches.
    for _ in range(3):
        fn()
    sync()
    times: list[float] = []
    while len(times) < runs or (sum(times) < 0.2 and len(times) < 200):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def time_paddings(padding: int, runs: int, batch_size: int, device: str) -> list[Timing]:
    """Median times of every padding (and ``F.pad`` constant, last) on random uint8 images.

    Each row times a ``(batch_size, 3, 224, 224)`` batch and one ``(3, 224, 224)`` image on
    ``device``, padded by ``padding`` px on every side, at least ``runs`` times each after
    three warm-up calls, on the Taichi kernel (not the torch route a fresh process pads on first).
    Raises ValueError when ``device`` cannot hold a tensor here.
    """
    import numpy as np
    import torch
    import torch.nn.functional as nnF

    from ..backends.warmup import no_warmup
    from ..transforms import BrickPad, TexturePad

    try:
        dev = torch.device(device)
        gen = torch.Generator().manual_seed(0)
        batch = torch.randint(0, 256, (batch_size, 3, 224, 224), dtype=torch.uint8, generator=gen)
        batch = batch.to(dev)
    except (RuntimeError, AssertionError) as e:
        raise ValueError(f"device {device!r} is not usable here: {e}") from None
    image = batch[0].clone()

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    tile = torch.from_numpy(np.array(stripes())).permute(2, 0, 1).to(dev)
    brick_t, texture_t = BrickPad(padding), TexturePad(padding, tile.contiguous())

    def standard(mode: str) -> Callable[[torch.Tensor], Any]:
        from ..functional import pad  # lazily: the command line starts without torch

        return lambda x: pad(x, padding, padding_mode=mode)

    cases: list[tuple[str, Callable[[torch.Tensor], Any]]] = [
        ("BrickPad", brick_t),
        ("TexturePad (stripes)", texture_t),
        *((f"pad {m}", standard(m)) for m in STANDARD_MODES),
        ("torch F.pad constant", lambda x: nnF.pad(x, [padding] * 4)),
    ]
    rows = []
    with no_warmup():  # the rows time the kernel, not the torch route of a fresh process
        for label, fn in cases:
            batch_ms = _median_ms(lambda: fn(batch), runs, sync)  # noqa: B023 (called at once)
            image_ms = _median_ms(lambda: fn(image), runs, sync)  # noqa: B023
            rows.append(Timing(label, batch_ms, image_ms))
    return rows


def timing_table(rows: list[Timing], padding: int, runs: int, batch: int, device: str) -> str:
    """``rows`` (from :func:`time_paddings`, ``F.pad`` last) as a plain-text table with
    throughput and ratios to ``F.pad``; the other arguments are the ones the rows were timed
    with and appear in the heading."""
    import torch

    yard = rows[-1]
    out_bytes = batch * 3 * (224 + 2 * padding) ** 2
    threads = f" ({torch.get_num_threads()} threads)" if device == "cpu" else ""
    widths = (22, 10, 12, 9, 10, 10)  # label | batch: time, throughput, ratio | image: time, ratio

    def line(*cells: str) -> str:
        label, *rest = cells
        parts = [f"{label:<{widths[0]}}"] + [
            f"{c:>{w}}" for c, w in zip(rest, widths[1:], strict=True)
        ]
        return " ".join(parts[:4]) + "  " + " ".join(parts[4:])

    batch_w, image_w = sum(widths[1:4]) + 2, sum(widths[4:]) + 1
    groups = f"{'':{widths[0]}} {f'batch {batch}x3x224x224':^{batch_w}}  "
    groups += f"{'one image 3x224x224':^{image_w}}"
    header = line("mode", "time", "throughput", "vs F.pad", "time", "vs F.pad")
    rule = "-" * len(header)
    lines = [
        f"Padding uint8 images by {padding} px on {device}{threads}; median of >= {runs} runs "
        "after a warm-up.",
        "",
        groups.rstrip(),
        header,
        rule,
    ]
    for r in rows:
        if r is yard:
            lines.append(rule)
        gbs = out_bytes / (r.batch_ms * 1e-3) / 1e9
        lines.append(
            line(
                r.label,
                f"{r.batch_ms:.2f} ms",
                f"{gbs:.2f} GB/s",
                f"{r.batch_ms / yard.batch_ms:.2f}x",
                f"{r.image_ms:.3f} ms",
                f"{r.image_ms / yard.image_ms:.2f}x",
            )
        )
    lines += [
        "",
        "throughput: output bytes written per second. vs F.pad: time relative to",
        "torch.nn.functional.pad (a constant border) on the same input; below 1 is faster.",
    ]
    return "\n".join(lines)
