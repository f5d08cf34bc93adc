"""The RWKV section of ``gpu_check.py``: ``ops.wkv``, ``ops.wkv7`` and ``ops.time_conv`` on a GPU.

Correctness: device results (float32, float16, bfloat16) and float32 gradients against float64
references computed on the CPU (``rwkv.wkv_torch``, the stable recurrence one token at a time,
and ``F.conv1d``), chunked WKV with the state equal to the whole run, ``k ~ U(-1000, 1000)``
finite, and both ops launched on a side stream right after the matmul that produces their input.
WKV-7 (CUDA only): values (float32, float16, bfloat16), the new state and the gradients of all
seven inputs against the float64 recurrence on the CPU, chunked equal to whole.
Timing: the article's sizes against the torch peers users run today (``benchmarks/rwkv_ops.py``);
WKV-7 at (4, 512, 8, 64) against the eager loop and, when flash-linear-attention is installed,
its ``fused_recurrent_rwkv7`` and ``chunk_rwkv7``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from _common import Deadline, Peer, format_ms, measure
from rwkv_ops import (
    _forward,
    _forward_backward,
    conv1d_peer,
    time_conv_flops,
    wkv7_inputs,
    wkv7_torch,
    wkv_inputs,
    wkv_torch,
)

import tipad_transforms.ops as tops


def _close(got: torch.Tensor, want: torch.Tensor, tol: float) -> bool:
    """Within ``tol`` of the reference's scale (float32 sums differ by order, not by value)."""
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    scale = want.abs().max().clamp(min=1.0)
    return bool(torch.isfinite(got).all()) and bool(((got - want).abs() <= tol * scale).all())


def check_wkv(device: torch.device, quick: bool) -> list[str]:
    problems: list[str] = []
    shapes = [(2, 37, 19)] if quick else [(2, 37, 19), (3, 300, 64), (1, 5, 1)]
    for b, t, c in shapes:
        x = wkv_inputs(b, t, c, seed=b * 1000 + t)
        cpu64 = [x[n].double() for n in ("time_decay", "time_first", "k", "v")]
        want = wkv_torch(*cpu64)
        for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 2e-2), (torch.bfloat16, 5e-2)):
            args = [a.to(device, dtype) for a in cpu64]
            got = tops.wkv(*args)
            assert isinstance(got, torch.Tensor)
            if got.dtype != dtype or not _close(got, want, tol):
                problems.append(f"wkv {(b, t, c)} {dtype} != float64 reference")
        # Gradients of all four inputs, float32 on the device vs float64 autograd on the CPU.
        leaves = [a.detach().to(device, torch.float32).requires_grad_() for a in cpu64]
        refs = [a.detach().clone().requires_grad_() for a in cpu64]
        up = x["grad"].double()
        got_g = torch.autograd.grad(tops.wkv(*leaves), leaves, up.to(device, torch.float32))
        want_g = torch.autograd.grad(wkv_torch(*refs), refs, up)
        for name, g, w in zip(("time_decay", "time_first", "k", "v"), got_g, want_g, strict=True):
            if not _close(g, w, 1e-3):
                problems.append(f"wkv {(b, t, c)} gradient of {name} != float64 reference")
        # Chunked with the state == whole (forward).
        args = [a.to(device, torch.float32) for a in cpu64]
        state = tops.init_wkv_state(b, c, device=device)
        cut = t // 3
        y1, state = tops.wkv(args[0], args[1], args[2][:, :cut], args[3][:, :cut], state)
        y2, _ = tops.wkv(args[0], args[1], args[2][:, cut:], args[3][:, cut:], state)
        if not _close(torch.cat([y1, y2], 1), want, 1e-4):
            problems.append(f"wkv {(b, t, c)} chunked with state != whole")
    x = wkv_inputs(2, 2048, 32, seed=5)
    k = (torch.rand(2, 2048, 32, generator=torch.Generator().manual_seed(5)) * 2000 - 1000).to(
        device
    )
    y = tops.wkv(x["time_decay"].to(device), x["time_first"].to(device), k, x["v"].to(device))
    assert isinstance(y, torch.Tensor)
    if not bool(torch.isfinite(y).all()):
        problems.append("wkv with k ~ U(-1000, 1000) is not finite")
    return problems


