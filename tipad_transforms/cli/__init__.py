"""The ``tipad`` command line (also ``python -m tipad_transforms``): argument parsing and the
commands.

``tipad demo``  pads the bundled sample images in every mode, writes one labelled gallery PNG
                (``_gallery``) and prints a timing table against ``torch.nn.functional.pad``
                (``_timing_table``).
``tipad pad``   pads image files, folders and glob patterns into a mirrored tree, modes kept
                (inputs: ``_image_inputs``; one file: ``_image_padding``; the worker processes:
                ``_image_workers``; the progress line: ``_progress``).
``tipad --version``

Exit status (``tipad pad --help`` and docs/cli.md say the same): 0 done; 1 some inputs not
padded (named on stderr) or a worker process died; 2 a usage error, or inputs that cannot be
padded as asked (nothing written); 128 + N stopped by signal N (SIGINT, SIGTERM, SIGHUP; 141:
stdout was a closed pipe). Every error is one ``tipad: error: ...`` line, no traceback (``-v``
adds one to an unexpected error).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from .inputs import UsageError
from .._version import __version__

if TYPE_CHECKING:  # the padding modules import torch: not at start-up
    from .painter import Outcome, PadSpec

__all__ = ["build_parser", "main"]

STANDARD_MODES = ("constant", "edge", "reflect", "symmetric", "circular")
#: ``running_bond_stagger()`` of the default brick, quoted in ``--stagger``'s help (a test keeps
#: the two equal; computing it would import torch for ``--help``).
DEFAULT_BRICK_STAGGER = 106
#: The signals that stop a run cleanly (workers ended, no temporary file left, 128 + N).
_STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
_SIGPIPE = getattr(signal, "SIGPIPE", 13)
#: The largest --padding of ``tipad demo`` (its gallery is 7 x 3 padded samples).
_DEMO_MAX_PADDING = 1024

_EXIT_CODES = (
    "Exit status: 0 every input padded; 1 some inputs not padded (each named on stderr) or a "
    "worker process died; 2 a usage error, or inputs that cannot be padded as asked (nothing "
    "is written); 128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM; 141 stdout was a closed "
    "pipe, as with | head)."
)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


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
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
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
    from .._runtime import taichi_backend  # names the Taichi without importing it

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
        "--padding",
        type=_int_at_least(0, _DEMO_MAX_PADDING),
        default=48,
        help=f"pixels on every side, 0 to {_DEMO_MAX_PADDING} (default 48)",
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
        "input's pixels any more): --format png keeps every pixel. "
        "Each output is written to a temporary file beside it and renamed into place: an "
        "interrupted or failed run leaves every earlier output whole and no partial file. "
        "A symbolic link at an output path is replaced (its target is never written); an output "
        "path that is an input (the same file, by a hard or symbolic link) stops the run. "
        "Without --keep-going, an input that cannot be padded stops the run before anything is "
        "written, and a failure while writing stops it after the files in progress. " + _EXIT_CODES,
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
        help="output folder, created if missing (files of the same name are replaced, atomically)",
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
        type=_int_at_least(-(2**63), 2**63 - 1),
        metavar="N",
        help="shift in px of each row of tiles against the row above (default: the brick "
        f"wall's running bond, running_bond_stagger() = {DEFAULT_BRICK_STAGGER} px for the "
        "default brick; 0 for --texture)",
    )
    pad.add_argument(
        "--seed",
        type=_int_at_least(-(2**63), 2**64 - 1),
        help="brick wall seed, from -2**63 to 2**64-1 (default 0)",
    )
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
        "--keep-going",
        action="store_true",
        help="pad every input that can be padded; name each one that cannot on stderr, and "
        "exit with status 1",
    )
    pad.add_argument(
        "--skip-existing",
        action="store_true",
        help="leave an output that already exists alone (resumes an interrupted run)",
    )
    pad.add_argument(
        "--dry-run", action="store_true", help="check everything, list what would be written"
    )
    pad.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="one line per file written (and the traceback of an unexpected error)",
    )


class _Interrupted(BaseException):
    """Raised in the main thread by the first stop signal (SIGINT, SIGTERM, SIGHUP): unwinding
    removes the file being written and ends the workers; :func:`main` returns 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_signals() -> Iterator[list[int]]:
    """Turn the first stop signal into :class:`_Interrupted` (the list gets every signal
    received); later ones are ignored while the first one's clean-up runs (it is bounded).
    Handlers are restored afterwards; outside the main thread nothing is installed."""
    received: list[int] = []
    closing = False
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1 and not closing:
            raise _Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in _STOP_SIGNALS}
    try:
        yield received
    finally:
        closing = True  # a signal now is only recorded: main() returns 128 + N
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def _quiet_closed_pipes() -> None:
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


