"""The data-loading section of ``gpu_check.py``: pad_stack, GPUCollate and DeviceLoader on a GPU.

Correctness (bit exact against the spec's oracle ``peers.reference_pad`` applied to each sample
on the CPU, at the placement the batch reports): ``functional.pad_stack`` in every mode on
variable-size images, ``GPUCollate`` against ``PadCollate`` on the CPU replaying the same draw,
and ``DeviceLoader`` with a consumer on a side stream that is busy when each batch arrives.
Timing: one ``pad_stack`` launch against torchvision's per-sample ``pad`` plus ``torch.stack``
on the same device, for a 64-image batch of random sizes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
from _common import Deadline, Peer, bits_equal, format_ms, measure
from peers import reference_pad
from torchvision.transforms.v2 import functional as tvF

import tipad_transforms.functional as TF
from tipad_transforms.data import DeviceLoader, GPUCollate, PadCollate

MODES = ["texture", "constant", "edge", "reflect", "symmetric", "circular"]


def _images(
    n: int, lo: int, hi: int, dtype: torch.dtype, gen: torch.Generator
) -> list[torch.Tensor]:
    sizes = torch.randint(lo, hi + 1, (n, 2), generator=gen).tolist()
    out = []
    for h, w in sizes:
        x = torch.randint(0, 256, (3, h, w), generator=gen, dtype=torch.uint8)
        out.append(x if dtype == torch.uint8 else (x.to(dtype) / 255).to(dtype))
    return out


def _expected(
    images: list[torch.Tensor], size: tuple[int, int], where: torch.Tensor, mode: str, **kw: Any
) -> torch.Tensor:
    """Each image padded by the oracle at its own placement, stacked (CPU)."""
    canvases = []
    for i, x in enumerate(images):
        top, left = (int(v) for v in where[i])
        pads = (left, top, size[1] - left - x.shape[-1], size[0] - top - x.shape[-2])
        per = {k: (v[i : i + 1] if k in ("offset", "texture_index") else v) for k, v in kw.items()}
        canvases.append(reference_pad(x[None], pads, mode, **per)[0])
    return torch.stack(canvases)


def check_pad_stack(device: torch.device, quick: bool) -> list[str]:
    problems: list[str] = []
    gen = torch.Generator().manual_seed(7)
    dtypes = [torch.uint8, torch.float32] if quick else [torch.uint8, torch.float32, torch.bfloat16]
    for dtype in dtypes:
        for mode in MODES:
            images = _images(9, 3, 40, dtype, gen)
            size = (48, 52)
            where = torch.tensor(
                [
                    [
                        int(torch.randint(0, size[0] - x.shape[-2] + 1, (), generator=gen)),
                        int(torch.randint(0, size[1] - x.shape[-1] + 1, (), generator=gen)),
                    ]
                    for x in images
                ]
            )
            kw: dict[str, Any] = {}
            call: dict[str, Any] = {}
            if mode == "texture":
                bank = torch.rand(2, 3, 7, 11, generator=gen).to(dtype)
                offset = torch.randint(-50, 50, (len(images), 2), generator=gen)
                index = torch.randint(0, 2, (len(images),), generator=gen)
                kw = {"bank": bank, "offset": offset, "texture_index": index, "stagger": 5}
                call = {"texture": bank.to(device), "offset": offset.to(device), "stagger": 5}
                call["texture_index"] = index.to(device)
            elif mode == "constant":
                values = [0.25, 0.5, 1.0] if dtype.is_floating_point else [1, 2, 3]
                kw = {"fill": torch.tensor(values).to(dtype)}
                call = {"fill": values}
            got = TF.pad_stack(
                [x.to(device) for x in images], size, where.to(device), **call, padding_mode=mode
            )
            want = _expected(images, size, where, mode, **kw)
            if not bits_equal(got.cpu(), want):
                problems.append(f"pad_stack {mode} {dtype} != oracle")
    # Gradients: float32 on the device against float64 autograd of the oracle.
    images = _images(5, 4, 20, torch.float32, gen)
    where = torch.tensor([[1, 2]] * len(images))
    xs = [x.to(device).requires_grad_() for x in images]
    out = TF.pad_stack(xs, (24, 24), where.to(device), padding_mode="reflect")
    up = torch.rand(out.shape, generator=gen)
    (out * up.to(device)).sum().backward()
    refs = [x.double().requires_grad_() for x in images]
    want = _expected(refs, (24, 24), where, "reflect")
    grads = torch.autograd.grad(want, refs, up.double())
    for i, (x, g) in enumerate(zip(xs, grads, strict=True)):
        assert x.grad is not None
        if not torch.allclose(x.grad.cpu().double(), g, rtol=1e-5, atol=1e-5):
            problems.append(f"pad_stack reflect gradient of image {i} != oracle")
    return problems


def check_collate_and_loader(device: torch.device) -> list[str]:
    problems: list[str] = []
    gen = torch.Generator().manual_seed(3)
    samples = [(x, i) for i, x in enumerate(_images(12, 10, 60, torch.uint8, gen))]
    cpu = PadCollate(placement="random", multiple=8, return_regions=True)
    params = cpu.make_params([tuple(x.shape[-2:]) for x, _ in samples])
    want = cpu(samples, params=params)
    if device.type == "cuda":
        got = GPUCollate(device, placement="random", multiple=8, return_regions=True)(
            samples, params=params
        )
        for g, w in zip(got, want, strict=True):
            if isinstance(w, torch.Tensor) and not bits_equal(g.cpu(), w):
                problems.append("GPUCollate != PadCollate on the CPU with the same draw")
    # DeviceLoader: each batch arrives while the consumer's stream is busy with a matmul; the
    # batch transform (a replayable brick_pad) must see the copied batch, not stale memory.
    batches = [samples[i : i + 4] for i in range(0, len(samples), 4)]
    collate = PadCollate(
        random_offset=False, return_regions=True
    )  # deterministic: the check recomputes it
    brick: Callable[[torch.Tensor], torch.Tensor] = functools.partial(TF.brick_pad, padding=6)
    loader = DeviceLoader([collate(b) for b in batches], device, transforms=brick)
    side = torch.cuda.Stream(device) if device.type == "cuda" else None
    a = torch.randn(4096, 4096, device=device) if side is not None else None
    seen = []
    for batch in loader:
        if side is not None and a is not None:
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                _ = a @ a
                seen.append([t.clone() if isinstance(t, torch.Tensor) else t for t in batch])
        else:
            seen.append(list(batch))
    if side is not None:
        side.synchronize()
    for k, (b, got_b) in enumerate(zip(batches, seen, strict=True)):
        images, labels, regions = collate(b)
        if not bits_equal(got_b[0].cpu(), TF.brick_pad(images, 6)):
            problems.append(f"DeviceLoader batch {k}: images != CPU collate + brick_pad")
        if not torch.equal(got_b[1].cpu(), labels) or not torch.equal(got_b[2].cpu(), regions):
            problems.append(f"DeviceLoader batch {k}: labels or regions differ")
    return problems


def timing(device: torch.device, repeats: int) -> dict[str, Any]:
    """64 random-size uint8 images (150-224 px) onto 224x224: one launch vs per-sample pad."""
    gen = torch.Generator().manual_seed(11)
    images = [x.to(device) for x in _images(64, 150, 224, torch.uint8, gen)]
    where = torch.tensor([[(224 - x.shape[-2]) // 2, (224 - x.shape[-1]) // 2] for x in images])
    where_d = where.to(device)
    pads = [
        [left, top, 224 - left - x.shape[-1], 224 - top - x.shape[-2]]
        for (top, left), x in zip(where.tolist(), images, strict=True)
    ]

    def tv(mode: str) -> Callable[[], torch.Tensor]:
        return lambda: torch.stack(
            [tvF.pad(x, p, padding_mode=mode) for x, p in zip(images, pads, strict=True)]
        )

    def tipad(mode: str) -> Callable[[], torch.Tensor]:
        return lambda: TF.pad_stack(images, (224, 224), where_d, padding_mode=mode)

    peers = [
        Peer("stack-reflect", "tipad pad_stack reflect", tipad("reflect"), "reflect"),
        Peer("tv-reflect", "v2 pad reflect + stack", tv("reflect"), "reflect"),
        Peer("stack-constant", "tipad pad_stack constant", tipad("constant"), "constant"),
        Peer("tv-constant", "v2 pad constant + stack", tv("constant"), "constant"),
    ]
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    ms = measure(peers, repeats=repeats, warmup=1, min_sample_s=0.005, sync=sync)
    med = {m.peer.key: m.stats.median_s for m in ms}
    rows = [
        {**m.to_json(), "ratio_to_torchvision": m.stats.median_s / med["tv-" + m.peer.group]}
        for m in ms
    ]
    table = "\n".join(
        f"  {m.peer.label:28s} {format_ms(m.stats.median_s):>10s}  "
        f"{m.stats.median_s / med['tv-' + m.peer.group]:.2f}x v2"
        for m in ms
    )
    return {"peers": rows, "table": table, "wall_s": time.perf_counter() - t0}


def run(
    device: torch.device,
    quick: bool,
    repeats: int,
    with_timing: bool,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """The whole section: ``{"ok", "status", "problems", "skipped", "timing"}``."""
    t0 = time.perf_counter()
    problems = check_pad_stack(device, quick) + check_collate_and_loader(device)
    skipped = []
    if device.type != "cuda":
        skipped = ["GPUCollate vs PadCollate: needs CUDA",
                   "DeviceLoader with a busy side-stream consumer: needs CUDA"]  # fmt: skip
    result: dict[str, Any] = {
        "ok": not problems,
        "status": "FAIL" if problems else "pass",
        "problems": problems,
        "skipped": skipped,
    }
    if with_timing:
        result["timing"] = timing(device, repeats)
    result["wall_s"] = time.perf_counter() - t0
    return result


# --------------------------------------------------------------------------------------------
# Padding against the GPU libraries users run today (the "pad_peers" section)

#: tipad mode -> (Kornia PadTo's pad_mode, CV-CUDA's Border name); None where it has none.
PEER_MODES: dict[str, tuple[str | None, str]] = {
    "constant": ("constant", "CONSTANT"),
    "edge": ("replicate", "REPLICATE"),
    "symmetric": (None, "REFLECT"),  # OpenCV's REFLECT repeats the edge pixel: numpy symmetric
    "circular": (None, "WRAP"),
}


def _kornia_peers(
    x: torch.Tensor, size: tuple[int, int], skipped: list[str]
) -> dict[str, Callable[[], torch.Tensor]]:
    """Kornia's pad (``kornia.augmentation.PadTo``: bottom/right to one size; Kornia has no
    general per-side pad, ``kornia.geometry`` none at all), one callable per tipad mode."""
    try:
        from kornia.augmentation import PadTo
    except ImportError as exc:
        skipped.append(f"Kornia PadTo: kornia does not import ({exc})")
        return {}
    out: dict[str, Callable[[], torch.Tensor]] = {}
    for mode, (kmode, _) in PEER_MODES.items():
        if kmode is None:
            continue
        aug = PadTo(size, pad_mode=kmode, pad_value=0.0)
        out[mode] = functools.partial(aug, x)
    return out


def _cvcuda_peers(
    images: list[torch.Tensor], where: torch.Tensor, size: tuple[int, int], skipped: list[str]
) -> dict[str, Callable[[], torch.Tensor]]:
    """CV-CUDA's ``copymakeborderstack``: variable-size HWC images into one padded NCHW batch
    (returned as a torch view of CV-CUDA's NHWC output, permuted), one callable per mode."""
    if images[0].device.type != "cuda":
        skipped.append("CV-CUDA copymakeborderstack: needs CUDA")
        return {}
    try:
        import cvcuda
    except ImportError as exc:
        skipped.append(f"CV-CUDA copymakeborderstack: cvcuda does not import ({exc})")
        return {}
    try:
        nvcv: Any = cvcuda if hasattr(cvcuda, "ImageBatchVarShape") else __import__("nvcv")
        batch = nvcv.ImageBatchVarShape(len(images))
        hwc = [x.permute(1, 2, 0).contiguous() for x in images]
        for x in hwc:
            batch.pushback(nvcv.as_image(x))
        # CV-CUDA wraps torch's memory without owning it: every source tensor is kept alive.
        corners = [where[:, i].to(torch.int32).reshape(1, -1, 1, 1).cuda() for i in (0, 1)]
        top, left = (nvcv.as_tensor(c, "NHWC") for c in corners)
        keep = (hwc, corners)
    except Exception as exc:  # its API is not ours: a mismatch is reported, not fatal
        skipped.append(f"CV-CUDA copymakeborderstack: setup raised {type(exc).__name__}: {exc}")
        return {}

    def call(border: Any) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            assert keep
            out = cvcuda.copymakeborderstack(
                batch, top=top, left=left, out_height=size[0], out_width=size[1],
                border_mode=border, border_value=[0.0],
            )  # fmt: skip
            return torch.as_tensor(out.cuda(), device=images[0].device).permute(0, 3, 1, 2)

        return run

    peers: dict[str, Callable[[], torch.Tensor]] = {}
    for mode, (_, border) in PEER_MODES.items():
        fn = call(getattr(cvcuda.Border, border))
        try:
            fn()
        except Exception as exc:
            skipped.append(
                f"CV-CUDA copymakeborderstack {border}: raised {type(exc).__name__}: {exc}"
            )
            continue
        peers[mode] = fn
    return peers


def _equal_or_skip(
    label: str, fn: Callable[[], torch.Tensor], want: torch.Tensor, skipped: list[str]
) -> bool:
    """A peer is timed only where it computes tipad's canvas; otherwise it is named as skipped."""
    got = fn()
    if got.is_cuda:  # CV-CUDA launches on its own stream
        torch.cuda.synchronize(got.device)
    if got.shape == want.shape and bits_equal(got.contiguous(), want):
        return True
    skipped.append(f"{label}: its canvas differs from tipad's, not timed")
    return False


def peer_timing(
    device: torch.device, small: bool, repeats: int, skipped: list[str]
) -> dict[str, Any]:
    """A uniform float32 batch padded bottom/right (tipad pad, F.pad, v2, Kornia PadTo), and
    variable-size uint8 images into one batch (tipad pad_stack, CV-CUDA copymakeborderstack),
    in constant/edge/symmetric/circular; each peer bit-equal to tipad before it is timed."""
    gen = torch.Generator().manual_seed(13)
    n, side = (3, 12) if small else (64, 224)
    pad = 5 if small else 32
    x = torch.rand(n, 3, side, side, generator=gen).to(device)
    size = (side + pad, side + pad)
    kornia = _kornia_peers(x, size, skipped)
    images = [im.to(device) for im in _images(n, side // 2, side, torch.uint8, gen)]
    where = torch.tensor(
        [[(size[0] - im.shape[-2]) // 2, (size[1] - im.shape[-1]) // 2] for im in images]
    )
    where_d = where.to(device)
    cv = _cvcuda_peers(images, where, size, skipped)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    fpad = {"constant": "constant", "edge": "replicate", "symmetric": None, "circular": "circular"}
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    for mode in PEER_MODES:
        sides = [0, 0, pad, pad]  # left, top, right, bottom

        def tp(m: str = mode, sides: list[int] = sides) -> torch.Tensor:
            return TF.pad(x, sides, padding_mode=m)

        def ps(m: str = mode) -> torch.Tensor:
            return TF.pad_stack(images, size, where_d, padding_mode=m)

        uniform = [Peer(f"tipad-{mode}", f"tipad pad {mode}", tp, "uniform")]
        if mode != "circular":  # v2 has no circular mode
            uniform.append(Peer(f"v2-{mode}", f"v2.pad {mode}", functools.partial(
                tvF.pad, x, sides, padding_mode=mode), "uniform"))  # fmt: skip
        fmode = fpad[mode]
        if fmode is not None:
            uniform.append(Peer(f"fpad-{mode}", f"F.pad {fmode}", functools.partial(
                torch.nn.functional.pad, x, (0, pad, 0, pad), mode=fmode), "uniform"))  # fmt: skip
        want = tp()
        if mode in kornia and _equal_or_skip(f"Kornia PadTo {mode}", kornia[mode], want, skipped):
            uniform.append(Peer(f"kornia-{mode}", f"Kornia PadTo {mode}", kornia[mode], "uniform"))
        stack = [Peer(f"stack-{mode}", f"tipad pad_stack {mode}", ps, "stack")]
        label = f"CV-CUDA copymakeborderstack {PEER_MODES[mode][1]}"
        if mode in cv and _equal_or_skip(label, cv[mode], ps(), skipped):
            stack.append(Peer(f"cvcuda-{mode}", label, cv[mode], "stack"))
        for title, peers in ((f"pad {mode} {tuple(x.shape)} float32 +{pad} bottom/right", uniform),
                             (f"pad_stack {mode} {n} uint8 images -> {size}", stack)):  # fmt: skip
            ms = measure(peers, repeats=repeats, warmup=1, min_sample_s=0.005, sync=sync)
            base = ms[0].stats.median_s
            ratios = [{**m.to_json(), "ratio_to_tipad": m.stats.median_s / base} for m in ms]
            rows.append({"workload": title, "peers": ratios})
            lines.append(f"  {title}: " + ", ".join(
                f"{m.peer.label} {format_ms(m.stats.median_s)}" for m in ms))  # fmt: skip
    return {"workloads": rows, "table": "\n".join(lines)}


def peers_run(
    device: torch.device,
    quick: bool,
    repeats: int,
    with_timing: bool,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """The "pad_peers" section: ``{"ok", "status", "problems", "skipped", "timing"}``."""
    t0 = time.perf_counter()
    skipped: list[str] = []
    if not with_timing:
        return {"ok": True, "status": "skipped: --no-timing", "problems": [], "skipped": []}
    if deadline is not None and deadline.left() < 40:
        return {"ok": True, "status": "skipped: time budget", "problems": [], "skipped": []}
    small = quick or device.type == "cpu"
    try:
        timing_ = peer_timing(device, small, min(repeats, 7), skipped)
        problems: list[str] = []
    except Exception as exc:  # tipad against F.pad / v2 / pad_stack's own canvas: a real failure
        timing_, problems = {"workloads": [], "table": ""}, [f"{type(exc).__name__}: {exc}"]
    return {
        "ok": not problems,
        "status": "FAIL" if problems else "pass",
        "problems": problems,
        "skipped": skipped,
        "timing": timing_,
        "wall_s": time.perf_counter() - t0,
    }
