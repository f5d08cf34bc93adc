"""Upstream taichi against taichi_forge: the recorded workloads, side by side, same machine.

    python benchmarks/backends.py [--quick] [--repeats N] [--out out/bench]
        [--python taichi=PATH] [--python taichi_forge=PATH]

A process runs one Taichi, so each backend runs in a child process of its own (``TIPAD_TAICHI``
names it; ``--python`` gives the interpreter of a venv that has it, e.g. `make bench-backends`
passes the second venv of `make test`). Both children start together, check and warm up every
workload, then run one round each in turn, the order swapped every round, so that a noisy shared
machine's drift lands on both alike; only one child runs at a time. Each reports per-call
medians over rounds (``_common``'s samples: enough back-to-back calls to last ``--min-sample``).

Workloads (``docs/benchmarks.md``'s, float32 unless said): the ``(64, 3, 224, 224)`` batch padded
by 32 in uint8 and float32 (``brick_pad`` fresh and into ``out=``; ``pad`` reflect into
``out=``), the seed article's 4144 x 8224 canvas (``texture_pad`` into ``out=``), ``pad_stack``
of 64 random-size uint8 images onto 224 x 224 (reflect and constant), WKV forward and
forward+backward at (8, 512, 512) and time_conv forward and forward+backward at (8, 256, 512).

Each child also times its first call in a fresh process (``brick_pad`` on one image with an
empty Taichi cache: import, init, compile) and saves every workload's output; the parent checks
that the two backends agree (padding bit for bit, RWKV within float32 rounding) before it
prints anything. Writes ``<out>/backends.json`` (every sample, medians, ratios, checks, versions).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch
from _common import REPO, format_ms, format_table, machine_info, write_json

BACKENDS = ("taichi", "taichi_forge")


# ---------------------------------------------------------------------------------------------
# the child: one backend, every workload


def _workloads(quick: bool, seed: int) -> dict[str, Callable[[], torch.Tensor]]:
    """Workload key -> a call returning its result (a tensor the parent can compare)."""
    import tipad_transforms.functional as TF
    import tipad_transforms.ops as tops

    gen = torch.Generator().manual_seed(seed)
    # Another helper renames functional.pad's mode argument to torchvision's padding_mode.
    mode_kw = "padding_mode" if "padding_mode" in inspect.signature(TF.pad).parameters else "mode"
    calls: dict[str, Callable[[], torch.Tensor]] = {}

    n = 8 if quick else 64
    for dtype in (torch.uint8, torch.float32):
        name = str(dtype).removeprefix("torch.")
        x = torch.randint(0, 256, (n, 3, 224, 224), generator=gen, dtype=torch.uint8)
        x = x if dtype == torch.uint8 else x.float() / 255
        out = torch.empty(n, 3, 288, 288, dtype=dtype)
        out2 = torch.empty_like(out)
        calls[f"batch-{name} brick_pad fresh"] = lambda x=x: TF.brick_pad(x, 32)
        calls[f"batch-{name} brick_pad out="] = lambda x=x, o=out: TF.brick_pad(x, 32, out=o)
        calls[f"batch-{name} pad reflect out="] = lambda x=x, o=out2: TF.pad(
            x, 32, **{mode_kw: "reflect"}, out=o
        )

    tile = torch.rand(1, 48, 32, generator=gen)
    wide = (512, 256, 512, 256) if quick else (4096, 2048, 4096, 2048)
    canvas = torch.empty(1, 48 + wide[1] + wide[3], 32 + wide[0] + wide[2])
    calls["seed canvas texture_pad out="] = lambda: TF.texture_pad(
        tile, wide, tile, stagger=10, out=canvas
    )

    sizes = torch.randint(150, 225, (n, 2), generator=gen).tolist()
    images = [torch.randint(0, 256, (3, h, w), generator=gen, dtype=torch.uint8) for h, w in sizes]
    where = torch.tensor([[(224 - h) // 2, (224 - w) // 2] for h, w in sizes])
    for mode in ("reflect", "constant"):
        calls[f"pad_stack {mode}"] = lambda m=mode: TF.pad_stack(images, (224, 224), where, m)

    b, t, c = (2, 128, 128) if quick else (8, 512, 512)
    h = torch.arange(c, dtype=torch.float32)
    decay = -5 + 8 * (h / max(c - 1, 1)) ** 1.35
    first = torch.log(torch.tensor(0.3)) + ((h + 1) % 3 - 1) * 0.5
    k, v, g = (torch.randn(b, t, c, generator=gen) for _ in range(3))
    leaves = [a.clone().requires_grad_() for a in (decay, first, k, v)]

    def wkv_fwd() -> torch.Tensor:
        with torch.no_grad():
            return tops.wkv(decay, first, k, v)

    def wkv_bwd() -> torch.Tensor:
        grads = torch.autograd.grad(tops.wkv(*leaves), leaves, g)
        return torch.cat([gr.reshape(-1) for gr in grads])

    calls[f"wkv fwd {b}x{t}x{c}"] = wkv_fwd
    calls[f"wkv fwd+bwd {b}x{t}x{c}"] = wkv_bwd

    b, c, t = (2, 64, 128) if quick else (8, 256, 512)
    w, kk, gg = (
        torch.randn(c, t, generator=gen) / t**0.5,
        *(torch.randn(b, c, t, generator=gen) for _ in range(2)),
    )
    conv_leaves = [w.clone().requires_grad_(), kk.clone().requires_grad_()]

    def conv_fwd() -> torch.Tensor:
        with torch.no_grad():
            return tops.time_conv(w, kk)

    def conv_bwd() -> torch.Tensor:
        grads = torch.autograd.grad(tops.time_conv(*conv_leaves), conv_leaves, gg)
        return torch.cat([gr.reshape(-1) for gr in grads])

    calls[f"time_conv fwd {b}x{c}x{t}"] = conv_fwd
    calls[f"time_conv fwd+bwd {b}x{c}x{t}"] = conv_bwd
    return calls


_FIRST_CALL = """
import json, sys, time
import torch
t0 = time.perf_counter()
import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI
x = torch.randint(0, 256, (3, 224, 224), dtype=torch.uint8)
t1 = time.perf_counter()
F.brick_pad(x, 32)
t2 = time.perf_counter()
F.brick_pad(x, 32)
t3 = time.perf_counter()
print(json.dumps({"first_call_s": t2 - t1, "second_call_s": t3 - t2,
                  "backend": TAICHI.describe()}))
