"""Taichi's internals (``_compat/taichi.py``): every one the package reads is there, none is
read anywhere else, and the lean launcher gives Taichi's public call's bits.

The lean launcher relies on internals of one Taichi version: these tests fail loudly when an
upgrade removes what it uses, and check that every kernel of every family gives bit-equal
results through both paths, on seeded random inputs with poisoned outputs.
"""

from __future__ import annotations

import ast
import contextlib
import os
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tipad_transforms import functional as F
from tipad_transforms._compat import taichi as _lean
from tipad_transforms.backends import TAICHI
from tipad_transforms.ops import time_conv, wkv, wkv7
from tipad_transforms.ops.padding import taichi as pad_taichi
from tipad_transforms.ops.rwkv4 import taichi as wkv_taichi
from tipad_transforms.ops.rwkv7 import taichi as wkv7_taichi

PACKAGE = Path(__file__).resolve().parents[2] / "tipad_transforms"


def _ti() -> Any:
    return TAICHI.load()


@pytest.fixture
def lean() -> None:
    """The lean launcher is written for upstream Taichi's internals (``KNOWN``): taichi_forge
    takes the public call (``test_unknown_taichi_takes_the_public_call``)."""
    if _ti().__name__ == "taichi_forge":
        pytest.skip("the lean launcher is written for upstream taichi; taichi_forge takes the "
                    "public call")  # fmt: skip


def _lean_kernels() -> list[_lean.LeanKernel]:
    return [
        k
        for family in TAICHI.kernels.values()
        for k in family.values()
        if isinstance(k, _lean.LeanKernel)
    ]


@contextlib.contextmanager
def _public_only() -> Iterator[None]:
    kernels = _lean_kernels()
    before = [k.enabled for k in kernels]
    for k in kernels:
        k.enabled = False
    try:
        yield
    finally:
        for k, e in zip(kernels, before, strict=True):
            k.enabled = e


def _poisoned(fn: Callable[[], Any]) -> Any:
    # Outputs come from fresh allocations; poison the allocator's recent blocks by filling a
    # few large NaN tensors first so unwritten elements would not read as plausible values.
    for _ in range(3):
        torch.full((1 << 16,), float("nan"))
    return fn()


