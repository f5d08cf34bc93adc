"""One-shot check of tipad on a CUDA machine: correctness against the CPU, then timings.

    python benchmarks/gpu_check.py [--quick] [--out PATH] [--budget 420]
    python benchmarks/gpu_check.py --dry-run                 # every section on the CPU, no GPU

Flags: ``--device`` (cuda, or cpu), ``--quick`` (fewer dtypes, cases and rounds, small shapes),
``--dry-run`` (``--device cpu --quick``, 2 timing rounds and the tiny stand-ins of the large
workloads: walks every section and code path in about a minute and names, in the JSON's
``skipped`` and the summary, what needs CUDA), ``--out`` (the JSON), ``--budget`` (seconds of
wall clock; the default fits one 8-minute run on one GPU), ``--repeats`` (timing rounds),
``--compile/--no-compile``, ``--compile-batch`` and ``--compile-cap`` (the torch.compile
peer), ``--no-timing`` (correctness only), ``--seed``.

(a) Correctness. Random inputs (integers over the whole dtype range, floats with inf, NaN and -0.0)
    for every op (``pad`` in all modes, ``texture_pad`` with 2-D/3-D textures, banks with
    per-sample ``texture_index``, per-sample offsets, negative and large staggers, ``brick_pad``),
    every dtype, fresh and ``out=`` (poisoned with a sentinel first). Each device result must equal,
    bit for bit, (1) tipad's result on the CPU, computed in a separate process where the Taichi
    CPU kernel runs (one Taichi arch per process), and (2) an independent oracle written from the
    spec (``peers.reference_pad``). Autograd gradients (w.r.t. the image and the texture) are
    compared with the CPU's and the oracle's. A side-stream check runs ``texture_pad``, ``pad``
    and a backward inside ``with torch.cuda.stream(s)`` right after a large matmul on ``s``
    produces the input, and consumes the output on ``s`` at once.
    The device run must use the Taichi kernel (no silent torch fallback): checked.
(b) Timing of the benchmark workloads (``workloads.py``) on the device against the same peers:
    ``torch.cuda.synchronize`` around back-to-back calls, interleaved rounds, medians; plus the
    first-call latency of a fresh process with an empty Taichi cache.
(b') Sections of the later features (``SECTIONS``): ``gpu_data.py`` (pad_stack, GPUCollate,
    DeviceLoader: correctness against the oracle, then pad_stack timing), ``gpu_rwkv.py``
    (wkv, wkv7 and time_conv: correctness against float64 references, then timings against
    torch, ``time_conv`` at RWKV-CUDA's (32, 768, 768), and ``wkv7`` against fla's
    ``chunk_rwkv7``/``fused_recurrent_rwkv7`` at (8, 4096, 64, 64), the wind_rwkv table's
    shape, when the budget allows), ``pad_peers`` (``gpu_data.peers_run``: padding against
    F.pad, v2, Kornia's PadTo and CV-CUDA's ``copymakeborderstack``, each where it imports and
    computes tipad's canvas), ``orders`` (``gpu_orders.py``: each ``ORDER_SWITCHES`` entry's
    simple and optimised GPU order side by side), and ``two_process`` (2+ GPUs visible only,
    else skipped by name): the refusal of ``cuda:1`` names ``bind_device``, and
    ``torchrun --nproc_per_node 2 examples/train_ddp.py`` over NCCL binds each rank
    to its own GPU as ``cuda:0`` and runs the kernels there.
(c) JSON to ``--out`` (default ``$OUT/gpu_check.json`` when ``$OUT`` is set, else
    ``out/gpu_check/gpu_check.json``), a PNG beside it when matplotlib is installed, and a
    PASS / FAIL summary (exit status 0 / 1).

Sections run in order of importance and stop starting new work when ``--budget`` runs low, so
the script ends in time; skipped work is reported as skipped, never as passed.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpu_data
import gpu_orders
import gpu_rwkv
import torch
from _common import (
    Deadline,
    Measurement,
    bits_equal,
    first_call_latency,
    format_ms,
    format_table,
    machine_info,
    measure,
    plot_workloads,
    runtime_sha,
    write_json,
)
from peers import reference_pad
from torchvision.transforms.v2 import functional as tvF
from workloads import (
    FPAD,
    Workload,
    article_workload,
    batch_workload,
    evaluate_targets,
    targets_table,
)

import tipad_transforms.functional as TF


def two_process(
    device: torch.device,
    quick: bool,
    repeats: int,
    with_timing: bool,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """One GPU per rank (``tipad_transforms.distributed``), with 2+ GPUs visible only.

    In this process: a ``cuda:1`` tensor is refused with a message naming ``bind_device``, and
    padding it takes the torch route with the right values. Then ``torchrun --nproc_per_node 2
    examples/train_ddp.py`` (NCCL): each rank bound to its own GPU as ``cuda:0``, parameters
    identical on both ranks after every step, and no rank took the torch route (the kernels
    ran on both GPUs). Skips (``ok``) where fewer than 2 GPUs are visible.
    """
    t0 = time.perf_counter()
    count = torch.cuda.device_count() if device.type == "cuda" else 0
    if count < 2:
        why = f"needs 2+ visible GPUs, found {count}"
        return {
            "ok": True,
            "status": f"skipped: {why}",
            "skipped": [f"cuda:1 refusal naming bind_device: {why}",
                        f"two processes with bind_device (torchrun, NCCL): {why}"],
        }  # fmt: skip
    import json
    import socket

    from tipad_transforms.backends import TAICHI

    problems: list[str] = []
    reason = TAICHI.refusal(torch.device("cuda", 1)) or ""
    if "tipad_transforms.distributed.bind_device()" not in reason:
        problems.append(f"refusal of cuda:1 does not name bind_device: {reason!r}")
    x = torch.randint(0, 256, (3, 5, 7), dtype=torch.uint8, device="cuda:1")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = TF.brick_pad(x, 3).cpu()
    if not bits_equal(got, TF.brick_pad(x.cpu(), 3)):
        problems.append("brick_pad of a cuda:1 tensor (torch route) differs from the CPU's")
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="tipad-ddp-") as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        env = dict(os.environ, PYTHONPATH=str(repo))
        env.pop("LOCAL_RANK", None)
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            "--master_addr=127.0.0.1", f"--master_port={port}",
            str(repo / "examples" / "train_ddp.py"), "--epochs", "1" if quick else "2",
            "--report-dir", tmp,
        ]  # fmt: skip
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=240, env=env, start_new_session=True
            )
        except subprocess.TimeoutExpired:
            return {"ok": False, "status": "FAIL", "problems": ["torchrun timed out (240 s)"]}
        output = done.stdout + done.stderr
        if done.returncode != 0:
            problems.append(f"torchrun exited {done.returncode}: {output[-2000:]}")
        elif "the Taichi kernel cannot run here" in output:
            problems.append(f"a rank took the torch route: {output[-2000:]}")
        else:
            reports = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(2)]
            if [r["device"] for r in reports] != ["cuda:0", "cuda:0"]:
                problems.append(f"ranks not bound to cuda:0: {[r['device'] for r in reports]}")
            visible = [r["cuda_visible_devices"] for r in reports]
            if len(set(visible)) != 2:
                problems.append(f"ranks share a GPU: CUDA_VISIBLE_DEVICES {visible}")
            for e, (a, b) in enumerate(zip(*(r["epochs"] for r in reports), strict=True)):
                for k, (sa, sb) in enumerate(zip(a["steps"], b["steps"], strict=True)):
                    if sa["params"] != sb["params"]:
                        problems.append(f"epoch {e} step {k}: parameters differ across ranks")
    return {
        "ok": not problems,
        "status": "FAIL" if problems else "pass",
        "problems": problems,
        "wall_s": time.perf_counter() - t0,
    }


# Sections of the later issues: each ``run(device, quick, repeats, with_timing, deadline)``
# returns a dict with "ok", "status", "problems", optionally "skipped" (names of what it could
# not run here, with the reason) and "timing" (with a printable "table").
SECTIONS: list[tuple[str, Callable[..., dict[str, Any]]]] = [
    ("data", gpu_data.run),
    ("rwkv", gpu_rwkv.run),
    ("pad_peers", gpu_data.peers_run),
    ("orders", gpu_orders.run),
    ("two_process", two_process),
]

DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
]
STANDARD = ["constant", "edge", "reflect", "symmetric", "circular"]
# (shape, (left, top, right, bottom)): a batch, padding beyond the image (numpy.pad semantics),
# a bare (H, W) with zero sides, two leading dims.
GEOMETRIES: list[tuple[tuple[int, ...], tuple[int, int, int, int]]] = [
    ((2, 3, 7, 9), (3, 2, 4, 1)),
    ((3, 5, 4), (9, 11, 10, 12)),
    ((6, 5), (0, 3, 2, 0)),
    ((2, 2, 3, 5, 6), (4, 4, 4, 4)),
]
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    """One call, in user form (``kwargs``) and in the oracle's canonical form (``oracle``)."""

    id: str
    op: str  # "pad" | "texture_pad" | "brick_pad"
    x: torch.Tensor
    padding: tuple[int, int, int, int]
    kwargs: dict[str, Any]
    oracle: dict[str, Any]
    grad: bool = False
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # kwargs that move to device


