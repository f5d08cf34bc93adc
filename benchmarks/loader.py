"""Images per second through whole DataLoader epochs of variable-size images, per pipeline.

    python benchmarks/loader.py [--quick] [--workers 2] [--device cpu|cuda] [--out out/bench]

Same images, same worker count, same start method, same batch size, for every pipeline:

* ``a``   torchvision today: every sample padded to the common size by ``v2.Pad`` (reflect) in
          the dataset's transform, inside the workers, then ``default_collate`` stacks them;
* ``b``   ``PadCollate`` (brick wall) as the ``collate_fn``: one launch per batch, in the workers;
* ``b-reflect`` the same with ``padding_mode="reflect"``: the same canvases as ``a``, bit for
          bit (checked);
* ``a-tipad`` ``a`` with tipad in place of ``v2.Pad``: every sample padded to the common size by
          ``functional.brick_pad`` (brick wall) in the dataset's transform, one call per image;
* ``a-brick`` ``a`` plus c's augmentation done per sample: ``BrickPad(16, random_offset=True)``
          on every image in the dataset's transform (one call per image, in the workers);
* ``c``   ``PadCollate`` in the workers plus ``DeviceLoader`` running ``BrickPad(16,
          random_offset=True)`` on the device batch (per-sample offsets, one launch).

Every pipeline's batches go through ``DeviceLoader(loader, device)`` (only ``c`` with
transforms), so all of them end on the device and only the padding differs. Workers are
persistent: one warm-up epoch each (worker start, Taichi start and compile: reported apart;
``TIPAD_WORKER_WARMUP=0`` in the workers, so Taichi starts in that epoch), then ``--repeats``
rounds, each one epoch of every pipeline in an order rotated per round.
Reported: median images/s over rounds (quartiles, min and every epoch time in the JSON), ratios
to ``a``, the issue's targets. Writes ``<out>/loader.json`` and ``<out>/loader.png``.

Start method: ``spawn`` by default (``--context``). On the CPU the device stage of ``c`` starts
Taichi in this process; a worker *forked* after that could not run the kernel (the package falls
back to its torch route, with a warning) and would measure the wrong thing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from _common import Stats, format_table, machine_info, runtime_sha, write_json
from torch.utils.data import DataLoader, Dataset, default_collate
from torchvision.transforms import v2

from tipad_transforms import BrickPad
from tipad_transforms import functional as F
from tipad_transforms.assets import SAMPLE_NAMES, load_sample

DEVICE_PAD = 16  # the device-stage BrickPad of pipeline c
PEERS = ["a", "b", "b-reflect", "a-tipad", "a-brick", "c"]

NOTES = [
    "The images are made once in memory from the bundled sample photos (random crops resized "
    "to a random (h, w), each side uniform in [min-side, max-side]), uint8 RGB, and shared with "
    "the workers through torch's shared memory: no decoding, so padding and collation are all "
    "the work a worker does. With JPEG decoding in the dataset every pipeline would be slower "
    "by the same per-image cost and the ratios closer to 1.",
    "Canvas: the fixed (max-side, max-side) for every pipeline, each image centred, so every "
    "pipeline writes the same number of bytes per batch; a (labels) tuple per sample, "
    "shuffle=False (the first batch of every pipeline is checked against the source images).",
    "a: v2.Pad(reflect) per sample in Dataset.__getitem__ (torchvision casts uint8 to float "
    "and back for reflect), default_collate stacks into shared memory. b: PadCollate(size) "
    "brick wall, one kernel launch per batch. b-reflect: PadCollate(size, padding_mode='reflect'), "
    "canvases bit-equal to a's. c: b's collate plus DeviceLoader(transforms=BrickPad(16, "
    "random_offset=True)) on the device: per-sample offsets, one launch per batch, output "
    "(B, 3, max-side + 32, max-side + 32). a-tipad: a with tipad's brick_pad in place of "
    "v2.Pad (same canvas, brick wall instead of reflect), one call per image in the workers. "
    "a-brick: a's transform followed by the same "
    "BrickPad(16, random_offset=True) per sample in the dataset (one call per image in the "
    "workers): c's output, made the per-sample way.",
    "All pipelines go through DeviceLoader(loader, device) (only c with transforms), so all "
    "batches end on the device; on CUDA the DataLoader pins memory and the epoch ends with a "
    "synchronize.",
    "An epoch is timed from iter(loader) to the end of its last batch. Workers are persistent "
    "(persistent_workers=True): their start (process spawn, imports, Taichi start and kernel "
    "compile) is in the warm-up epoch, reported separately.",
    "Worker threads: DataLoader sets torch to 1 thread per worker; worker_init_fn sets "
    "TI_CPU_MAX_NUM_THREADS to --worker-threads (default 1) before Taichi starts in the worker, "
    "so that workers x threads does not oversubscribe the cores.",
    "On a shared machine absolute rates are noisy; pipelines are interleaved (order rotated "
    "each round) so drift lands on all of them; read the ratios.",
]


# ---------------------------------------------------------------------------------- the data ---


def make_images(count: int, min_side: int, max_side: int, seed: int) -> list[torch.Tensor]:
    """``count`` uint8 ``(3, h, w)`` images, ``h, w`` uniform in ``[min_side, max_side]``.

    Random crops of the bundled sample photos, resized: natural image statistics, no download.
    """
    g = torch.Generator().manual_seed(seed)
    photos = [v2.functional.pil_to_tensor(load_sample(n).convert("RGB")) for n in SAMPLE_NAMES]
    out = []
    for i in range(count):
        photo = photos[i % len(photos)]
        ph, pw = photo.shape[-2:]
        ch = int(torch.randint(ph // 2, ph + 1, (1,), generator=g))
        cw = int(torch.randint(pw // 2, pw + 1, (1,), generator=g))
        top = int(torch.randint(0, ph - ch + 1, (1,), generator=g))
        left = int(torch.randint(0, pw - cw + 1, (1,), generator=g))
        h, w = (int(v) for v in torch.randint(min_side, max_side + 1, (2,), generator=g))
        out.append(v2.functional.resized_crop(photo, top, left, ch, cw, [h, w], antialias=True))
    return out


def centre_padding(h: int, w: int, size: int) -> list[int]:
    """``[left, top, right, bottom]`` that centres an ``(h, w)`` image on a ``size`` square."""
    top, left = (size - h) // 2, (size - w) // 2
    return [left, top, size - w - left, size - h - top]


class PadToSquare:
    """Pipeline a's per-sample transform: ``v2.functional.pad`` to a centred ``size`` square."""

    def __init__(self, size: int, mode: str) -> None:
        self.size = size
        self.mode = mode

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        pad = centre_padding(img.shape[-2], img.shape[-1], self.size)
        out: torch.Tensor = v2.functional.pad(img, pad, padding_mode=self.mode)
        return out


