"""Per-call and per-process costs (issue 9), each workload beside its peers in one process.

    python benchmarks/percall.py [--quick] [--threads 1] [--repeats 7] [--out out/bench]
                                 [--only image]

Workloads (peers interleaved, medians; see ``_common.measure``):

* ``image``: one ``(3, 224, 224)`` uint8 image padded by 32: ``v2.Pad(32, padding_mode="reflect")``
  (the yardstick), ``F.pad`` constant, tipad ``pad(reflect)`` (bit-equal to v2's),
  ``TexturePad``, ``BrickPad``, and ``texture_pad`` again through Taichi's public launcher on
  its thread pool (the lean launch path and the serial small launch switched off: how the
  package launched before them; the direct route past the custom-op dispatch and the launch
  plans stay on).
* ``wkv``: ``ops.wkv`` with ``T = 1`` (``B = 1``, ``C = 768``, with a state), lean and public.
* ``rwkv4``: one token through an RWKV-4 model (12 layers x 768, and 6 x 512; vocabulary 1024
  so the layers dominate), tipad ``RWKV4(idx, state)`` against BlinkDL's ``rwkv`` package,
  strategy ``"cpu fp32"``, on the same weights (logits cross-checked first). Without the
  package, tipad alone.
* ``canvas``: the seed canvas: a ``(1, 48, 32)`` float32 tile padded by ``(4096, 2048)`` with
  itself as texture, stagger 10 (``1 x 4144 x 8224``): a fresh output, into ``out=``, and
  torch's ``empty().fill_()`` of the same size (what first-touch page faults cost torch).
* ``workers`` (``--workers``, not run by default: about a minute): DataLoader epochs of 64
  ``(3, 96, 96)`` uint8 samples, 2 workers, batch 8, non-persistent (every epoch starts its
  workers), the parent having used the package: per-sample ``BrickPad(16)`` against
  ``v2.Pad(16, padding_mode="reflect")``, under plain ``forkserver`` and under
  ``data.worker_context()`` (the forkserver preloads torch and Taichi's import); 2 epochs each.
* ``first call``: ``brick_pad`` in a new process (import, Taichi init, first launch) with this
  machine's offline cache (warm after one run), two processes.

Writes ``<out>/percall.json`` and ``<out>/percall.png`` (``--only image``: that workload alone,
into ``percall-image.*``). ``--quick``: small models, few repeats (a smoke run, not a
measurement).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
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
from torchvision.transforms import v2

import tipad_transforms as tt
from tipad_transforms import _runtime
from tipad_transforms import functional as F
from tipad_transforms._runtime import _lean
from tipad_transforms.nn import RWKV4
from tipad_transforms.ops import init_wkv_state, wkv


@contextlib.contextmanager
def public_launcher() -> Iterator[None]:
    """Taichi's public call and the thread pool for every launch (the launch path before)."""
    kernels = [
        k
        for family in _runtime._state["kernels"].values()
        for k in family.values()
        if isinstance(k, _lean.LeanKernel)
    ]
    saved = [k.enabled for k in kernels], _runtime.SERIAL_BYTES
    for k in kernels:
        k.enabled = False
    _runtime.SERIAL_BYTES = -1
    try:
        yield
    finally:
        for k, e in zip(kernels, saved[0], strict=True):
            k.enabled = e
        _runtime.SERIAL_BYTES = saved[1]


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
    texture = tt.TexturePad(32, tex)
    brick = tt.BrickPad(32)
    return [
        Peer("v2", "v2.Pad(reflect)", lambda: v2pad(x), "reflect"),
        Peer("fpad", "F.pad constant", lambda: torch.nn.functional.pad(x, (32,) * 4), "const"),
        Peer("pad", "tipad pad(reflect)", lambda: F.pad(x, 32, padding_mode="reflect"), "reflect"),
        Peer("tex", "tipad TexturePad", lambda: texture(x), "tex"),
        Peer("brick", "tipad BrickPad", lambda: brick(x), "brick"),
        Peer(
            "tex-public",
            "tipad texture_pad, public launcher",
            publicly(lambda: F.texture_pad(x, 32, tex)),
            "tex",
        ),
    ]


def wkv_peers() -> list[Peer]:
    g = torch.Generator().manual_seed(1)
    c = 768
    td, tf = torch.randn(c, generator=g), torch.randn(c, generator=g)
    k, v = torch.randn(1, 1, c, generator=g), torch.randn(1, 1, c, generator=g)
    state = init_wkv_state(1, c)

    def run() -> torch.Tensor:
        return wkv(td, tf, k, v, state)[0]

    return [
        Peer("wkv", "tipad ops.wkv T=1", run, "wkv"),
        Peer("wkv-public", "ops.wkv T=1, public launcher", publicly(run), "wkv"),
    ]


def rwkv4_peers(vocab: int, n_embd: int, n_layer: int, tmp: Path) -> tuple[list[Peer], str]:
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
    peers = [Peer("tipad", label, lambda: model(torch.tensor([[5]]), state)[0], "rwkv")]
    theirs = load_package(model, tmp)
    if theirs is None:
        return peers, "rwkv package not installed: tipad timed alone"
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
    return peers, f"logits of {len(prompt)} tokens equal to the package's within {worst:.1e}"


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


