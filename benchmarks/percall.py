"""Per-call and per-process costs (issue 9), each workload beside its peers in one process.

    python benchmarks/percall.py [--quick] [--threads 1] [--repeats 7] [--out out/bench]
                                 [--only wkv --only rwkv4 ...]
    python benchmarks/percall.py --only-workers [--epochs 4] | --only-first RUNS

Workloads (peers interleaved, medians; see ``_common.measure``):

* ``image``: one ``(3, 224, 224)`` uint8 image padded by 32: ``v2.Pad(32, padding_mode="reflect")``
  (the yardstick), ``F.pad`` constant, ``v2.Pad(32)`` and tipad ``pad`` constant (the peer a
  user of constant padding would pick), tipad ``pad(reflect)`` (bit-equal to v2's),
  ``TexturePad``, ``BrickPad`` (both, at this size, crops of their texture's wall), and
  ``texture_pad`` again on the kernel (the copy forms switched off), by the lean launch path
  and through Taichi's public launcher on its thread pool (the lean launch path and the
  serial small launch switched off: how the package launched before them; the direct route
  past the custom-op dispatch and the launch plans stay on); ``pad(reflect)`` and
  ``BrickPad`` as a process runs them during its torch-route warm-up (``TIPAD_WARMUP``).
* ``sizes``: the images of ``loader.py`` (256 of 150-256 px sides, views into one flat buffer
  as its workers get them: most at odd addresses, rows of odd widths), one per call in turn,
  padded to a centred 256 x 256 square: ``v2.functional.pad`` reflect (the yardstick), tipad
  ``pad(reflect)`` and ``brick_pad`` (loader pipelines ``a`` and ``a-tipad`` without the
  DataLoader).
* ``wkv``: ``ops.wkv`` with ``T = 1`` (``B = 1``, ``C = 768``, with a state; no gradient, so it
  runs the op's implementation directly), the custom op called through ``torch.ops``, and
  ``ops.wkv`` through Taichi's public launcher.
* ``rwkv4``: one token through an RWKV-4 model (12 layers x 768, and 6 x 512; vocabulary 1024
  so the layers dominate), tipad ``RWKV4(idx, state)`` against BlinkDL's ``rwkv`` package,
  strategy ``"cpu fp32"``, on the same weights (logits cross-checked first). Without the
  package, tipad alone. ``--compile`` adds ``torch.compile(model, fullgraph=True)`` (one graph
  per step since 0.5.0; logits checked against eager's).
* ``canvas``: the seed canvas: a ``(1, 48, 32)`` float32 tile padded by ``(4096, 2048)`` with
  itself as texture, stagger 10 (``1 x 4144 x 8224``): tipad with a fresh output and into
  ``out=``, the seed article's eager torch gather (``peers.gather_texture_pad``: coordinates ->
  lattice cell -> tile pixel -> one ``index_select``; the yardstick of the issue's ">= 20x"
  target, bit-equal to tipad's canvas before timing), and torch's ``empty().fill_()`` of the
  same size (what first-touch page faults cost torch). Then a breakdown of where a fresh call's
  time goes (``canvas_breakdown``: allocation, huge-page advice, first-touch launch, faults,
  transparent huge pages used).
* ``workers`` (``--workers``, not run by default: about a minute): DataLoader epochs of 64
  ``(3, 96, 96)`` uint8 samples, 2 workers, batch 8, non-persistent (every epoch starts its
  workers), the parent having used the package: per-sample ``BrickPad(16)`` (workers warm up
  on the torch route, the default), the same with ``TIPAD_WORKER_WARMUP=0`` (Taichi started on
  a worker's first sample) and ``v2.Pad(16, padding_mode="reflect")``, under plain
  ``forkserver`` and under ``data.worker_context()`` (the forkserver preloads the main module,
  torch, torchvision, the padding modules and Taichi's import); ``--epochs`` epochs each
  (default 4) after one that starts the server, pipelines taking turns; medians and ratios
  to v2.Pad.
* ``first call``: ``brick_pad`` in a new process with this machine's offline cache (warm after
  one run), as the package starts by default (the first calls on the torch route: its
  warm-up) and with ``TIPAD_WARMUP=0`` (the first call starts Taichi: import, init, first
  launch); each process calls on until Taichi has started and reports that call too. Two
  processes of each, taking turns (``--only-first RUNS``: this alone, RUNS of each).

Writes ``<out>/percall.json`` and ``<out>/percall.png``. ``--quick``: small models, few
repeats (a smoke run, not a measurement). ``--only NAME`` (repeatable: ``image``, ``sizes``,
``wkv``, ``rwkv4``, ``canvas``): those workloads alone, without the first-call processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import torch
from _common import (
    FIRST_CALL_CODE,
    REPO,
    Measurement,
    Peer,
    format_ms,
    format_table,
    machine_info,
    measure,
    plot_workloads,
    write_json,
)
from peers import gather_texture_pad
from torchvision.transforms import v2

import tipad_transforms as tt
from tipad_transforms import functional as F
from tipad_transforms._compat import taichi as _lean
from tipad_transforms.backends import TAICHI
from tipad_transforms.backends import warmup as warm_up
from tipad_transforms.backends.taichi import advise_huge_pages
from tipad_transforms.backends.warmup import WORKER_WARMUP_ENV
from tipad_transforms.nn import RWKV4
from tipad_transforms.ops import init_wkv_state, wkv
from tipad_transforms.ops.padding import copies as pad_copies


@contextlib.contextmanager
def public_launcher() -> Iterator[None]:
    """Taichi's public call and the thread pool for every launch (the launch path before)."""
    kernels = [
        k
        for family in TAICHI.kernels.values()
        for k in family.values()
        if isinstance(k, _lean.LeanKernel)
    ]
    saved = [k.enabled for k in kernels], TAICHI.serial_bytes
    for k in kernels:
        k.enabled = False
    TAICHI.serial_bytes = -1
    try:
        yield
    finally:
        for k, e in zip(kernels, saved[0], strict=True):
            k.enabled = e
        TAICHI.serial_bytes = saved[1]