class BrickToSquare(PadToSquare):
    """Pipeline a-tipad's per-sample transform: tipad's ``brick_pad`` to a centred ``size``
    square (a's transform with a brick wall instead of a reflection)."""

    def __init__(self, size: int) -> None:
        super().__init__(size, "brick")

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        return F.brick_pad(img, centre_padding(img.shape[-2], img.shape[-1], self.size))


class VariableSizeImages(Dataset[tuple[torch.Tensor, int]]):
    """``(image, label)`` samples from one flat uint8 buffer (one shared-memory block).

    ``transform``, if given, runs on the ``(3, h, w)`` image in ``__getitem__`` (in the worker).
    """

    def __init__(
        self,
        images: list[torch.Tensor],
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.data = torch.cat([im.reshape(-1) for im in images])
        self.shapes = [tuple(im.shape) for im in images]
        sizes = torch.tensor([im.numel() for im in images])
        self.starts = (torch.cumsum(sizes, 0) - sizes).tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.shapes)

    def image(self, i: int) -> torch.Tensor:
        shape = self.shapes[i]
        n = shape[0] * shape[1] * shape[2]
        return self.data[self.starts[i] : self.starts[i] + n].view(shape)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        img = self.image(i)
        return (self.transform(img) if self.transform else img), i % 10


