"""Preprocessing throughput: Ray Data actors with RayPadBatch vs DataLoader workers with PadCollate.

    python benchmarks/scaling.py [--images 384] [--batch 16] [--out out/scaling/scaling.json]

The same job both ways: decode a folder of generated PNGs of mixed sizes (RGB, sides 48-128),
pad each batch of 16 onto one brick-wall canvas rounded up to a multiple of 32 with random
placements and lattice offsets (one kernel launch per batch), hand the batches to the driver.

* DataLoader: ``num_workers`` 1 and 2 (``forkserver``, so the workers run the Taichi kernel),
  PIL decode in ``__getitem__``, ``PadCollate`` as ``collate_fn``.
* Ray Data: ``read_images -> map_batches(RayPadBatch, compute=ActorPoolStrategy(size=k))`` with
  1 and 2 CPU actors (``ray.init(num_cpus=2)``; each actor asks for 0.5 CPU so that the read
  tasks are not starved), consumed with ``iter_batches``.

Per run: the wall time of one pass including start-up (workers or actors: importing torch and
tipad, starting Taichi), the time to the first batch, images/s end to end, and the steady rate
over the second half of the images (from the batch that passes half of them to the last). One
pass per configuration (each pays its start-up again), so on a shared machine the numbers are
noisy: the JSON records the load average. Needs the ray extra (``pip install -e '.[ray]'``);
without it the Ray rows are reported as skipped.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import torch
from _common import format_table, machine_info, write_json
from torch.utils.data import DataLoader, Dataset

from tipad_transforms.data import PadCollate, RayPadBatch

SIDES = (48, 128)
MULTIPLE = 32


def make_images(folder: Path, n: int, seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        h, w = (int(v) for v in rng.integers(SIDES[0], SIDES[1] + 1, 2))
        # Smooth content compresses like a photo would, unlike uniform noise.
        y, x = np.mgrid[0:h, 0:w]
        base = (np.sin(x / 7 + i) + np.cos(y / 5)) * 60 + 128
        pixels = np.stack([base, base[::-1], base[:, ::-1]], -1)
        pixels = np.clip(pixels + rng.normal(0, 8, pixels.shape), 0, 255).astype(np.uint8)
        path = folder / f"img{i:04d}.png"
        PIL.Image.fromarray(pixels).save(path)
        paths.append(path)
    return paths


class Files(Dataset[torch.Tensor]):
    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        with PIL.Image.open(self.paths[i]) as im:
            return torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)


def _timed(batches: Any, count: Any) -> dict[str, float]:
    """Consume ``batches``: total seconds, seconds to the first batch, images/s end to end, and
    the steady rate over the second half of the images (start-up long over by then)."""
    t0 = time.perf_counter()
    marks: list[tuple[int, float]] = []  # (images so far, seconds)
    n = 0
    for batch in batches:
        n += count(batch)
        marks.append((n, time.perf_counter() - t0))
    assert marks, "no batches"
    total = marks[-1][1]
    half = next(m for m in marks if m[0] >= n / 2)
    steady = (n - half[0]) / (total - half[1]) if total > half[1] else float("nan")
    return {
        "images": n,
        "total_s": total,
        "first_batch_s": marks[0][1],
        "end_to_end_ips": n / total,
        "steady_ips": steady,
    }


def run_dataloader(paths: list[Path], workers: int, batch: int) -> dict[str, float]:
    loader = DataLoader(
        Files(paths),
        batch_size=batch,
        num_workers=workers,
        multiprocessing_context="forkserver"
        if "forkserver" in mp.get_all_start_methods()
        else "spawn",
        collate_fn=PadCollate(multiple=MULTIPLE, placement="random"),
    )
    return _timed(loader, lambda b: len(b[0]))


def run_ray(folder: Path, actors: int, batch: int) -> dict[str, float]:
    import ray.data

    ds = ray.data.read_images(str(folder), mode="RGB", include_paths=True)
    padded = ds.map_batches(
        RayPadBatch,
        fn_constructor_kwargs={"multiple": MULTIPLE, "placement": "random"},
        batch_size=batch,
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=0.5,
    )
    return _timed(padded.iter_batches(batch_size=None), lambda b: len(b["path"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--images", type=int, default=384)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("out/scaling/scaling.json"))
    args = ap.parse_args(argv)
    payload: dict[str, Any] = {"schema": "tipad-scaling/1", "machine": machine_info()}
    payload["settings"] = {"images": args.images, "batch": args.batch, "sides": SIDES}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tipad-scaling-") as tmp:
        folder = Path(tmp)
        paths = make_images(folder, args.images)
        for workers in (1, 2):
            print(f"DataLoader, {workers} worker(s)...", file=sys.stderr, flush=True)
            rows.append({"engine": "DataLoader + PadCollate", "procs": workers})
            rows[-1].update(run_dataloader(paths, workers, args.batch))
        try:
            import ray
        except ImportError:
            rows.append({"engine": "Ray Data + RayPadBatch", "procs": "-", "skipped": "no ray"})
        else:
            os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            ray.data.DataContext.get_current().enable_progress_bars = False
            try:
                for actors in (1, 2):
                    print(f"Ray Data, {actors} actor(s)...", file=sys.stderr, flush=True)
                    rows.append({"engine": "Ray Data + RayPadBatch", "procs": actors})
                    rows[-1].update(run_ray(folder, actors, args.batch))
            finally:
                ray.shutdown()
    payload["rows"] = rows
    payload["loadavg_at_end"] = list(os.getloadavg())
    write_json(args.out, payload)
    header = ["engine", "workers/actors", "images", "pass s", "first batch s", "img/s", "steady"]
    table = [
        [
            str(r["engine"]),
            str(r["procs"]),
            str(r.get("images", "-")),
            f"{r['total_s']:.1f}" if "total_s" in r else "-",
            f"{r['first_batch_s']:.1f}" if "first_batch_s" in r else "-",
            f"{r['end_to_end_ips']:.1f}" if "end_to_end_ips" in r else "-",
            f"{r['steady_ips']:.0f}" if "steady_ips" in r else r.get("skipped", "-"),
        ]
        for r in rows
    ]
    print(format_table(header, table, right="123456"))
    print(
        f"load average at start {payload['machine']['loadavg_at_start']}, at end "
        f"{payload['loadavg_at_end']}; JSON: {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