"""


def _first_call() -> dict[str, Any]:
    """One fresh process, empty Taichi cache: the first ``brick_pad`` (import, init, compile)."""
    with tempfile.TemporaryDirectory(prefix="tipad-backends-cache-") as cache:
        # TIPAD_WARMUP=0: the first call starts Taichi (what this times), no torch route.
        env = dict(os.environ, TI_OFFLINE_CACHE_FILE_PATH=cache, TIPAD_WARMUP="0")
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_CALL],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            cwd=REPO,
        )
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.splitlines()[-1])


def _sample(fn: Callable[[], torch.Tensor], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def child(args: argparse.Namespace) -> None:
    """Serve the parent over stdin/stdout: ``ready`` after the warm-up, one line per round."""
    from tipad_transforms.backends import TAICHI

    send: IO[str] = sys.stdout
    sys.stdout = sys.stderr  # anything else printed must not break the protocol
    first = _first_call()
    calls = _workloads(args.quick, args.seed)
    outputs: dict[str, torch.Tensor] = {}
    per_sample: dict[str, int] = {}
    compile_s: dict[str, float] = {}
    for key, fn in calls.items():
        t0 = time.perf_counter()
        outputs[key] = fn().clone()  # the first call compiles this kernel for this dtype
        compile_s[key] = time.perf_counter() - t0
        fn()
        dt = _sample(fn, 1)
        per_sample[key] = max(1, min(200, round(args.min_sample / max(dt, 1e-9))))
    torch.save(outputs, args.child_outputs)
    info = {
        "backend": TAICHI.describe(),
        "first_call": first,
        "first_call_in_this_process_s": compile_s,
        "calls_per_sample": per_sample,
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps({"ready": info}), file=send, flush=True)
    for line in sys.stdin:
        if line.strip() != "round":
            break
        times = {key: _sample(fn, per_sample[key]) for key, fn in calls.items()}
        print(json.dumps({"round": times}), file=send, flush=True)


# ---------------------------------------------------------------------------------------------
# the parent: two children, interleaved rounds, checks, tables


def _compare(a: torch.Tensor, b: torch.Tensor, key: str) -> dict[str, Any]:
    if a.shape != b.shape or a.dtype != b.dtype:
        raise AssertionError(f"{key}: {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
    if key.startswith(("wkv", "time_conv")):
        # Same math, another LLVM: float32 rounding may differ (contraction, exp).
        diff = (a.double() - b.double()).abs().max().item()
        scale = a.double().abs().max().item()
        if not diff <= 1e-5 * max(scale, 1.0):
            raise AssertionError(f"{key}: the backends differ by {diff:.3g} (scale {scale:.3g})")
        return {"check": "close", "max_abs_diff": diff, "scale": scale}
    if not torch.equal(a.view(torch.uint8), b.view(torch.uint8)):
        raise AssertionError(f"{key}: the backends' canvases differ")
    return {"check": "bit-equal"}


def parent(args: argparse.Namespace) -> None:
    pythons = dict(p.split("=", 1) for p in args.python)
    unknown = set(pythons) - set(BACKENDS)
    if unknown:
        raise SystemExit(f"--python takes {' or '.join(BACKENDS)}=PATH, got {sorted(unknown)}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    children: dict[str, subprocess.Popen[str]] = {}
    ready: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tipad-backends-") as tmp, contextlib.ExitStack() as st:
        for name in BACKENDS:
            cmd = [pythons.get(name, sys.executable), __file__, "--child"]
            cmd += ["--min-sample", str(args.min_sample), "--seed", str(args.seed)]
            cmd += ["--child-outputs", f"{tmp}/{name}.pt"] + (["--quick"] if args.quick else [])
            env = dict(os.environ, TIPAD_TAICHI=name)
            proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
            )
            st.callback(proc.kill)
            children[name] = proc
            # One at a time: the other child's warm-up would share the two cores with this one.
            line = proc.stdout.readline() if proc.stdout else ""
            if not line:
                raise SystemExit(f"the {name} child failed (see its stderr above)")
            ready[name] = json.loads(line)["ready"]
            print(f"{name}: ready ({ready[name]['backend']})", file=sys.stderr)
        outputs = {name: torch.load(f"{tmp}/{name}.pt") for name in BACKENDS}
        checks = {
            key: _compare(outputs["taichi"][key], outputs["taichi_forge"][key], key)
            for key in outputs["taichi"]
        }
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in BACKENDS}
        for r in range(args.repeats):
            order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]
            for name in order:
                proc = children[name]
                assert proc.stdin and proc.stdout
                proc.stdin.write("round\n")
                proc.stdin.flush()
                for key, s in json.loads(proc.stdout.readline())["round"].items():
                    samples[name].setdefault(key, []).append(s)
            print(f"  round {r + 1}/{args.repeats}", file=sys.stderr)
        for proc in children.values():
            assert proc.stdin
            proc.stdin.write("quit\n")
            proc.stdin.close()
            proc.wait(timeout=60)

    rows, results = [], []
    for key in samples["taichi"]:
        up, fo = (statistics.median(samples[n][key]) for n in BACKENDS)
        results.append(
            {
                "workload": key,
                "median_s": {"taichi": up, "taichi_forge": fo},
                "min_s": {n: min(samples[n][key]) for n in BACKENDS},
                "samples_s": {n: samples[n][key] for n in BACKENDS},
                "forge_over_upstream": fo / up,
                **checks[key],
            }
        )
        rows.append([key, format_ms(up), format_ms(fo), f"{fo / up:.2f}x", checks[key]["check"]])
    for label, get in (
        ("first call, fresh process, empty cache", lambda i: i["first_call"].get("first_call_s")),
        ("first call, second of that process", lambda i: i["first_call"].get("second_call_s")),
    ):
        up, fo = (get(ready[n]) for n in BACKENDS)
        if up is not None and fo is not None:
            rows.append([label, format_ms(up), format_ms(fo), f"{fo / up:.2f}x", ""])
    header = [
        "workload (median ms)",
        ready["taichi"]["backend"],
        ready["taichi_forge"]["backend"],
        "forge / upstream",
        "outputs",
    ]
    table = format_table(header, rows, right="123")
    print(table)
    geo = statistics.geometric_mean([r["forge_over_upstream"] for r in results])
    print(f"geometric mean of forge / upstream over the workloads: {geo:.2f}x")
    write_json(
        out_dir / "backends.json",
        {
            "machine": machine_info(),
            "args": vars(args),
            "children": ready,
            "results": results,
            "geomean_forge_over_upstream": geo,
            "table": table,
            "wall_s": time.perf_counter() - started,
        },
    )
    print(f"wrote {out_dir / 'backends.json'}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--repeats", type=int, default=7, help="interleaved rounds (default 7)")
    ap.add_argument("--min-sample", type=float, default=0.05, help="seconds per sample")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/bench")
    ap.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="BACKEND=PATH",
        help="interpreter for a backend (default: this one)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-outputs", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