def texture_kernel(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with texture mode on the kernel (no copy form: a wall's crops serve one image)."""

    def run() -> Any:
        saved = pad_copies.TEXTURE, pad_copies.LATTICES
        pad_copies.TEXTURE = pad_copies.LATTICES = False
        try:
            return fn()
        finally:
            pad_copies.TEXTURE, pad_copies.LATTICES = saved

    return run


def warming_up(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` as a process runs it before starting Taichi (its warm-up): on the torch route."""

    def run() -> Any:
        saved = warm_up._State.budget
        TAICHI.running = lambda: False  # the instance attribute hides the method
        warm_up._State.budget, warm_up._State.spent = math.inf, 0.0
        try:
            return fn()
        finally:
            del TAICHI.running
            warm_up._State.budget = saved

    return run


def publicly(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with public_launcher():
            return fn()

    return run


def image_peers() -> list[Peer]:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (3, 224, 224), generator=g, dtype=torch.uint8)
    tex = torch.randint(0, 256, (3, 16, 16), generator=g, dtype=torch.uint8)
    v2pad = v2.Pad(32, padding_mode="reflect")
    v2const = v2.Pad(32)
    texture = tt.TexturePad(32, tex)
    brick = tt.BrickPad(32)
    return [
        Peer("torchvision.v2", "v2.Pad(reflect)", lambda: v2pad(x), "reflect"),
        Peer(
            "torch.fpad", "F.pad constant", lambda: torch.nn.functional.pad(x, (32,) * 4), "const"
        ),
        Peer("torchvision.v2-constant", "v2.Pad(constant)", lambda: v2const(x), "const"),
        Peer("tipad.pad-constant", "tipad pad(constant)", lambda: F.pad(x, 32), "const"),
        Peer(
            "tipad.pad",
            "tipad pad(reflect)",
            lambda: F.pad(x, 32, padding_mode="reflect"),
            "reflect",
        ),
        Peer("tipad.tex", "tipad TexturePad", lambda: texture(x), "tex"),
        Peer("tipad.brick", "tipad BrickPad", lambda: brick(x), "brick"),
        Peer(
            "tipad.pad-warm-up",
            "tipad pad(reflect), the torch-route warm-up",
            warming_up(lambda: F.pad(x, 32, padding_mode="reflect")),
            "reflect",
        ),
        Peer(
            "tipad.brick-warm-up",
            "tipad BrickPad, the torch-route warm-up",
            warming_up(lambda: brick(x)),
            "brick",
        ),
        Peer(
            "tipad.tex-kernel",
            "tipad texture_pad, the kernel",
            texture_kernel(lambda: F.texture_pad(x, 32, tex)),
            "tex",
        ),
        Peer(
            "tipad.tex-public",
            "tipad texture_pad, the kernel, public launcher",
            texture_kernel(publicly(lambda: F.texture_pad(x, 32, tex))),
            "tex",
        ),
    ]


def sizes_peers(quick: bool) -> list[Peer]:
    """``loader.py``'s images, one per call in turn, padded to a centred 256 x 256 square."""
    from loader import VariableSizeImages, centre_padding, make_images

    data = VariableSizeImages(make_images(32 if quick else 256, 150, 256, seed=0))
    # Views into one flat buffer, as the loader's workers get them: most start at odd addresses.
    images = [data.data[s : s + math.prod(shape)].view(shape) for s, shape
              in zip(data.starts, data.shapes, strict=True)]  # fmt: skip
    pads = [centre_padding(im.shape[-2], im.shape[-1], 256) for im in images]

    def each(pad: Callable[[torch.Tensor, list[int]], torch.Tensor]) -> Callable[[], Any]:
        turn = iter(range(2**62))  # every peer starts at image 0: the bit check compares those

        def call() -> torch.Tensor:
            i = next(turn) % len(images)
            return pad(images[i], pads[i])

        return call

    def v2_reflect(x: torch.Tensor, p: list[int]) -> torch.Tensor:
        out: torch.Tensor = v2.functional.pad(x, p, padding_mode="reflect")
        return out

    return [
        Peer("torchvision.v2", "v2 pad(reflect)", each(v2_reflect), "reflect"),
        Peer(
            "tipad.pad",
            "tipad pad(reflect)",
            each(partial(F.pad, padding_mode="reflect")),
            "reflect",
        ),
        Peer("tipad.brick", "tipad brick_pad", each(F.brick_pad), "brick"),
    ]


def wkv_peers() -> list[Peer]:
    g = torch.Generator().manual_seed(1)
    c = 768
    td, tf = torch.randn(c, generator=g), torch.randn(c, generator=g)
    k, v = torch.randn(1, 1, c, generator=g), torch.randn(1, 1, c, generator=g)
    state = init_wkv_state(1, c)

    def run() -> torch.Tensor:
        return wkv(td, tf, k, v, state)[0]

    def op() -> torch.Tensor:  # the custom op's dispatch, what ops.wkv used to go through
        return torch.ops.tipad.wkv_forward(td, tf, k, v, state, False)[0]

    return [
        Peer("tipad.wkv", "tipad ops.wkv T=1", run, "wkv"),
        Peer("tipad.wkv-op", "torch.ops.tipad.wkv_forward T=1", op, "wkv"),
        Peer("tipad.wkv-public", "ops.wkv T=1, public launcher", publicly(run), "wkv"),
    ]


def rwkv4_peers(
    vocab: int, n_embd: int, n_layer: int, tmp: Path, compiled: bool = False
) -> tuple[list[Peer], str]:
    torch.manual_seed(2)
    model = RWKV4(vocab, n_embd, n_layer).eval()
    with torch.no_grad():
        for p in model.parameters():  # the init's zeros would make a trivial benchmark
            p.add_(0.02 * torch.randn(p.shape))
    prompt = [3, 14, 15, 92, 65, 35]
    state: Any = None
    ours = []
    with torch.no_grad():
        for t in prompt:
            logits, state = model(torch.tensor([[t]]), state)
            ours.append(logits[0, 0])
    label = f"tipad RWKV4 {n_layer}x{n_embd}"
    rec = model.recurrent()  # the one-token step: what generate runs
    peers = [
        Peer("tipad", f"{label} recurrent", lambda: rec(torch.tensor([[5]]), state)[0], "rwkv"),
        # The module path rounds differently from the snapshot: a group of its own.
        Peer("tipad-module", f"{label} model(idx, state)",
             lambda: model(torch.tensor([[5]]), state)[0], "rwkv-module"),
    ]  # fmt: skip
    note = ""
    if compiled:
        # One graph (the custom op inside); inductor fuses the elementwise ops, so its bits
        # differ from eager's: checked for closeness here, timed in a group of its own.
        step = torch.compile(model, fullgraph=True)
        start = time.perf_counter()
        got = step(torch.tensor([[5]]), state)[0]
        seconds = time.perf_counter() - start
        want = model(torch.tensor([[5]]), state)[0]
        gap = float((got - want).abs().max() / want.abs().max())
        if gap > 1e-4:
            sys.exit(f"torch.compile(model) logits differ from eager's: {gap:.2e} relative")
        peers.append(
            Peer(
                "tipad-compiled",
                f"{label}, torch.compile",
                lambda: step(torch.tensor([[5]]), state)[0],
                "rwkv-compiled",
            )
        )
        note = f"; torch.compile: {seconds:.1f} s to compile, logits within {gap:.1e} of eager"
    theirs = load_package(model, tmp)
    if theirs is None:
        return peers, "rwkv package not installed: tipad timed alone" + note
    their_state = None
    worst = 0.0
    for t, mine in zip(prompt, ours, strict=True):
        logits, their_state = theirs.forward([t], their_state)
        worst = max(worst, float((logits - mine).abs().max() / mine.abs().max()))
    if worst > 1e-4:
        sys.exit(f"logits differ from the rwkv package's: {worst:.2e} relative")
    state0 = list(their_state)
    peers.append(
        Peer(
            "rwkv",
            f"rwkv package cpu fp32 {n_layer}x{n_embd}",
            lambda: theirs.forward([5], [s.clone() for s in state0])[0],
            "rwkv-pkg",
        )
    )
    return peers, f"logits of {len(prompt)} tokens equal to the package's within {worst:.1e}{note}"


def load_package(model: RWKV4, tmp: Path) -> Any | None:
    os.environ.pop("RWKV_V7_ON", None)
    os.environ["RWKV_CUDA_ON"] = "0"
    here = Path(__file__).resolve().parent  # this folder's rwkv.py would shadow the package
    saved = sys.path[:]
    sys.path = [d for d in sys.path if Path(d or ".").resolve() != here]
    try:
        from rwkv.model import RWKV
    except ImportError:
        return None
    finally:
        sys.path = saved
    torch.save(model.state_dict(), tmp / "model4.pth")
    return RWKV(str(tmp / "model4"), strategy="cpu fp32")


CANVAS_TILE = (1, 48, 32)
CANVAS_STAGGER = 10


def canvas_inputs(quick: bool) -> tuple[torch.Tensor, tuple[int, int]]:
    """The seed canvas's tile (also the image) and padding (``(left/right, top/bottom)``)."""
    g = torch.Generator().manual_seed(3)
    return torch.rand(*CANVAS_TILE, generator=g), (512, 256) if quick else (4096, 2048)


def canvas_peers(quick: bool) -> list[Peer]:
    tile, pads = canvas_inputs(quick)
    sides = (pads[0], pads[1], pads[0], pads[1])  # (left, top, right, bottom)

    def seed(into: torch.Tensor | None) -> torch.Tensor:
        return F.texture_pad(tile, pads, tile, stagger=CANVAS_STAGGER, out=into)

    out = seed(None)
    return [
        Peer("tipad.fresh", "tipad texture_pad, fresh output", lambda: seed(None), "canvas"),
        Peer("tipad.out", "tipad texture_pad, out=", lambda: seed(out), "canvas", "out="),
        Peer(
            "torch.gather",
            "torch gather, eager (the seed's method)",
            lambda: gather_texture_pad(tile, sides, tile, CANVAS_STAGGER),
            "canvas",
        ),
        Peer(
            "torch.fill", "torch.empty().fill_(1)", lambda: torch.empty(out.shape).fill_(1), "fill"
        ),
    ]


def _minor_faults() -> int:
    """This process's minor page faults so far (all threads: Taichi's workers included)."""
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def _vmstat(*keys: str) -> dict[str, int]:
    """Machine-wide counters (other processes' huge-page faults land here too)."""
    with open("/proc/vmstat") as f:
        pairs = (line.split() for line in f)
        return {k: int(v) for k, v in pairs if k in keys}


def _anon_huge_kib() -> int:
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("AnonHugePages:"))


def _clock() -> tuple[float, float, float]:
    """Wall time, this process's CPU time (all threads: Taichi's workers too), its system part."""
    import resource
    import time

    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime + r.ru_stime, r.ru_stime


def canvas_breakdown(quick: bool, rounds: int) -> dict[str, Any]:
    """Where a fresh canvas's time goes, step by step, ``rounds`` times (medians; Linux only).

    Steps of one fresh call, timed apart: ``torch.empty``, ``advise_huge_pages`` (the runtime
    seam gives the same advice again inside the launch, a no-op then), the launch into that
    untouched memory (first-touch faults: the kernel's threads fault the pages in), and a launch
    into the same now-resident canvas (the kernel alone); ``fill`` steps are torch's
    ``empty().fill_(1)`` without and with the advice. Each step has its wall time, CPU time
    (all threads) and the system part of it: on a shared machine the CPU times say what a step
    costs, the wall times also what it waited. Page faults of this process, the machine's THP
    fault counters and this process's ``AnonHugePages`` while the canvas lives show whether huge
    pages back it.
    """
    import statistics

    if not Path("/proc/self/smaps_rollup").exists():
        return {"skipped": "needs Linux /proc"}
    tile, pads = canvas_inputs(quick)
    shape = F.texture_pad(tile, pads, tile, stagger=CANVAS_STAGGER).shape
    thp_keys = ("thp_fault_alloc", "thp_fault_fallback")
    steps: dict[str, dict[str, list[float]]] = {}
    counts: dict[str, list[int]] = {}

    def step(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        c0 = _clock()
        got = fn(*args)
        c1 = _clock()
        for key, a, b in zip(("wall", "cpu", "sys"), c0, c1, strict=True):
            steps.setdefault(name, {}).setdefault(key, []).append(b - a)
        return got

    def pad_into(canvas: torch.Tensor) -> torch.Tensor:
        return F.texture_pad(tile, pads, tile, stagger=CANVAS_STAGGER, out=canvas)

    def fill(advise: bool) -> None:
        t = torch.empty(shape)
        if advise:
            advise_huge_pages(t)
        t.fill_(1)

    for _ in range(rounds):
        base = _anon_huge_kib()
        canvas = step("empty", torch.empty, shape)
        step("advise", advise_huge_pages, canvas)
        f0, v0 = _minor_faults(), _vmstat(*thp_keys)
        step("first_touch_launch", pad_into, canvas)
        f1, v1 = _minor_faults(), _vmstat(*thp_keys)
        counts.setdefault("anon_huge_kib", []).append(_anon_huge_kib() - base)
        counts.setdefault("minor_faults", []).append(f1 - f0)
        for k in thp_keys:
            counts.setdefault(k, []).append(v1[k] - v0[k])
        step("resident_launch", pad_into, canvas)
        del canvas
        step("fill", fill, False)
        step("fill_advised", fill, True)
    nbytes = math.prod(shape) * 4
    return {
        "shape": list(shape),
        "bytes": nbytes,
        "rounds": rounds,
        "medians_s": {
            name: {k: statistics.median(v) for k, v in kinds.items()}
            for name, kinds in steps.items()
        },
        "median_counts": {k: statistics.median(v) for k, v in counts.items()},
        "pages_4k": -(-nbytes // 4096),
        "huge_pages_2m": nbytes // (1 << 21),
        "thp_setting": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "thp_defrag": _read("/sys/kernel/mm/transparent_hugepage/defrag"),
    }


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def report_breakdown(b: dict[str, Any]) -> None:
    if "skipped" in b:
        print(f"\nfresh canvas breakdown skipped: {b['skipped']}")
        return
    c = b["median_counts"]
    shape = "x".join(map(str, b["shape"]))
    print(f"\nwhere a fresh {shape} float32 canvas goes (medians of {b['rounds']}; "
          f"THP {b['thp_setting']}, defrag {b['thp_defrag']}):")  # fmt: skip
    rows = [
        [name, format_ms(m["wall"]), format_ms(m["cpu"]), format_ms(m["sys"])]
        for name, m in b["medians_s"].items()
    ]
    print(format_table(["step", "wall", "cpu", "of which sys"], rows, right="123"))
    print(f"first-touch launch: {c['minor_faults']:.0f} minor faults "
          f"({b['pages_4k']} 4 KiB pages, {b['huge_pages_2m']} whole 2 MiB pages), "
          f"thp_fault_alloc +{c['thp_fault_alloc']:.0f}, fallback +{c['thp_fault_fallback']:.0f}, "
          f"AnonHugePages +{c['anon_huge_kib'] / 1024:.0f} MiB")  # fmt: skip


def first_calls(runs: int) -> list[dict[str, Any]]:
    """``runs`` new processes with the default warm-up and ``runs`` with ``TIPAD_WARMUP=0``,
    alternating; each record says which (``warmup``)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    out = []
    for _ in range(runs):
        for warmup in ("default", "0"):
            env = dict(os.environ, PYTHONPATH=path)
            env.pop(warm_up.WARMUP_ENV, None)
            if warmup == "0":
                env[warm_up.WARMUP_ENV] = "0"
            done = subprocess.run(
                [sys.executable, "-c", FIRST_CALL_CODE, "cpu"],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode != 0:
                out.append({"warmup": warmup, "error": done.stderr[-2000:]})
            else:
                out.append({"warmup": warmup, **json.loads(done.stdout.strip().splitlines()[-1])})
    return out


def report_first_calls(firsts: list[dict[str, Any]]) -> None:
    if not firsts:
        return
    print("\nfirst brick_pad in a new process (offline cache as this machine has it):")
    rows = []
    for r in firsts:
        if "error" in r:
            print(f"  TIPAD_WARMUP={r['warmup']}: {r['error']}")
            continue
        rows.append([
            "default (warm-up)" if r["warmup"] == "default" else "TIPAD_WARMUP=0",
            format_ms(r["first_call_s"]),
            format_ms(r["second_call_s"]),
            str(r["calls_before_taichi"]),
            format_ms(r["warmup_total_s"]),
            format_ms(r["taichi_start_call_s"]),
        ])  # fmt: skip
    header = ["start", "first call ms", "second ms", "calls before Taichi", "their total ms",
              "call that starts Taichi ms"]  # fmt: skip
    print(format_table(header, rows, right="12345"))


class Samples(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """64 copies of one image through ``transform`` (module level: workers unpickle it)."""

    def __init__(self, transform: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.transform = transform
        self.image = torch.randint(0, 256, (3, 96, 96), dtype=torch.uint8)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(self.image)


def _start_taichi_at_once(_worker_id: int) -> None:
    """``worker_init_fn``: this worker starts Taichi on its first sample (no torch-route
    warm-up), as every worker did before 0.4.2."""
    os.environ[WORKER_WARMUP_ENV] = "0"


def worker_epochs(epochs: int) -> dict[str, list[float]]:
    """Seconds per DataLoader epoch for each pipeline; the pipelines take turns epoch by epoch
    (after one epoch each that starts the forkserver), so load changes hit all of them."""
    import multiprocessing
    import time

    from torch.utils.data import DataLoader

    from tipad_transforms.data import worker_context

    # The server and the workers must import this checkout's package, as this process does.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )
    tt.BrickPad(16)(torch.zeros(3, 8, 8, dtype=torch.uint8))  # the parent used the package
    pipelines = (
        ("BrickPad", tt.BrickPad(16), None),
        ("BrickPad, Taichi at once", tt.BrickPad(16), _start_taichi_at_once),
        ("v2.Pad", v2.Pad(16, padding_mode="reflect"), None),
    )
    out: dict[str, list[float]] = {}
    # Plain forkserver first: worker_context changes the server's preload list for good.
    for name, ctx in (("forkserver", multiprocessing.get_context("forkserver")),
                      ("worker_context", worker_context("forkserver"))):  # fmt: skip
        if name == "worker_context":
            from multiprocessing import forkserver

            forkserver._forkserver._stop()  # the next worker starts a server with the preload
        for _ in range(epochs + 1):  # the first round starts the server: reported, not ranked
            for label, transform, init in pipelines:
                loader = DataLoader(Samples(transform), batch_size=8, num_workers=2,
                                    multiprocessing_context=ctx, worker_init_fn=init)  # fmt: skip
                t0 = time.perf_counter()
                for _batch in loader:
                    pass
                out.setdefault(f"{name} {label}", []).append(time.perf_counter() - t0)
    return out


def report_epochs(epochs: dict[str, list[float]]) -> dict[str, float]:
    """Print each pipeline's epochs and median (first epoch left out); returns the ratios to
    the same context's v2.Pad pipeline."""
    ratios = {}
    for k, v in epochs.items():
        base = statistics.median(epochs[k.split(" ", 1)[0] + " v2.Pad"][1:])
        ratios[k] = statistics.median(v[1:]) / base
        print(
            f"{k:40s} " + "  ".join(f"{t:.2f}" for t in v)
            + f"  s; median {statistics.median(v[1:]):.3f} s, {ratios[k]:.2f}x v2.Pad"
        )  # fmt: skip
    return ratios


def report(title: str, results: list[Measurement], yard: str) -> list[str]:
    base = next(m for m in results if m.peer.key == yard).stats.median_s
    rows = [
        [
            m.peer.label,
            format_ms(m.stats.median_s),
            format_ms(m.stats.min_s),
            f"{m.stats.median_s / base:.2f}x",
            m.check,
        ]
        for m in results
    ]
    print(f"\n{title}")
    print(format_table(["peer", "median", "min", f"/ {yard}", "check"], rows, right="123"))
    return [title]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path("out/bench"))
    p.add_argument("--workers", action="store_true", help="also time DataLoader worker epochs")
    p.add_argument(
        "--compile",
        action="store_true",
        help="also time torch.compile(model) in the rwkv4 workloads (about 15-25 s to compile)",
    )
    p.add_argument("--only-workers", action="store_true", help="time worker epochs only")
    p.add_argument("--epochs", type=int, default=4, help="worker epochs per pipeline (ranked)")
    p.add_argument(
        "--only",
        action="append",
        choices=["image", "sizes", "wkv", "rwkv4", "canvas"],
        help="run only these workloads (repeatable); skips the first-call processes",
    )
    p.add_argument(
        "--only-first",
        type=int,
        metavar="RUNS",
        help="time the first call in RUNS new processes only",
    )
    args = p.parse_args(argv)
    if args.only_first:
        firsts = first_calls(args.only_first)
        report_first_calls(firsts)
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / "percall-first.json",
                   {"first_call": firsts, "load_average": os.getloadavg(),
                    "machine": machine_info()})  # fmt: skip
        return
    if args.only_workers:
        epochs = worker_epochs(args.epochs)
        ratios = report_epochs(epochs)
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / "percall-workers.json",
                   {"epochs_s": epochs, "ratio_to_v2": ratios, "load_average": os.getloadavg(),
                    "machine": machine_info()})  # fmt: skip
        return
    torch.set_num_threads(args.threads)
    repeats = 3 if args.quick else args.repeats
    sample = 0.05 if args.quick else 0.2
    print(f"load average {os.getloadavg()}, torch threads {args.threads}")
    workloads: list[tuple[str, list[Measurement], str]] = []
    checks: dict[str, str] = {}

    def run(title: str, peers: list[Peer], yard: str, min_s: float = sample) -> None:
        results = measure(peers, repeats=repeats, warmup=2, min_sample_s=min_s)
        workloads.append((title, results, yard))
        report(title, results, yard)

    only = set(args.only or ["image", "sizes", "wkv", "rwkv4", "canvas"])
    if "image" in only:
        run("one 3x224x224 uint8 image, pad 32", image_peers(), "torchvision.v2")
    if "sizes" in only:
        run("images of many sizes (3x150..256x150..256 uint8) to 256x256, one per call",
            sizes_peers(args.quick), "torchvision.v2")  # fmt: skip
    if "wkv" in only:
        run("ops.wkv, T=1, B=1, C=768", wkv_peers(), "tipad.wkv-public")
    models = [(1024, 128, 2)] if args.quick else [(1024, 768, 12), (1024, 512, 6)]
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        for vocab, n_embd, n_layer in models if "rwkv4" in only else []:
            peers, check = rwkv4_peers(vocab, n_embd, n_layer, Path(tmp), args.compile)
            checks[f"rwkv4 {n_layer}x{n_embd}"] = check
            print(f"\nRWKV-4 {n_layer}x{n_embd}: {check}")
            run(f"RWKV-4 {n_layer}x{n_embd}, one token", peers, peers[-1].key)
    breakdown: dict[str, Any] = {}
    if "canvas" in only:
        run("seed canvas 1x4144x8224 float32", canvas_peers(args.quick), "torch.gather", min_s=0.1)
        canvas = {m.peer.key: m.stats.median_s for m in workloads[-1][1]}
        speedups = {k: canvas["torch.gather"] / canvas[f"tipad.{k}"] for k in ("fresh", "out")}
        speedup = (
            f"fresh {speedups['fresh']:.1f}x, out= {speedups['out']:.1f}x (target: fresh >= 20x)"
        )
        checks["canvas speedup over the eager gather"] = speedup
        print(f"speedup over the eager gather (medians): {speedup}")
        breakdown = canvas_breakdown(args.quick, 3 if args.quick else 7)
        report_breakdown(breakdown)
    epochs = worker_epochs(args.epochs) if args.workers else {}
    report_epochs(epochs)
    firsts = [] if args.only else first_calls(1 if args.quick else 2)
    report_first_calls(firsts)

    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "threads": args.threads,
        "load_average": os.getloadavg(),
        "checks": checks,
        "canvas_breakdown": breakdown,
        "workloads": [
            {"title": t, "yardstick": y, "peers": [m.to_json() for m in ms]}
            for t, ms, y in workloads
        ],
        "worker_epochs_s": epochs,
        "first_call": firsts,
        "machine": machine_info(),
    }
    # A partial run does not overwrite a whole one's files.
    stem = "percall" if args.only is None else "percall-" + "-".join(sorted(set(args.only)))
    write_json(args.out / f"{stem}.json", payload)
    plot_workloads(workloads, args.out / f"{stem}.png", "Per-call costs (issue 9)")
    print(f"\nwrote {args.out / f'{stem}.json'}")


if __name__ == "__main__":
    main()