def _random(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, shape, generator=gen, dtype=torch.int64).to(dtype)
    t = (torch.randn(shape, generator=gen, dtype=torch.float64) * 100).to(dtype)
    flat = t.view(-1)
    if flat.numel() >= 8:  # bit-exact copies must keep these too
        picks = torch.randperm(flat.numel(), generator=gen)[:4]
        flat[picks] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0], dtype=dtype)
    return t


def _lead_n(shape: tuple[int, ...]) -> tuple[tuple[int, ...], int, int]:
    """(leading dims, N samples, C channels) of an image shape."""
    if len(shape) == 2:
        return (), 1, 1
    lead = shape[:-3]
    n = 1
    for d in lead:
        n *= d
    return lead, n, shape[-3]


def _fill_for(dtype: torch.dtype, c: int) -> tuple[Any, torch.Tensor]:
    """A per-channel fill the dtype holds exactly, and its ``(C,)`` tensor."""
    if dtype == torch.bool:
        values: list[Any] = [bool(i % 2 == 0) for i in range(c)]
    elif dtype.is_floating_point:
        values = [[0.5, float("-inf"), -0.0][i % 3] for i in range(c)]
    else:
        hi = torch.iinfo(dtype).max
        values = [[1, hi, 7][i % 3] for i in range(c)]
    fill = values[0] if c == 1 else values
    return fill, torch.tensor(values).to(dtype)


