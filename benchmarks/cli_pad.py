"""``tipad pad`` on folder trees against a plain PIL loop on the same trees: images per second.

    python benchmarks/cli_pad.py [--count 1000] [--photos 12] [--workers N] [--repeats 3]
                                 [--dir DIR] [--with-fsync] [--out out/cli-pad]

Two trees, made in ``--dir`` (default: the system's temporary folder; a RAM disk such as
``/dev/shm`` takes the disk's metadata latency out of both peers):

* ``small``: :func:`make_image_tree` (also used by ``tests/cli``), ``count`` small images (8-40 px
  a side) of mixed formats and modes in nested folders: PNG RGB, RGBA, grey and palette (some
  with a transparent entry), JPEG RGB and grey, GIF palette;
* ``photos``: :func:`make_photo_tree`, ``--photos`` JPEG photos of ``--photo-size`` (default
  3000x2000).

Every peer reads each file, pads it by ``--padding`` px and writes it under a mirrored tree in
the input's format (JPEG at quality 95):

* ``PIL loop``: ``PIL.Image.open``, ``ImageOps.expand`` (a constant border), ``save``; one
  process, no temporary file;
* ``tipad constant`` and ``tipad reflect``: ``tipad pad DIR -o OUT --recursive --mode M
  --workers N --no-progress`` run in this process through ``tipad_transforms.cli.main`` (no
  interpreter or torch import timed; the worker processes' start, the check of every input and
  the atomic writes are). Constant is the loop's own work; reflect is more. ``--with-fsync``
  adds ``tipad constant --fsync`` (every output flushed to disk before its rename).

After one untimed round of every peer, ``--repeats`` rounds time each peer once, in an order
rotated by one place per round. Printed and written to ``<out>/cli-pad.json``: each peer's
median images/s, the spread (slowest and fastest round), the ratio of medians to the PIL loop
and the median CPU time per image of all its processes, per tree. The machine this runs on may
be shared: read the spread, not one number; where other jobs hold the cores, the workers
cannot run side by side and the CPU time says more than the wall time.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import PIL.Image
from PIL import ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # quiets Taichi, puts this checkout first on sys.path

#: (suffix, PIL mode, save options) of the kinds in the tree, drawn in turn.
KINDS: tuple[tuple[str, str, dict[str, object]], ...] = (
    (".png", "RGB", {}),
    (".png", "RGBA", {}),
    (".png", "L", {}),
    (".png", "P", {}),
    (".png", "P", {"transparency": 3}),
    (".jpg", "RGB", {"quality": 90}),
    (".jpg", "L", {"quality": 90}),
    (".gif", "P", {}),
)


def _palette(rng: np.random.Generator, colours: int) -> list[int]:
    """``colours`` distinct RGB entries (the red channel is distinct), so indices round-trip."""
    red = rng.permutation(256)[:colours]
    green_blue = rng.integers(0, 256, (colours, 2))
    return np.column_stack([red, green_blue]).astype(np.uint8).reshape(-1).tolist()


def make_image_tree(root: Path, count: int, seed: int = 0) -> list[Path]:
    """Write ``count`` small mixed images under ``root`` (nested folders) and one text file
    that is not an image; return the image paths."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        suffix, mode, options = KINDS[i % len(KINDS)]
        folder = root / f"set{i % 4}" / (f"part{i % 3}" if i % 2 else "")
        folder.mkdir(parents=True, exist_ok=True)
        w, h = (int(v) for v in rng.integers(8, 41, 2))
        if mode == "P":
            index = rng.integers(0, 16, (h, w), dtype=np.uint8)
            img = PIL.Image.frombytes("P", (w, h), index.tobytes())
            img.putpalette(_palette(rng, 16))
        else:
            bands = len(mode)
            arr = rng.integers(0, 256, (h, w, bands), dtype=np.uint8)
            img = PIL.Image.fromarray(arr[..., 0] if bands == 1 else arr, mode)
        path = folder / f"img{i:05d}{suffix}"
        img.save(path, **options)  # type: ignore[arg-type]
        paths.append(path)
    (root / "set0" / "notes.txt").write_text("not an image: tipad pad skips it\n")
    return paths


def make_photo_tree(root: Path, count: int, size: tuple[int, int], seed: int = 0) -> list[Path]:
    """Write ``count`` JPEG photos of ``size`` under ``root`` (two folders): the bundled sample
    photo scaled up with grain, so that they encode like photographs, not noise."""
    from tipad_transforms.assets import load_sample

    rng = np.random.default_rng(seed)
    base = load_sample("grace_hopper").convert("RGB").resize(size, PIL.Image.Resampling.BICUBIC)
    paths = []
    for i in range(count):
        grain = rng.normal(0, 6, (size[1], size[0], 1)).astype(np.int16)
        arr = np.clip(np.asarray(base, np.int16) + grain + i, 0, 255).astype(np.uint8)
        path = root / f"roll{i % 2}" / f"photo{i:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        PIL.Image.fromarray(arr).save(path, quality=90)
        paths.append(path)
    return paths