def check_wkv7(device: torch.device, quick: bool) -> list[str]:
    """``ops.wkv7`` on ``device`` against the float64 recurrence on the CPU."""
    problems: list[str] = []
    shapes = (
        [(2, 37, 2, 16)]
        if quick or device.type != "cuda"
        else [(2, 37, 2, 16), (2, 300, 4, 64), (1, 5, 3, 7)]
    )
    names = ("r", "w", "k", "v", "a", "b")
    for shape in shapes:
        b, t, h, n = shape
        x = wkv7_inputs(*shape, seed=b * 1000 + t)
        cpu64 = [x[name].double() for name in names]
        gen = torch.Generator().manual_seed(t)
        s64 = torch.randn(b, h, n, n, generator=gen, dtype=torch.float64)
        refs = [a.clone().requires_grad_() for a in (*cpu64, s64)]
        want, want_s = _wkv7_reference(*refs)
        for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 2e-2), (torch.bfloat16, 5e-2)):
            got, got_s = tops.wkv7(*(a.to(device, dtype) for a in cpu64),
                                   s64.to(device, torch.float32))  # fmt: skip
            if got.dtype != dtype or not _close(got, want, tol) or not _close(got_s, want_s, tol):
                problems.append(f"wkv7 {shape} {dtype} != float64 reference")
        up, up_s = torch.randn_like(want), torch.randn_like(want_s)
        want_g = torch.autograd.grad((want * up).sum() + (want_s * up_s).sum(), refs)
        leaves = [a.detach().to(device, torch.float32).requires_grad_() for a in refs]
        got, got_s = tops.wkv7(*leaves)
        loss = (got * up.to(device).float()).sum() + (got_s * up_s.to(device).float()).sum()
        got_g = torch.autograd.grad(loss, leaves)
        for name, g, w in zip((*names, "state"), got_g, want_g, strict=True):
            if not _close(g, w, 1e-3):
                problems.append(f"wkv7 {shape} gradient of {name} != float64 reference")
        cut = t // 3
        args = [a.detach().to(device, torch.float32) for a in cpu64]
        y1, s1 = tops.wkv7(*(a[:, :cut] for a in args), s64.to(device, torch.float32))
        y2, s2 = tops.wkv7(*(a[:, cut:] for a in args), s1)
        if not _close(torch.cat([y1, y2], 1), want, 1e-4) or not _close(s2, want_s, 1e-4):
            problems.append(f"wkv7 {shape} chunked with state != whole")
    return problems


