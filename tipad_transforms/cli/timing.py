"""The ``tipad demo`` timing table: every padding beside the peers a user would pick instead
(``torch.nn.functional.pad``, torchvision v2's ``pad``) and a same-bytes ``copy_``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from .arguments import STANDARD_MODES
from .demo import stripes

__all__ = ["COPY", "PEERS", "Timing", "time_paddings", "timing_table"]

if TYPE_CHECKING:  # imported lazily: `tipad --help` stays instant
    import torch

#: The label of the same-bytes copy row: a canvas-sized ``copy_`` into a preallocated tensor.
COPY = "same-bytes copy_"
TORCH_MODES = ("constant", "replicate", "reflect", "circular")  # F.pad's, in tipad's order
V2_MODES = ("edge", "reflect", "symmetric")  # torchvision v2 pad's, timed too
#: Each tipad row's peers; the texture rows stand beside the cheapest padding of the same
#: bytes, ``F.pad`` constant.
PEERS: dict[str, tuple[str, ...]] = {
    "BrickPad": ("torch F.pad constant",),
    "TexturePad (stripes)": ("torch F.pad constant",),
    "pad constant": ("torch F.pad constant",),
    "pad edge": ("torch F.pad replicate", "v2 pad edge"),
    "pad reflect": ("torch F.pad reflect", "v2 pad reflect"),
    "pad symmetric": ("v2 pad symmetric",),
    "pad circular": ("torch F.pad circular",),
}


@dataclass
class Timing:
    """One row of the table: median ms for the batch and for one image; ``peers`` names the
    rows this one is compared with (empty for a peer or the copy)."""

    label: str
    batch_ms: float
    image_ms: float
    peers: tuple[str, ...] = ()


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
    """Median times of every tipad padding, then the peers and the copy (last): a random uint8
    ``(batch_size, 3, 224, 224)`` batch and one ``(3, 224, 224)`` image on ``device``, padded by
    ``padding`` px a side, on the Taichi kernel (the warm-up's torch route is off).
    Raises ValueError when ``device`` cannot hold a tensor here."""
    import numpy as np
    import torch
    import torch.nn.functional as nnF
    import torchvision.transforms.v2.functional as tvF

    from ..backends.warmup import no_warmup
    from ..functional import pad
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

    # The floor for writing the canvas once (its buffers made outside the timing).
    buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def same_bytes_copy(x: torch.Tensor) -> Any:
        pair = buffers.get(x.dim())
        if pair is None:
            canvas = nnF.pad(x, [padding] * 4)
            pair = buffers[x.dim()] = (torch.empty_like(canvas), canvas)
        return pair[0].copy_(pair[1])

    cases: list[tuple[str, Callable[[torch.Tensor], Any]]] = [
        ("BrickPad", brick_t),
        ("TexturePad (stripes)", texture_t),
        *((f"pad {m}", partial(pad, padding=padding, padding_mode=m)) for m in STANDARD_MODES),
        *((f"torch F.pad {m}", partial(nnF.pad, pad=[padding] * 4, mode=m)) for m in TORCH_MODES),
        *((f"v2 pad {m}", partial(tvF.pad, padding=[padding], padding_mode=m)) for m in V2_MODES),
        (COPY, same_bytes_copy),
    ]
    rows = []
    with no_warmup():  # the rows time the kernel, not the torch route of a fresh process
        for label, fn in cases:
            batch_ms = _median_ms(lambda: fn(batch), runs, sync)  # noqa: B023 (called at once)
            image_ms = _median_ms(lambda: fn(image), runs, sync)  # noqa: B023
            rows.append(Timing(label, batch_ms, image_ms, PEERS.get(label, ())))
    return rows


def timing_table(rows: list[Timing], padding: int, runs: int, batch: int, device: str) -> str:
    """``rows`` (as :func:`time_paddings` orders them) as a plain-text table: throughput, time
    relative to the copy and, for tipad's rows, to the faster peer (named in the last column);
    the other arguments are those the rows were timed with, for the heading."""
    import torch

    by_label = {r.label: r for r in rows}
    copy = by_label[COPY]
    out_bytes = batch * 3 * (224 + 2 * padding) ** 2
    threads = f" ({torch.get_num_threads()} threads)" if device == "cpu" else ""
    # label | batch: time, throughput, vs copy, vs peer | image: time, vs copy, vs peer | peer
    widths = (22, 10, 11, 8, 8, 10, 8, 8)

    def line(*cells: str, peer: str = "") -> str:
        label, *rest = cells
        parts = [f"{label:<{widths[0]}}"] + [
            f"{c:>{w}}" for c, w in zip(rest, widths[1:], strict=True)
        ]
        return (" ".join(parts[:5]) + "  " + " ".join(parts[5:]) + "  " + peer).rstrip()

    batch_w, image_w = sum(widths[1:5]) + 3, sum(widths[5:]) + 2
    groups = f"{'':{widths[0]}} {f'batch {batch}x3x224x224':^{batch_w}}  "
    groups += f"{'one image 3x224x224':^{image_w}}"
    header = line("mode", "time", "throughput", "vs copy", "vs peer", "time", "vs copy",
                  "vs peer", peer="peer (the faster)")  # fmt: skip
    rule = "-" * len(header)
    lines = [
        f"Padding uint8 images by {padding} px on {device}{threads}; median of >= {runs} runs "
        "after a warm-up.",
        "",
        groups.rstrip(),
        header,
        rule,
    ]
    first_peer = next((r for r in rows if not r.peers), None)
    for r in rows:
        if r is first_peer or r is copy:
            lines.append(rule)
        gbs = out_bytes / (r.batch_ms * 1e-3) / 1e9
        peers = [by_label[p] for p in r.peers if p in by_label]
        best = min(peers, key=lambda p: p.batch_ms) if peers else None
        lines.append(
            line(
                r.label,
                f"{r.batch_ms:.2f} ms",
                f"{gbs:.2f} GB/s",
                f"{r.batch_ms / copy.batch_ms:.2f}x",
                f"{r.batch_ms / best.batch_ms:.2f}x" if best else "",
                f"{r.image_ms:.3f} ms",
                f"{r.image_ms / copy.image_ms:.2f}x",
                f"{r.image_ms / best.image_ms:.2f}x" if best else "",
                peer=best.label if best else "",
            )
        )
    lines += [
        "",
        "throughput: output bytes written per second. vs copy: time relative to a copy_ of the",
        "canvas's bytes into a preallocated tensor (the floor for writing it once). vs peer: time",
        "relative to the faster of the mode's peers (torch F.pad, torchvision v2 pad; the texture",
        "rows stand beside F.pad constant). Below 1 is faster.",
    ]
    return "\n".join(lines)
