"""Shared benchmark machinery: interleaved timing, statistics, tables, machine info, JSON, plots.

Used by ``pad.py`` (CPU) and ``gpu_check.py`` (CUDA). Nothing here knows about padding: a peer is a
label and a zero-argument callable, a measurement is a list of per-call seconds.

Timing rules (the same for every peer, so ratios compare like with like):

* Every peer is called once for the correctness check, ``warmup`` more times, and once more to
  choose how many back-to-back calls make one sample (enough to last ``min_sample_s``).
* Then ``repeats`` rounds; each round times one sample of every peer, in an order rotated by one
  place per round, so that slow drift of a noisy shared machine (other jobs, thermal, page cache)
  lands on all peers alike instead of on whichever ran last.
* A sample is ``sync(); t0; n calls; sync(); t1`` and records ``(t1 - t0) / n``. Outputs of
  fresh-output peers are dropped inside the timed region, so their deallocation is paid too (as a
  training loop pays it).
* Reported: the median of the samples (plus quartiles and the minimum), never the mean.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import importlib.metadata
import json
import math
import multiprocessing
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch

# Every script imports this module before tipad_transforms, so this runs first: quiet Taichi
# (also in workers and subprocesses, which inherit the environment), and measure this checkout's
# package even where it is not pip-installed (e.g. a GPU machine).
os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "0")
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import tipad_transforms  # noqa: E402  (this checkout's: the path above)

# Benchmarks time the Taichi kernel: a script that imports this starts Taichi at its first
# padding call, not after its torch-route warm-up (set_warmup). Peers that time the warm-up say
# so (percall.py). Only in the script's own process: a spawned DataLoader worker imports the
# script again, and workers and subprocesses read the environment, as users' do.
if multiprocessing.parent_process() is None:
    tipad_transforms.set_warmup(0)


__all__ = [
    "CompileTimeout",
    "Deadline",
    "Measurement",
    "Peer",
    "Stats",
    "bits_equal",
    "first_call_latency",
    "format_ms",
    "format_table",
    "machine_info",
    "measure",
    "measurements_from_json",
    "plot_workloads",
    "runtime_sha",
    "time_limit",
    "write_json",
]


@dataclass
class Peer:
    """One contender of a workload.

    ``fn`` does the whole user-visible operation (argument parsing included) and returns the
    canvas it produced (a fresh tensor, or the ``out=`` tensor it wrote). ``group`` names the
    canvas it must equal bit for bit: every peer of one group is checked against the first.
    ``output`` is ``"fresh"`` (allocates its result) or ``"out="`` (writes a preallocated one).
    """

    key: str
    label: str
    fn: Callable[[], torch.Tensor]
    group: str
    output: str = "fresh"
    note: str = ""


@dataclass
class Stats:
    median_s: float
    q1_s: float
    q3_s: float
    min_s: float
    max_s: float

    @classmethod
    def of(cls, times: Sequence[float]) -> Stats:
        if len(times) == 1:
            t = times[0]
            return cls(t, t, t, t, t)
        q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
        return cls(statistics.median(times), q1, q3, min(times), max(times))


@dataclass
class Measurement:
    peer: Peer
    times_s: list[float]
    calls_per_sample: int
    check: str
    stats: Stats = field(init=False)

    def __post_init__(self) -> None:
        self.stats = Stats.of(self.times_s)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.peer.key,
            "label": self.peer.label,
            "output": self.peer.output,
            "group": self.peer.group,
            "note": self.peer.note,
            "check": self.check,
            "calls_per_sample": self.calls_per_sample,
            "times_s": self.times_s,
            "median_s": self.stats.median_s,
            "q1_s": self.stats.q1_s,
            "q3_s": self.stats.q3_s,
            "min_s": self.stats.min_s,
            "max_s": self.stats.max_s,
        }


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits (NaN payloads and signed zeros included), on any devices."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.device != b.device:
        b = b.to(a.device)
    if a.dtype == torch.bool or a.element_size() == 1:
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))


class CheckFailed(AssertionError):
    """A peer's canvas differs from its group's: timing it would compare unequal work."""


def _check(peers: Sequence[Peer], sync: Callable[[], None]) -> dict[str, str]:
    """Call every peer once and compare it with the first peer of its group (bit exact)."""
    verdicts: dict[str, str] = {}
    firsts: dict[str, tuple[Peer, torch.Tensor]] = {}
    for p in peers:
        got = p.fn()
        sync()
        if p.group not in firsts:
            # Clone: an out= peer writes the same buffer again on every call.
            firsts[p.group] = (p, got.clone())
            verdicts[p.key] = "reference of its group"
            continue
        ref_peer, ref = firsts[p.group]
        if not bits_equal(got, ref):
            mism = (got != ref).sum().item() if got.shape == ref.shape else "shape"
            raise CheckFailed(
                f"{p.label!r} differs from {ref_peer.label!r} "
                f"(shapes {tuple(got.shape)} vs {tuple(ref.shape)}, {mism} elements differ): "
                "refusing to time peers that do different work"
            )
        verdicts[p.key] = f"bit-equal to {ref_peer.key}"
        del got
    return verdicts


def measure(
    peers: Sequence[Peer],
    *,
    repeats: int,
    warmup: int,
    min_sample_s: float,
    sync: Callable[[], None] = lambda: None,
    max_calls: int = 1000,
    log: Callable[[str], None] = lambda s: None,
) -> list[Measurement]:
    """Check, warm up and time ``peers`` round-robin; see the module docstring."""
    verdicts = _check(peers, sync)
    calls: dict[str, int] = {}
    for p in peers:
        for _ in range(warmup):
            p.fn()
        sync()
        t0 = time.perf_counter()
        p.fn()
        sync()
        dt = time.perf_counter() - t0
        calls[p.key] = max(1, min(max_calls, math.ceil(min_sample_s / max(dt, 1e-9))))
    times: dict[str, list[float]] = {p.key: [] for p in peers}
    for r in range(repeats):
        k = r % len(peers)
        for p in [*peers[k:], *peers[:k]]:
            n = calls[p.key]
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                p.fn()
            sync()
            times[p.key].append((time.perf_counter() - t0) / n)
        log(f"  round {r + 1}/{repeats} done")
    return [Measurement(p, times[p.key], calls[p.key], verdicts[p.key]) for p in peers]


class CompileTimeout(TimeoutError):
    """``time_limit`` ran out."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``CompileTimeout`` in the main thread after ``seconds`` (POSIX; no-op elsewhere)."""
    if seconds <= 0 or not hasattr(signal, "setitimer"):
        yield
        return

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise CompileTimeout(f"gave up after {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class Deadline:
    """A wall-clock budget shared by the sections of a script."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()


def format_ms(seconds: float | None) -> str:
    """Milliseconds with three significant digits (at least two decimals below 10 ms)."""
    if seconds is None or math.isnan(seconds):
        return "-"
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}" if ms >= 0.1 else f"{ms:.3f}"


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: str = "") -> str:
    """Aligned plain-text table; columns whose index is in ``right`` ("0123...") align right."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, (c, w) in enumerate(zip(cells, widths, strict=True)):
            out.append(str(c).rjust(w) if str(i) in right else str(c).ljust(w))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.rstrip("\n")


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _version(dist: str) -> str | None:
    # From the installed metadata: importing Taichi here would load it before the benchmark does.
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _source_version() -> str | None:
    """The measured code's version, from its ``_version.py`` (read, not imported: the
    installed metadata of an editable install keeps the version it was installed at)."""
    path = REPO / "tipad_transforms" / "_version.py"
    found = re.search(r'__version__ = "([^"]+)"', path.read_text()) if path.exists() else None
    return found.group(1) if found else _version("tipad_transforms")


def runtime_sha() -> str | None:
    """Short hash of the kernel package's source, to name the exact kernel measured.

    Taichi compiles kernels from the source file on disk when they are first called, so a run
    during which this changes mixes kernel versions (or fails): scripts compare start and end.
    """
    package = REPO / "tipad_transforms"
    files = sorted([*package.glob("ops/*/taichi.py"), *package.glob("backends/*.py"),
                    package / "_compat" / "taichi.py"])  # fmt: skip
    if not files:
        return None
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def machine_info() -> dict[str, Any]:
    """Versions, hardware and provenance: what a reader needs to trust or redo the numbers."""
    dirty = _git("status", "--porcelain", "--", "tipad_transforms")
    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "taichi": _version("taichi"),
        "numpy": _version("numpy"),
        "tipad_transforms": _source_version(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty_files": [line for line in (dirty or "").splitlines() if line],
        # The kernel changes under our feet while it is being optimised: name the exact one.
        "runtime_py_sha256": runtime_sha(),
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(0)
        info["cuda_runtime"] = torch.version.cuda
        info["cuda_capability"] = list(torch.cuda.get_device_capability(0))
    return info


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    tmp.replace(path)


def plot_workloads(
    workloads: Sequence[tuple[str, Sequence[Measurement], str]], path: Path, title: str
) -> Path | None:
    """Horizontal bars per workload: median time and ratio to the yardstick, linear axes from 0.

    Linear, so that bar lengths compare as the numbers do (on a log axis cut above zero, 29.8
    against 33.8 ms looked like 10x); every bar is labelled with its value. The legend lists
    only the groups drawn. ``workloads`` holds ``(title, measurements, yardstick_key)``.
    Returns the path, or None when there is nothing to plot or matplotlib is not installed (the
    JSON still holds everything).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    n = len(workloads)
    if n == 0:
        return None
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    heights = [max(2.2, 0.32 * len(ms) + 1.0) for _, ms, _ in workloads]
    fig, axes = plt.subplots(
        n,
        2,
        figsize=(15, sum(heights) + 1.2),
        gridspec_kw={"height_ratios": heights, "width_ratios": [1.25, 1]},
        squeeze=False,
    )
    colours = {"tipad": "#c0392b", "torch": "#2c3e50", "torchvision": "#2980b9"}
    other = "#7f8c8d"
    drawn: dict[str, str] = {}  # legend label -> colour, in the order first drawn
    any_out = False
    ratio_fmt = FuncFormatter(lambda v, _: f"{v:g}x")
    for row, (wl_title, ms, yard) in enumerate(workloads):
        ax_t, ax_r = axes[row]
        labels = [f"{m.peer.label} [{m.peer.output}]" for m in ms]
        med = [m.stats.median_s * 1e3 for m in ms]
        err = [
            [(m.stats.median_s - m.stats.q1_s) * 1e3 for m in ms],
            [(m.stats.q3_s - m.stats.median_s) * 1e3 for m in ms],
        ]
        groups = [m.peer.key.split(".")[0] for m in ms]
        col = [colours.get(g, other) for g in groups]
        for g, c in zip(groups, col, strict=True):
            drawn.setdefault(g if g in colours else "other", c)
        hatch = ["//" if m.peer.output == "out=" else "" for m in ms]
        any_out = any_out or any(hatch)
        y = list(range(len(ms)))
        ax_t.barh(
            y,
            med,
            xerr=err,
            color=col,
            hatch=hatch,
            edgecolor="white",
            capsize=2,
            error_kw={"elinewidth": 0.8, "ecolor": "#555555"},
        )
        ax_t.set_yticks(y, labels, fontsize=8)
        ax_t.invert_yaxis()
        ax_t.set_xlabel("median time per call, ms (linear from 0; whiskers: quartiles)")
        ax_t.set_title(wl_title, fontsize=10, loc="left")
        for yi, m in zip(y, ms, strict=True):
            ax_t.annotate(
                f"{format_ms(m.stats.median_s)} ms",
                (m.stats.q3_s * 1e3, yi),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
        ax_t.set_xlim(0, max(m.stats.q3_s for m in ms) * 1e3 * 1.25)
        base = next((m.stats.median_s for m in ms if m.peer.key == yard), None)
        if base:
            ratio = [m.stats.median_s / base for m in ms]
            ax_r.barh(y, ratio, color=col, hatch=hatch, edgecolor="white")
            ax_r.axvline(1.0, color="k", lw=0.8)
            ax_r.set_yticks(y, [""] * len(y))
            ax_r.invert_yaxis()
            ax_r.xaxis.set_major_formatter(ratio_fmt)
            yard_label = next(m.peer.label for m in ms if m.peer.key == yard)
            ax_r.set_xlabel(f"median / median of {yard_label} [fresh] (linear; < 1 is faster)")
            for yi, v in zip(y, ratio, strict=True):
                faster = f"  ({1 / v:.1f}x faster)" if 0 < v < 0.9 else ""
                ax_r.annotate(
                    f"{v:.2f}x{faster}",
                    (v, yi),
                    xytext=(4, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=7,
                )
            ax_r.set_xlim(0, max(max(ratio), 1.0) * 1.35)
    handles = [Patch(color=c, label=k) for k, c in drawn.items()]
    if any_out:
        handles.append(
            Patch(facecolor="#999999", hatch="//", edgecolor="white", label="out= (preallocated)")
        )
    fig.legend(handles=handles, loc="upper right", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def measurements_from_json(workload: dict[str, Any]) -> list[Measurement]:
    """The measurements of one workload of a recorded ``*.json`` (to redraw its plot)."""

    def never() -> torch.Tensor:
        raise RuntimeError("a peer read back from JSON cannot run")

    return [
        Measurement(
            Peer(p["key"], p["label"], never, p["group"], p["output"], p.get("note", "")),
            list(p["times_s"]),
            int(p["calls_per_sample"]),
            p["check"],
        )
        for p in workload["peers"]
    ]


FIRST_CALL_CODE = r"""
import json, sys, time
device = sys.argv[1]
t0 = time.perf_counter()
import torch, torchvision
t1 = time.perf_counter()
import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI
t2 = time.perf_counter()
taichi_at_import = "taichi" in sys.modules
x = torch.randint(0, 256, (3, 224, 224), dtype=torch.uint8, device=device)
if x.is_cuda:
    torch.cuda.synchronize()  # torch's own CUDA start-up is not ours to count

out = []

def call():
    start = time.perf_counter()
    y = F.brick_pad(x, 32)
    if x.is_cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    out[:] = out or [y]  # the first output only
    return seconds, TAICHI.started()

# A CPU process pads on the torch route first (its warm-up, TIPAD_WARMUP): call on until
# Taichi has started, and report the call that started it (import, init, first launch).
runs = [call() for _ in range(2)]
while not runs[-1][1] and len(runs) < 100_000:
    runs.append(call())
start = next((i for i, r in enumerate(runs) if r[1]), len(runs) - 1)
print(json.dumps({
    "import_torch_torchvision_s": t1 - t0,
    "import_tipad_functional_s": t2 - t1,
    "taichi_imported_by_import": taichi_at_import,
    "first_call_s": runs[0][0],
    "second_call_s": runs[1][0],
    "calls_before_taichi": start,
    "taichi_start_call_s": runs[start][0],
    "warmup_total_s": sum(r[0] for r in runs[:start]),
    "output_shape": list(out[0].shape),
}))
"""


def first_call_latency(
    device: str,
    cold_runs: int,
    *,
    warm_run: bool = True,
    timeout_s: float = 300,
    log: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """First ``brick_pad`` call in fresh processes, each with an empty Taichi offline cache.

    ``cold_runs`` processes get an empty ``TI_OFFLINE_CACHE_FILE_PATH`` each; with ``warm_run``
    one more reuses the last one's cache (what a user's later processes see). Each process
    reports the import time of ``tipad_transforms.functional`` (torch and torchvision already
    loaded), whether that import loaded Taichi, and the first and second call on a
    ``(3, 224, 224)`` uint8 image (the first includes Taichi's import, init and kernel compile).
    """
    runs: list[dict[str, Any]] = []
    cache = ""
    with tempfile.TemporaryDirectory(prefix="tipad-bench-ticache-") as root:
        for i in range(cold_runs + int(warm_run)):
            kind = "warm" if i == cold_runs else "cold"
            if kind == "cold":
                cache = tempfile.mkdtemp(dir=root)
            path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
            # TIPAD_WARMUP=0: the first call starts Taichi (what this times), no torch route.
            env = dict(os.environ, TI_OFFLINE_CACHE_FILE_PATH=cache, PYTHONPATH=path)
            env["TIPAD_WARMUP"] = "0"
            files_before = sum(len(f) for _, _, f in os.walk(cache))
            t0 = time.perf_counter()
            try:
                done = subprocess.run(
                    [sys.executable, "-c", FIRST_CALL_CODE, device],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                runs.append({"cache": kind, "error": f"timed out after {timeout_s:.0f} s"})
                continue
            wall = time.perf_counter() - t0
            if done.returncode != 0:
                runs.append({"cache": kind, "error": done.stderr[-3000:]})
                log(f"  first call ({kind} cache): FAILED\n{done.stderr[-1000:]}")
                continue
            rec = json.loads(done.stdout.strip().splitlines()[-1])
            rec.update(
                cache=kind,
                cache_files_before=files_before,
                cache_files_after=sum(len(f) for _, _, f in os.walk(cache)),
                process_wall_s=wall,
            )
            runs.append(rec)
            log(f"  first call ({kind} cache): {rec['first_call_s']:.3f} s")
    cold = [r["first_call_s"] for r in runs if r["cache"] == "cold" and "first_call_s" in r]
    imports = [r["import_tipad_functional_s"] for r in runs if "first_call_s" in r]
    return {
        "device": device,
        "env": "TI_OFFLINE_CACHE_FILE_PATH=<empty temp dir> (cold); the last one again (warm)",
        "image": "(3, 224, 224) uint8, brick_pad(x, 32)",
        "runs": runs,
        "cold_first_call_median_s": statistics.median(cold) if cold else None,
        "import_tipad_median_s": statistics.median(imports) if imports else None,
    }
