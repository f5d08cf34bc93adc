"""The Taichi backend: threads, forked DataLoader workers, refusals and the torch backend that
serves them, quiet lazy import, a Taichi the user started."""

from __future__ import annotations

import json
import os
import textwrap
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
from reference import (
    STANDARD_MODES,
    assert_bitwise_equal,
    pad_ref,
    random_image,
    run_child,
    texture_pad_ref,
)

import tipad_transforms.functional as F
import tipad_transforms.ops  # noqa: F401  (registers torch.ops.tipad)
from tipad_transforms import ops
from tipad_transforms.backends import TAICHI
from tipad_transforms.ops.padding import PadCall, PadGeometry
from tipad_transforms.ops.padding import reference as pad_reference

MODES = (*STANDARD_MODES, "texture")


def _torch_pad(g: PadGeometry, mode: str, x: torch.Tensor, **kw: Any) -> torch.Tensor:
    """The torch backend's padding of ``x`` into a fresh canvas."""
    canvas = x.new_empty(g.n, g.c, g.out_h, g.out_w)
    pad_reference.forward(PadCall(g, mode, kw["fill"], kw["texture"], kw["offset"],
                                  kw["texture_index"], kw["stagger"]), x, canvas)  # fmt: skip
    return canvas


# ---------------------------------------------------------------------------------------------
# spreading few heavy tasks over Taichi's CPU threads


@pytest.mark.parametrize("need", [0, 1, 1024, 1000])
def test_spread_gives_few_tasks_enough_iterations_and_many_tasks_one(
    need: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tipad_transforms.backends.taichi import spread

    monkeypatch.setattr(TAICHI, "cpu_iterations", need)
    for tasks in (1, 3, 7, 511, 512, 999, 1000, 1024, 5000):
        got = spread(tasks)
        assert got >= 1 and spread(tasks, serial=True) == 1
        if tasks >= need:
            assert got == 1, (tasks, need)
        else:  # the fewest iterations per task that reach every thread's run
            assert tasks * got >= need > tasks * (got - 1), (tasks, need, got)
    assert spread(0) == 1


# ---------------------------------------------------------------------------------------------
# threads


def _job(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = (torch.uint8, torch.float32, torch.int16, torch.float64)[i % 4]
    mode = MODES[i % len(MODES)]
    x = random_image((2, 3, 6, 7 + i % 5), dtype, seed=100 + i)
    padding = (i % 7, 3, 9 - i % 4, i % 3)
    if mode == "texture":
        tex = random_image((3, 2 + i % 3, 5), dtype, seed=200 + i)
        return (
            F.texture_pad(x, padding, tex, stagger=i, offset=(i, -i)),
            texture_pad_ref(x, padding, tex, stagger=i, offset=(i, -i)),
        )
    fill = [1, 2, 3] if mode == "constant" else 0
    return F.pad(x, padding, padding_mode=mode, fill=fill), pad_ref(x, padding, mode, fill)


def test_concurrent_threads_get_right_results() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_job, range(32)))
    for got, want in results:
        assert_bitwise_equal(got, want)


# ---------------------------------------------------------------------------------------------
# fresh processes: first launch from threads, forked DataLoader workers, quiet import

