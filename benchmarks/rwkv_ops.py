"""Benchmark tipad's RWKV operators against what users run on a CPU today.

    python benchmarks/rwkv_ops.py [--quick] [--compile] [--ops wkv wkv7 time_conv] [--out out/bench]

* WKV (RWKV-4), forward and forward+backward, float32, (B, T, C) = (8, 512, 512) and
  (1, 4096, 768): ``tipad_transforms.ops.wkv`` against the stable recurrence written here in
  torch, one step per token (eager), and with ``--compile`` against ``torch.compile`` of that
  step (the loop stays in Python; compile time reported apart), and with ``--compile-loop``
  ``torch.compile`` of the whole loop (unrolled over T: minutes, capped by ``--compile-cap``).
* WKV-7 (RWKV-7 "Goose", x070), forward and forward+backward, float32, (B, T, H, N) =
  (4, 512, 8, 64) (C = 512): ``tipad_transforms.ops.wkv7`` against the recurrence written
  here in torch (one batched matrix step per token, eager), and with ``--compile`` /
  ``--compile-loop`` against ``torch.compile`` of that step / of the whole loop.
* time_conv (the causal depthwise time convolution), forward and forward+backward, float32, L = T,
  (B, C, T) = (8, 256, 512) and (32, 768, 768): ``tipad_transforms.ops.time_conv`` against
  ``F.conv1d(F.pad(k, (L - 1, 0)), w.unsqueeze(1), groups=C)``, with achieved GFLOP/s (2 FLOPs
  per multiply-add of the causal sum) next to a float32 matmul's, measured in the same run.

Prints one table per workload and the targets (MET / MISSED), and writes ``<out>/rwkv.json``
(every raw timing, medians, ratios, accuracy checks, machine info) and ``<out>/rwkv.png``.
Timing rules: ``_common.py`` (one process, interleaved rounds, medians). Peers compute the same
function in different orders, so each is checked against the first within a tolerance here
(not bit for bit) before it is timed.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from _common import (
    CompileTimeout,
    Deadline,
    Measurement,
    Peer,
    format_ms,
    format_table,
    machine_info,
    measure,
    plot_workloads,
    runtime_sha,
    time_limit,
    write_json,
)

import tipad_transforms.ops as tops

NOTES = [
    "Peers run in one process, interleaved round-robin (order rotated each round) after an "
    "accuracy check and warm-up calls; reported times are medians over rounds of per-call wall "
    "time (the min column approximates the uncontended cost on a shared machine).",
    "torch eager WKV = the numerically stable (aa, bb, pp) recurrence of RWKV-4, one torch step "
    "per token, differentiated by autograd: what runs on a CPU without the CUDA kernel.",
    "torch.compile (step) = torch.compile(step, dynamic=False) of one token's update, called T "
    "times from Python (the loop is not compiled); (loop) = torch.compile of the whole "
    "sequential function, unrolled over T. Compile time is the first call, reported apart.",
    "time_conv GFLOP/s counts 2 FLOPs per multiply-add of the causal sum (forward: 2*B*C*"
    "sum_t min(t+1, L); forward+backward: 3 times that), for every peer alike: conv1d on the "
    "left-padded input also multiplies the zero padding, which is not counted.",
    "fwd+bwd = one forward with autograd recording plus torch.autograd.grad of all inputs for a "
    "fixed random output gradient.",
    "On a busy shared machine the eager loop (thousands of small ops, each a parallel region "
    "that waits for its slowest thread) slows down far more than one long kernel: (8, 512, 512) "
    "eager forward took 0.6 s with torch.set_num_threads(1) and 2.4-9.6 s with 2 threads at a "
    "load average of 5-10 on 2 cores. --threads 1 gives steadier, less flattering ratios.",
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# WKV


def wkv_step(
    w: torch.Tensor,
    u: torch.Tensor,
    kt: torch.Tensor,
    vt: torch.Tensor,
    aa: torch.Tensor,
    bb: torch.Tensor,
    pp: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One token of the stable recurrence: ``(y_t, aa, bb, pp)``."""
    ww = u + kt
    p = torch.maximum(pp, ww)
    e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
    y = (e1 * aa + e2 * vt) / (e1 * bb + e2)
    ww = w + pp
    p = torch.maximum(ww, kt)
    e1, e2 = torch.exp(ww - p), torch.exp(kt - p)
    return y, e1 * aa + e2 * vt, e1 * bb + e2, p