def _say(message: str) -> None:
    """``message`` on stderr, if stderr can still take it."""
    with contextlib.suppress(OSError):
        print(message, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tipad`` with ``argv`` (default ``sys.argv[1:]``); return the exit status (0 done,
    1 some inputs not padded, 2 usage error, 128 + N stopped by signal N)."""
    with _stop_signals() as received:
        try:
            try:
                args = build_parser().parse_args(argv)
            except SystemExit as e:  # argparse exits on --help, --version and usage errors
                return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
            status = _run(args)
        except _Interrupted as e:
            newline = "\n" if sys.stderr.isatty() else ""  # end a progress line first
            _say(
                f"{newline}tipad: stopped by {signal.Signals(e.signum).name}; the outputs "
                "written are complete, no partial file is left (--skip-existing resumes)"
            )
            return 128 + e.signum
        except BrokenPipeError:  # stdout is a pipe whose reader left (| head): end quietly
            _quiet_closed_pipes()
            return 128 + _SIGPIPE
    # A signal that came as the handlers were restored: recorded, not raised.
    return 128 + received[0] if received else status


def _run(args: argparse.Namespace) -> int:
    """The command's exit status; every error is one line on stderr."""
    from concurrent.futures import BrokenExecutor

    verbose = bool(getattr(args, "verbose", False))
    try:
        status = _demo(args) if args.command == "demo" else _pad(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return status
    except UsageError as e:
        print(f"tipad: error: {e}", file=sys.stderr)
        return 2
    except BrokenExecutor as e:  # a worker process died (killed, out of memory)
        print(f"tipad: error: a worker process stopped: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise
    except Exception as e:  # out of memory, or a bug: still one line (-v: the traceback)
        if verbose:
            traceback.print_exc()
        hint = "" if verbose or args.command != "pad" else " (-v shows the traceback)"
        text = " ".join(str(e).split())
        print(f"tipad: error: {type(e).__name__}: {text}{hint}", file=sys.stderr)
        return 1


# -- tipad pad ----------------------------------------------------------------------------


def _padding(values: list[int]) -> tuple[int, int, int, int]:
    from .painter import max_output_pixels

    if len(values) == 1:
        sides = (values[0], values[0], values[0], values[0])
    elif len(values) == 2:
        sides = (values[0], values[1], values[0], values[1])
    elif len(values) == 4:
        sides = (values[0], values[1], values[2], values[3])
    else:
        raise UsageError(f"--padding takes 1, 2 or 4 numbers (P, LR TB or L T R B), got {values}")
    left, top, right, bottom = sides
    w, h = 1 + left + right, 1 + top + bottom
    if w * h > max_output_pixels():
        raise UsageError(
            f"--padding {' '.join(map(str, values))}: even a 1x1 image would grow to {w}x{h} "
            f"px, over the {max_output_pixels():,} px that tipad writes (Pillow's "
            "decompression-bomb limit)"
        )
    return sides


def _pad_spec(args: argparse.Namespace) -> PadSpec:
    from .painter import PadSpec

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
        verbose=args.verbose,
    )


def _pad(args: argparse.Namespace) -> int:
    from .inputs import find_inputs, output_format, plan_jobs
    from .painter import _read_texture, remove_stale_temporaries
    from .workers import Workers, default_workers
    from .progress import Progress

    spec = _pad_spec(args)
    fmt = output_format(args.format) if args.format is not None else None
    out_dir: Path = args.out
    keep_going: bool = args.keep_going
    failed: list[str] = []  # with --keep-going: the inputs not padded, and why
    found = find_inputs(
        args.inputs,
        recursive=args.recursive,
        skip=out_dir,
        problems=failed if keep_going else None,
    )
    protect = [spec.texture] if spec.texture is not None else []
    jobs = plan_jobs(found, out_dir, fmt, protect=protect)
    if spec.texture is not None:
        _read_texture(spec.texture)  # a bad texture is one error, not one per worker
    for reason in failed:
        print(f"tipad: error: {reason}", file=sys.stderr)
    todo = [j for j in jobs if not (args.skip_existing and os.path.lexists(j.target))]
    skipped = len(jobs) - len(todo)
    show = sys.stderr.isatty() if args.progress is None else args.progress
    wanted = default_workers() if args.workers is None else args.workers
    # A worker costs a process start and a Taichi start: not worth it for a handful of files.
    workers = min(wanted, max(1, len(todo) // 16))

    plans: list[Outcome] = []
    done: list[Outcome] = []
    not_written = 0  # inputs that failed while being padded or written
    stopped = False
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(Workers(spec, workers)) if todo else None
        progress = Progress(sys.stderr, len(todo), "checking", enabled=show and bool(todo))
        bad: list[str] = []
        for result in pool.check(todo) if pool else ():
            if isinstance(result, str):
                bad.append(result)
            else:
                plans.append(result)
            progress.advance()
        progress.finish()
        if bad and not keep_going:
            shown = "\n  ".join(bad[:5])
            more = f"\n  ... and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise UsageError(
                f"{len(bad)} of {_plural(len(todo), 'input')} cannot be padded as asked; "
                f"nothing was written (--keep-going pads the others):\n  {shown}{more}"
            )
        for reason in bad:
            print(f"tipad: error: {reason}", file=sys.stderr)
        failed += bad
        if args.dry_run:
            for plan in plans:
                print(_describe(plan, "would write"))
            print(_summary(plans, spec.quality, dry_run=True))
            _report(skipped, failed, out_dir)
            return 1 if failed else 0
        for stale in remove_stale_temporaries(j.target for j in jobs):
            if args.verbose:
                print(f"removed {stale}, left by a run that was killed", file=sys.stderr)
        progress = Progress(sys.stderr, len(plans), "padding", enabled=show and bool(plans))
        start = time.perf_counter()
        for result in pool.pad([plan.job for plan in plans]) if pool else ():
            if isinstance(result, str):
                failed.append(result)
                not_written += 1
                print(f"tipad: error: {result}", file=sys.stderr)
                if not keep_going and not stopped:
                    stopped = True
                    assert pool is not None
                    pool.stop()
            else:
                done.append(result)
                if args.verbose:
                    print(_describe(result, "->"))
            progress.advance()
        progress.finish()
    elapsed = time.perf_counter() - start
    print(_summary(done, spec.quality, dry_run=False, seconds=elapsed, out_dir=out_dir))
    if stopped:
        _report(skipped, [], out_dir)
        left = len(plans) - len(done) - not_written
        print(
            f"tipad: stopped at the first failure: {_plural(left, 'other input')} not padded "
            "(--keep-going pads them; --skip-existing resumes)",
            file=sys.stderr,
        )
        return 1
    _report(skipped, failed, out_dir)
    return 1 if failed else 0


def _report(skipped: int, failed: list[str], out_dir: Path) -> None:
    """The lines after the summary: outputs left alone, inputs not padded."""
    if skipped:
        print(f"Skipped {_plural(skipped, 'image')} already in {out_dir} (--skip-existing).")
    if failed:
        print(f"tipad: {_plural(len(failed), 'input')} not padded (listed above)", file=sys.stderr)


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
        lines = [f"Dry run: {_plural(n, 'image')} checked, nothing written."]
    else:
        rate = f", {n / seconds:,.0f} images/s" if seconds > 0 and n else ""
        lines = [f"Padded {_plural(n, 'image')} into {out_dir} ({seconds:.1f} s{rate})."]
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
        lines.append(f"{_plural(frames, 'multi-frame input')}: only the first frame is padded.")
    return "\n".join(lines)


# -- tipad demo ---------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from .demo import demo_columns, render_gallery
    from .painter import write_atomically
    from .timing import time_paddings, timing_table
    from ..assets import SAMPLE_NAMES, load_sample

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
        write_atomically(gallery, target, "PNG", {}, out_dir.resolve())
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