_CHILD = """
import json, sys, threading, traceback, warnings
import torch
import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI

report = {}
gen = torch.Generator().manual_seed(0)
x = torch.randint(0, 256, (8, 3, 5, 6), dtype=torch.uint8, generator=gen)
tex = torch.rand(3, 4, 7, generator=gen)

def sample(i):
    img = x[i]
    return torch.cat([
        F.texture_pad(img, (2, 3, 4, 1), tex, stagger=3, offset=(i, -i)).flatten(),
        F.pad(img, (7, 1, 2, 8), padding_mode="reflect").flatten(),
        F.pad(img, 2, fill=[1, 2, 3]).flatten(),
    ])

# 1. The very first launches of the process come from several threads at once.
try:
    results = [None] * 4
    def work(i):
        results[i] = sample(i)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads: t.start()
    for t in threads: t.join(timeout=120)
    report["threads_alive"] = sum(t.is_alive() for t in threads)
    report["threads"] = [r.tolist() if r is not None else None for r in results]
except Exception:
    report["threads_error"] = traceback.format_exc()

# 2. Taichi now runs in this parent; forked DataLoader workers must still pad correctly.
report["parent_arch"] = TAICHI.runtime_arch()
expected = [sample(i) for i in range(8)]
report["expected"] = [e.tolist() for e in expected]

class Pads(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return sample(i)

try:
    loader = torch.utils.data.DataLoader(
        Pads(), batch_size=2, num_workers=2, multiprocessing_context="fork", timeout=120
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.cat([b for b in loader])
    report["loader"] = [g.tolist() for g in got]
except Exception:
    report["loader_error"] = traceback.format_exc()
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def child_report() -> dict[str, Any]:
    proc = run_child(_CHILD, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, (
        f"child exited with {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
    report: dict[str, Any] = json.loads(lines[-1][len("REPORT ") :])
    report["stdout_other"] = [ln for ln in proc.stdout.splitlines() if not ln.startswith("REPORT")]
    return report


def test_first_launch_from_several_threads(child_report: dict[str, Any]) -> None:
    assert "threads_error" not in child_report, child_report.get("threads_error")
    assert child_report["threads_alive"] == 0, "a thread hung on the first launch"
    assert child_report["threads"] == child_report["expected"][:4]


def test_forked_dataloader_workers_after_parent_padded(child_report: dict[str, Any]) -> None:
    assert child_report["parent_arch"] == "cpu", "Taichi should run in the parent by now"
    assert "loader_error" not in child_report, child_report.get("loader_error")
    assert child_report["loader"] == child_report["expected"]


def test_first_launch_prints_nothing_to_stdout(child_report: dict[str, Any]) -> None:
    assert child_report["stdout_other"] == []


def test_import_is_lazy_and_silent() -> None:
    proc = run_child(
        """
        import sys
        import tipad_transforms
        import tipad_transforms.functional
        import tipad_transforms.ops
        loaded = sorted(m for m in sys.modules if m == "taichi" or m.startswith("taichi."))
        if loaded:
            sys.exit("taichi imported: " + ", ".join(loaded[:5]))
        from tipad_transforms.backends import TAICHI
        if TAICHI.runtime_arch() is not None:
            sys.exit("taichi initialised at import")
        """,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == ""
    assert proc.stderr == ""


# ---------------------------------------------------------------------------------------------
# the CUDA loop order (one thread per pixel), run on the CPU


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float64], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_per_pixel_loop_order(
    mode: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CUDA runs the kernel's per-pixel branch; flipping the switch on the CPU checks its index
    # math here, where no GPU is needed.
    F.pad(torch.zeros(1, 1, 1), 1)  # initialise first: init would reset the switch
    monkeypatch.setattr(TAICHI, "gpu_order", True)
    x = random_image((2, 3, 5, 6), dtype, seed=40).requires_grad_(dtype == torch.float64)
    bank = random_image((2, 1, 3, 4), dtype, seed=41).requires_grad_(dtype == torch.float64)
    kw: dict[str, Any] = {
        "stagger": -2,
        "offset": torch.tensor([[1, 3], [-4, 0]]),
        "texture_index": torch.tensor([1, 0]),
    }
    if mode == "texture":
        got = F.texture_pad(x, (7, 2, 3, 8), bank, **kw)
        want = texture_pad_ref(x, (7, 2, 3, 8), bank, differentiable=dtype.is_floating_point, **kw)
        inputs: tuple[torch.Tensor, ...] = (x, bank)
    else:
        got = F.pad(x, (7, 2, 3, 8), padding_mode=mode, fill=1)
        want = pad_ref(x, (7, 2, 3, 8), mode, 1, differentiable=dtype.is_floating_point)
        inputs = (x,)
    assert_bitwise_equal(got, want)
    if dtype == torch.float64:
        upstream = random_image(tuple(want.shape), dtype, seed=42)
        for g, w in zip(
            torch.autograd.grad(got, inputs, upstream),
            torch.autograd.grad(want, inputs, upstream),
            strict=True,
        ):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# refusal and the fallback route


def test_refusal_reasons() -> None:
    for device in (torch.device("cuda", 1), torch.device("meta")):
        reason = TAICHI.refusal(device)
        assert isinstance(reason, str) and reason
    assert "cuda:1" in str(TAICHI.refusal(torch.device("cuda", 1)))
    assert "meta" in str(TAICHI.refusal(torch.device("meta")))
    F.pad(torch.zeros(1, 1, 1), 1)  # make sure Taichi runs here
    assert TAICHI.refusal(torch.device("cpu")) is None


def _canonical(
    mode: str,
    dtype: torch.dtype,
    seed: int,
    padding: tuple[int, int, int, int] = (9, 2, 6, 11),
    texture_channels: int = 1,
) -> tuple[PadGeometry, dict[str, Any], tuple[Any, ...]]:
    """One call's canonical arguments: for the torch backend and for torch.ops.tipad.pad."""
    x = random_image((2, 3, 4, 5), dtype, seed=seed)
    padding = list(padding)
    g = PadGeometry.of(x.shape, padding)
    bank = random_image((2, texture_channels, 3, 4), dtype, seed=seed + 1)
    fill = random_image((3,), dtype, seed=seed + 2)
    offset = torch.tensor([[1, -2], [-7, 3]], dtype=torch.int32)
    index = torch.tensor([1, 0], dtype=torch.int32)
    stagger = 3
    texture = bank if mode == "texture" else x.new_empty(0)
    fill = fill if mode == "constant" else x.new_empty(0)
    kwargs = {
        "texture": texture,
        "fill": fill,
        "offset": offset,
        "texture_index": index,
        "stagger": stagger,
    }
    return g, kwargs, (x, padding, mode, fill, texture, offset, index, stagger)