def make_cases(seed: int, quick: bool) -> list[Case]:
    gen = torch.Generator().manual_seed(seed)
    cases: list[Case] = []
    dtypes = [torch.uint8, torch.bfloat16, torch.float32, torch.bool] if quick else DTYPES
    geometries = GEOMETRIES[:2] + GEOMETRIES[3:] if quick else GEOMETRIES
    for dtype in dtypes:
        name = str(dtype).removeprefix("torch.")
        for gi, (shape, pads) in enumerate(geometries):
            lead, n, c = _lead_n(shape)
            x = _random(shape, dtype, gen)
            for mode in STANDARD:
                kwargs: dict[str, Any] = {"mode": mode}
                oracle: dict[str, Any] = {"mode": mode}
                if mode == "constant":
                    kwargs["fill"], oracle["fill"] = _fill_for(dtype, c)
                cases.append(Case(f"pad-{mode}-{name}-g{gi}", "pad", x, pads, kwargs, oracle))
            # Texture: a 2-D tile, a (C, th, tw) tile with per-sample offsets, a bank.
            th, tw = 3 + gi, 5 + 2 * gi
            tile2 = _random((th, tw), dtype, gen)
            cases.append(
                Case(
                    f"texture-2d-{name}-g{gi}",
                    "texture_pad",
                    x,
                    pads,
                    {"texture": tile2, "stagger": 3, "offset": (1, -2)},
                    {
                        "mode": "texture",
                        "bank": tile2[None, None],
                        "offset": torch.tensor([[1, -2]]).expand(n, 2),
                        "texture_index": torch.zeros(n, dtype=torch.long),
                        "stagger": 3,
                    },
                    tensors={"texture": tile2},
                )
            )
            offs = torch.randint(-20, 20, (*lead, 2), generator=gen)
            tile3 = _random((c, th, tw), dtype, gen)
            cases.append(
                Case(
                    f"texture-3d-offsets-{name}-g{gi}",
                    "texture_pad",
                    x,
                    pads,
                    {"texture": tile3, "stagger": -5, "offset": offs},
                    {
                        "mode": "texture",
                        "bank": tile3[None],
                        "offset": offs.reshape(n, 2),
                        "texture_index": torch.zeros(n, dtype=torch.long),
                        "stagger": -5,
                    },
                    tensors={"texture": tile3, "offset": offs},
                )
            )
            k = 3
            ct = 1 if gi % 2 else c  # one-channel banks broadcast to all channels
            bank = _random((k, ct, th, tw), dtype, gen)
            index = torch.randint(0, k, lead, generator=gen)
            offs = torch.randint(-7, 30, (*lead, 2), generator=gen)
            cases.append(
                Case(
                    f"texture-bank-{name}-g{gi}",
                    "texture_pad",
                    x,
                    pads,
                    {"texture": bank, "stagger": 1000 + gi, "offset": offs, "texture_index": index},
                    {
                        "mode": "texture",
                        "bank": bank,
                        "offset": offs.reshape(n, 2),
                        "texture_index": index.reshape(n),
                        "stagger": 1000 + gi,
                    },
                    tensors={"texture": bank, "offset": offs, "texture_index": index},
                )
            )
    # A float [0, 1] texture for an integer image (scaled like torchvision's to_dtype).
    x8 = _random((2, 3, 6, 7), torch.uint8, gen)
    ftile = torch.rand(3, 4, 5, generator=gen)
    cases.append(
        Case(
            "texture-float-tile-uint8",
            "texture_pad",
            x8,
            (5, 4, 3, 2),
            {"texture": ftile, "stagger": 2},
            {
                "mode": "texture",
                "bank": tvF.to_dtype(ftile, torch.uint8, scale=True)[None],
                "offset": torch.zeros(2, 2, dtype=torch.long),
                "texture_index": torch.zeros(2, dtype=torch.long),
                "stagger": 2,
            },
            tensors={"texture": ftile},
        )
    )
    # brick_pad: RGB and one-channel tiles, a per-sample offset; the full benchmark batch too.
    brick_shapes: list[tuple[int, ...]] = [(2, 3, 20, 30), (4, 1, 9, 11)]
    if not quick:
        brick_shapes.append((64, 3, 224, 224))
    for dtype in (torch.uint8, torch.float32):
        for shape in brick_shapes:
            lead, n, c = _lead_n(shape)
            x = _random(shape, dtype, gen)
            tile = TF.make_brick_texture(channels=3 if c == 3 else 1)
            offs = torch.randint(0, 40, (*lead, 2), generator=gen)
            pads = (32, 32, 32, 32) if shape[-1] == 224 else (70, 45, 13, 60)
            cases.append(
                Case(
                    f"brick-{str(dtype).removeprefix('torch.')}-{'x'.join(map(str, shape))}",
                    "brick_pad",
                    x,
                    pads,
                    {"offset": offs},
                    {
                        "mode": "texture",
                        "bank": tvF.to_dtype(tile, dtype, scale=True)[None],
                        "offset": offs.reshape(n, 2),
                        "texture_index": torch.zeros(n, dtype=torch.long),
                        "stagger": TF.running_bond_stagger(),
                    },
                    tensors={"offset": offs},
                )
            )
    # Gradients: every mode, float dtypes, w.r.t. the image and (texture mode) the texture.
    grad_dtypes = [torch.float32, torch.float64]
    if not quick:
        grad_dtypes += [torch.float16, torch.bfloat16]
    for dtype in grad_dtypes:
        name = str(dtype).removeprefix("torch.")
        shape, pads = GEOMETRIES[0]
        lead, n, c = _lead_n(shape)
        x = torch.randn(shape, generator=gen).to(dtype)
        for mode in STANDARD:
            kwargs = {"mode": mode}
            oracle = {"mode": mode}
            if mode == "constant":
                kwargs["fill"], oracle["fill"] = 0.25, torch.full((c,), 0.25, dtype=dtype)
            cases.append(Case(f"grad-{mode}-{name}", "pad", x, pads, kwargs, oracle, grad=True))
        shape, pads = GEOMETRIES[1]  # padding beyond the image: texture pixels reused a lot
        lead, n, c = _lead_n(shape)
        x = torch.randn(shape, generator=gen).to(dtype)
        tile = torch.randn(c, 4, 7, generator=gen).to(dtype)
        cases.append(
            Case(
                f"grad-texture-{name}",
                "texture_pad",
                x,
                pads,
                {"texture": tile, "stagger": 3, "offset": (2, 5)},
                {
                    "mode": "texture",
                    "bank": tile[None],
                    "offset": torch.tensor([[2, 5]]),
                    "texture_index": torch.zeros(1, dtype=torch.long),
                    "stagger": 3,
                },
                grad=True,
                tensors={"texture": tile},
            )
        )
    return cases