def _cases() -> dict[str, Callable[[], Any]]:
    g = torch.Generator().manual_seed(9)

    def rnd(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    img8 = torch.randint(0, 256, (2, 3, 13, 17), generator=g, dtype=torch.uint8)
    img = rnd(2, 3, 13, 17)
    tex = torch.randint(0, 256, (3, 5, 7), generator=g, dtype=torch.uint8)
    b, t, c = 2, 5, 24
    td, tf, k4, v4 = rnd(c), rnd(c), rnd(b, t, c), rnd(b, t, c)
    st4 = torch.stack([rnd(b, c), rnd(b, c).abs() + 1, rnd(b, c)], 1)
    # C = 13, not a multiple of the lanes: flat loads and a partial last block.
    flat4 = (td[:13], tf[:13], k4[..., :13], v4[..., :13], st4[..., :13].contiguous())
    # float64 (libm exp), one token (a serial launch).
    one4 = (td, tf, k4[:, :1], v4[:, :1], st4)
    r7 = [rnd(1, 4, 2, 8, dtype=torch.float64) * 0.5 for _ in range(6)]
    r7[1] = -r7[1].abs() - 0.1  # log decays
    s7 = rnd(1, 2, 8, 8, dtype=torch.float64)
    w_tc, k_tc = rnd(6, 4), rnd(2, 6, 9)

    def grads(fn: Callable[..., torch.Tensor], *xs: torch.Tensor) -> list[torch.Tensor]:
        leaves = [x.clone().requires_grad_() for x in xs]
        out = fn(*leaves)
        out.backward(torch.ones_like(out))
        return [out.detach()] + [x.grad for x in leaves if x.grad is not None]

    return {
        "pad texture uint8": lambda: F.texture_pad(img8, (3, 4, 5, 6), tex, stagger=2),
        "pad reflect": lambda: F.pad(img8, (9, 2, 1, 20), padding_mode="reflect"),
        "pad constant": lambda: F.pad(img, 3, fill=1.5),
        "pad backward": lambda: grads(lambda x: F.pad(x, 4, padding_mode="symmetric"), img),
        "pad_stack": lambda: F.pad_stack(
            [img8[0], img8[1, :, :7, :9].contiguous()],
            (20, 24),
            torch.tensor([[2, 3], [9, 1]]),
            padding_mode="reflect",
        ),
        "wkv forward/backward": lambda: grads(lambda *a: wkv(*a, state=st4)[0], td, tf, k4, v4),
        "wkv packed float32": lambda: wkv(td, tf, k4, v4, st4),
        # C not a multiple of the lanes: flat loads, a partial last block; float64: libm exp.
        "wkv flat float32": lambda: wkv(*flat4),
        "wkv float64 one token": lambda: wkv(*(x.double() for x in one4)),
        "wkv7 forward/backward": lambda: grads(lambda *a: wkv7(*a, state=s7)[0], *r7),
        "time_conv forward/backward": lambda: grads(time_conv, w_tc, k_tc),
    }


def _flat(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for item in x for t in _flat(item)]


@pytest.mark.usefixtures("lean")
def test_pinned_taichi_internals_exist() -> None:
    """What the lean path reads of Taichi: an upgrade that changes it must fail here."""
    ti = _ti()
    assert _lean.lean_supported(ti), (
        f"Taichi {ti.__name__} {ti.__version__} is not one the lean launcher knows "
        f"({_lean.KNOWN}): check _compat/taichi.py against its kernel_impl.py, then add it"
    )
    from taichi.lang import kernel_impl

    for name in ("ensure_compiled", "compiled_kernels", "launch_kernel"):
        assert hasattr(kernel_impl.Kernel, name) or name == "compiled_kernels"
    # Edge mode: a small constant canvas is torch copies, which launch no kernel.
    F.pad(torch.zeros(1, 2, 2, dtype=torch.uint8), 1, padding_mode="edge")  # launches pad_canvas
    k = TAICHI.kernels["pad"]["pad_canvas"]
    assert isinstance(k, _lean.LeanKernel) and k.enabled
    primal = k.public._primal
    for attr in ("arguments", "compiled_kernels", "return_type", "has_print", "mapper"):
        assert hasattr(primal, attr), attr
    plan = next(iter(k._plans.values()))
    ctx = plan.kernel.make_launch_context()
    for method in ("set_arg_external_array_with_shape", "set_arg_int", "set_arg_float"):
        assert callable(getattr(ctx, method)), method
    runtime = ti.lang.impl.get_runtime()
    for attr in ("prog", "target_tape", "fwd_mode_manager"):
        assert hasattr(runtime, attr), attr
    assert callable(runtime.prog.compile_kernel) and callable(runtime.prog.launch_kernel)


@pytest.mark.usefixtures("lean")
@pytest.mark.parametrize("case", list(_cases()))
def test_lean_equals_public_bit_for_bit(case: str) -> None:
    run = _cases()[case]
    run()  # builds the family, compiles (public call), records the plan
    lean_before = {id(k): len(k._plans) for k in _lean_kernels()}
    lean = _flat(_poisoned(run))
    assert any(k.enabled and k._plans for k in _lean_kernels())
    assert {id(k): len(k._plans) for k in _lean_kernels()} == lean_before  # served, not new
    with _public_only():
        public = _flat(_poisoned(run))
    assert len(lean) == len(public)
    for a, b in zip(lean, public, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)), case


@pytest.mark.usefixtures("lean")
def test_every_family_runs_lean() -> None:
    for run in _cases().values():
        run()
        run()
    families = TAICHI.kernels
    assert {"pad", "wkv", "wkv7", "time_conv"} <= set(families)
    for name in ("pad", "wkv", "wkv7", "time_conv"):
        used = [k for k in families[name].values() if isinstance(k, _lean.LeanKernel) and k._plans]
        assert used and all(k.enabled for k in used), name


