"""What a fresh output's memory costs on this machine: first touch, and huge-page advice.

    python benchmarks/fresh_memory.py [--gib 2] [--pause 5] [--calls 40] [--quick]
                                      [--out out/fresh-memory]

Two measurements, printed and written to ``<out>/fresh-memory.json`` (with a plot of the second
in ``fresh-memory.png`` where matplotlib is installed):

* ``first touch``: ``--gib`` GiB allocated and written four times, back to back and then with
  ``--pause`` seconds between rounds: microseconds per 4 KiB page for the first write (the
  page faults) and for a second write of the same memory (no faults). On bare metal both
  first-touch figures match. In a VM whose balloon device reports free memory to the host
  (virtio-balloon free page reporting, as Firecracker guests have), memory freed and left
  alone for a couple of seconds is handed back to the host, and the next first touch pays the
  host's fault as well.
* ``advised``: in a fresh process each, ``--calls`` calls of a fresh float32 (64, 3, 288, 288)
  tensor (44 MB) written by ``fill_``, with and without the huge-page advice tipad gives its
  large fresh CPU outputs (``backends.taichi.advise_huge_pages``): per-call milliseconds.

Also recorded: the THP settings, the kernel's ``page_reporting_order`` and whether a balloon
device is present.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # quiets Taichi, puts this checkout first on sys.path

PAGE = 4096

_CALLS = """
import sys, time, torch
from tipad_transforms.backends.taichi import advise_huge_pages
torch.set_num_threads(2)
advise, calls = sys.argv[1] == "1", int(sys.argv[2])
times = []
for _ in range(calls):
    start = time.perf_counter()
    out = torch.empty(64, 3, 288, 288)
    if advise:
        advise_huge_pages(out)
    out.fill_(1.0)
    times.append(time.perf_counter() - start)
    del out
print(" ".join(repr(t) for t in times))
"""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def machine_memory() -> dict[str, object]:
    cmdline = _read("/proc/cmdline") or ""
    order = _read("/sys/module/page_reporting/parameters/page_reporting_order")
    for word in cmdline.split():
        if word.startswith("page_reporting.page_reporting_order="):
            order = word.split("=", 1)[1]
    return {
        "thp_enabled": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "thp_defrag": _read("/sys/kernel/mm/transparent_hugepage/defrag"),
        "page_reporting_order": order,
        "balloon_device": Path("/sys/bus/virtio/drivers/virtio_balloon").exists()
        and any(Path("/sys/bus/virtio/drivers/virtio_balloon").glob("virtio*")),
    }


def first_touch(gib: float, pause: float) -> list[dict[str, float]]:
    import torch

    nbytes = int(gib * (1 << 30))
    rounds = []
    for i in range(4):
        if i >= 2:
            time.sleep(pause)
        start = time.perf_counter()
        x = torch.empty(nbytes, dtype=torch.uint8)
        x.fill_(1)
        first = time.perf_counter() - start
        start = time.perf_counter()
        x.fill_(2)
        again = time.perf_counter() - start
        del x
        rounds.append({
            "pause_s": pause if i >= 2 else 0.0,
            "first_us_per_page": first / (nbytes / PAGE) * 1e6,
            "again_us_per_page": again / (nbytes / PAGE) * 1e6,
        })  # fmt: skip
    return rounds


def advised(calls: int) -> dict[str, list[float]]:
    series = {}
    for name, flag in (("plain", "0"), ("advised", "1")):
        done = subprocess.run(
            [sys.executable, "-c", _CALLS, flag, str(calls)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        series[name] = [float(t) for t in done.stdout.split()]
    return series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="GiB per first-touch round (2)")
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between rounds 3-4")
    parser.add_argument("--calls", type=int, default=40, help="calls per advised process (40)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 0.25 GiB, 8 calls")
    parser.add_argument("--out", type=Path, default=Path("out/fresh-memory"))
    args = parser.parse_args()
    if args.quick:
        args.gib, args.pause, args.calls = 0.25, 0.2, 8
    info = _common.machine_info() | machine_memory()
    touch = first_touch(args.gib, args.pause)
    print(f"first touch of {args.gib:g} GiB (us per 4 KiB page):")
    for r in touch:
        print(
            f"  after a {r['pause_s']:g} s pause: first write {r['first_us_per_page']:.2f}, "
            f"second write {r['again_us_per_page']:.2f}"
        )
    series = advised(args.calls)
    head = max(1, args.calls // 4)
    summary = {}
    for name, times in series.items():
        summary[name] = {
            "first_calls_median_ms": statistics.median(times[:head]) * 1e3,
            "last_half_median_ms": statistics.median(times[len(times) // 2 :]) * 1e3,
        }
        first, last = (summary[name][k] for k in ("first_calls_median_ms", "last_half_median_ms"))
        print(
            f"{name:8s} 44 MB fresh + fill_: first {head} calls {first:.1f} ms, "
            f"last {len(times) - len(times) // 2} {last:.1f} ms (medians)"
        )
    print(
        {
            k: info[k]
            for k in ("thp_enabled", "thp_defrag", "page_reporting_order", "balloon_device")
        }
    )
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "schema": "tipad-bench-fresh-memory/1",
        "machine": info,
        "settings": {**vars(args), "out": str(args.out)},
        "first_touch": touch,
        "per_call_s": series,
        "summary": summary,
    }
    (args.out / "fresh-memory.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, times in series.items():
        ax.plot(range(1, len(times) + 1), [t * 1e3 for t in times], marker=".", label=name)
    ax.set_xlabel("call in a fresh process")
    ax.set_ylabel("ms per call")
    ax.set_title("fresh 44 MB float32 tensor + fill_")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "fresh-memory.png", dpi=120)


if __name__ == "__main__":
    main()