# --------------------------------------------------------------------------------------------
# Running a case


def _call(
    case: Case, x: torch.Tensor, kw: dict[str, Any], out: torch.Tensor | None
) -> torch.Tensor:
    if case.op == "pad":
        return TF.pad(x, case.padding, out=out, padding_mode=kw["mode"], fill=kw.get("fill", 0))
    if case.op == "texture_pad":
        return TF.texture_pad(
            x,
            case.padding,
            kw["texture"],
            stagger=kw.get("stagger", 0),
            offset=kw.get("offset", (0, 0)),
            texture_index=kw.get("texture_index"),
            out=out,
        )
    return TF.brick_pad(x, case.padding, offset=kw.get("offset", (0, 0)), out=out)


def _stable_seed(text: str) -> int:
    # hash() of a str is salted per process; the CPU process must draw the same weights.
    return zlib.crc32(text.encode())


def run_case(case: Case, device: torch.device) -> dict[str, Any]:
    """Results of one case on ``device``, moved to the CPU: fresh, out=, grads."""
    kw = dict(case.kwargs)
    for name, t in case.tensors.items():
        kw[name] = t.to(device)
    x = case.x.to(device)
    res: dict[str, Any] = {}
    fresh = _call(case, x, kw, None)
    res["fresh"] = fresh.cpu()
    # out=: poisoned so that any element the kernel skips shows.
    out = torch.empty_like(fresh)
    out.view(_BITS[out.element_size()]).fill_(0x5A)
    returned = _call(case, x, kw, out)
    res["out"] = out.cpu()
    res["out_is_returned"] = returned is out
    if case.grad:
        xg = x.detach().clone().requires_grad_()
        if "texture" in kw:
            kw["texture"] = kw["texture"].detach().clone().requires_grad_()
        y = _call(case, xg, kw, None)
        gen = torch.Generator().manual_seed(_stable_seed(case.id))
        w = torch.randn(y.shape, generator=gen).to(y.dtype).to(device)
        (y * w).sum().backward()
        assert xg.grad is not None
        res["grad_x"] = xg.grad.cpu()
        if "texture" in kw:
            res["grad_texture"] = kw["texture"].grad.cpu()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return res