# (left, top, right, bottom): a border on every side, and none on two of them; a texture of
# one channel (broadcast to the image's three) and of three.
CASES = [(m, (9, 2, 6, 11), 1) for m in MODES] + [
    (m, (0, 3, 2, 0), c) for m in MODES for c in ((1, 3) if m == "texture" else (1,))
]


@pytest.mark.allow_fallback
@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16, torch.float64, torch.bool], ids=str)
@pytest.mark.parametrize(("mode", "padding", "texture_channels"), CASES, ids=str)
def test_fallback_equals_kernel(
    mode: str, dtype: torch.dtype, padding: tuple[int, int, int, int], texture_channels: int
) -> None:
    g, kwargs, op_args = _canonical(mode, dtype, 11, padding, texture_channels)
    x = op_args[0]
    fallback = _torch_pad(g, mode, x, **kwargs)
    kernel = torch.ops.tipad.pad(*op_args)
    assert_bitwise_equal(fallback, kernel)
    if mode == "texture":
        want = texture_pad_ref(
            x,
            op_args[1],
            kwargs["texture"],
            stagger=3,
            offset=kwargs["offset"],
            texture_index=kwargs["texture_index"],
        )
    else:
        want = pad_ref(x, op_args[1], mode, kwargs["fill"] if mode == "constant" else 0)
    assert_bitwise_equal(kernel, want)


@pytest.mark.allow_fallback
@pytest.mark.parametrize("seed", range(12))
def test_fallback_texture_rows_match_the_reference(seed: int) -> None:
    # The torch route's row windows against the per-pixel reference, on random shapes: a
    # texture wider or taller than the canvas, large staggers, negative offsets, bank indices.
    gen = torch.Generator().manual_seed(seed)

    def draw(lo: int, hi: int, *shape: int) -> torch.Tensor:
        return torch.randint(lo, hi, shape or (1,), generator=gen)

    n, c, h, w = 3, int(draw(1, 4)), int(draw(1, 9)), int(draw(1, 9))
    th, tw = int(draw(1, 30)), int(draw(1, 40))
    ct = int(draw(0, 2)) * (c - 1) + 1  # 1 or c channels
    padding = [int(p) for p in draw(0, 25, 4)]
    stagger = int(draw(-50, 50))
    bank = random_image((4, ct, th, tw), torch.float32, seed=100 + seed)
    offset = draw(-60, 60, n, 2).to(torch.int32)
    index = draw(0, 4, n).to(torch.int32)
    x = random_image((n, c, h, w), torch.float32, seed=200 + seed)
    got = _torch_pad(
        PadGeometry.of(x.shape, padding), "texture", x, texture=bank, fill=x.new_empty(0),
        offset=offset, texture_index=index, stagger=stagger,
    )  # fmt: skip
    want = texture_pad_ref(x, padding, bank, stagger=stagger, offset=offset, texture_index=index)
    assert_bitwise_equal(got, want)


