"""The ``tipad`` command line (also ``python -m tipad_transforms``): argument parsing and the
commands.

``tipad demo``  pads the bundled sample images in every mode, writes one labelled gallery PNG
                (``_gallery``) and prints a timing table against ``torch.nn.functional.pad``
                (``_timing_table``).
``tipad pad``   pads image files, folders and glob patterns into a mirrored tree, modes kept
                (inputs: ``_image_inputs``; one file: ``_image_padding``; the worker processes:
                ``_image_workers``; the progress line: ``_progress``).
``tipad --version``

Errors in the arguments or the files exit with status 2 and a one-line message; a file that
fails while the others are written exits with status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ._image_inputs import UsageError
from ._version import __version__

if TYPE_CHECKING:  # the padding modules import torch: not at start-up
    from ._image_padding import Outcome, PadSpec

__all__ = ["build_parser", "main"]

STANDARD_MODES = ("constant", "edge", "reflect", "symmetric", "circular")
#: ``running_bond_stagger()`` of the default brick, quoted in ``--stagger``'s help (a test keeps
#: the two equal; computing it would import torch for ``--help``).
DEFAULT_BRICK_STAGGER = 106


# -- argument parsing ---------------------------------------------------------------------


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of pixels, got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"padding must be non-negative, got {value}")
    return value


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        bounds = f"from {minimum} to {maximum}" if maximum else f">= {minimum}"
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer {bounds}, got {text!r}"
            ) from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected an integer {bounds}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)


def build_parser() -> argparse.ArgumentParser:
    """The ``tipad`` argument parser (subcommands ``demo`` and ``pad``)."""
    parser = argparse.ArgumentParser(
        prog="tipad",
        description="Texture padding for images and tensors, one fused Taichi kernel per call.",
    )
    from ._runtime import taichi_backend  # names the Taichi without importing it

    parser.add_argument(
        "--version", action="version", version=f"tipad {__version__} ({taichi_backend()})"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    demo = sub.add_parser(
        "demo",
        help="pad the bundled sample images every way, save a gallery, time the kernels",
        description="Pad the bundled sample images with BrickPad, a custom TexturePad and every "
        "standard mode; write one labelled gallery PNG; print median timings against "
        "torch.nn.functional.pad.",
    )
    demo.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    demo.add_argument(
        "--padding", type=_non_negative_int, default=48, help="pixels on every side (default 48)"
    )
    demo.add_argument(
        "--runs", type=_positive_int, default=5, help="least timed runs per measurement (default 5)"
    )
    demo.add_argument(
        "--batch", type=_positive_int, default=64, help="batch size of the timed batch (64)"
    )
    demo.add_argument(
        "--device", default="cpu", help="device for the timings, e.g. cpu or cuda (default cpu)"
    )
    _add_pad_parser(sub)
    return parser


def _add_pad_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pad = sub.add_parser(
        "pad",
        help="pad image files, folders and glob patterns, keeping their mode",
        description="Pad images (any format Pillow reads) and write them under OUTDIR: a file "
        "under its name, a folder's images (--recursive: its whole tree) and a pattern's "
        "matches under their paths relative to the folder or the pattern's fixed part. Every "
        "input is checked against every option (headers only) before anything is written. "
        "Without --mode the border is a brick wall (or --texture FILE).",
        epilog="Give --padding after the inputs (it takes 1, 2 or 4 numbers). Quote patterns "
        "('imgs/**/*.png') so that tipad expands them, recursively. Fill values are in the "
        "image's own units: 0-255 for 8-bit modes (mode '1' too: 255 is white), 0-65535 for "
        "16-bit, one number or one per band. Outputs keep each input's format unless --format "
        "says otherwise; JPEG and WebP outputs are re-encoded with loss (the interior is not the "
        "input's pixels any more): --format png keeps every pixel.",
    )
    pad.add_argument(
        "inputs", nargs="+", metavar="IN", help="image files, folders or glob patterns"
    )
    pad.add_argument(
        "-o",
        "--out",
        type=Path,
        required=True,
        metavar="OUTDIR",
        help="output folder, created if missing (files of the same name are replaced)",
    )
    pad.add_argument(
        "-r", "--recursive", action="store_true", help="take the subfolders of folder inputs too"
    )
    pad.add_argument(
        "--padding",
        type=_non_negative_int,
        nargs="+",
        default=[32],
        metavar="P",
        help="P (all sides), LR TB, or L T R B pixels (default 32)",
    )
    kind = pad.add_mutually_exclusive_group()
    kind.add_argument("--mode", choices=STANDARD_MODES, help="a standard padding mode")
    kind.add_argument("--brick", action="store_true", help="a procedural brick wall (the default)")
    kind.add_argument("--texture", type=Path, metavar="FILE", help="tile this image instead")
    pad.add_argument(
        "--fill", type=_number, nargs="+", metavar="V", help="--mode constant's value(s), default 0"
    )
    pad.add_argument(
        "--stagger",
        type=int,
        metavar="N",
        help="shift in px of each row of tiles against the row above (default: the brick "
        f"wall's running bond, running_bond_stagger() = {DEFAULT_BRICK_STAGGER} px for the "
        "default brick; 0 for --texture)",
    )
    pad.add_argument("--seed", type=int, help="brick wall seed (default 0)")
    pad.add_argument(
        "--format",
        metavar="FMT",
        help="write every output in this format (png, jpeg, webp, tiff, ...), suffix changed; "
        "default: each input's own format",
    )
    pad.add_argument(
        "--quality",
        type=_int_at_least(1, 100),
        metavar="Q",
        help="JPEG/WebP quality 1-100 (default 95 for JPEG, Pillow's 80 for WebP)",
    )
    pad.add_argument(
        "--workers",
        type=_int_at_least(0),
        metavar="N",
        help="processes that decode, pad and encode (default: every core, fewer for a few "
        "files; 0: this process only)",
    )
    pad.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="show count, images/s and ETA on stderr (default: when stderr is a terminal)",
    )
    pad.add_argument(
        "--dry-run", action="store_true", help="check everything, list what would be written"
    )
    pad.add_argument("-v", "--verbose", action="store_true", help="one line per file written")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tipad`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help, --version and usage errors
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    from concurrent.futures import BrokenExecutor

    try:
        if args.command == "demo":
            return _demo(args)
        return _pad(args)
    except UsageError as e:
        print(f"tipad: error: {e}", file=sys.stderr)
        return 2
    except BrokenExecutor as e:  # a worker process died (killed, out of memory)
        print(f"tipad: error: a worker process stopped: {e}", file=sys.stderr)
        return 1


# -- tipad pad ----------------------------------------------------------------------------


def _padding(values: list[int]) -> tuple[int, int, int, int]:
    if len(values) == 1:
        return (values[0], values[0], values[0], values[0])
    if len(values) == 2:
        return (values[0], values[1], values[0], values[1])
    if len(values) == 4:
        return (values[0], values[1], values[2], values[3])
    raise UsageError(f"--padding takes 1, 2 or 4 numbers (P, LR TB or L T R B), got {values}")


def _pad_spec(args: argparse.Namespace) -> PadSpec:
    from ._image_padding import PadSpec

    if args.fill is not None and args.mode != "constant":
        raise UsageError("--fill applies to --mode constant only")
    if args.stagger is not None and args.mode is not None:
        raise UsageError("--stagger applies to --brick and --texture only")
    if args.seed is not None and (args.mode is not None or args.texture is not None):
        raise UsageError("--seed applies to --brick only")
    return PadSpec(
        padding=_padding(args.padding),
        mode=args.mode,
        fill=None if args.fill is None else tuple(args.fill),
        texture=args.texture,
        stagger=args.stagger,
        seed=0 if args.seed is None else args.seed,
        quality=args.quality,
    )


def _pad(args: argparse.Namespace) -> int:
    from ._image_inputs import find_inputs, output_format, plan_jobs
    from ._image_padding import _read_texture
    from ._image_workers import Workers, default_workers
    from ._progress import Progress

    spec = _pad_spec(args)
    fmt = output_format(args.format) if args.format is not None else None
    out_dir: Path = args.out
    jobs = plan_jobs(find_inputs(args.inputs, recursive=args.recursive, skip=out_dir), out_dir, fmt)
    if spec.texture is not None:
        _read_texture(spec.texture)  # a bad texture is one error, not one per worker
    show = sys.stderr.isatty() if args.progress is None else args.progress
    wanted = default_workers() if args.workers is None else args.workers
    # A worker costs a process start and a Taichi start: not worth it for a handful of files.
    workers = min(wanted, max(1, len(jobs) // 16))

    with Workers(spec, workers) as pool:
        progress = Progress(sys.stderr, len(jobs), "checking", enabled=show)
        plans: list[Outcome] = []
        errors: list[str] = []
        for result in pool.check(jobs):
            if isinstance(result, str):
                errors.append(result)
            else:
                plans.append(result)
            progress.advance()
        progress.finish()
        if errors:
            shown = "\n  ".join(errors[:5])
            more = f"\n  ... and {len(errors) - 5} more" if len(errors) > 5 else ""
            raise UsageError(
                f"{len(errors)} of {len(jobs)} inputs cannot be padded as asked; nothing was "
                f"written:\n  {shown}{more}"
            )
        if args.dry_run:
            for plan in plans:
                print(_describe(plan, "would write"))
            print(_summary(plans, spec.quality, dry_run=True))
            return 0
        progress = Progress(sys.stderr, len(jobs), "padding", enabled=show)
        done: list[Outcome] = []
        start = time.perf_counter()
        for result in pool.pad(jobs):
            if isinstance(result, str):
                errors.append(result)
                print(f"tipad: error: {result}", file=sys.stderr)
            else:
                done.append(result)
                if args.verbose:
                    print(_describe(result, "->"))
            progress.advance()
        progress.finish()
    elapsed = time.perf_counter() - start
    print(_summary(done, spec.quality, dry_run=False, seconds=elapsed, out_dir=out_dir))
    if errors:
        print(f"tipad: {len(errors)} of {len(jobs)} files failed (listed above)", file=sys.stderr)
        return 1
    return 0


def _describe(o: Outcome, verb: str) -> str:
    (w, h), (w1, h1) = o.size, o.out_size
    kind = "re-encoded with loss" if o.lossy else "interior bit-exact"
    note = f", {o.note}" if o.note else ""
    sizes = f"{w}x{h} -> {w1}x{h1}"
    return f"{o.job.source} {verb} {o.job.target}  ({o.mode}, {sizes}, {o.fmt}, {kind}{note})"


def _summary(
    outcomes: list[Outcome],
    quality: int | None,
    *,
    dry_run: bool,
    seconds: float = 0.0,
    out_dir: Path | None = None,
) -> str:
    """What was (or would be) written, honest about lossy re-encoding."""
    n = len(outcomes)
    if dry_run:
        lines = [f"Dry run: {n} images checked, nothing written."]
    else:
        rate = f", {n / seconds:,.0f} images/s" if seconds > 0 else ""
        lines = [f"Padded {n} images into {out_dir} ({seconds:.1f} s{rate})."]
    lossy = [o for o in outcomes if o.lossy]
    exact = sorted({o.fmt for o in outcomes if not o.lossy})
    if exact:
        lines.append(
            f"{n - len(lossy)} written losslessly ({', '.join(exact)}): the interior is the "
            "input's pixels, exactly (EXIF orientation applied)."
        )
    if lossy:
        settings = []
        for fmt in sorted({o.fmt for o in lossy}):
            q = quality if quality is not None else {"JPEG": 95, "WEBP": 80}.get(fmt)
            settings.append(f"{fmt} quality {q}" if q is not None else fmt)
        lines.append(
            f"{len(lossy)} re-encoded with loss ({', '.join(settings)}): their interior is "
            "close to the input but not equal; --format png keeps every pixel."
        )
    frames = sum(1 for o in outcomes if o.note)
    if frames:
        lines.append(f"{frames} multi-frame inputs: only the first frame is padded.")
    return "\n".join(lines)


# -- tipad demo ---------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from ._gallery import demo_columns, render_gallery
    from ._timing_table import time_paddings, timing_table
    from .assets import SAMPLE_NAMES, load_sample

    start = time.perf_counter()
    out_dir: Path = args.out
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {str(out_dir)!r}: {e}") from None
    samples = [(name, load_sample(name)) for name in SAMPLE_NAMES]
    gallery = render_gallery(samples, demo_columns(args.padding), args.padding)
    target = out_dir / "gallery.png"
    try:
        gallery.save(target)
    except OSError as e:
        raise UsageError(f"cannot write {str(target)!r}: {e}") from None
    gallery_s = time.perf_counter() - start
    print(
        f"Gallery: {target}  ({gallery.width}x{gallery.height} px; {len(samples)} images x 7 "
        f"paddings, made in {gallery_s:.1f} s)\n"
    )
    try:
        rows = time_paddings(args.padding, args.runs, args.batch, args.device)
    except ValueError as e:
        raise UsageError(f"--device: {e}") from None
    print(timing_table(rows, args.padding, args.runs, args.batch, args.device))
    print(f"\nDone in {time.perf_counter() - start:.1f} s. Open {target.resolve()} to look.")
    return 0