def test_unknown_taichi_takes_the_public_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def kernel(*args: Any) -> None:
        calls.append(args)

    kernel._is_wrapped_kernel = True  # type: ignore[attr-defined]
    fork = types.SimpleNamespace(__name__="taichi_forge", __version__=(0, 7, 0))
    lk = _lean.LeanKernel(fork, kernel)
    assert not lk.enabled
    lk(torch.zeros(2), 3)
    assert len(calls) == 1
    monkeypatch.setenv("TIPAD_LEAN_LAUNCH", "0")
    assert not _lean.lean_supported(_ti())


@pytest.mark.usefixtures("lean")
def test_arguments_it_does_not_know_take_the_public_call() -> None:
    x = torch.randint(0, 256, (3, 6, 6), dtype=torch.uint8)
    F.pad(x, 2, padding_mode="reflect")
    k = TAICHI.kernels["pad"]["pad_canvas"]
    t = torch.zeros(4, 2)[:, 0]  # not contiguous
    assert k._key((t,) * len(k._kinds)) is None
    assert k._key((torch.zeros(2, requires_grad=True),) * len(k._kinds)) is None
    assert k._key(()) is None


@pytest.mark.usefixtures("lean")
def test_pad_plans_bind_a_raw_pointer_launcher() -> None:
    """The padding plans launch through ``_lean.Bound`` (raw pointers, no signature), which
    rests on the same internals as ``LeanKernel``: it must exist for the pad kernel, give the
    public call's bits, and hand the call back (False) when the lean path may not run."""
    g = torch.Generator().manual_seed(21)
    x = torch.randint(0, 256, (2, 3, 11, 16), generator=g, dtype=torch.uint8)
    tex = torch.randint(0, 256, (3, 4, 6), generator=g, dtype=torch.uint8)
    run = lambda: F.texture_pad(x, (9, 7, 10, 8), tex, stagger=2)  # noqa: E731
    run()
    run()
    bounds = [b for b in pad_taichi._bounds.values() if b is not None]
    assert bounds, "no padding plan bound a lean launcher"
    assert all(isinstance(b, _lean.Bound) for b in bounds)
    lean = _poisoned(run)
    with _public_only():
        assert not any(b.launch([]) for b in bounds)  # disabled: nothing launched, no error
        public = _poisoned(run)
    assert torch.equal(lean, public)