def oracle_case(case: Case) -> dict[str, Any]:
    """The independent oracle's results (forward; float64 gradients for grad cases)."""
    o = dict(case.oracle)
    mode = o.pop("mode")
    res: dict[str, Any] = {"fresh": reference_pad(case.x, case.padding, mode, **o)}
    if case.grad:
        # copy=True: .double() of a float64 tensor is the tensor itself, and requires_grad_()
        # on it would leak into the case (its gradients accumulating across cases).
        x = case.x.detach().to(torch.float64, copy=True).requires_grad_()
        o64 = {
            k: (v.detach().to(torch.float64, copy=True) if k in ("fill", "bank") else v)
            for k, v in o.items()
        }
        if "bank" in o64:
            o64["bank"] = o64["bank"].requires_grad_()
        y = reference_pad(x, case.padding, mode, **o64)
        gen = torch.Generator().manual_seed(_stable_seed(case.id))
        w = torch.randn(y.shape, generator=gen).to(case.x.dtype).double()
        (y * w).sum().backward()
        res["grad_x"] = x.grad
        if "bank" in o64:
            res["grad_texture"] = o64["bank"].grad.reshape(case.kwargs["texture"].shape)
    return res


GRAD_TOL = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def compare(case: Case, got: dict[str, Any], ref: dict[str, Any], what: str) -> list[str]:
    """Problems found comparing ``got`` (device) with ``ref`` (CPU tipad or oracle)."""
    problems = []
    for key in ("fresh", "out"):
        if key in ref and not bits_equal(got[key], ref[key]):
            problems.append(f"{key} != {what}")
    if what == "oracle" and not bits_equal(got["out"], ref["fresh"]):
        problems.append("out= != oracle (unwritten or wrong elements)")
    if got.get("out_is_returned") is False:
        problems.append("out= call did not return out")
    for key in ("grad_x", "grad_texture"):
        if key not in ref:
            continue
        if key not in got:
            problems.append(f"{key} missing")
            continue
        rtol, atol = GRAD_TOL[case.x.dtype]
        a, b = got[key].double(), ref[key].double()
        scale = max(1.0, float(b.abs().max()))
        if a.shape != b.shape or not torch.allclose(a, b, rtol=rtol, atol=atol * scale):
            err = float((a - b).abs().max()) if a.shape == b.shape else float("nan")
            problems.append(f"{key} != {what} (max abs err {err:.3g})")
    return problems


# --------------------------------------------------------------------------------------------
# Sections


def tipad_engine(device: torch.device) -> str:
    """Which engine serves ``device``: "taichi-cuda"/"taichi-cpu", "FALLBACK (...)", or
    "unknown (...)" when tipad's private runtime API has changed (then the fallback warnings,
    public behaviour, are the only evidence)."""
    try:
        from tipad_transforms.backends import TAICHI

        reason = TAICHI.refusal(device)
        arch = TAICHI.runtime_arch()
    except (ImportError, AttributeError, TypeError) as exc:
        return f"unknown ({type(exc).__name__}: {exc})"
    if reason is None and arch == device.type:
        return f"taichi-{arch}"
    return f"FALLBACK (taichi arch {arch}; refusal: {reason})"


