"""Benchmark tipad's padding against torch, torchvision and the article's torch gather, on CPU.

    python benchmarks/pad.py [--quick] [--out out/bench]

Prints one table per workload and the issue's targets (MET / MISSED), and writes
``<out>/pad.json`` (every raw timing, medians, ratios, machine info, notes) and ``<out>/pad.png``
(medians per workload, log scale, and ratios to ``F.pad`` constant).

Workloads and peers: see ``workloads.py``; timing rules: see ``_common.py``. A full run takes a
few minutes on 2 cores plus the ``torch.compile`` of the gather (reported separately, capped by
``--compile-cap``); ``--quick`` is a smoke run (fewer rounds, no compile) of well under a minute
on a quiet machine.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _common import (
    Deadline,
    Measurement,
    Peer,
    first_call_latency,
    format_ms,
    format_table,
    machine_info,
    measure,
    plot_workloads,
    runtime_sha,
    write_json,
)
from workloads import (
    FPAD,
    Workload,
    article_workload,
    batch_workload,
    check_out_buffers,
    evaluate_targets,
    targets_table,
)

NOTES = [
    "Peers run in one process, interleaved round-robin (order rotated each round) after a "
    "bit-exact check and warm-up calls; reported times are medians over rounds of per-call "
    "wall time, fresh outputs freed inside the timed region.",
    "Yardstick for fresh outputs: torch.nn.functional.pad constant (the cheapest padding that "
    "writes the same bytes). F.pad has no out=, and out.copy_(F.pad(x)) would write the canvas "
    "twice, so the yardstick for out= is 'torch slices constant': four border slabs filled and "
    "the interior copied into the preallocated tensor with torch slicing (every output element "
    "written once, the input read once). out= rows are also given relative to F.pad fresh.",
    "tipad brick_pad is the functional: it rebuilds the brick tile (and converts it to the image "
    "dtype) on every call. tipad BrickPad (the transform) and texture_pad with a tile already in "
    "the image dtype build it once; all three produce the same canvas (checked).",
    "torch gather = the seed article's torch method (coordinates -> lattice cell -> tile pixel "
    "-> index_select), without its bugs (no mutation of an input, lattice origin on the image, "
    "image kept in the centre) and with broadcast row coordinates (fewer full-size temporaries "
    "than the article's coordinate grid). Its canvas is asserted bit-equal to texture_pad.",
    "torch gather (compiled) = torch.compile(gather, dynamic=False), default inductor backend, "
    "with an empty inductor cache (a cold compile, as a user's first run); compile time is the "
    "first call and is reported separately, not in the medians.",
    "First call: a fresh Python process with TI_OFFLINE_CACHE_FILE_PATH pointing to an empty "
    "directory; timed from just before the first brick_pad call on a (3, 224, 224) uint8 image "
    "to just after it (Taichi import + init + kernel compile + the call). The import time of "
    "tipad_transforms is measured in the same process after torch and torchvision are loaded.",
    "On a shared machine absolute times are noisy: a parallel region (torch's OpenMP pool, "
    "Taichi's thread pool) waits for its slowest thread, so when another process takes a core "
    "a call can take several times its uncontended time and the samples are bimodal. The min "
    "column approximates the uncontended cost, the median what a busy machine gives; load "
    "averages are recorded. Ratios between interleaved peers are the meaningful numbers; "
    "--threads 1 gives steadier ones.",
]


# The same-bytes copy: a canvas-sized copy_ into a preallocated tensor, the floor for writing
# the canvas once (reads as many bytes as it writes: a padding reads fewer).
COPY = "torch.copy_same_bytes"
STANDARD = ("constant", "edge", "reflect", "symmetric", "circular")
# Each standard mode's peers a user would call instead: torch's F.pad and torchvision v2's pad.
TORCH_MODE = {"constant": "constant", "edge": "replicate", "reflect": "reflect",
              "circular": "circular"}  # fmt: skip
V2_MODES = ("edge", "reflect", "symmetric")


def batch_input(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """The batch ``workloads.batch_workload`` pads (its recipe: the same bits)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
    return torch.rand(shape, generator=gen, dtype=torch.float32).to(dtype)


