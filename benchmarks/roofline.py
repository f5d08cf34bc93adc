"""The floor of every kernel family at the benchmark shapes: bytes and FLOPs per launch, the
least time an H200 needs for them, and this machine's own floor and tipad's time on it.

    python benchmarks/roofline.py [--out docs/results/roofline.json] [--repeats 5]

Per workload: the bytes a launch must move (each input read once, each output written once)
and the FLOPs it must do (2 per multiply-add; an exp counted as one). The H200 floor is
``max(bytes / 4.8 TB/s, FLOPs / 67 TFLOP/s)`` (HBM3e bandwidth; float32 without tensor cores),
so the first GPU run reads against it. The CPU floor uses this machine's limits measured in the
same run: a same-bytes ``copy_`` (read + write) and a 2048x2048 float32 matmul; tipad's forward
is timed beside it (median of ``--repeats`` rounds), except at the shapes only a GPU runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from _common import Peer, machine_info, measure, write_json
from rwkv_ops import wkv7_inputs

import tipad_transforms.functional as F
from tipad_transforms import ops

H200_BYTES_PER_S = 4.8e12
H200_FLOPS = 67e12
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    family: str
    name: str
    bytes: int
    flops: int
    #: builds the launch to time on this CPU, or None where only a GPU runs the shape
    make: Callable[[], Callable[[], Any]] | None


def _padding(dtype: torch.dtype) -> Workload:
    b, c, h, w, p = 64, 3, 224, 224, 32
    size = torch.tensor([], dtype=dtype).element_size()
    moved = (b * c * h * w + b * c * (h + 2 * p) * (w + 2 * p)) * size

    def make() -> Callable[[], Any]:
        gen = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (b, c, h, w), generator=gen).to(dtype)
        out = torch.empty(b, c, h + 2 * p, w + 2 * p, dtype=dtype)
        return lambda: F.pad(x, [p], padding_mode="reflect", out=out)

    name = f"pad reflect (64, 3, 224, 224) + 32 {str(dtype)[6:]}, out="
    return Workload("padding", name, moved, 0, make)


def _wkv(b: int, t: int, c: int) -> Workload:
    # Reads k, v; writes y. Per element: the update and the output, 3 exps, ~12 FLOPs.
    def make() -> Callable[[], Any]:
        gen = torch.Generator().manual_seed(0)
        w, u = -torch.rand(c, generator=gen).exp(), torch.randn(c, generator=gen)
        k, v = (torch.randn(b, t, c, generator=gen) for _ in range(2))
        return lambda: ops.wkv(w, u, k, v)

    return Workload("rwkv4", f"wkv fwd ({b}, {t}, {c})", 3 * b * t * c * 4, 15 * b * t * c, make)


def _wkv7(b: int, t: int, h: int, n: int, cpu: bool) -> Workload:
    # Per (b, t, h): S a (2N^2), S * w (N^2), + (S a) b^T (2N^2), + v k^T (2N^2), y = S r (2N^2).
    flops = 9 * n * n * b * t * h
    moved = (7 * b * t * h * n + 2 * b * h * n * n) * 4  # r w k v a b in, y out; state in, out

    def make() -> Callable[[], Any]:
        x = wkv7_inputs(b, t, h, n, seed=0)  # x070-like operands, the benchmark's
        args = [x[name] for name in ("r", "w", "k", "v", "a", "b")]
        return lambda: ops.wkv7(*args)

    return Workload("rwkv7", f"wkv7 fwd ({b}, {t}, {h}, {n})", moved, flops, make if cpu else None)


def _time_conv(b: int, c: int, t: int, cpu: bool) -> Workload:
    # Causal, L = T: output t sums t + 1 products.
    flops = b * c * t * (t + 1)
    moved = (2 * b * c * t + c * t) * 4

    def make() -> Callable[[], Any]:
        gen = torch.Generator().manual_seed(0)
        x, w = torch.randn(b, c, t, generator=gen), torch.randn(c, t, generator=gen)
        return lambda: ops.time_conv(w, x)

    name = f"time_conv fwd ({b}, {c}, {t}), L = T"
    return Workload("timex", name, moved, flops, make if cpu else None)


WORKLOADS = [
    _padding(torch.uint8),
    _padding(torch.float32),
    _wkv(8, 512, 512),
    _wkv7(4, 512, 8, 64, cpu=True),
    _wkv7(8, 4096, 64, 64, cpu=False),
    _time_conv(8, 256, 512, cpu=True),
    _time_conv(32, 768, 768, cpu=True),
]


def machine_limits(repeats: int) -> dict[str, float]:
    """This machine's same-bytes copy bandwidth (read + write) and float32 matmul rate."""
    src, dst = torch.empty(1 << 25), torch.empty(1 << 25)  # 128 MiB each
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    peers = [Peer("copy", "copy_", lambda: dst.copy_(src), "copy"),
             Peer("mm", "matmul", lambda: a @ b, "mm")]  # fmt: skip
    copy, mm = measure(peers, repeats=repeats, warmup=1, min_sample_s=0.05)
    return {
        "copy_bytes_per_s": 2 * src.numel() * 4 / copy.stats.median_s,
        "matmul_flops": 2 * n**3 / mm.stats.median_s,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "roofline.json")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    limits = machine_limits(args.repeats)
    rows = []
    for wl in WORKLOADS:
        gpu_floor = max(wl.bytes / H200_BYTES_PER_S, wl.flops / H200_FLOPS)
        cpu_floor = max(wl.bytes / limits["copy_bytes_per_s"], wl.flops / limits["matmul_flops"])
        tipad = None
        if wl.make is not None:
            fn = wl.make()
            (m,) = measure([Peer("tipad", wl.name, fn, "t")], repeats=args.repeats, warmup=1,
                           min_sample_s=0.05)  # fmt: skip
            tipad = m.stats.median_s
        rows.append({
            "family": wl.family, "workload": wl.name, "bytes": wl.bytes, "flops": wl.flops,
            "h200_floor_s": gpu_floor,
            "h200_bound": "memory" if wl.bytes / H200_BYTES_PER_S >= wl.flops / H200_FLOPS
            else "compute",
            "cpu_floor_s": cpu_floor, "cpu_tipad_s": tipad,
        })  # fmt: skip
        shown = "-" if tipad is None else f"{tipad * 1e3:.2f} ms ({tipad / cpu_floor:.1f}x floor)"
        print(f"{wl.name}: H200 floor {gpu_floor * 1e6:.1f} us, CPU floor "
              f"{cpu_floor * 1e3:.2f} ms, tipad {shown}", flush=True)  # fmt: skip
    machine = machine_info()
    machine["command"] = "python benchmarks/roofline.py " + " ".join(argv or sys.argv[1:])
    write_json(args.out, {
        "schema": "tipad-roofline/1", "machine": machine, "settings": {"repeats": args.repeats},
        "h200": {"bytes_per_s": H200_BYTES_PER_S, "flops": H200_FLOPS}, "limits": limits,
        "rows": rows,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
