"""``tipad pad``: every input checked against every option (headers only) before anything is
written, then padded and written by the workers; the summary says what was re-encoded with
loss."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from .arguments import UsageError
from .inputs import FileJob, find_inputs, output_format, plan_jobs
from .painter import Outcome, PadSpec, max_output_pixels, read_texture
from .progress import Progress
from .workers import Workers, default_workers
from .writing import remove_stale_temporaries

__all__ = ["run"]


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _padding(values: list[int]) -> tuple[int, int, int, int]:
    if len(values) not in (1, 2, 4):
        raise UsageError(f"--padding takes 1, 2 or 4 numbers (P, LR TB or L T R B), got {values}")
    left, top, right, bottom = (values * 4)[:4] if len(values) < 4 else values
    w, h = 1 + left + right, 1 + top + bottom
    if w * h > max_output_pixels():
        raise UsageError(
            f"--padding {' '.join(map(str, values))}: even a 1x1 image would grow to {w}x{h} "
            f"px, over the {max_output_pixels():,} px that tipad writes (Pillow's "
            "decompression-bomb limit)"
        )
    return left, top, right, bottom


def _pad_spec(args: argparse.Namespace) -> PadSpec:
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
        fsync=args.fsync,
        verbose=args.verbose,
    )


def run(args: argparse.Namespace) -> int:
    """Pad what ``args`` name; the exit status (UsageError: nothing written)."""
    spec = _pad_spec(args)
    fmt = output_format(args.format) if args.format is not None else None
    out_dir: Path = args.out
    keep_going: bool = args.keep_going
    failed: list[str] = []  # with --keep-going: the inputs not padded, and why
    found = find_inputs(
        args.inputs, recursive=args.recursive, skip=out_dir, problems=failed if keep_going else None
    )
    jobs = plan_jobs(found, out_dir, fmt, protect=[spec.texture] if spec.texture else [])
    if spec.texture is not None:
        read_texture(spec.texture)  # a bad texture is one error, not one per worker
    for reason in failed:
        print(f"tipad: error: {reason}", file=sys.stderr)
    todo = [j for j in jobs if not (args.skip_existing and os.path.lexists(j.target))]
    skipped = len(jobs) - len(todo)
    show = sys.stderr.isatty() if args.progress is None else args.progress
    wanted = default_workers() if args.workers is None else args.workers
    # A worker process costs a start (and a pickled job list where it is spawned): worth it
    # for 16 small files or 2 MB of input (a photo or two) a worker.
    work = max(len(todo) // 16, sum(j.size for j in todo) >> 21)
    workers = min(wanted, max(1, work))

    plans: list[tuple[int, Outcome]] = []
    done: list[tuple[int, Outcome]] = []
    stopped = False
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(Workers(spec, todo, workers)) if todo else None
        progress = Progress(sys.stderr, len(todo), "checking", enabled=show and bool(todo))
        bad: list[str] = []
        for i, result in pool.run("check", range(len(todo))) if pool else ():
            if isinstance(result, str):
                bad.append(result)
            else:
                plans.append((i, result))
            progress.advance()
        progress.finish()
        if bad and not keep_going:
            shown = "\n  ".join(bad[:5])
            more = f"\n  ... and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise UsageError(
                f"{len(bad)} of {plural(len(todo), 'input')} cannot be padded as asked; "
                f"nothing was written (--keep-going pads the others):\n  {shown}{more}"
            )
        for reason in bad:
            print(f"tipad: error: {reason}", file=sys.stderr)
        failed += bad
        if args.dry_run:
            for i, plan in plans:
                print(_describe(todo[i], plan, "would write"))
            print(_summary([plan for _, plan in plans], spec.quality))
            _report(skipped, failed, out_dir)
            return 1 if failed else 0
        for stale in remove_stale_temporaries(j.target for j in jobs):
            if args.verbose:
                print(f"removed {stale}, left by a run that was killed", file=sys.stderr)
        progress = Progress(sys.stderr, len(plans), "padding", enabled=show and bool(plans))
        start = time.perf_counter()
        for i, result in pool.run("pad", [i for i, _ in plans]) if pool else ():
            if isinstance(result, str):
                failed.append(result)
                print(f"tipad: error: {result}", file=sys.stderr)
                if not keep_going and not stopped and pool is not None:
                    stopped = True
                    pool.stop()
            else:
                done.append((i, result))
                if args.verbose:
                    print(_describe(todo[i], result, "->"))
            progress.advance()
        progress.finish()
    print(
        _summary(
            [o for _, o in done], spec.quality, seconds=time.perf_counter() - start, out_dir=out_dir
        )
    )
    _report(skipped, [] if stopped else failed, out_dir)
    if stopped:
        left = len(plans) - len(done) - len(failed)  # failed: all in this pad (else no stop)
        print(
            f"tipad: stopped at the first failure: {plural(left, 'other input')} not padded "
            "(--keep-going pads them; --skip-existing resumes)",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _report(skipped: int, failed: list[str], out_dir: Path) -> None:
    """The lines after the summary: outputs left alone, inputs not padded."""
    if skipped:
        print(f"Skipped {plural(skipped, 'image')} already in {out_dir} (--skip-existing).")
    if failed:
        print(f"tipad: {plural(len(failed), 'input')} not padded (listed above)", file=sys.stderr)


def _describe(job: FileJob, o: Outcome, verb: str) -> str:
    (w, h), (w1, h1) = o.size, o.out_size
    kind = "re-encoded with loss" if o.lossy else "interior bit-exact"
    note = f", {o.note}" if o.note else ""
    return (
        f"{job.source} {verb} {job.target}  ({o.mode}, {w}x{h} -> {w1}x{h1}, {o.fmt}, {kind}{note})"
    )


def _summary(
    outcomes: list[Outcome],
    quality: int | None,
    *,
    seconds: float | None = None,
    out_dir: Path | None = None,
) -> str:
    """What was written (``seconds`` given) or would be (a dry run), honest about lossy
    re-encoding."""
    n = len(outcomes)
    if seconds is None:
        lines = [f"Dry run: {plural(n, 'image')} checked, nothing written."]
    else:
        rate = f", {n / seconds:,.0f} images/s" if seconds > 0 and n else ""
        lines = [f"Padded {plural(n, 'image')} into {out_dir} ({seconds:.1f} s{rate})."]
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
        lines.append(f"{plural(frames, 'multi-frame input')}: only the first frame is padded.")
    return "\n".join(lines)