def issue25_peers(wl: Workload, x: torch.Tensor, pad: int) -> list[Peer]:
    """The rows issue 25 asks for, beside a batch workload's own: the same-bytes copy, every
    standard mode fresh and into ``out=``, each mode's torch and v2 peers not already there,
    and ``PadCollate`` batches of the same images (constant; the brick texture at one lattice
    offset, and with an offset drawn per sample, the collate's default)."""
    import torch.nn.functional as NF
    import torchvision.transforms.v2.functional as tvF

    import tipad_transforms.functional as TF
    from tipad_transforms.data import PadCollate

    have = {p.key for p in wl.peers}
    canvas = NF.pad(x, [pad] * 4)
    src, dst = canvas.clone(), torch.empty_like(canvas)
    peers = [Peer(COPY, "same-bytes copy_", lambda: dst.copy_(src), "copy", "out=")]
    for mode in STANDARD:
        out = torch.empty_like(canvas)
        for key, label, fn, output in (
            (f"tipad.pad_{mode}", f"tipad pad {mode}",
             lambda m=mode: TF.pad(x, pad, padding_mode=m), "fresh"),
            (f"tipad.pad_{mode}_out", f"tipad pad {mode}",
             lambda m=mode, o=out: TF.pad(x, pad, padding_mode=m, out=o), "out="),
        ):  # fmt: skip
            if key not in have:
                peers.append(Peer(key, label, fn, mode, output))
        name = TORCH_MODE.get(mode)
        if name is not None and mode != "constant":

            def fpad(m: str = name) -> torch.Tensor:
                return NF.pad(x, [pad] * 4, mode=m)

            peers.append(Peer(f"torch.fpad_{name}", f"F.pad {name}", fpad, mode))
        if mode in V2_MODES and f"torchvision.v2_{mode}" not in have:

            def v2(m: str = mode) -> torch.Tensor:
                return tvF.pad(x, [pad], padding_mode=m)

            peers.append(Peer(f"torchvision.v2_{mode}", f"v2.pad {mode}", v2, mode))
    samples = list(x.unbind(0))
    size = tuple(canvas.shape[-2:])
    constant = PadCollate(size, padding_mode="constant")
    brick = PadCollate(size, random_offset=False)
    # PadCollate's defaults: a lattice offset drawn per sample (its own group: no other peer
    # draws the same offsets; tests/ops/padding checks the form against the reference).
    drawn = PadCollate(size, generator=torch.Generator().manual_seed(0))
    peers += [
        Peer("tipad.PadCollate_constant", "tipad PadCollate constant",
             lambda: constant(samples), "constant"),
        Peer("tipad.PadCollate_brick", "tipad PadCollate brick", lambda: brick(samples),
             "collate-brick"),
        Peer("tipad.PadCollate_brick_random", "tipad PadCollate brick, offsets drawn",
             lambda: drawn(samples), "collate-brick-random"),
    ]  # fmt: skip
    return peers


# The batch workloads' inputs (key: dtype, shape, padding), as built below.
BATCHES = {
    "batch-uint8": (torch.uint8, (64, 3, 224, 224), 32),
    "batch-float32": (torch.float32, (64, 3, 224, 224), 32),
    "batch-uint8-odd": (torch.uint8, (64, 3, 201, 173), 31),
}