def wkv_torch(
    time_decay: torch.Tensor,
    time_first: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    step: Callable[..., Any] = wkv_step,
) -> torch.Tensor:
    """WKV ``(B, T, C)`` with the state starting at (0, 0, -1e38)."""
    w = -torch.exp(time_decay)
    b, t, c = k.shape
    aa, bb = k.new_zeros(b, c), k.new_zeros(b, c)
    pp = k.new_full((b, c), -1e38)
    ys = []
    for i in range(t):
        y, aa, bb, pp = step(w, time_first, k[:, i], v[:, i], aa, bb, pp)
        ys.append(y)
    return torch.stack(ys, 1)


def wkv_inputs(b: int, t: int, c: int, seed: int) -> dict[str, torch.Tensor]:
    """RWKV-4 style parameters (rwkv.md's init, middle layer) and unit-scale k, v."""
    gen = torch.Generator().manual_seed(seed)
    h = torch.arange(c, dtype=torch.float32)
    return {
        "time_decay": -5 + 8 * (h / max(c - 1, 1)) ** (0.7 + 1.3 * 0.5),
        "time_first": torch.log(torch.tensor(0.3)) + ((h + 1) % 3 - 1) * 0.5,
        "k": torch.randn(b, t, c, generator=gen),
        "v": torch.randn(b, t, c, generator=gen),
        "grad": torch.randn(b, t, c, generator=gen),
    }


# ---------------------------------------------------------------------------------------------
# WKV-7