def cpu_reference_main(path: Path, seed: int, quick: bool) -> int:
    """Child process: tipad on the CPU (Taichi CPU kernel) for every case; saved to ``path``."""
    cases = make_cases(seed, quick)
    out: dict[str, Any] = {"engine": None, "results": {}, "errors": {}}
    cpu = torch.device("cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for case in cases:
            try:
                out["results"][case.id] = run_case(case, cpu)
            except Exception as exc:
                out["errors"][case.id] = f"{type(exc).__name__}: {exc}"
            if out["engine"] is None:
                out["engine"] = tipad_engine(cpu)
    out["fallback_warnings"] = [
        str(w.message)
        for w in caught
        if issubclass(w.category, RuntimeWarning) and "tipad" in str(w.message)
    ]
    torch.save(out, path)
    return 0


def correctness(
    device: torch.device,
    cases: list[Case],
    ref_proc: subprocess.Popen[bytes] | None,
    ref_path: Path,
    deadline: Deadline,
) -> dict[str, Any]:
    records: dict[str, dict[str, Any]] = {}
    device_results: dict[str, dict[str, Any]] = {}
    engine = None
    fallback_warnings: list[str] = []
    for case in cases:
        rec: dict[str, Any] = {"id": case.id, "problems": []}
        records[case.id] = rec
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                device_results[case.id] = run_case(case, device)
            for w in caught:
                if issubclass(w.category, RuntimeWarning) and "tipad" in str(w.message):
                    fallback_warnings.append(str(w.message))
                    rec["problems"].append(f"warning: {w.message}")
        except Exception as exc:
            rec["problems"].append(f"raised {type(exc).__name__}: {exc}")
            rec["traceback"] = traceback.format_exc()[-2000:]
            continue
        if engine is None:
            engine = tipad_engine(device)
        try:
            rec["problems"] += compare(case, device_results[case.id], oracle_case(case), "oracle")
        except Exception as exc:
            rec["problems"].append(f"oracle raised {type(exc).__name__}: {exc}")
    cpu_status = "not run"
    cpu_engine = None
    if ref_proc is not None:
        try:
            rc = ref_proc.wait(timeout=max(10.0, deadline.left() - 150))
            cpu_status = "ok" if rc == 0 else f"exit status {rc}"
        except subprocess.TimeoutExpired:
            ref_proc.kill()
            cpu_status = "timed out"
    if cpu_status == "ok":
        ref = torch.load(ref_path, weights_only=False)
        cpu_engine = ref["engine"]
        if ref["fallback_warnings"]:
            cpu_engine = f"FALLBACK ({ref['fallback_warnings'][0]})"
        for case in cases:
            rec = records[case.id]
            if case.id in ref["errors"]:
                rec["problems"].append(f"CPU run raised {ref['errors'][case.id]}")
            elif case.id in device_results:
                rec["problems"] += compare(
                    case, device_results[case.id], ref["results"][case.id], "CPU tipad"
                )
            rec["compared_with_cpu"] = True
    for rec in records.values():
        rec["status"] = "FAIL" if rec["problems"] else "pass"
    failed = [r for r in records.values() if r["status"] == "FAIL"]

    # The fallback warning (public) is the primary evidence; the private probe confirms it.
    def served(name: str | None) -> bool:
        return name is not None and not name.startswith("FALLBACK")

    engine_ok = served(engine) and not fallback_warnings
    cpu_engine_ok = served(cpu_engine)
    return {
        "engine": engine,
        "engine_ok": engine_ok,
        "cpu_reference": cpu_status,
        "cpu_reference_engine": cpu_engine,
        "cases": list(records.values()),
        "n_cases": len(records),
        "n_failed": len(failed),
        "fallback_warnings": fallback_warnings,
        "ok": not failed and engine_ok and cpu_status == "ok" and cpu_engine_ok,
    }


def stream_check(device: torch.device, reps: int) -> dict[str, Any]:
    """tipad launched on a side stream right after the op that produces its input."""
    if device.type != "cuda":
        return {"status": "skipped (needs CUDA)", "ok": True}
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(8192, 8192, generator=gen).to(device)
    tile = torch.rand(3, 23, 235, generator=gen).to(device)
    s = torch.cuda.Stream(device)
    problems: list[str] = []
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for i in range(reps):
        with torch.cuda.stream(s):
            big = a @ a  # tens of ms on s: an unordered launch would read x before it exists
            # A different scale each round: stale memory from the previous round differs.
            x = (big[: 16 * 3 * 64, :64] * (1.0 + i)).reshape(16, 3, 64, 64)
            y = TF.texture_pad(x, (9, 7, 5, 3), tile, stagger=11, offset=(i, 2 * i))
            y_seen = y.clone()  # consumed on s at once: must see the finished canvas
            out = torch.empty(16, 3, 74, 78, device=device)
            TF.pad(x, (7, 5, 7, 5), out=out, padding_mode="reflect")
            out_seen = out.clone()
            xg = x.detach().requires_grad_()
            (TF.pad(xg, 6, padding_mode="symmetric") * 2).sum().backward()
            assert xg.grad is not None
            grad_seen = xg.grad.clone()
        s.synchronize()
        xc = x.cpu()
        ref_y = reference_pad(
            xc,
            (9, 7, 5, 3),
            "texture",
            bank=tile.cpu()[None],
            offset=torch.tensor([[i, 2 * i]]).expand(16, 2),
            texture_index=torch.zeros(16, dtype=torch.long),
            stagger=11,
        )
        if not bits_equal(y_seen.cpu(), ref_y):
            problems.append(f"round {i}: texture_pad on a side stream != oracle")
        if not bits_equal(out_seen.cpu(), reference_pad(xc, (7, 5, 7, 5), "reflect")):
            problems.append(f"round {i}: pad(out=) on a side stream != oracle")
        xr = xc.to(torch.float64, copy=True).requires_grad_()
        (reference_pad(xr, (6, 6, 6, 6), "symmetric") * 2).sum().backward()
        assert xr.grad is not None
        if not torch.allclose(grad_seen.cpu().double(), xr.grad, rtol=1e-5, atol=1e-5):
            problems.append(f"round {i}: backward on a side stream != oracle")
    return {
        "status": "FAIL" if problems else "pass",
        "ok": not problems,
        "rounds": reps,
        "problems": problems,
        "wall_s": time.perf_counter() - t0,
    }


def timing(
    device: torch.device, args: argparse.Namespace, deadline: Deadline
) -> tuple[list[dict[str, Any]], dict[str, list[Measurement]], list[str], list[Any]]:
    """The benchmark workloads on ``device``; compiles only while the budget allows."""
    small = device.type == "cpu"  # the dry run: small inputs, the logic is what is checked
    sync: Callable[[], None] = (
        (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    )
    builders: list[tuple[str, Callable[[float | None], Workload]]] = [
        ("article", lambda c: article_workload(device, compile_cap_s=c)),
        (
            "batch-uint8",
            lambda c: batch_workload(
                torch.uint8,
                device,
                compile_cap_s=c,
                shape=(4, 3, 40, 40) if small else (64, 3, 224, 224),
            ),
        ),
        (
            "batch-float32",
            lambda c: batch_workload(
                torch.float32,
                device,
                compile_cap_s=c,
                shape=(4, 3, 40, 40) if small else (64, 3, 224, 224),
            ),
        ),
    ]
    payload: list[dict[str, Any]] = []
    if small:  # the article canvas's eager gather takes seconds on a CPU
        builders = builders[1:]
        payload.append({"key": "article", "status": "skipped: its eager gather is slow on a CPU"})
    results: dict[str, list[Measurement]] = {}
    tables: list[str] = []
    plots: list[Any] = []
    for i, (key, build) in enumerate(builders):
        if deadline.left() < 40:
            payload.append({"key": key, "status": "skipped: time budget"})
            continue
        reserve = 40.0 * (len(builders) - i)  # this workload and those after it
        cap = min(args.compile_cap, deadline.left() - reserve)
        want_compile = args.compile and cap >= 30 and (key == "article" or args.compile_batch)
        log(f"timing {key}{' (compiling the gather first)' if want_compile else ''}...")
        try:
            wl = build(cap if want_compile else None)
            ms = measure(
                wl.peers,
                repeats=args.repeats,
                warmup=1,
                min_sample_s=0.005 if device.type == "cuda" else 0.002,
                sync=sync,
            )
        except Exception as exc:
            payload.append(
                {
                    "key": key,
                    "status": f"FAIL: {type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-3000:],
                }
            )
            log(f"  {key}: FAIL {exc}")
            continue
        results[key] = ms
        base = {m.peer.key: m.stats.median_s for m in ms}
        rows = [
            [
                m.peer.label,
                m.peer.output,
                format_ms(m.stats.median_s),
                f"{format_ms(m.stats.q1_s)}-{format_ms(m.stats.q3_s)}",
                f"{m.stats.median_s / base[FPAD]:.2f}x",
                f"{m.stats.median_s / base[wl.yardsticks[m.peer.output]]:.2f}x",
            ]
            for m in ms
        ]
        header = ["peer", "output", "median ms", "quartiles ms", "/ F.pad", "/ same-output const"]
        tables.append(f"{wl.title} on {device}\n" + format_table(header, rows, right="2345"))
        print("\n" + tables[-1], flush=True)
        plots.append((f"{wl.title} on {device}", ms, FPAD))
        payload.append(
            {
                "key": key,
                "status": "ok",
                "title": wl.title,
                **wl.description,
                "torch_compile": wl.compile_info,
                "rounds": args.repeats,
                "peers": [
                    {**m.to_json(), "ratio_to_fpad_constant": m.stats.median_s / base[FPAD]}
                    for m in ms
                ],
            }
        )
        del wl, ms
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return payload, results, tables, plots


# --------------------------------------------------------------------------------------------


def default_out() -> Path:
    root = os.environ.get("OUT")
    return Path(root) / "gpu_check.json" if root else Path("out/gpu_check/gpu_check.json")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run")
    ap.add_argument("--quick", action="store_true", help="fewer dtypes, cases, rounds, sizes")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="on the CPU: --device cpu --quick, 2 rounds, tiny sizes; walks every section",
    )
    ap.add_argument("--out", type=Path, default=None, help="JSON path (see above)")
    ap.add_argument("--budget", type=float, default=420.0, help="wall-clock budget, seconds")
    ap.add_argument("--repeats", type=int, default=None, help="timing rounds (default 15, quick 5)")
    ap.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the gather peer (default: on for cuda, within the budget)",
    )
    ap.add_argument(
        "--compile-batch",
        action="store_true",
        help="also compile the gather for the two batch workloads (budget permitting)",
    )
    ap.add_argument("--compile-cap", type=float, default=120.0, help="per compile, seconds")
    ap.add_argument("--no-timing", action="store_true", help="correctness only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu-reference", type=Path, help=argparse.SUPPRESS)  # internal: child mode
    args = ap.parse_args(argv)
    if args.cpu_reference is not None:
        return cpu_reference_main(args.cpu_reference, args.seed, args.quick)
    if args.dry_run:
        args.device, args.quick = "cpu", True
        args.repeats = args.repeats or 2
    args.repeats = args.repeats or (5 if args.quick else 15)
    if args.compile is None:
        args.compile = args.device.startswith("cuda")
    out_path: Path = args.out or default_out()
    deadline = Deadline(args.budget)
    device = torch.device(args.device)
    payload: dict[str, Any] = {"schema": "tipad-gpu-check/1", "machine": machine_info()}
    payload["settings"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    failures: list[str] = []
    skipped: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="tipad-gpu-check-"))
    try:
        if device.type == "cuda" and not torch.cuda.is_available():
            failures.append("CUDA requested but torch.cuda.is_available() is False")
            return 1
        if device.type == "cuda":
            # Inductor and Triton caches start empty: the compile time reported is a cold one.
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp / "inductor"))
            os.environ.setdefault("TRITON_CACHE_DIR", str(tmp / "triton"))
        log(
            f"gpu_check on {device} ({payload['machine'].get('cuda_device', 'cpu')}), "
            f"budget {args.budget:.0f} s"
        )

        # (a) correctness. The CPU reference runs in its own process (its own Taichi arch),
        # concurrently with the device cases.
        ref_path = tmp / "cpu_reference.pt"
        cmd = [sys.executable, __file__, "--cpu-reference", str(ref_path), "--seed", str(args.seed)]
        ref_proc = subprocess.Popen([*cmd, *(["--quick"] if args.quick else [])])
        cases = make_cases(args.seed, args.quick)
        log(f"(a) correctness: {len(cases)} cases on {device}, CPU reference in a subprocess...")
        corr = correctness(device, cases, ref_proc, ref_path, deadline)
        corr["wall_s"] = deadline.elapsed()
        payload["correctness"] = corr
        bad = [c for c in corr["cases"] if c["status"] == "FAIL"]
        for c in bad[:20]:
            log(f"  FAIL {c['id']}: {'; '.join(c['problems'])[:300]}")
        log(
            f"  {corr['n_cases'] - corr['n_failed']}/{corr['n_cases']} cases pass; engine "
            f"{corr['engine']}; CPU reference {corr['cpu_reference']} "
            f"({corr['cpu_reference_engine']}); {corr['wall_s']:.0f} s"
        )
        if not corr["ok"]:
            failures.append(
                f"correctness: {corr['n_failed']} of {corr['n_cases']} cases fail; engine "
                f"{corr['engine']}; CPU reference {corr['cpu_reference']} "
                f"({corr['cpu_reference_engine']})"
            )
        stream = stream_check(device, reps=3 if args.quick else 6)
        payload["stream_check"] = stream
        log(f"  side-stream ordering: {stream['status']} (at {deadline.elapsed():.0f} s)")
        if not stream["ok"]:
            failures.append(f"side-stream ordering: {stream['problems']}")
        elif stream["status"].startswith("skipped"):
            skipped.append("side-stream ordering: needs CUDA")
        for name, section in SECTIONS:
            if deadline.left() < 45:
                skipped.append(f"{name} section: time budget")
                continue
            log(f"  {name} section...")
            try:
                result = section(
                    device, args.quick, args.repeats, not args.no_timing, deadline=deadline
                )
            except Exception as exc:
                result = {"ok": False, "status": f"FAIL: {type(exc).__name__}: {exc}"}
                result["problems"] = [traceback.format_exc()[-2000:]]
            payload[name] = result
            log(f"  {name}: {result['status']} ({result.get('wall_s', 0):.0f} s)")
            if str(result["status"]).startswith("skipped"):
                skipped.append(f"{name} section ({result['status']})")
            skipped += [f"{name}: {s}" for s in result.get("skipped", [])]
            if "timing" in result:
                print(result["timing"]["table"], flush=True)
            if not result["ok"]:
                failures.append(f"{name}: {result['problems'][:5]}")

        # (b) timing and first-call latency.
        if args.no_timing:
            skipped.append("timing (--no-timing)")
        else:
            if not args.compile:
                skipped.append("timing: torch.compile gather peer (off; --compile to run it)")
            log("(b) first-call latency in fresh processes (empty Taichi cache)...")
            payload["first_call"] = first = first_call_latency(
                args.device,
                1 if args.quick else 2,
                log=log,
                timeout_s=max(30.0, min(120.0, deadline.left() - 60)),
            )
            wls, results, tables, plots = timing(device, args, deadline)
            payload["workloads"] = wls
            payload["tables"] = tables
            for w in wls:
                if str(w["status"]).startswith("FAIL"):
                    failures.append(f"timing {w['key']}: {w['status']}")
                elif w["status"] != "ok":
                    skipped.append(f"timing {w['key']} ({w['status']})")
            payload["targets"] = evaluate_targets(results, first["cold_first_call_median_s"])
            png = plot_workloads(plots, out_path.with_suffix(".png"), f"tipad on {device}")
            payload["plot"] = str(png) if png else None
        return 1 if failures else 0
    except Exception as exc:
        failures.append(f"crashed: {type(exc).__name__}: {exc}")
        payload["traceback"] = traceback.format_exc()
        traceback.print_exc()
        return 1
    finally:
        if runtime_sha() != payload["machine"]["runtime_py_sha256"]:
            failures.append("tipad_transforms' kernel sources changed during the run; run again")
        payload["failures"] = failures
        payload["skipped"] = skipped
        payload["verdict"] = "FAIL" if failures else "PASS"
        payload["wall_s"] = deadline.elapsed()
        write_json(out_path, payload)
        targets = payload.get("targets") or []
        if targets:
            print(f"\nTargets on {device}\n" + targets_table(targets))
        print(
            f"\n{'=' * 70}\nGPU CHECK {payload['verdict']} on {device} in "
            f"{payload['wall_s']:.0f} s -> {out_path}"
        )
        for f in failures:
            print(f"  FAIL: {f}")
        for s in skipped:
            print(f"  skipped: {s}")
        print("=" * 70, flush=True)


if __name__ == "__main__":
    sys.exit(main())
