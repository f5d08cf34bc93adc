"""The loop-order section of ``gpu_check.py``: simple and optimised GPU orders side by side.

``ORDER_SWITCHES`` lists ``(family, module, attribute)``: a module-level bool in the family's
``taichi.py``, True for the optimised GPU loop order, False for the simple one. For each switch,
the family's workloads (``WORKLOADS[family]``) are timed with the switch on and off in the same
process, rounds interleaved (``_common.measure``), and the two results must be bit-equal (the
orders do the same work). The switch is set around every call and restored after it, also when
a call raises. A switch whose module or attribute does not exist is skipped by name.

On a CPU (the dry run) the families take their CPU order; the section sets ``TAICHI.gpu_order``
to True while it runs (as the tests do) so that both GPU orders run through Taichi's CPU backend,
and restores it after.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from _common import Deadline, Peer, bits_equal, format_ms, measure

import tipad_transforms.functional as TF

#: (family, module, attribute): True = the optimised GPU order, False = the simple one.
ORDER_SWITCHES: list[tuple[str, str, str]] = [
    ("padding", "tipad_transforms.ops.padding.taichi", "GPU_ROW_BLOCKS"),
    ("rwkv7", "tipad_transforms.ops.rwkv7.taichi", "GPU_BLOCK_ORDER"),
    ("timex", "tipad_transforms.ops.timex.taichi", "GPU_TILES"),
]
#: Families whose two orders sum in other orders: their outputs agree to this relative
#: tolerance instead of bit for bit (padding moves bits: it must be exact).
TOLERANCE: dict[str, float] = {"rwkv7": 1e-5, "timex": 1e-5}


def _padding_workloads(
    device: torch.device, small: bool
) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """The padding benchmark batch: brick_pad (texture) and reflect, uint8."""
    shape = (2, 3, 19, 23) if small else (64, 3, 224, 224)
    gen = torch.Generator().manual_seed(4)
    x = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8).to(device)
    pad = 5 if small else 32
    return [
        (f"brick_pad {shape} uint8, pad {pad}", lambda: TF.brick_pad(x, pad)),
        (f"pad reflect {shape} uint8, pad {pad}", lambda: TF.pad(x, pad, padding_mode="reflect")),
    ]


def _rwkv7_workloads(
    device: torch.device, small: bool
) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """``ops.wkv7`` forward, float32, at the CPU benchmark's shape (a tiny one for the dry
    run): the block order against the thread-per-row one."""
    from rwkv_ops import wkv7_inputs

    from tipad_transforms.ops import wkv7

    b, t, h, n = (1, 9, 2, 16) if small else (4, 512, 8, 64)
    x = wkv7_inputs(b, t, h, n, seed=7)  # x070-like operands, the CPU benchmark's
    args = [x[name].to(device) for name in ("r", "w", "k", "v", "a", "b")]
    return [(f"wkv7 forward {(b, t, h, n)} float32", lambda: wkv7(*args)[0])]


def _timex_workloads(
    device: torch.device, small: bool
) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """``ops.time_conv`` forward, float32, at RWKV-CUDA's (B, C, T) = (32, 768, 768) with
    ``L == T`` (a tiny shape for the dry run): the tiled order against a thread per output."""
    from tipad_transforms.ops import time_conv

    b, c, t = (2, 3, 37) if small else (32, 768, 768)
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(c, t, generator=gen).to(device)
    k = torch.randn(b, c, t, generator=gen).to(device)
    return [(f"time_conv forward {(b, c, t)} L={t} float32", lambda: time_conv(w, k))]


#: family -> builder of ``(title, call)`` workloads; ``small`` for the dry run's sizes.
WORKLOADS: dict[str, Callable[[torch.device, bool], list[tuple[str, Callable[[], Any]]]]] = {
    "padding": _padding_workloads,
    "rwkv7": _rwkv7_workloads,
    "timex": _timex_workloads,
}


def _agree(family: str, a: torch.Tensor, b: torch.Tensor) -> bool:
    tol = TOLERANCE.get(family)
    if tol is None:
        return bits_equal(a, b)
    return a.shape == b.shape and torch.allclose(a, b, rtol=tol, atol=tol)


@contextlib.contextmanager
def switched(module: Any, attribute: str, value: bool) -> Iterator[None]:
    """``module.attribute = value`` inside the block, restored after it (also on error)."""
    old = getattr(module, attribute)
    setattr(module, attribute, value)
    try:
        yield
    finally:
        setattr(module, attribute, old)


def _under(module: Any, attribute: str, value: bool, fn: Callable[[], Any]) -> Callable[[], Any]:
    def call() -> Any:
        with switched(module, attribute, value):
            return fn()

    return call


@contextlib.contextmanager
def _gpu_order_on(device: torch.device) -> Iterator[None]:
    """On a CPU, make the families take their GPU order (restored after); on a GPU, nothing."""
    if device.type != "cpu":
        yield
        return
    from tipad_transforms.backends import TAICHI

    TF.pad(torch.zeros(1, 1, 2, 2), 1)  # initialise the runtime: it sets gpu_order from the arch
    old = TAICHI.gpu_order
    TAICHI.gpu_order = True
    try:
        yield
    finally:
        TAICHI.gpu_order = old


def run(
    device: torch.device,
    quick: bool,
    repeats: int,
    with_timing: bool,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """The whole section: ``{"ok", "status", "problems", "skipped", "timing"}``.

    Without timing each pair is still checked bit-equal once.
    """
    t0 = time.perf_counter()
    small = quick or device.type == "cpu"
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    problems: list[str] = []
    skipped: list[str] = []
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    with _gpu_order_on(device):
        for family, module_name, attribute in ORDER_SWITCHES:
            name = f"{family} {module_name}.{attribute}"
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                skipped.append(f"order switch {name}: module does not import ({exc})")
                continue
            if not isinstance(getattr(module, attribute, None), bool):
                skipped.append(f"order switch {name}: no such bool attribute")
                continue
            if family not in WORKLOADS:
                skipped.append(f"order switch {name}: no workload for family {family!r}")
                continue
            for title, fn in WORKLOADS[family](device, small):
                if deadline is not None and deadline.left() < 30:
                    skipped.append(f"order switch {name} {title}: time budget")
                    continue
                # One group (bit-checked by measure) where the orders must be exact, two
                # where they agree to a tolerance (checked here).
                other = "y" if family not in TOLERANCE else "y2"
                peers = [
                    Peer(
                        "optimised", f"{attribute}=True", _under(module, attribute, True, fn), "y"
                    ),
                    Peer(
                        "simple", f"{attribute}=False", _under(module, attribute, False, fn), other
                    ),
                ]
                try:
                    a, b = peers[0].fn(), peers[1].fn()
                    if not _agree(family, a, b):
                        problems.append(f"{name} {title}: the two orders differ")
                        continue
                    if not with_timing:
                        continue
                    ms = measure(
                        peers,
                        repeats=min(repeats, 7),
                        warmup=1,
                        min_sample_s=0.005 if device.type == "cuda" else 0.001,
                        sync=sync,
                    )
                except Exception as exc:
                    problems.append(f"{name} {title}: {type(exc).__name__}: {exc}")
                    continue
                opt, simple = ms[0].stats.median_s, ms[1].stats.median_s
                rows.append(
                    {
                        "family": family,
                        "switch": f"{module_name}.{attribute}",
                        "workload": title,
                        "peers": [m.to_json() for m in ms],
                        "simple_over_optimised": simple / opt,
                    }
                )
                lines.append(
                    f"  {family:8s} {title:40s} optimised {format_ms(opt):>9s}  "
                    f"simple {format_ms(simple):>9s}  {simple / opt:6.2f}x"
                )
    result: dict[str, Any] = {
        "ok": not problems,
        "status": "FAIL" if problems else "pass",
        "problems": problems,
        "skipped": skipped,
    }
    if with_timing:
        result["timing"] = {"workloads": rows, "table": "\n".join(lines)}
    result["wall_s"] = time.perf_counter() - t0
    return result
