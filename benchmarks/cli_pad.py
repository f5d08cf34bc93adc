"""``tipad pad`` on a folder tree against a plain PIL loop on the same tree: images per second.

    python benchmarks/cli_pad.py [--count 1000] [--workers N] [--repeats 3] [--out out/cli-pad]

The tree (:func:`make_image_tree`, also used by ``tests/cli/test_inputs.py``) holds ``count``
small images (8-40 px a side) of mixed formats and modes, in nested folders: PNG RGB, RGBA,
grey and palette (some with a transparent entry), JPEG RGB and grey, GIF palette. Both peers read
every file, pad it by ``--padding`` px and write it under a mirrored tree in the input's format
(JPEG at quality 95):

* ``tipad pad DIR -o OUT --recursive --mode reflect --workers N --no-progress``, run in this
  process through ``tipad_transforms.cli.main`` (so no interpreter or torch import is timed; the
  worker processes' start and the header check of every input are);
* a plain loop: ``PIL.Image.open``, ``ImageOps.expand`` (a constant border: PIL has no reflect,
  so the loop does less work than tipad), ``save``; one process.

Rounds alternate the two peers; the medians and their ratio are printed and written to
``<out>/cli-pad.json``. The machine this ran on is shared: read the spread, not one number.
"""

from __future__ import annotations

import argparse
import io
import json
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


def tipad_cli(src: Path, dst: Path, padding: int, workers: int) -> int:
    from tipad_transforms.cli import main

    argv = [str(src), "-o", str(dst), "--recursive", "--mode", "reflect"]
    argv += ["--padding", str(padding), "--workers", str(workers), "--no-progress"]
    with redirect_stdout(io.StringIO()):
        status = main(["pad", *argv])
    if status != 0:
        raise SystemExit(f"tipad pad exited with {status}")
    return sum(1 for p in dst.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--padding", type=int, default=8)
    parser.add_argument("--workers", type=int, default=None, help="default: every core")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("out/cli-pad"))
    args = parser.parse_args()
    from tipad_transforms.cli.workers import default_workers

    workers = args.workers if args.workers is not None else default_workers()
    info = _common.machine_info()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "tree"
        make_image_tree(src, args.count)
        times: dict[str, list[float]] = {"tipad": [], "pil": []}
        for r in range(args.repeats):
            for peer in ("tipad", "pil") if r % 2 == 0 else ("pil", "tipad"):
                dst = Path(tmp) / f"out-{peer}"
                shutil.rmtree(dst, ignore_errors=True)
                start = time.perf_counter()
                if peer == "tipad":
                    n = tipad_cli(src, dst, args.padding, workers)
                else:
                    n = pil_loop(src, dst, args.padding)
                times[peer].append(time.perf_counter() - start)
                if n != args.count:
                    raise SystemExit(f"{peer} wrote {n} files, expected {args.count}")
                print(f"round {r + 1}: {peer} {args.count / times[peer][-1]:,.0f} images/s")
    rate = {k: args.count / statistics.median(v) for k, v in times.items()}
    ratio = rate["tipad"] / rate["pil"]
    print(
        f"\n{args.count} images, padding {args.padding}, {workers} workers, "
        f"{info['cpu_count']} CPUs, load {info['loadavg_at_start']}:\n"
        f"  tipad pad: {rate['tipad']:,.0f} images/s (median of {args.repeats})\n"
        f"  PIL loop:  {rate['pil']:,.0f} images/s\n"
        f"  ratio tipad / PIL: {ratio:.2f}x"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "schema": "tipad-bench-cli-pad/1",
        "machine": info,
        "settings": {**vars(args), "out": str(args.out), "workers": workers},
        "seconds": times,
        "images_per_s": rate,
        "ratio_tipad_to_pil": ratio,
    }
    (args.out / "cli-pad.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