@pytest.mark.allow_fallback
@pytest.mark.parametrize("mode", MODES)
def test_fallback_backward_equals_kernel(mode: str) -> None:
    g, kwargs, op_args = _canonical(mode, torch.float64, seed=12)
    grad = random_image((g.n, g.c, g.out_h, g.out_w), torch.float64, seed=13)
    texture = kwargs["texture"]
    gx_fb = torch.zeros(g.n, g.c, g.h, g.w, dtype=torch.float64)
    gt_fb = torch.zeros(texture.shape, dtype=torch.float64)
    call = PadCall(g, mode, texture.new_empty(0), texture, kwargs["offset"],
                   kwargs["texture_index"], 3)  # fmt: skip
    pad_reference.backward(call, grad, gx_fb, gt_fb)
    gx, gt = torch.ops.tipad.pad_backward(
        grad, [2, 3, 4, 5], op_args[1], mode, texture, kwargs["offset"], kwargs["texture_index"], 3
    )
    torch.testing.assert_close(gx_fb.reshape(gx.shape), gx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gt_fb.reshape(gt.shape), gt, rtol=1e-12, atol=1e-12)


@pytest.mark.allow_fallback
@pytest.mark.parametrize("mode", MODES)
def test_refused_device_uses_fallback_with_one_warning(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = f"test refusal for {mode}"
    monkeypatch.setattr(TAICHI, "refusal", lambda device: reason)
    x = random_image((2, 3, 4, 5), torch.float64, seed=14).requires_grad_()
    tex = random_image((3, 2, 3), torch.float64, seed=15).requires_grad_()

    def call() -> torch.Tensor:
        if mode == "texture":
            return F.texture_pad(x, (7, 1, 2, 6), tex, stagger=2, offset=(1, 1))
        return F.pad(x, (7, 1, 2, 6), padding_mode=mode, fill=0.5)

    with pytest.warns(RuntimeWarning, match=reason) as record:
        got = call()
    assert record[0].filename == __file__  # points at the user's line, not into torch
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per reason, not per call
        again = call()
    if mode == "texture":
        want = texture_pad_ref(x, (7, 1, 2, 6), tex, stagger=2, offset=(1, 1), differentiable=True)
    else:
        want = pad_ref(x, (7, 1, 2, 6), mode, 0.5, differentiable=True)
    assert_bitwise_equal(got, want)
    assert_bitwise_equal(again, want)
    inputs = (x, tex) if mode == "texture" else (x,)
    upstream = random_image(tuple(want.shape), torch.float64, seed=16)
    for g, w in zip(
        torch.autograd.grad(got, inputs, upstream),
        torch.autograd.grad(want, inputs, upstream),
        strict=True,
    ):
        torch.testing.assert_close(g, w)


def test_meta_tensors_give_shapes_at_the_ops_only() -> None:
    # The ops' fake implementations give shapes, as torch's ops do; the functionals refuse
    # meta tensors by name (padding needs data: a meta texture or fill met "Cannot copy out
    # of meta tensor" deep inside). test_bad_input.py covers every argument.
    x = torch.empty(2, 3, 4, 5, device="meta")
    empty = torch.empty(0, device="meta")
    lattice = (torch.zeros(2, 2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32))
    meta_lattice = [t.to("meta") for t in lattice]
    out = ops.pad(x, [1, 2, 3, 4], "reflect", empty, empty, *meta_lattice, 0)
    assert out.device.type == "meta" and out.shape == (2, 3, 10, 9)
    with pytest.raises(ValueError, match=r"^inpt is a meta tensor"):
        F.pad(x, (1, 2, 3, 4), padding_mode="reflect")


def _compiled_in(path: str, source: str, name: str) -> Any:
    """Function ``name`` of ``source`` with its frames reported as ``path``'s."""
    scope: dict[str, Any] = {}
    exec(compile(textwrap.dedent(source), path, "exec"), scope)
    return scope[name]


@pytest.mark.allow_fallback
def test_fallback_warning_in_a_worker_points_past_the_standard_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A DataLoader worker's stack: multiprocessing's bootstrap, torch's worker loop and fetcher,
    # then (here) tipad's op itself. The warning once pointed at multiprocessing/process.py.
    site = os.path.dirname(os.path.dirname(torch.__file__))
    fetch = _compiled_in(
        os.path.join(site, "torch", "utils", "data", "_utils", "fetch.py"),
        "def fetch(op, *args):\n    return op(*args)\n",
        "fetch",
    )
    bootstrap = _compiled_in(
        os.path.join(os.path.dirname(os.__file__), "multiprocessing", "process.py"),
        "def run(target, *args):\n    return target(*args)\n",
        "run",
    )
    reason = "refused in a fake worker"
    monkeypatch.setattr(TAICHI, "refusal", lambda device: reason)
    x = torch.zeros(1, 2, 2)
    none = torch.empty(0)
    lattice = (torch.zeros(1, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32))
    with pytest.warns(RuntimeWarning, match=reason) as record:
        bootstrap(fetch, ops.pad, x, [1, 1, 1, 1], "edge", none, none, *lattice, 0)
    assert record[0].filename == __file__


# ---------------------------------------------------------------------------------------------
# a Taichi the user started, an interrupted start

# The child's checks, against references it computes with numpy and torch alone (a reflect pad,
# the WKV recurrence in float64): REPORT <json> on its last line.
_CHECKS = """
import json, sys, warnings
import numpy as np
import torch

def recurrence(td, tf, k, v):
    w, u = -torch.exp(td.double()), tf.double()
    k, v = k.double(), v.double()
    aa = torch.zeros(k.shape[0], k.shape[2], dtype=torch.float64)
    bb = torch.zeros_like(aa)
    pp = torch.full_like(aa, -1e38)
    ys = []
    for t in range(k.shape[1]):
        ww = u + k[:, t]
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        ys.append((e1 * aa + e2 * v[:, t]) / (e1 * bb + e2))
        ww = w + pp
        p = torch.maximum(ww, k[:, t])
        e1, e2 = torch.exp(ww - p), torch.exp(k[:, t] - p)
        aa, bb, pp = e1 * aa + e2 * v[:, t], e1 * bb + e2, p
    return torch.stack(ys, 1)

def checks(report, calls):
    import tipad_transforms.functional as F
    from tipad_transforms.ops import wkv
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 5, 6, generator=g)
    td, tf = torch.randn(8, generator=g), torch.randn(8, generator=g)
    k, v = torch.randn(2, 7, 8, generator=g), torch.randn(2, 7, 8, generator=g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pads = [F.pad(x, 3, padding_mode="reflect") for _ in range(calls)]
        ys = [wkv(td, tf, k, v) for _ in range(calls)]
    want = np.pad(x.numpy(), ((0, 0), (3, 3), (3, 3)), mode="reflect")
    report["pad_ok"] = all(np.array_equal(p.numpy(), want) for p in pads)
    err = max(float((y.double() - recurrence(td, tf, k, v)).abs().max()) for y in ys)
    report["wkv_err"] = err
    report["warnings"] = [str(w.message) for w in caught]
    from tipad_transforms.backends import TAICHI
    report["started"] = TAICHI.started()
"""


def _child_report(script: str) -> dict[str, Any]:
    proc = run_child(_CHECKS + textwrap.dedent(script), timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, (
        f"child exited with {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
    report: dict[str, Any] = json.loads(lines[-1][len("REPORT ") :])
    return report


def test_users_taichi_with_default_ip_i64_is_refused_with_the_reason() -> None:
    # Aborted the process (LLVM "Invalid cast!", SIGABRT) at the first ops.wkv, and hung under
    # debug=True: the kernels need default_ip=i32. Now: the torch route, one warning per
    # operation that names the setting, the right values; a second ti.init(debug=True) too.
    report = _child_report(
        """
        import taichi as ti
        ti.init(arch=ti.cpu, default_ip=ti.i64)
        import tipad_transforms
        tipad_transforms.set_warmup(0)
        report = {}
        checks(report, 2)
        ti.init(arch=ti.cpu, default_ip=ti.i64, debug=True)
        again = {}
        checks(again, 1)
        report["again"] = again
        print("REPORT " + json.dumps(report))
        """
    )
    for part in (report, report["again"]):
        assert part["pad_ok"] and part["wkv_err"] < 1e-5
        assert not part["started"]
    assert len(report["warnings"]) == 2, report["warnings"]  # padding, computing wkv
    assert all("default_ip=i64" in w and "ti.i32" in w for w in report["warnings"])
    assert report["again"]["warnings"] == []  # once per operation and reason


def test_users_default_ip_i64_is_refused_after_a_fork_too() -> None:
    # A fork (DataLoader workers) before the first call records the parent's pid; the user's
    # runtime must still be checked at the start, not taken as this package's own.
    report = _child_report(
        """
        import os
        import tipad_transforms
        from tipad_transforms.backends.taichi import TAICHI
        ti = TAICHI.load()  # the Taichi the package runs (upstream or taichi_forge)
        ti.init(arch=ti.cpu, default_ip=ti.i64)
        tipad_transforms.set_warmup(0)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        report = {}
        checks(report, 2)
        print("REPORT " + json.dumps(report))
        """
    )
    assert report["pad_ok"] and report["wkv_err"] < 1e-5 and not report["started"]
    assert len(report["warnings"]) == 2, report["warnings"]
    assert all("default_ip=i64" in w for w in report["warnings"])


def test_users_failed_default_ip_i16_start_leaves_the_kernels_working() -> None:
    # Taichi's own ti.init refuses i16 (an AssertionError); caught, the next padding and wkv
    # calls start Taichi as usual and run the kernels.
    report = _child_report(
        """
        import taichi as ti
        try:
            ti.init(arch=ti.cpu, default_ip=ti.i16)
            report = {"init": "accepted"}
        except AssertionError:
            report = {"init": "refused"}
        import tipad_transforms
        tipad_transforms.set_warmup(0)
        checks(report, 1)
        print("REPORT " + json.dumps(report))
        """
    )
    assert report["pad_ok"] and report["wkv_err"] < 1e-5
    if report["init"] == "refused":
        assert report["started"] and report["warnings"] == []
    else:  # a Taichi that takes i16: refused by us, with the reason
        assert report["warnings"] and all("default_ip" in w for w in report["warnings"])


def test_interrupted_first_import_of_taichi_recovers_at_the_next_call() -> None:
    # Ctrl-C during the first kernel call's `import taichi`, caught (a notebook), left every
    # later call raising "module 'taichi' has no attribute 'lang'".
    report = _child_report(
        """
        import importlib.abc
        class Interrupt(importlib.abc.MetaPathFinder):
            fired = False
            def find_spec(self, name, path, target=None):
                if name == "taichi.lang.kernel_impl" and not Interrupt.fired:
                    Interrupt.fired = True
                    raise KeyboardInterrupt
                return None
        sys.meta_path.insert(0, Interrupt())
        import tipad_transforms
        import tipad_transforms.functional as F
        tipad_transforms.set_warmup(0)
        report = {}
        try:
            F.pad(torch.zeros(1, 2, 2), 1)
            report["interrupted"] = False
        except KeyboardInterrupt:
            report["interrupted"] = True
        checks(report, 2)
        print("REPORT " + json.dumps(report))
        """
    )
    assert report["interrupted"]
    assert report["pad_ok"] and report["wkv_err"] < 1e-5
    assert report["started"] and report["warnings"] == []