def issue25_targets(results: dict[str, list[Measurement]]) -> list[dict[str, Any]]:
    """Issue 25's padding targets, as ``workloads.evaluate_targets`` writes its own: every
    mode's ``out=`` within 1.5x the same-bytes copy, every fresh tipad output and each
    ``PadCollate`` batch within 1.0x ``F.pad`` constant's fresh output (medians; the minima's
    ratio beside)."""
    targets: list[dict[str, Any]] = []
    for wl in BATCHES:
        if wl not in results:
            continue
        stats = {m.peer.key: m.stats for m in results[wl]}
        checks = [(f"{k}", COPY, 1.5, "the same-bytes copy") for k in stats
                  if k.startswith("tipad.") and k.endswith("_out")]  # fmt: skip
        checks += [(k, FPAD, 1.0, "F.pad constant fresh") for k in stats
                   if k.startswith("tipad.") and not k.endswith("_out")]  # fmt: skip
        for key, base, threshold, what in checks:
            if base not in stats:
                continue
            value = stats[key].median_s / stats[base].median_s
            targets.append(
                {
                    "target": f"{wl}: {key} <= {threshold}x {what} (issue 25)",
                    "measured": value,
                    "measured_from_mins": stats[key].min_s / stats[base].min_s,
                    "op": "<=",
                    "threshold": threshold,
                    "verdict": "MET" if value <= threshold else "MISSED",
                    "how": f"median({key}) / median({base})",
                }
            )
    return targets


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def table(wl: Workload, ms: list[Measurement], rounds: int) -> str:
    by_key = {m.peer.key: m.stats.median_s for m in ms}
    base = by_key[FPAD]
    copy = by_key.get(COPY, float("nan"))
    rows = []
    for m in ms:
        s = m.stats
        yard = by_key.get(wl.yardsticks[m.peer.output], float("nan"))
        rows.append(
            [
                m.peer.label,
                m.peer.output,
                format_ms(s.median_s),
                f"{format_ms(s.q1_s)}-{format_ms(s.q3_s)}",
                format_ms(s.min_s),
                f"{s.median_s / base:.2f}x",
                f"{s.median_s / yard:.2f}x",
                f"{s.median_s / copy:.2f}x" if copy == copy else "-",  # NaN: no copy row
            ]
        )
    header = [
        "peer",
        "output",
        "median ms",
        "quartiles ms",
        "min ms",
        "/ F.pad fresh",
        "/ same-output const",
        "/ same-bytes copy",
    ]
    return f"{wl.title}   [{rounds} rounds]\n" + format_table(header, rows, right="234567")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: few rounds, no compile")
    ap.add_argument("--out", type=Path, default=Path("out/bench"), help="output directory")
    ap.add_argument("--repeats", type=int, help="rounds per batch workload (default 15, quick 3)")
    ap.add_argument(
        "--article-repeats", type=int, help="rounds on the article canvas (default 5, quick 2)"
    )
    ap.add_argument(
        "--warmup",
        type=int,
        help="extra warm-up calls per peer (default 1, quick 0; article canvas 0)",
    )
    ap.add_argument(
        "--min-sample-ms",
        type=float,
        default=20.0,
        help="calls per sample are chosen so a sample lasts at least this long (default 20)",
    )
    ap.add_argument("--first-call-runs", type=int, help="cold subprocesses (default 2, quick 1)")
    ap.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the gather on the article canvas (default: on, off with --quick)",
    )
    ap.add_argument(
        "--compile-batch",
        action="store_true",
        help="also compile the gather for both batch workloads (two more compiles)",
    )
    ap.add_argument(
        "--compile-cap", type=float, default=300.0, help="give up a compile after this (s)"
    )
    ap.add_argument(
        "--warm-inductor-cache",
        action="store_true",
        help="reuse torch's default inductor cache instead of an empty one",
    )
    ap.add_argument(
        "--threads",
        type=int,
        help="CPU threads for torch (set_num_threads) and Taichi (TI_CPU_MAX_NUM_THREADS); "
        "default: both libraries' defaults (all cores). 1 gives steadier numbers on a busy "
        "machine, where a parallel region waits for its slowest, descheduled thread",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        # Before Taichi starts (lazily, at the first call); subprocesses inherit the variables.
        torch.set_num_threads(args.threads)
        os.environ["TI_CPU_MAX_NUM_THREADS"] = str(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    quick = args.quick
    repeats = args.repeats or (3 if quick else 15)
    article_repeats = args.article_repeats or (2 if quick else 5)
    warmup = args.warmup if args.warmup is not None else (0 if quick else 1)
    compile_on = args.compile if args.compile is not None else not quick
    cold_runs = args.first_call_runs or (1 if quick else 2)
    cap = args.compile_cap if compile_on else None
    if compile_on and not args.warm_inductor_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="tipad-bench-inductor-")

    clock = Deadline(0)
    info = machine_info()
    settings = {
        "quick": quick,
        "repeats_batch": repeats,
        "repeats_article": article_repeats,
        "warmup_calls": warmup,
        "warmup_calls_article": warmup if args.warmup is not None else 0,
        "min_sample_s": args.min_sample_ms / 1e3,
        "compile": compile_on,
        "compile_batch": args.compile_batch,
        "compile_cap_s": cap,
        "inductor_cache": "default" if args.warm_inductor_cache else "empty temp dir",
        "first_call_cold_runs": cold_runs,
        "seed": args.seed,
        "threads": args.threads or "library defaults",
    }
    log(
        f"tipad pad benchmark on {info['cpu_count']} CPUs, torch {info['torch']}, "
        f"load average {info['loadavg_at_start']}"
    )

    log("first-call latency (fresh subprocesses)...")
    first = first_call_latency("cpu", cold_runs, log=log)

    device = torch.device("cpu")
    results: dict[str, list[Measurement]] = {}
    payload_workloads: list[dict[str, Any]] = []
    tables: list[str] = []
    plots: list[tuple[str, list[Measurement], str]] = []
    builders = [
        (
            "batch-uint8",
            lambda c: batch_workload(torch.uint8, device, compile_cap_s=c, seed=args.seed),
            repeats,
        ),
        (
            "batch-float32",
            lambda c: batch_workload(torch.float32, device, compile_cap_s=c, seed=args.seed),
            repeats,
        ),
        (
            # Odd widths and an odd padding: image rows and canvas rows start at every place
            # in an 8-byte word (the row walk joins word halves), as in datasets of many sizes.
            "batch-uint8-odd",
            lambda c: batch_workload(
                torch.uint8,
                device,
                shape=(64, 3, 201, 173),
                pad=31,
                compile_cap_s=c,
                seed=args.seed,
                suffix="-odd",
            ),
            repeats,
        ),
        (
            "article",
            lambda c: article_workload(device, compile_cap_s=c, seed=args.seed),
            article_repeats,
        ),
    ]
    for key, build, rounds in builders:
        c = cap if (key == "article" or args.compile_batch) else None
        log(f"{key}: building inputs{' and compiling the gather' if c else ''}...")
        wl = build(c)
        if key in BATCHES:
            dtype, shape, pad = BATCHES[key]
            wl.peers += issue25_peers(wl, batch_input(dtype, shape, args.seed), pad)
        if wl.compile_info:
            tc = wl.compile_info
            log(f"  torch.compile: {tc['status']} in {tc['compile_s']:.1f} s")
        log(f"{key}: checking and timing {len(wl.peers)} peers, {rounds} rounds...")
        t0 = time.perf_counter()
        ms = measure(
            wl.peers,
            repeats=rounds,
            # The check call and the calibration call already warm every peer twice; on the
            # article canvas, where the eager gather takes seconds, that is enough.
            warmup=warmup if key != "article" or args.warmup is not None else 0,
            min_sample_s=args.min_sample_ms / 1e3,
            log=log,
        )
        check_out_buffers(ms)
        results[key] = ms
        tables.append(table(wl, ms, rounds))
        print("\n" + tables[-1], flush=True)
        plots.append((wl.title, ms, FPAD))
        base = {m.peer.key: m.stats.median_s for m in ms}
        payload_workloads.append(
            {
                "key": wl.key,
                "title": wl.title,
                **wl.description,
                "rounds": rounds,
                "timing_wall_s": time.perf_counter() - t0,
                "yardsticks": wl.yardsticks,
                "torch_compile": wl.compile_info,
                "peers": [
                    {
                        **m.to_json(),
                        "ratio_to_fpad_constant": m.stats.median_s / base[FPAD],
                        "ratio_to_same_output_yardstick": m.stats.median_s
                        / base[wl.yardsticks[m.peer.output]],
                    }
                    for m in ms
                ],
            }
        )
        del wl
        gc.collect()

    targets = evaluate_targets(results, first["cold_first_call_median_s"])
    targets += issue25_targets(results)
    fc = first["cold_first_call_median_s"]
    imp = first["import_tipad_median_s"]
    summary = [
        "",
        f"first brick_pad call, cold Taichi cache (median of {cold_runs}): "
        + (f"{fc:.3f} s" if fc is not None else "failed")
        + (f"; import tipad_transforms.functional after torch: {imp * 1e3:.0f} ms" if imp else ""),
    ]
    warm = [r for r in first["runs"] if r.get("cache") == "warm" and "first_call_s" in r]
    if warm:
        summary.append(f"first call with a warm Taichi cache: {warm[0]['first_call_s']:.3f} s")
    for p in payload_workloads:
        if p["torch_compile"]:
            tc = p["torch_compile"]
            summary.append(
                f"torch.compile of the gather ({p['key']}): {tc['status']}, {tc['compile_s']:.1f} s"
            )
    info["loadavg_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    summary.append(
        f"load average (1, 5, 15 min) at start {info['loadavg_at_start']}, at end "
        f"{info['loadavg_at_end']} on {info['cpu_count']} CPUs; torch threads "
        f"{torch.get_num_threads()}"
    )
    info["runtime_py_sha256_at_end"] = runtime_sha()
    warnings_: list[str] = []
    if info["runtime_py_sha256_at_end"] != info["runtime_py_sha256"]:
        warnings_.append(
            "tipad_transforms' kernel sources changed during the run: the numbers mix kernel "
            "versions; run again"
        )
        summary.append("WARNING: " + warnings_[-1])
    print("\n".join(summary))
    print("\nTargets (the issue's)\n" + targets_table(targets))

    info["total_wall_s"] = clock.elapsed()
    args.out.mkdir(parents=True, exist_ok=True)
    png = plot_workloads(
        plots,
        args.out / "pad.png",
        f"tipad padding on CPU ({info['cpu_count']} cores, torch {info['torch']}, "
        f"taichi {info['taichi']}) - {info['date']}",
    )
    payload = {
        "schema": "tipad-bench-pad/1",
        "machine": info,
        "settings": settings,
        "notes": NOTES,
        "warnings": warnings_,
        "first_call": first,
        "workloads": payload_workloads,
        "targets": targets,
        "tables": tables,
        "plot": str(png) if png else None,
    }
    write_json(args.out / "pad.json", payload)
    print(f"\nwrote {args.out / 'pad.json'}" + (f" and {png}" if png else " (no matplotlib)"))
    print(f"total {clock.elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