def canvas_peers(quick: bool) -> list[Peer]:
    g = torch.Generator().manual_seed(3)
    tile = torch.rand(1, 48, 32, generator=g)
    pads = (512, 256) if quick else (4096, 2048)

    def seed(into: torch.Tensor | None) -> torch.Tensor:
        return F.texture_pad(tile, pads, tile, stagger=10, out=into)

    out = seed(None)
    return [
        Peer(
            "fresh",
            "tipad texture_pad, fresh output",
            lambda: F.texture_pad(tile, pads, tile, stagger=10),
            "canvas",
        ),
        Peer(
            "out",
            "tipad texture_pad, out=",
            lambda: F.texture_pad(tile, pads, tile, stagger=10, out=out),
            "canvas",
            "out=",
        ),
        Peer("fill", "torch.empty().fill_(1)", lambda: torch.empty(out.shape).fill_(1), "fill"),
    ]


def first_calls(runs: int) -> list[dict[str, Any]]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    out = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", FIRST_CALL_CODE, "cpu"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            out.append({"error": done.stderr[-2000:]})
        else:
            out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


class Samples(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """64 copies of one image through ``transform`` (module level: workers unpickle it)."""

    def __init__(self, transform: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.transform = transform
        self.image = torch.randint(0, 256, (3, 96, 96), dtype=torch.uint8)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(self.image)


def worker_epochs(epochs: int) -> dict[str, list[float]]:
    import multiprocessing
    import time

    from torch.utils.data import DataLoader

    from tipad_transforms.data import worker_context

    # The server and the workers must import this checkout's package, as this process does.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )
    tt.BrickPad(16)(torch.zeros(3, 8, 8, dtype=torch.uint8))  # the parent used the package
    out: dict[str, list[float]] = {}
    # Plain forkserver first: worker_context changes the server's preload list for good.
    for name, ctx in (("forkserver", multiprocessing.get_context("forkserver")),
                      ("worker_context", worker_context("forkserver"))):  # fmt: skip
        if name == "worker_context":
            from multiprocessing import forkserver

            forkserver._forkserver._stop()  # the next worker starts a server with the preload
        for label, transform in (("BrickPad", tt.BrickPad(16)),
                                 ("v2.Pad", v2.Pad(16, padding_mode="reflect"))):  # fmt: skip
            times = []
            for _ in range(epochs):
                loader = DataLoader(Samples(transform), batch_size=8, num_workers=2,
                                    multiprocessing_context=ctx)  # fmt: skip
                t0 = time.perf_counter()
                for _batch in loader:
                    pass
                times.append(time.perf_counter() - t0)
            out[f"{name} {label}"] = times
    return out


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
    p.add_argument("--only-workers", action="store_true", help="time worker epochs only")
    p.add_argument(
        "--only",
        choices=("image",),
        help="time this workload only (image: the one-image padding calls, ~20 s)",
    )
    args = p.parse_args(argv)
    if args.only_workers:
        epochs = worker_epochs(2)
        for k, v in epochs.items():
            print(f"{k:28s} " + "  ".join(f"{t:.2f} s" for t in v))
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / "percall-workers.json",
                   {"epochs_s": epochs, "load_average": os.getloadavg(),
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

    run("one 3x224x224 uint8 image, pad 32", image_peers(), "v2")
    epochs: dict[str, list[float]] = {}
    firsts: list[dict[str, Any]] = []
    if args.only is None:
        run("ops.wkv, T=1, B=1, C=768", wkv_peers(), "wkv-public")
        models = [(1024, 128, 2)] if args.quick else [(1024, 768, 12), (1024, 512, 6)]
        with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
            for vocab, n_embd, n_layer in models:
                peers, check = rwkv4_peers(vocab, n_embd, n_layer, Path(tmp))
                checks[f"rwkv4 {n_layer}x{n_embd}"] = check
                print(f"\nRWKV-4 {n_layer}x{n_embd}: {check}")
                run(f"RWKV-4 {n_layer}x{n_embd}, one token", peers, peers[-1].key)
        run("seed canvas 1x4144x8224 float32", canvas_peers(args.quick), "fill", min_s=0.1)
        epochs = worker_epochs(2) if args.workers else {}
        for k, v in epochs.items():
            print(f"{k:28s} " + "  ".join(f"{t:.2f} s" for t in v))
        firsts = first_calls(1 if args.quick else 2)
        print("\nfirst call in a new process (offline cache as this machine has it):")
        for i, r in enumerate(firsts):
            print(f"  run {i + 1}: {r.get('first_call_s', r.get('error'))}")

    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "threads": args.threads,
        "load_average": os.getloadavg(),
        "checks": checks,
        "workloads": [
            {"title": t, "yardstick": y, "peers": [m.to_json() for m in ms]}
            for t, ms, y in workloads
        ],
        "worker_epochs_s": epochs,
        "first_call": firsts,
        "machine": machine_info(),
    }
    # A partial run does not overwrite a whole one's files.
    stem = "percall" if args.only is None else f"percall-{args.only}"
    write_json(args.out / f"{stem}.json", payload)
    plot_workloads(workloads, args.out / f"{stem}.png", "Per-call costs (issue 9)")
    print(f"\nwrote {args.out / f'{stem}.json'}")


if __name__ == "__main__":
    main()