def wkv7_step(
    s: torch.Tensor,
    r: torch.Tensor,
    d: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token for every (batch, head): ``(y_t, S_t)`` from ``S_{t-1}`` ``(B, H, N, N)``."""
    sa = s @ a.unsqueeze(-1)
    s = s * d.unsqueeze(-2) + sa @ b.unsqueeze(-2) + v.unsqueeze(-1) @ k.unsqueeze(-2)
    return (s @ r.unsqueeze(-1)).squeeze(-1), s


def wkv7_torch(
    r: torch.Tensor,
    w: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    step: Callable[..., Any] = wkv7_step,
) -> torch.Tensor:
    """``y`` ``(B, T, H, N)`` of the x070 recurrence from a zero state, one step per token."""
    n_b, n_t, n_h, n_n = r.shape
    d = torch.exp(w)
    s = r.new_zeros(n_b, n_h, n_n, n_n)
    ys = []
    for t in range(n_t):
        y, s = step(s, r[:, t], d[:, t], k[:, t], v[:, t], a[:, t], b[:, t])
        ys.append(y)
    return torch.stack(ys, 1)


def wkv7_inputs(b: int, t: int, h: int, n: int, seed: int) -> dict[str, torch.Tensor]:
    """x070-like operands: decays in (0.545, 1), ``a = -kk``, ``b = kk * iclr`` (kk unit)."""
    gen = torch.Generator().manual_seed(seed)

    def randn() -> torch.Tensor:
        return torch.randn(b, t, h, n, generator=gen)

    kk = F.normalize(randn(), dim=-1)
    iclr = torch.rand(b, t, h, n, generator=gen)
    w = -torch.exp(torch.tensor(-0.5)) * torch.sigmoid(randn())
    return {"r": randn(), "w": w, "k": randn(), "v": randn(), "a": -kk, "b": kk * iclr,
            "grad": randn()}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# time_conv


def conv1d_peer(w: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    length = w.shape[1]
    return F.conv1d(F.pad(k, (length - 1, 0)), w.unsqueeze(1), groups=w.shape[0])


def fft_peer(w: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The causal convolution as a product of spectra, zero-padded to a power of two."""
    t, length = k.shape[-1], w.shape[-1]
    n = 1 << (t + length - 2).bit_length()
    spectrum = torch.fft.rfft(k, n=n) * torch.fft.rfft(w.flip(-1), n=n)
    return torch.fft.irfft(spectrum, n=n)[..., :t]


def time_conv_flops(b: int, c: int, t: int, length: int) -> int:
    """Forward FLOPs of the causal sum: ``2 * B * C * sum_t min(t + 1, L)``."""
    m = min(t, length)
    return 2 * b * c * (m * (m + 1) // 2 + (t - m) * length)


# ---------------------------------------------------------------------------------------------
# peers and checks


def _forward(fn: Callable[..., torch.Tensor], args: list[torch.Tensor]) -> Callable[[], Any]:
    def run() -> torch.Tensor:
        with torch.no_grad():
            return fn(*args)

    return run


def _forward_backward(
    fn: Callable[..., torch.Tensor], args: list[torch.Tensor], grad: torch.Tensor
) -> Callable[[], Any]:
    leaves = [a.detach().clone().requires_grad_() for a in args]

    def run() -> torch.Tensor:
        grads = torch.autograd.grad(fn(*leaves), leaves, grad)
        return torch.cat([g.reshape(-1) for g in grads])

    return run


def check_close(peers: list[Peer], rtol: float, atol: float) -> dict[str, Any]:
    """Every peer's result against the first's; raises if one is off (timing would be moot)."""
    ref = peers[0].fn()
    report: dict[str, Any] = {}
    for p in peers[1:]:
        if p.group == "copy":  # a yardstick of bytes, not the same function
            continue
        got = p.fn()
        diff = (got.double() - ref.double()).abs()
        # Relative to the largest value: float32 sums of thousands of terms (dw sums B*T) in
        # different orders differ by ~1e-6 of their scale, also where a sum cancels to ~0.
        bound = atol + rtol * ref.double().abs().max()
        report[p.key] = {"max_abs_diff": diff.max().item(), "rtol": rtol, "atol": atol}
        if not bool((diff <= bound).all()):
            raise AssertionError(
                f"{p.label} differs from {peers[0].label}: max abs diff {diff.max().item():.3g}"
            )
    return report


def compile_peer(
    label: str, build: Callable[[], Callable[[], Any]], cap: float
) -> tuple[Callable[[], Any] | None, dict[str, Any]]:
    """Build a compiled peer and make its first call under a time cap."""
    t0 = time.perf_counter()
    try:
        with time_limit(cap):
            fn = build()
            fn()
    except Exception as exc:
        # Inductor wraps the timeout raised inside it (BackendCompilerFailed): look inside.
        if not any(
            isinstance(e, CompileTimeout)
            for e in (exc, exc.__cause__, getattr(exc, "inner_exception", None))
        ):
            raise
        exc = CompileTimeout(f"gave up after {cap:.0f} s")
        log(f"  {label}: {exc}")
        return None, {"status": f"gave up ({exc})", "compile_s": time.perf_counter() - t0}
    return fn, {"status": "ok", "compile_s": time.perf_counter() - t0}


# ---------------------------------------------------------------------------------------------
# workloads


def _recurrence_workloads(
    name: str,
    op: Callable[..., torch.Tensor],
    loop: Callable[..., torch.Tensor],
    step: Callable[..., torch.Tensor],
    xs: list[torch.Tensor],
    grad: torch.Tensor,
    args: argparse.Namespace,
) -> list[tuple[list[Peer], dict[str, Any]]]:
    """Forward and forward+backward peers of one recurrence: tipad's op, the eager torch loop,
    and ``torch.compile`` of the loop or of one step (``args.compile_variants``)."""
    compiled: dict[str, Any] = {}
    out = []
    for kind in ("fwd", "fwd+bwd"):

        def make(fn: Callable[..., torch.Tensor], kind: str = kind) -> Callable[[], Any]:
            if kind == "fwd":
                return _forward(fn, xs)
            return _forward_backward(fn, xs, grad)

        peers = [
            Peer(f"tipad.{name}", f"tipad ops.{name} (Taichi)", make(op), "tipad"),
            Peer("torch.eager", "torch eager loop", make(loop), "eager"),
        ]
        for variant in args.compile_variants:
            key = f"torch.compile-{variant}"
            if variant == "step":
                compiled_step = torch.compile(step, dynamic=False)

                def fn(*a: torch.Tensor, _s: Any = compiled_step) -> torch.Tensor:
                    return loop(*a, step=_s)
            else:
                fn = torch.compile(loop, dynamic=False)
            run, info = compile_peer(key, lambda fn=fn: make(fn), args.compile_cap)
            compiled[f"{key} {kind}"] = info
            log(f"  torch.compile ({variant}, {kind}): {info['status']}, {info['compile_s']:.1f} s")
            if run is not None:
                peers.append(Peer(key, f"torch.compile ({variant})", run, key))
        out.append((peers, {"torch_compile": compiled}))
    return out


def wkv_workloads(
    shape: tuple[int, int, int], args: argparse.Namespace
) -> list[tuple[str, str, list[Peer], dict[str, Any]]]:
    b, t, c = shape
    inputs = wkv_inputs(b, t, c, args.seed)
    xs = [inputs[n] for n in ("time_decay", "time_first", "k", "v")]
    pairs = _recurrence_workloads("wkv", tops.wkv, wkv_torch, wkv_step, xs, inputs["grad"], args)
    # Issue 25's bandwidth target: the forward reads k and v and writes y, 3 B T C floats; a
    # copy_ moving as many bytes (read + write) gives the machine's rate for them, in the same
    # rounds.
    src = torch.randn(3 * b * t * c // 2)
    dst = torch.empty_like(src)
    fwd_peers, fwd_extra = pairs[0]
    fwd_peers.append(Peer("copy", "torch copy_ of the same bytes", lambda: dst.copy_(src), "copy"))
    fwd_extra["copy_share"] = 0.25
    return [
        (f"wkv-{kind}-{b}x{t}x{c}", f"WKV {kind}, (B, T, C) = {shape}, float32", peers, extra)
        for kind, (peers, extra) in zip(("fwd", "fwd+bwd"), pairs, strict=True)
    ]


def wkv7_flops(b: int, t: int, h: int, n: int) -> int:
    """The recurrence's FLOPs per forward: per step and head ``S a`` (2 N^2), the update
    ``S d + (S a) b^T + v k^T`` (5 N^2) and ``S r`` (2 N^2), whatever form computes it."""
    return 9 * b * t * h * n * n


def wkv7_recurrence(*xs: torch.Tensor) -> torch.Tensor:
    """``ops.wkv7`` with its chunked CPU form switched off: the Taichi recurrence alone."""
    from tipad_transforms.ops.rwkv7 import chunked

    saved = chunked.MIN_STEPS
    chunked.MIN_STEPS = sys.maxsize
    try:
        return tops.wkv7(*xs)  # type: ignore[return-value]
    finally:
        chunked.MIN_STEPS = saved


def _fla_missing() -> str | None:
    """Why flash-linear-attention's reference recurrence is not a peer here, or None."""
    import importlib.util

    try:
        found = importlib.util.find_spec("fla.ops.rwkv7") is not None
    except ModuleNotFoundError:
        found = False
    return None if found else "flash-linear-attention (fla.ops.rwkv7) is not installed"


def wkv7_workloads(
    shape: tuple[int, int, int, int], args: argparse.Namespace
) -> list[tuple[str, str, list[Peer], dict[str, Any]]]:
    b, t, h, n = shape
    inputs = wkv7_inputs(b, t, h, n, args.seed)
    xs = [inputs[name] for name in ("r", "w", "k", "v", "a", "b")]
    pairs = _recurrence_workloads(
        "wkv7", tops.wkv7, wkv7_torch, wkv7_step, xs, inputs["grad"], args
    )
    missing = _fla_missing()
    if missing:
        log(f"  skipped peer fla: {missing}")
    out = []
    for kind, (peers, extra) in zip(("fwd", "fwd+bwd"), pairs, strict=True):
        if kind == "fwd":
            run = _forward(wkv7_recurrence, xs)
        else:
            run = _forward_backward(wkv7_recurrence, xs, inputs["grad"])
        peers.insert(1, Peer("recurrence", "tipad ops.wkv7, recurrence only", run, "rec"))
        more: dict[str, Any] = {"need": 5.0, "skipped_peers": {"fla": missing} if missing else {}}
        if kind == "fwd":  # the rate target: >= 25% of the same run's matmul rate
            more |= {"flops": wkv7_flops(b, t, h, n), "matmul_share": 0.25}
        title = f"WKV-7 {kind}, (B, T, H, N) = {shape}, float32"
        out.append((f"wkv7-{kind}-{b}x{t}x{h}x{n}", title, peers, {**extra, **more}))
    return out


def conv_workloads(
    shape: tuple[int, int, int], args: argparse.Namespace
) -> list[tuple[str, str, list[Peer], dict[str, Any]]]:
    b, c, t, length = (*shape, shape[-1])[:4]
    gen = torch.Generator().manual_seed(args.seed)
    w = torch.randn(c, length, generator=gen) / length**0.5
    k = torch.randn(b, c, t, generator=gen)
    grad = torch.randn(b, c, t, generator=gen)
    out = []
    for kind in ("fwd", "fwd+bwd"):
        flops = time_conv_flops(b, c, t, length) * (1 if kind == "fwd" else 3)

        def make(fn: Callable[..., torch.Tensor], kind: str = kind) -> Callable[[], Any]:
            if kind == "fwd":
                return _forward(fn, [w, k])
            return _forward_backward(fn, [w, k], grad)

        peers = [
            Peer("tipad.time_conv", "tipad ops.time_conv (Taichi)", make(tops.time_conv), "t"),
            Peer("torch.conv1d", "torch F.conv1d(groups=C)", make(conv1d_peer), "c"),
            Peer("torch.fft", "torch.fft causal convolution", make(fft_peer), "f"),
        ]
        title = f"time_conv {kind}, (B, C, T) = {(b, c, t)}, L = {length}, float32"
        key = f"time_conv-{kind}-{b}x{c}x{t}" + ("" if length == t else f"-L{length}")
        # Issue 25's forward target: ahead of the best of the peers by 1.5x.
        more = {"flops": flops} | ({"best_peer_need": 1.5} if kind == "fwd" else {})
        out.append((key, title, peers, more))
    return out


def matmul_gflops(args: argparse.Namespace, rounds: int) -> dict[str, Any]:
    n = 512 if args.quick else 2048
    gen = torch.Generator().manual_seed(args.seed)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    (m,) = measure(
        [Peer("torch.matmul", f"torch float32 matmul {n}x{n}", lambda: a @ b, "mm")],
        repeats=rounds,
        warmup=1,
        min_sample_s=args.min_sample_ms / 1e3,
    )
    return {
        "n": n,
        "median_s": m.stats.median_s,
        "min_s": m.stats.min_s,
        "gflops_median": 2 * n**3 / m.stats.median_s / 1e9,
        "gflops_best": 2 * n**3 / m.stats.min_s / 1e9,
    }


def table(title: str, ms: list[Measurement], yard: str, flops: int | None, rounds: int) -> str:
    base = next(m.stats.median_s for m in ms if m.peer.key == yard)
    rows = []
    for m in ms:
        s = m.stats
        row = [
            m.peer.label,
            format_ms(s.median_s),
            f"{format_ms(s.q1_s)}-{format_ms(s.q3_s)}",
            format_ms(s.min_s),
            f"{s.median_s / base:.3f}x",
            f"{base / s.median_s:.2f}x",
        ]
        if flops:
            row.append(f"{flops / s.median_s / 1e9:.1f}")
        rows.append(row)
    header = ["peer", "median ms", "quartiles ms", "min ms", "time / yardstick", "speed-up"]
    if flops:
        header.append("GFLOP/s")
    return f"{title}   [{rounds} rounds]\n" + format_table(header, rows, right="123456")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: small sizes, few rounds")
    ap.add_argument("--out", type=Path, default=Path("out/bench"), help="output directory")
    ap.add_argument("--repeats", type=int, help="rounds per workload (default 5, quick 2)")
    ap.add_argument("--compile", action="store_true", help="add torch.compile of the WKV step")
    ap.add_argument(
        "--compile-loop", action="store_true", help="add torch.compile of the whole WKV loop"
    )
    ap.add_argument(
        "--compile-cap", type=float, default=600.0, help="give up a compile after this (s)"
    )
    ap.add_argument(
        "--ops",
        nargs="+",
        choices=("wkv", "wkv7", "time_conv"),
        default=["wkv", "wkv7", "time_conv"],
        help="the operators to benchmark (default: all)",
    )
    ap.add_argument("--min-sample-ms", type=float, default=50.0)
    ap.add_argument("--threads", type=int, help="CPU threads for torch and Taichi")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["TI_CPU_MAX_NUM_THREADS"] = str(args.threads)
    args.compile_variants = [
        v for v, on in (("step", args.compile), ("loop", args.compile_loop)) if on
    ]
    if args.compile_variants:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="tipad-rwkv-"))
    quick = args.quick
    rounds = args.repeats or (2 if quick else 5)
    if quick:
        wkv_shapes, conv_shapes = [(2, 64, 64)], [(2, 32, 64), (2, 32, 64, 16)]
        wkv7_shapes = [(1, 32, 2, 16)]
    else:
        wkv_shapes = [(8, 512, 512), (1, 4096, 768)]
        conv_shapes = [(8, 256, 512), (32, 768, 768), (8, 256, 512, 16), (8, 256, 512, 64)]
        wkv7_shapes = [(4, 512, 8, 64)]

    clock = Deadline(0)
    info = machine_info()
    log(f"tipad rwkv benchmark on {info['cpu_count']} CPUs, load {info['loadavg_at_start']}")
    mm = matmul_gflops(args, rounds)
    log(f"float32 matmul: {mm['gflops_median']:.1f} GFLOP/s (median)")

    payload_workloads: list[dict[str, Any]] = []
    plots: list[tuple[str, list[Measurement], str]] = []
    tables: list[str] = []
    targets: list[dict[str, Any]] = []
    builders: list[tuple[Callable[..., Any], tuple[int, ...], str]] = []
    if "wkv" in args.ops:
        builders += [(wkv_workloads, s, "torch.eager") for s in wkv_shapes]
    if "wkv7" in args.ops:
        builders += [(wkv7_workloads, s, "torch.eager") for s in wkv7_shapes]
    if "time_conv" in args.ops:
        builders += [(conv_workloads, s, "torch.conv1d") for s in conv_shapes]
    errors: list[str] = []
    for build, shape, yard in builders:
        log(f"{build.__name__} {shape}: building inputs...")
        for key, title, peers, extra in build(shape, args):
            log(f"{key}: checking and timing {len(peers)} peers, {rounds} rounds...")
            tol = (2e-5, 1e-5) if key.startswith("time_conv") else (2e-3, 1e-5)
            try:
                accuracy = check_close(peers, *tol)
            except Exception as exc:  # one broken peer must not cost the other workloads
                errors.append(f"{key}: {type(exc).__name__}: {str(exc)[-2000:]}")
                log("  ERROR " + errors[-1])
                targets.append({"target": key, "measured": "error", "met": False})
                continue
            t0 = time.perf_counter()
            ms = measure(
                peers,
                repeats=rounds,
                warmup=0,  # the accuracy check, the bit check and calibration warm up
                min_sample_s=args.min_sample_ms / 1e3,
                max_calls=50,
                log=log,
            )
            flops = extra.get("flops")
            tables.append(table(title, ms, yard, flops, rounds))
            print("\n" + tables[-1], flush=True)
            plots.append((title, ms, yard))
            med = {m.peer.key: m.stats.median_s for m in ms}
            tipad = next(k for k in med if k.startswith("tipad"))
            speedup = med[yard] / med[tipad]
            need = extra.get("need", 5.0 if yard == "torch.eager" else 1.0)
            targets.append(
                {
                    "target": f"{key}: tipad >= {need:g}x faster than {yard}"
                    if need > 1
                    else f"{key}: tipad faster than {yard}",
                    "measured": f"{speedup:.2f}x",
                    "met": speedup >= need,
                }
            )
            if extra.get("matmul_share") and flops:
                share = flops / med[tipad] / 1e9 / mm["gflops_median"]
                targets.append(
                    {
                        "target": f"{key}: tipad >= {extra['matmul_share']:.0%} of the matmul rate",
                        "measured": f"{share:.1%} ({flops / med[tipad] / 1e9:.1f} GFLOP/s)",
                        "met": share >= extra["matmul_share"],
                    }
                )
            if extra.get("copy_share"):
                share = med["copy"] / med[tipad]
                targets.append(
                    {
                        "target": f"{key}: tipad >= {extra['copy_share']:.0%} of copy bandwidth",
                        "measured": f"{share:.1%}",
                        "met": share >= extra["copy_share"],
                    }
                )
            if extra.get("best_peer_need"):
                others = {k: v for k, v in med.items() if not k.startswith("tipad")}
                best = min(others, key=others.__getitem__)
                r = others[best] / med[tipad]
                targets.append(
                    {
                        "target": f"{key}: tipad >= {extra['best_peer_need']:g}x the best "
                        f"peer ({best})",
                        "measured": f"{r:.2f}x",
                        "met": r >= extra["best_peer_need"],
                    }
                )
            for ck in (k for k in med if k.startswith("torch.compile")):
                r = med[ck] / med[tipad]
                targets.append(
                    {
                        "target": f"{key}: tipad faster than {ck}",
                        "measured": f"{r:.2f}x",
                        "met": r > 1.0,
                    }
                )
            payload_workloads.append(
                {
                    "key": key,
                    "title": title,
                    "shape": list(shape),
                    "rounds": rounds,
                    "timing_wall_s": time.perf_counter() - t0,
                    "yardstick": yard,
                    "accuracy_vs_first_peer": accuracy,
                    **extra,
                    "peers": [
                        {
                            **m.to_json(),
                            "ratio_to_yardstick": m.stats.median_s / med[yard],
                            **({"gflops_median": flops / m.stats.median_s / 1e9} if flops else {}),
                        }
                        for m in ms
                    ],
                }
            )
            del peers, ms
            gc.collect()

    info["loadavg_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    info["runtime_py_sha256_at_end"] = runtime_sha()
    warnings_: list[str] = []
    if info["runtime_py_sha256_at_end"] != info["runtime_py_sha256"]:
        warnings_.append("tipad_transforms' kernel sources changed during the run: run again")
    info["wkv_route"] = _wkv_route()
    rows = [[t["target"], t["measured"], "MET" if t["met"] else "MISSED"] for t in targets]
    print("\nTargets (the issue's)\n" + format_table(["target", "measured", "verdict"], rows))
    print(
        f"float32 matmul {mm['n']}x{mm['n']}: {mm['gflops_median']:.1f} GFLOP/s median "
        f"({mm['gflops_best']:.1f} best); load average at start {info['loadavg_at_start']}, "
        f"at end {info['loadavg_at_end']} on {info['cpu_count']} CPUs; WKV route: "
        f"{info['wkv_route']}"
    )
    for w in warnings_:
        print("WARNING: " + w)
    for e in errors:
        print("ERROR: " + e.splitlines()[0])
    info["total_wall_s"] = clock.elapsed()
    args.out.mkdir(parents=True, exist_ok=True)
    png = plot_workloads(
        plots,
        args.out / "rwkv.png",
        f"tipad RWKV operators on CPU ({info['cpu_count']} cores, torch {info['torch']}, "
        f"taichi {info['taichi']}) - {info['date']}",
    )
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    payload = {
        "schema": "tipad-bench-rwkv/1",
        "machine": info,
        "settings": settings,
        "notes": NOTES,
        "warnings": warnings_,
        "errors": errors,
        "matmul": mm,
        "workloads": payload_workloads,
        "targets": targets,
        "tables": tables,
        "plot": str(png) if png else None,
    }
    write_json(args.out / "rwkv.json", payload)
    print(f"\nwrote {args.out / 'rwkv.json'}" + (f" and {png}" if png else " (no matplotlib)"))
    print(f"total {clock.elapsed():.0f} s")
    return 1 if errors else 0


def _wkv_route() -> str:
    """Which WKV implementation ``ops.wkv`` ran: the Taichi kernels or the torch route."""
    from tipad_transforms.backends import TAICHI

    kernels = TAICHI.kernels
    return "taichi kernels: " + ", ".join(sorted(kernels)) if kernels else "torch route"


if __name__ == "__main__":
    sys.exit(main())