def _wkv7_reference(*args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence one token at a time from the state ``args[6]``: ``(y, final state)``."""
    r, w, k, v, a, b, s = args
    d = torch.exp(w)
    ys = []
    for t in range(r.shape[1]):
        sa = s @ a[:, t].unsqueeze(-1)
        s = s * d[:, t].unsqueeze(-2) + sa @ b[:, t].unsqueeze(-2)
        s = s + v[:, t].unsqueeze(-1) @ k[:, t].unsqueeze(-2)
        ys.append((s @ r[:, t].unsqueeze(-1)).squeeze(-1))
    return torch.stack(ys, 1), s


def _fla_peers() -> tuple[list[tuple[str, Any, bool]], str | None]:
    """flash-linear-attention's RWKV-7 ops on our conventions: ``([(label, fn, has_backward)],
    why none)``; ``fused_recurrent_rwkv7`` has no backward, so it is timed forward only."""
    try:
        from fla.ops.rwkv7 import chunk_rwkv7, fused_recurrent_rwkv7
    except ImportError as exc:
        return [], f"flash-linear-attention does not import ({exc})"

    def wrap(fn: Any) -> Any:
        # fla: (B, T, H, N) tensors, w the log decay, the same S[value, key] state.
        def run(r: Any, w: Any, k: Any, v: Any, a: Any, b: Any) -> torch.Tensor:
            return fn(r, w, k, v, a, b, scale=1.0)[0]

        return run

    return [("fla chunk_rwkv7", wrap(chunk_rwkv7), True),
            ("fla fused_recurrent_rwkv7", wrap(fused_recurrent_rwkv7), False)], None  # fmt: skip


def check_time_conv(device: torch.device) -> list[str]:
    problems: list[str] = []
    gen = torch.Generator().manual_seed(2)
    for b, c, t, length in ((3, 5, 37, 37), (2, 7, 50, 9), (1, 3, 8, 20)):
        w = torch.randn(c, length, generator=gen, dtype=torch.float64)
        k = torch.randn(b, c, t, generator=gen, dtype=torch.float64)
        up = torch.randn(b, c, t, generator=gen, dtype=torch.float64)
        refs = [w.clone().requires_grad_(), k.clone().requires_grad_()]
        want = conv1d_peer(*refs)
        want_g = torch.autograd.grad(want, refs, up)
        leaves = [a.to(device, torch.float32).requires_grad_() for a in (w, k)]
        got = tops.time_conv(*leaves)
        if not _close(got, want, 1e-5):
            problems.append(f"time_conv {(b, c, t, length)} != float64 conv1d")
        got_g = torch.autograd.grad(got, leaves, up.to(device, torch.float32))
        for name, g, r in zip(("w", "k"), got_g, want_g, strict=True):
            if not _close(g, r, 1e-5):
                problems.append(f"time_conv {(b, c, t, length)} gradient of {name} != conv1d")
    return problems


def check_side_stream(device: torch.device) -> list[str]:
    """Both ops on a side stream, right after a matmul on that stream makes their input."""
    if device.type != "cuda":
        return []
    problems: list[str] = []
    a = torch.randn(8192, 8192, device=device)
    s = torch.cuda.Stream(device)
    x = wkv_inputs(4, 64, 128, seed=9)
    td, tf = x["time_decay"].to(device), x["time_first"].to(device)
    for i in range(3):
        with torch.cuda.stream(s):
            big = a @ a
            k = big[:256, :128].reshape(4, 64, 128) * (1e-3 * (i + 1))
            y = tops.wkv(td, tf, k, k)
            kc = k.transpose(1, 2).contiguous()
            conv = tops.time_conv(k[0, :, :64].T.contiguous(), kc)
            y_seen, conv_seen = y.clone(), conv.clone()
        s.synchronize()
        k64 = k.double().cpu()
        if not _close(y_seen, wkv_torch(td.double().cpu(), tf.double().cpu(), k64, k64), 1e-4):
            problems.append(f"round {i}: wkv on a side stream != reference")
        w64 = k64[0, :, :64].T
        if not _close(conv_seen, conv1d_peer(w64, k64.transpose(1, 2)), 1e-4):
            problems.append(f"round {i}: time_conv on a side stream != reference")
    return problems


#: (B, T, H, N) of the RWKV-7 anchors: fla's benchmark shape, and wind_rwkv's published H100 table
#: (fwd+bwd at C = H * N = 4096, T = 4096, B = 8, N = 64), which is the same shape.
WKV7_ANCHOR_SHAPE = (8, 4096, 64, 64)
#: Seconds the anchor workloads need (inputs, fla's Triton compiles, rounds) before they start.
WKV7_ANCHOR_BUDGET_S = 90.0
#: The tiny stand-in of the anchor workloads (same code path) for quick runs and the dry run.
WKV7_ANCHOR_SMALL = (1, 16, 2, 8)


def _wkv7_anchor_work(
    device: torch.device, shape: tuple[int, int, int, int], skipped: list[str], notes: list[str]
) -> list[tuple[str, list[Peer], int | None]]:
    """``wkv7`` against fla's ops at ``shape`` in bfloat16 (as wind_rwkv's table), fwd and
    fwd+bwd; fla's ops need CUDA (Triton). Without them, the tiny stand-in times tipad against
    the eager loop so that the path still runs; the real shape is never timed without fla."""
    fla, why = _fla_peers()
    if device.type != "cuda":
        why = why or "fla's Triton kernels need CUDA"
    if why:
        skipped.append(f"wkv7 {WKV7_ANCHOR_SHAPE} vs fla chunk_rwkv7/fused_recurrent_rwkv7: {why}")
        fla = []
        if shape != WKV7_ANCHOR_SMALL:
            return []
    gen = torch.Generator(device).manual_seed(3)
    b, t, h, n = shape
    dt = torch.bfloat16

    def randn() -> torch.Tensor:
        return torch.randn(b, t, h, n, generator=gen, device=device)

    # The operands of rwkv_ops.wkv7_inputs, drawn on the device (GBs at the anchor shape).
    kk = torch.nn.functional.normalize(randn(), dim=-1)
    iclr = torch.rand(b, t, h, n, generator=gen, device=device)
    w = -torch.exp(torch.tensor(-0.5)) * torch.sigmoid(randn())
    xs = [a.to(dt) for a in (randn(), w, randn(), randn(), -kk, kk * iclr)]
    grad = randn().to(dt)
    del kk, iclr, w
    others: dict[str, list[tuple[str, Any]]] = {"fwd": [], "fwd+bwd": []}
    for label, fn, has_backward in fla:
        others["fwd"].append((label, fn))
        if has_backward:
            others["fwd+bwd"].append((label, fn))
        else:
            skipped.append(f"wkv7 vs {label} fwd+bwd: {label} has no backward")
    if not fla:
        others = {kind: [("torch eager loop", wkv7_torch)] for kind in others}
    # The peers' values against tipad's (bf16 sums in different orders: a scale, not a verdict).
    with torch.no_grad():
        y = tops.wkv7(*xs).float()
        for label, fn in others["fwd"]:
            err = float((fn(*xs).float() - y).abs().max() / y.abs().max().clamp(min=1e-30))
            notes.append(f"wkv7 {shape} bf16 fwd: max |{label} - tipad| / max |tipad| = {err:.3g}")
        del y
    work: list[tuple[str, list[Peer], int | None]] = []
    for kind, make in (("fwd", lambda f: _forward(f, xs)),
                       ("fwd+bwd", lambda f: _forward_backward(f, xs, grad))):  # fmt: skip
        peers = [Peer("tipad", "tipad wkv7", make(tops.wkv7), "tipad")]
        peers += [Peer(lbl, lbl, make(fn), lbl) for lbl, fn in others[kind]]
        work.append((f"wkv7 {shape} bf16 {kind}", peers, None))
    return work


def timing(
    device: torch.device,
    quick: bool,
    repeats: int,
    deadline: Deadline | None = None,
    skipped: list[str] | None = None,
) -> dict[str, Any]:
    """Every workload: tipad first, each other peer's median over tipad's (``ratios``)."""
    skipped = [] if skipped is None else skipped
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    notes: list[str] = []
    small = quick or device.type == "cpu"
    conv_shape = (4, 64, 128) if small else (32, 768, 768)  # RWKV-CUDA timex's (B, C, T)
    wkv_shapes = [(2, 64, 64)] if small else [(8, 512, 512), (1, 4096, 768)]
    # fmt: off
    work: list[tuple[str, list[Peer], int | None]] = []

    def pair(title: str, fns: tuple[Any, Any], labels: tuple[str, str], args: list[Any],
             grad: torch.Tensor, flops: int | None) -> None:
        # The same op forward, then forward+backward (3x the forward's FLOPs).
        for kind, make in (("fwd", lambda f: _forward(f, args)),
                           ("fwd+bwd", lambda f: _forward_backward(f, args, grad))):
            peers = [Peer(key, label, make(fn), key)
                     for key, label, fn in zip(("tipad", "torch"), labels, fns, strict=True)]
            n = None if flops is None else flops * (1 if kind == "fwd" else 3)
            work.append((f"{title} {kind}", peers, n))

    b, c, t = conv_shape
    w = (torch.randn(c, t, generator=gen) / t**0.5).to(device)
    k = torch.randn(b, c, t, generator=gen).to(device)
    up = torch.randn(b, c, t, generator=gen).to(device)
    pair(f"time_conv {conv_shape}", (tops.time_conv, conv1d_peer),
         ("tipad time_conv", "F.conv1d(groups=C)"), [w, k], up, time_conv_flops(b, c, t, t))
    for shape in wkv_shapes:
        x = {n: v.to(device) for n, v in wkv_inputs(*shape, seed=1).items()}
        xs = [x[n] for n in ("time_decay", "time_first", "k", "v")]
        pair(f"wkv {shape}", (tops.wkv, wkv_torch), ("tipad wkv", "torch eager loop"), xs,
             x["grad"], None)
    shape7 = (1, 16, 2, 8) if small else (4, 512, 8, 64)
    x = {n: v.to(device) for n, v in wkv7_inputs(*shape7, seed=2).items()}
    xs = [x[n] for n in ("r", "w", "k", "v", "a", "b")]
    pair(f"wkv7 {shape7}", (tops.wkv7, wkv7_torch), ("tipad wkv7", "torch eager loop"), xs,
         x["grad"], None)
    # fmt: on
    for title, peers, n_flops in work:
        # The eager WKV loop launches ~10 kernels per token: at T = 4096 one fwd+bwd takes
        # seconds on a GPU, so few rounds keep the section inside gpu_check's budget.
        if deadline is not None and deadline.left() < 30:
            skipped.append(f"rwkv timing {title}: time budget")
            continue
        rows_lines = _time(title, peers, n_flops, min(repeats, 5), sync)
        rows.append(rows_lines[0])
        lines.append(rows_lines[1])
    anchor = WKV7_ANCHOR_SMALL if small else WKV7_ANCHOR_SHAPE
    if deadline is not None and deadline.left() < WKV7_ANCHOR_BUDGET_S and not small:
        skipped.append(f"wkv7 {anchor} vs fla: time budget ({deadline.left():.0f} s left)")
    else:
        for title, peers, n_flops in _wkv7_anchor_work(device, anchor, skipped, notes):
            rows_lines = _time(title, peers, n_flops, min(repeats, 5), sync)
            rows.append(rows_lines[0])
            lines.append(rows_lines[1])
    return {"workloads": rows, "anchor_checks": notes, "table": "\n".join(lines + notes)}


def _time(
    title: str, peers: list[Peer], n_flops: int | None, rounds: int, sync: Any
) -> tuple[dict[str, Any], str]:
    """One workload timed: its JSON row and its printed line."""
    ms = measure(peers, repeats=rounds, warmup=1, min_sample_s=0.005, sync=sync)
    tipad_s = ms[0].stats.median_s
    ratios = {m.peer.label: m.stats.median_s / tipad_s for m in ms[1:]}
    row: dict[str, Any] = {
        "workload": title,
        "peers": [m.to_json() for m in ms],
        "ratios_over_tipad": ratios,
    }
    if len(ms) > 1:
        row["speedup_vs_torch"] = ms[1].stats.median_s / tipad_s
    if n_flops is not None:
        row["tipad_gflops"] = n_flops / tipad_s / 1e9
    line = f"  {title:34s} tipad {format_ms(tipad_s):>9s}" + "".join(
        f"  {m.peer.label} {format_ms(m.stats.median_s):>9s} ({ratios[m.peer.label]:.2f}x)"
        for m in ms[1:]
    )
    if n_flops is not None:
        line += f"  {row['tipad_gflops']:.0f} GFLOP/s"
    return row, line


def run(
    device: torch.device,
    quick: bool,
    repeats: int,
    with_timing: bool,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """The whole section: ``{"ok", "status", "problems", "skipped", "timing"}``."""
    t0 = time.perf_counter()
    skipped: list[str] = []
    problems = check_wkv(device, quick) + check_wkv7(device, quick) + check_time_conv(device)
    if device.type == "cuda":
        problems += check_side_stream(device)
    else:
        skipped.append("rwkv side-stream ordering (wkv, time_conv): needs CUDA")
    result: dict[str, Any] = {
        "ok": not problems,
        "status": "FAIL" if problems else "pass",
        "problems": problems,
        "skipped": skipped,
    }
    if with_timing:
        result["timing"] = timing(device, quick, repeats, deadline, skipped)
    result["wall_s"] = time.perf_counter() - t0
    return result