def pil_loop(src: Path, dst: Path, padding: int) -> int:
    """Pad every image under ``src`` into ``dst`` with PIL alone; return the count."""
    count = 0
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".png", ".jpg", ".gif"):
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        with PIL.Image.open(path) as img:
            fmt = img.format
            fill = 0 if img.mode in ("P", "L") else (0,) * len(img.getbands())
            out = ImageOps.expand(img, padding, fill=fill)
            out.save(target, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
        count += 1
    return count


def tipad_cli(
    src: Path, dst: Path, padding: int, workers: int, mode: str = "reflect", *extra: str
) -> int:
    from tipad_transforms.cli import main

    argv = [str(src), "-o", str(dst), "--recursive", "--mode", mode, *extra]
    argv += ["--padding", str(padding), "--workers", str(workers), "--no-progress"]
    with redirect_stdout(io.StringIO()):
        status = main(["pad", *argv])
    if status != 0:
        raise SystemExit(f"tipad pad exited with {status}")
    return sum(1 for p in dst.rglob("*") if p.is_file())


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the workers)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _run(peer: str, src: Path, dst: Path, padding: int, workers: int) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (all processes) and files written of one round of ``peer``."""
    shutil.rmtree(dst, ignore_errors=True)
    start, cpu = time.perf_counter(), _cpu()
    if peer == "PIL loop":
        n = pil_loop(src, dst, padding)
    else:  # "tipad MODE [OPTION]"
        n = tipad_cli(src, dst, padding, workers, *peer.split()[1:])
    return time.perf_counter() - start, _cpu() - cpu, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="small images (1000; 0: none)")
    parser.add_argument("--photos", type=int, default=12, help="large photos (12; 0: none)")
    parser.add_argument("--photo-size", default="3000x2000", metavar="WxH")
    parser.add_argument("--padding", type=int, default=8)
    parser.add_argument("--workers", type=int, default=None, help="default: every core")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the trees are written")
    parser.add_argument("--out", type=Path, default=Path("out/cli-pad"))
    parser.add_argument(
        "--with-fsync", action="store_true", help="time tipad constant --fsync too (slow)"
    )
    args = parser.parse_args()
    peers = ["PIL loop", "tipad constant", "tipad reflect"]
    peers += ["tipad constant --fsync"] if args.with_fsync else []
    from tipad_transforms.cli.workers import default_workers

    workers = args.workers if args.workers is not None else default_workers()
    photo_size = tuple(int(v) for v in args.photo_size.lower().split("x"))
    info = _common.machine_info()
    seconds: dict[str, dict[str, list[float]]] = {}
    cpu_seconds: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        trees: dict[str, tuple[Path, int]] = {}
        if args.count:
            trees["small"] = (Path(tmp) / "small", args.count)
            make_image_tree(trees["small"][0], args.count)
        if args.photos:
            trees["photos"] = (Path(tmp) / "photos", args.photos)
            make_photo_tree(trees["photos"][0], args.photos, photo_size)  # type: ignore[arg-type]
        for name, (src, count) in trees.items():
            seconds[name] = {peer: [] for peer in peers}
            cpu_seconds[name] = {peer: [] for peer in peers}
            for r in range(-1, args.repeats):  # round -1: untimed
                for k in range(len(peers)):
                    peer = peers[(k + r) % len(peers)]
                    took, cpu, n = _run(peer, src, Path(tmp) / "out", args.padding, workers)
                    if n != count:
                        raise SystemExit(f"{peer} wrote {n} files of {name}, expected {count}")
                    if r >= 0:
                        seconds[name][peer].append(took)
                        cpu_seconds[name][peer].append(cpu)
                        print(f"{name} round {r + 1}: {peer} {count / took:,.1f} images/s")
    print(
        f"\npadding {args.padding} px, {workers} workers, {info['cpu_count']} CPUs, load at "
        f"start {info['loadavg_at_start']}, trees in {args.dir or tempfile.gettempdir()}:"
    )
    rates: dict[str, dict[str, float]] = {}
    for name, per_peer in seconds.items():
        count = trees[name][1]
        rates[name] = {p: count / statistics.median(t) for p, t in per_peer.items()}
        print(f"{name} ({count} images):")
        for peer, times in per_peer.items():
            spread = f"{count / max(times):,.1f}-{count / min(times):,.1f}"
            ratio = rates[name][peer] / rates[name]["PIL loop"]
            cpu_ms = statistics.median(cpu_seconds[name][peer]) / count * 1e3
            print(
                f"  {peer:23s} {rates[name][peer]:9,.1f} images/s ({spread})  {ratio:.2f}x  "
                f"CPU {cpu_ms:.3f} ms/image"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "schema": "tipad-bench-cli-pad/2",
        "machine": info,
        "settings": {**vars(args), "out": str(args.out), "dir": str(args.dir), "workers": workers},
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "images_per_s": rates,
        "ratio_to_pil_loop": {
            name: {p: r / per["PIL loop"] for p, r in per.items()} for name, per in rates.items()
        },
    }
    (args.out / "cli-pad.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