@pytest.mark.usefixtures("lean")
def test_a_cpu_bound_reuses_its_context_and_resets_only_what_changed() -> None:
    """On the CPU a ``Bound`` keeps one launch context and sets a slot only when its array
    differs from the last launch's: inputs that change, stay and come back (the texture and
    ``meta`` never change) must give the public call's bits every time."""
    g = torch.Generator().manual_seed(23)
    xs = [torch.randint(0, 256, (1, 3, 9, 12), generator=g, dtype=torch.uint8) for _ in range(3)]
    tex = torch.randint(0, 256, (3, 5, 7), generator=g, dtype=torch.uint8)
    out = torch.empty(1, 3, 20, 25, dtype=torch.uint8)

    def run(x: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
        return F.texture_pad(x, (6, 5, 7, 6), tex, stagger=3, out=into)

    run(xs[0])
    run(xs[0])  # a plan and its Bound exist now
    bounds = [b for b in pad_taichi._bounds.values() if b is not None]
    assert bounds and all(b._ctx is not None for b in bounds)  # this is the CPU
    with _public_only():
        want = [run(x).clone() for x in xs]
    order = [0, 1, 0, 0, 2, 2, 1]
    for i in order:  # fresh outputs: a new canvas address or the allocator's last one
        assert torch.equal(_poisoned(lambda i=i: run(xs[i])), want[i])  # type: ignore[misc]
    for i in order:  # one out= canvas: that slot stays, the image slot changes
        out.fill_(7)
        assert torch.equal(run(xs[i], out), want[i])
    # The bound this signature launched through holds every slot (others may be unused).
    assert any(b._last and None not in b._last for b in bounds)


def _step_runs(family: str) -> list[Callable[[], list[torch.Tensor]]]:
    """Forward calls of ``family`` over several signatures: packed and flat loads, float32
    and float64, with and without saved states (an input requiring grad: the op path)."""
    g = torch.Generator().manual_seed(22)

    def rnd(*shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    runs: list[Callable[[], list[torch.Tensor]]] = []
    for c, dtype, grad in ((16, torch.float32, False), (13, torch.float32, True),
                           (5, torch.float64, False)):  # fmt: skip
        if family == "wkv":
            xs = [rnd(c, dtype=dtype), rnd(c, dtype=dtype), rnd(2, 3, c, dtype=dtype),
                  rnd(2, 3, c, dtype=dtype)]  # fmt: skip
            state = torch.stack([rnd(2, c, dtype=dtype), rnd(2, c, dtype=dtype).abs() + 1,
                                 rnd(2, c, dtype=dtype)], 1)  # fmt: skip
            op: Callable[..., Any] = wkv
        else:
            n = c % 8 + 2  # head sizes 2, 7, 7
            xs = [rnd(1, 3, 2, n, dtype=dtype) * 0.5 for _ in range(6)]
            xs[1] = -xs[1].abs() - 0.1  # log decays
            state = rnd(1, 2, n, n, dtype=dtype)
            op = wkv7
        if grad:
            xs[0].requires_grad_()
        runs.append(lambda op=op, xs=xs, s=state: _flat(op(*xs, state=s)))
    return runs


@pytest.mark.usefixtures("lean")
@pytest.mark.parametrize("family", ["wkv", "wkv7"])
def test_recurrence_steps_launch_through_raw_pointers(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The RWKV forwards launch through a per-signature ``_lean.Step`` (a ``Bound`` with the
    sizes fixed) once a signature has run, and each gives the public call's bits."""
    steps = (wkv_taichi if family == "wkv" else wkv7_taichi)._steps
    runs = _step_runs(family)
    for run in runs:
        run()
    steps.clear()
    firsts = [_poisoned(run) for run in runs]  # the public call, which records the steps
    keys = list(steps)
    assert len(keys) == len(runs)
    served: list[bool] = []
    launch = _lean.Step.launch

    def counting(self: _lean.Step, tensors: tuple[torch.Tensor, ...]) -> bool:
        served.append(launch(self, tensors))
        return served[-1]

    monkeypatch.setattr(_lean.Step, "launch", counting)
    lean = [_poisoned(run) for run in runs]
    assert served == [True] * len(runs) and list(steps) == keys
    with _public_only():
        public = [_poisoned(run) for run in runs]
    assert served[len(runs) :] == [False] * len(runs)  # disabled: handed back, nothing run
    for a, b, c in zip(firsts, lean, public, strict=True):
        for x, y, z in zip(a, b, c, strict=True):
            assert torch.equal(x.detach(), y.detach()) and torch.equal(y.detach(), z.detach())


def test_worker_context_preloads_taichi_in_the_forkserver() -> None:
    import multiprocessing.forkserver as fs

    from tipad_transforms.data import worker_context

    saved = list(fs._forkserver._preload_modules)
    try:
        ctx = worker_context("forkserver")
        assert ctx.get_start_method() == "forkserver"
        assert fs._forkserver._preload_modules == ["__main__", "tipad_transforms.backends.preload"]
        assert worker_context("spawn").get_start_method() == "spawn"
        with pytest.raises(ValueError, match="method"):
            worker_context("fork")
    finally:
        fs._forkserver._preload_modules = saved


def test_every_taichi_internal_is_there() -> None:
    """What the Taichi backend reads of Taichi's internals answers on the Taichi in use (the
    lean launcher's own are checked above): a moved one is named here."""
    F.pad(torch.zeros(1, 2, 2), 1)  # Taichi runs
    ti = _ti()
    assert _lean.runtime_arch(ti) == "cpu"
    assert _lean.default_ip(ti) == ti.i32
    assert _lean.is_kernel(TAICHI.kernels["pad"]["pad_canvas"].public)
    assert not _lean.is_kernel(test_every_taichi_internal_is_there)
    assert _lean.MISSING == [], f"Taichi internals moved: {_lean.MISSING}"


# Taichi's public API is the top-level module (``ti.kernel``, ``ti.types``, ``ti.cpu``, ...);
# these are its internals, which only _compat/taichi.py may read.
_TAICHI_PRIVATE = {
    "lang", "_primal", "_is_wrapped_kernel", "get_runtime", "current_cfg", "compiled_kernels",
    "ensure_compiled", "make_launch_context", "launch_kernel", "compile_kernel", "target_tape",
    "fwd_mode_manager", "set_arg_external_array_with_shape", "set_arg_int", "set_arg_float",
}  # fmt: skip


def _taichi_private_names(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _TAICHI_PRIVATE:
            found.append(f".{node.attr} (line {node.lineno})")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            ("taichi.", "taichi_forge.")
        ):
            found.append(f"from {node.module} import ... (line {node.lineno})")
        if isinstance(node, ast.Import):
            found += [f"import {a.name} (line {node.lineno})" for a in node.names
                      if a.name.startswith(("taichi.", "taichi_forge."))]  # fmt: skip
    return found


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PACKAGE.rglob("*.py") if "_compat" not in p.parts),
    ids=lambda p: os.path.relpath(p, PACKAGE),
)
def test_no_taichi_internal_outside_compat(path: Path) -> None:
    names = _taichi_private_names(ast.parse(path.read_text(), str(path)))
    assert names == [], (
        f"{path.name} reads Taichi internals; move them to _compat/taichi.py: {names}"
    )


def test_the_checker_sees_a_taichi_internal() -> None:
    source = "from taichi.lang import impl\nti.lang.impl.get_runtime().prog\nk._primal"
    assert len(_taichi_private_names(ast.parse(source))) >= 3
    assert _taichi_private_names(ast.parse("ti.kernel\nti.types.ndarray()\nti.cpu")) == []


_CHUNK_PROBE = """
import sys
ti = __import__(sys.argv[1])
ti.init(arch=ti.cpu, print_ir=True, offline_cache=False, cpu_max_num_threads=3, **(
    {"compile_tier": "full"} if ti.__name__ == "taichi_forge" else {}))

@ti.kernel
def probe(a: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in range(a.shape[0]):
        a[i] = a[i] + 1.0

import numpy as np
probe(np.zeros(4, np.float32))
"""


def test_cpu_range_for_chunks_are_what_spread_assumes(tmp_path: Path) -> None:
    """``CPU_MIN_CHUNK``: Taichi's CPU range-for becomes one loop per thread over a run of at
    least that many iterations (``backends.taichi.spread`` works around it). Read from the IR
    Taichi prints after its ``make_cpu_multithreaded_range_for`` pass: a Taichi that schedules
    otherwise fails here, and ``spread`` must be measured again."""
    import subprocess
    import sys

    script = tmp_path / "probe.py"
    script.write_text(_CHUNK_PROBE)
    run = subprocess.run(
        [sys.executable, str(script), _ti().__name__], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    ir = run.stdout  # the IR (its stage names go to stderr)
    start = ir.find("offloaded range_for(0, 3)")  # a loop per thread (3 asked for) ...
    assert start >= 0, ir[-3000:]
    head = ir[start:].splitlines()[:16]
    # ... each over max(ceil(n / 3), CPU_MIN_CHUNK) iterations
    chunk = [line.strip() for line in head if line.strip().startswith("<i32> $")
             and line.strip().endswith(f" = const {_lean.CPU_MIN_CHUNK}")]  # fmt: skip
    assert chunk, head
    assert any(" = max " in line for line in head), head
    F.pad(torch.zeros(1, 2, 2), 1)  # Taichi runs here
    assert _lean.cpu_threads(_ti()) == (os.cpu_count() or 1)
    assert TAICHI.cpu_iterations == _lean.CPU_MIN_CHUNK * _lean.cpu_threads(_ti())