class WorkerThreads:
    """``worker_init_fn``: cap Taichi's CPU threads in each worker before Taichi starts there,
    and start it on the worker's first pad (no torch-route warm-up): the timed epochs then
    measure the persistent workers' steady state, whatever the warm-up epoch's length."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def __call__(self, worker_id: int) -> None:
        os.environ["TI_CPU_MAX_NUM_THREADS"] = str(self.threads)
        os.environ["TIPAD_WORKER_WARMUP"] = "0"


# ----------------------------------------------------------------------------- the pipelines ---


@dataclass
class Pipeline:
    key: str
    label: str
    loader: Iterable[Any]
    note: str = ""
    warmup_s: float = float("nan")
    epochs_s: list[float] = field(default_factory=list)


def build_pipelines(
    images: list[torch.Tensor], args: argparse.Namespace, device: torch.device
) -> list[Pipeline]:
    from tipad_transforms.data import DeviceLoader, PadCollate

    size = (args.max_side, args.max_side)
    common: dict[str, Any] = {
        "batch_size": args.batch,
        "shuffle": False,
        "num_workers": args.workers,
        "pin_memory": device.type == "cuda",
    }
    if args.workers:
        common.update(
            multiprocessing_context=args.context,
            persistent_workers=True,
            worker_init_fn=WorkerThreads(args.worker_threads),
        )
    plain = VariableSizeImages(images)
    padded = VariableSizeImages(images, PadToSquare(args.max_side, "reflect"))
    padded_tipad = VariableSizeImages(images, BrickToSquare(args.max_side))
    # c's augmentation done the per-sample way: in the dataset, one BrickPad call per image.
    padded_brick = VariableSizeImages(
        images,
        v2.Compose(
            [PadToSquare(args.max_side, "reflect"), BrickPad(DEVICE_PAD, random_offset=True)]
        ),
    )

    def wrap(loader: DataLoader[Any], transforms: Any = None) -> Iterable[Any]:
        return DeviceLoader(loader, device, transforms=transforms)

    made = {
        "a": Pipeline(
            "a",
            "a: v2.Pad(reflect) per sample + default_collate",
            wrap(DataLoader(padded, collate_fn=default_collate, **common)),
        ),
        "b": Pipeline(
            "b",
            "b: PadCollate (brick wall)",
            wrap(DataLoader(plain, collate_fn=PadCollate(size, return_regions=True), **common)),
        ),
        "b-reflect": Pipeline(
            "b-reflect",
            "b-reflect: PadCollate(padding_mode='reflect')",
            wrap(
                DataLoader(
                    plain,
                    collate_fn=PadCollate(size, padding_mode="reflect", return_regions=True),
                    **common,
                )
            ),
        ),
        "a-tipad": Pipeline(
            "a-tipad",
            "a-tipad: tipad brick_pad per sample + default_collate",
            wrap(DataLoader(padded_tipad, collate_fn=default_collate, **common)),
        ),
        "a-brick": Pipeline(
            "a-brick",
            f"a-brick: a + BrickPad({DEVICE_PAD}) per sample",
            wrap(DataLoader(padded_brick, collate_fn=default_collate, **common)),
        ),
        "c": Pipeline(
            "c",
            f"c: PadCollate + DeviceLoader(BrickPad({DEVICE_PAD}))",
            wrap(
                DataLoader(plain, collate_fn=PadCollate(size, return_regions=True), **common),
                BrickPad(DEVICE_PAD, random_offset=True),
            ),
        ),
    }
    return [made[k] for k in args.peers]


def check_first_batch(p: Pipeline, batch: Any, images: list[torch.Tensor], size: int) -> str:
    """The first batch holds the first images, untouched, where its regions say (or centred)."""
    imgs, labels = batch[0], batch[1]
    n = imgs.shape[0]
    border = DEVICE_PAD if p.key in ("c", "a-brick") else 0
    want_shape = (n, 3, size + 2 * border, size + 2 * border)
    if tuple(imgs.shape) != want_shape or imgs.dtype != torch.uint8:
        raise AssertionError(f"{p.key}: batch {tuple(imgs.shape)} {imgs.dtype}, want {want_shape}")
    if not torch.equal(labels.cpu(), torch.arange(n) % 10):
        raise AssertionError(f"{p.key}: labels {labels.tolist()} are not the first samples'")
    regions = batch[2].cpu() if len(batch) > 2 else None
    for i in range(n):
        h, w = images[i].shape[-2:]
        left, top, _, _ = centre_padding(h, w, size)
        if regions is not None:
            rt, rl, rh, rw = regions[i].tolist()
            # c's device-side BrickPad moves the regions along with the images.
            if (rh, rw) != (h, w) or (rt, rl) != (top + border, left + border):
                raise AssertionError(f"{p.key}: region {regions[i].tolist()} for {(h, w)} image")
        y, x = top + border, left + border
        if not torch.equal(imgs[i, :, y : y + h, x : x + w].cpu(), images[i]):
            raise AssertionError(f"{p.key}: image {i} is not copied unchanged into its canvas")
    return "first batch: every image copied unchanged where it was placed, labels in order"


def run_epoch(p: Pipeline, sync: Callable[[], None]) -> tuple[float, int, Any]:
    """Seconds for one whole epoch of ``p``, images seen, and its first batch."""
    first = None
    seen = 0
    sync()
    t0 = time.perf_counter()
    for batch in p.loader:
        if first is None:
            first = batch
        seen += batch[0].shape[0]
    sync()
    return time.perf_counter() - t0, seen, first


# ----------------------------------------------------------------------------------- reports ---


def rates(p: Pipeline, count: int) -> Stats:
    return Stats.of([count / t for t in p.epochs_s])


def report_table(pipes: list[Pipeline], count: int) -> str:
    base = statistics.median(count / t for t in pipes[0].epochs_s) if pipes else float("nan")
    rows = []
    for p in pipes:
        s = rates(p, count)
        rows.append(
            [
                p.label,
                f"{s.median_s:,.0f}",
                f"{s.q1_s:,.0f}-{s.q3_s:,.0f}",
                f"{statistics.median(p.epochs_s):.3f}",
                f"{s.median_s / base:.2f}x",
                f"{p.warmup_s:.1f}",
            ]
        )
    header = ["pipeline", "images/s", "quartiles", "epoch s", f"/ {pipes[0].key}", "warm-up s"]
    return format_table(header, rows, right="12345")


def evaluate_targets(pipes: dict[str, Pipeline], count: int, device: str) -> list[dict[str, Any]]:
    med = {k: rates(p, count).median_s for k, p in pipes.items()}
    out: list[dict[str, Any]] = []
    if "a" not in med:
        return out
    for k in ("b", "c", "a-tipad", "a-brick"):
        if k in med:
            ratio = med[k] / med["a"]
            out.append(
                {
                    "target": f"{k} at least as fast as a (images/s, {device})",
                    "measured": f"{ratio:.2f}x a's rate ({med[k]:,.0f} vs {med['a']:,.0f} img/s)",
                    "met": ratio >= 1.0,
                }
            )
    if device == "cuda" and "b" in med and "c" in med:
        # c's device stage must cost the workers nothing: c's rate equals b's (within noise).
        ratio = med["c"] / med["b"]
        out.append(
            {
                "target": "c's device augmentation adds no worker cost: c within 5% of b (cuda)",
                "measured": f"{ratio:.2f}x b's rate",
                "met": ratio >= 0.95,
            }
        )
    return out


def plot(pipes: list[Pipeline], count: int, path: Path, title: str) -> Path | None:
    """Bars of median images/s (whiskers: quartiles) with the ratio to the first pipeline."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    stats = [rates(p, count) for p in pipes]
    base = stats[0].median_s
    colours = {
        "a": "#2980b9",
        "b": "#c0392b",
        "b-reflect": "#e67e22",
        "a-tipad": "#1abc9c",
        "a-brick": "#5dade2",
        "c": "#8e44ad",
    }
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(pipes) + 1.8))
    y = list(range(len(pipes)))
    ax.barh(
        y,
        [s.median_s for s in stats],
        xerr=[[s.median_s - s.q1_s for s in stats], [s.q3_s - s.median_s for s in stats]],
        color=[colours.get(p.key, "#7f8c8d") for p in pipes],
        capsize=3,
        error_kw={"elinewidth": 0.8, "ecolor": "#555555"},
    )
    ax.set_yticks(y, [p.label for p in pipes], fontsize=9)
    ax.invert_yaxis()
    for yi, s in zip(y, stats, strict=True):
        ax.annotate(
            f"{s.median_s:,.0f} img/s  ({s.median_s / base:.2f}x)",
            (s.q3_s, yi),
            xytext=(5, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, max(s.q3_s for s in stats) * 1.45)
    ax.set_xlabel("images per second through a whole epoch (median; whiskers: quartiles)")
    fig.suptitle(title, fontsize=9, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -------------------------------------------------------------------------------------- main ---


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 128 images, 2 rounds")
    ap.add_argument("--out", type=Path, default=Path("out/bench"), help="output directory")
    ap.add_argument("--device", default="cpu", help="where the batches go: cpu or cuda")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    ap.add_argument(
        "--context",
        default="spawn",
        choices=["spawn", "forkserver", "fork"],
        help="worker start method (default spawn; see the module docstring about fork)",
    )
    ap.add_argument(
        "--worker-threads", type=int, default=1, help="Taichi CPU threads per worker (default 1)"
    )
    ap.add_argument("--images", type=int, help="images per epoch (default 1024, quick 128)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    ap.add_argument("--min-side", type=int, default=150)
    ap.add_argument("--max-side", type=int, default=256, help="also the canvas side")
    ap.add_argument("--repeats", type=int, help="timed epochs per pipeline (default 9, quick 2)")
    ap.add_argument(
        "--peers",
        nargs="+",
        default=PEERS,
        choices=PEERS,
        help="pipelines to run; the first is the yardstick of the ratios (default all)",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    count = args.images or (128 if args.quick else 1024)
    repeats = args.repeats or (2 if args.quick else 9)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.manual_seed(args.seed)

    start = time.perf_counter()
    info = machine_info()
    log(
        f"tipad loader benchmark: {count} images, batch {args.batch}, {args.workers} "
        f"{args.context} workers, device {device}; load average {info['loadavg_at_start']}"
    )
    images = make_images(count, args.min_side, args.max_side, args.seed)
    pipes = build_pipelines(images, args, device)

    checks: dict[str, str] = {}
    firsts: dict[str, Any] = {}
    for p in pipes:
        log(f"{p.key}: warm-up epoch (starts workers, Taichi, compiles)...")
        p.warmup_s, seen, first = run_epoch(p, sync)
        if seen != count:
            raise AssertionError(f"{p.key}: an epoch gave {seen} images, want {count}")
        checks[p.key] = check_first_batch(p, first, images, args.max_side)
        firsts[p.key] = first[0]
        log(f"  {p.warmup_s:.1f} s; {checks[p.key]}")
    if "a" in firsts and "b-reflect" in firsts:
        same = torch.equal(firsts["a"].cpu(), firsts["b-reflect"].cpu())
        if not same:
            raise AssertionError("b-reflect's first batch differs from a's: not the same work")
        checks["b-reflect"] += "; bit-equal to a's first batch"
    del firsts

    for r in range(repeats):
        k = r % len(pipes)
        for p in [*pipes[k:], *pipes[:k]]:
            p.epochs_s.append(run_epoch(p, sync)[0])
        log(f"  round {r + 1}/{repeats} done")

    table = report_table(pipes, count)
    targets = evaluate_targets({p.key: p for p in pipes}, count, device.type)
    info["loadavg_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    info["runtime_py_sha256_at_end"] = runtime_sha()
    info["total_wall_s"] = time.perf_counter() - start
    warnings_: list[str] = []
    if info["runtime_py_sha256_at_end"] != info["runtime_py_sha256"]:
        warnings_.append(
            "tipad_transforms' kernel sources changed during the run: check which kernel file "
            "changed (the padding kernel is _pad.py) and run again if it was that one"
        )
        print("WARNING: " + warnings_[-1])
    print(f"\n{count} images/epoch, {args.workers} {args.context} workers, device {device}")
    print(table)
    if targets:
        print(
            "\nTargets (the issue's)\n"
            + format_table(
                ["target", "measured", "verdict"],
                [[t["target"], t["measured"], "MET" if t["met"] else "MISSED"] for t in targets],
            )
        )
    print(f"load average at start {info['loadavg_at_start']}, at end {info['loadavg_at_end']}")

    args.out.mkdir(parents=True, exist_ok=True)
    png = plot(
        pipes,
        count,
        args.out / "loader.png",
        f"DataLoader epoch of {count} images ({args.min_side}-{args.max_side} px, uint8 RGB), "
        f"batch {args.batch}, {args.workers} {args.context} workers, device {device}\n"
        f"{info['cpu_model']}, {info['cpu_count']} CPUs, torch {info['torch']} - {info['date']}",
    )
    payload = {
        "schema": "tipad-bench-loader/1",
        "machine": info,
        "settings": {
            "quick": args.quick,
            "images": count,
            "batch_size": args.batch,
            "sides": [args.min_side, args.max_side],
            "canvas": [args.max_side, args.max_side],
            "workers": args.workers,
            "multiprocessing_context": args.context,
            "worker_taichi_threads": args.worker_threads,
            "device": str(device),
            "device_stage_padding": DEVICE_PAD,
            "repeats": repeats,
            "seed": args.seed,
        },
        "notes": NOTES,
        "warnings": warnings_,
        "pipelines": [
            {
                "key": p.key,
                "label": p.label,
                "check": checks[p.key],
                "warmup_epoch_s": p.warmup_s,
                "epochs_s": p.epochs_s,
                "images_per_s_median": rates(p, count).median_s,
                "images_per_s_q1": rates(p, count).q1_s,
                "images_per_s_q3": rates(p, count).q3_s,
                "images_per_s_max": rates(p, count).max_s,
                "ratio_to_first": rates(p, count).median_s / rates(pipes[0], count).median_s,
            }
            for p in pipes
        ],
        "targets": targets,
        "table": table,
        "plot": str(png) if png else None,
    }
    write_json(args.out / "loader.json", payload)
    print(f"wrote {args.out / 'loader.json'}" + (f" and {png}" if png else " (no matplotlib)"))
    print(f"total {info['total_wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
