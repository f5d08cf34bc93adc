"""Every private API of torch and CPython the package uses is read in ``_compat`` only, and is
there on the versions the project tests with: this file fails loudly, naming the entry, when
one has moved (the package then keeps working on each entry's safe default)."""

from __future__ import annotations

import ast
import inspect
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

from tipad_transforms._compat import cpython
from tipad_transforms._compat import torch as ctorch

PACKAGE = Path(__file__).resolve().parent.parent / "tipad_transforms"


def test_every_torch_entry_is_there() -> None:
    assert ctorch.MISSING == [], f"torch internals moved: {ctorch.MISSING}"


def test_every_cpython_entry_is_there() -> None:
    cpython.seed_getmodule_cache(())
    assert cpython.MISSING == [], f"CPython internals moved: {cpython.MISSING}"
    assert isinstance(inspect.modulesbyfile, dict)  # type: ignore[attr-defined]


def test_the_entries_answer_as_the_internals_do() -> None:
    assert not ctorch.jit_tracing() and not ctorch.functorch_active()
    assert ctorch.mode_depth() == 0
    with torch._subclasses.fake_tensor.FakeTensorMode():
        assert ctorch.mode_depth() >= 1
    assert torch.func.vmap(lambda x: x + ctorch.functorch_active())(torch.zeros(2)).all()
    traced: list[bool] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        traced.append(ctorch.jit_tracing())
        return x * 2

    torch.jit.trace(f, torch.zeros(2))
    assert traced and traced[0]  # the trace's own call (its check_trace reruns f eagerly)
    assert not ctorch.in_bad_fork()
    assert ctorch.nvml_device_count() >= -1
    assert ctorch.cuda_device_count() == (
        torch.cuda.device_count() if torch.cuda.is_available() else 0
    )
    m = torch.nn.Linear(2, 2)
    assert not ctorch.module_hooks(m) and not ctorch.global_module_hooks()
    handle = m.register_forward_hook(lambda *a: None)
    assert ctorch.module_hooks(m)
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert ctorch.global_module_hooks()
    finally:
        handle.remove()
    t = torch.zeros(3)
    before = ctorch.tensor_version(t)
    t.add_(1)
    assert ctorch.tensor_version(t) == before + 1


def test_a_warning_points_at_the_first_frame_outside_the_given_prefixes() -> None:
    here = __file__

    def inner() -> None:  # stands for package code: a frame in an "internal" file
        cpython.warn_at_caller("hello", UserWarning, (here,), ())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inner()
    # Every frame of this file is internal here; the first outside it is pytest's.
    assert caught and caught[0].filename != here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpython.warn_at_caller("hello", UserWarning, ("/nonexistent/",), ())
    assert caught and caught[0].filename == here  # the caller's line


def _private_names(tree: ast.AST) -> list[str]:
    """``torch._C._x``, ``sys._getframe``, ``inspect.modulesbyfile``, ``torch.nn.modules.module``
    privates and ``torch.cuda._x`` read in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = []
            cur: ast.AST = node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name):
                chain.append(cur.id)
            dotted = ".".join(reversed(chain))
            if (
                dotted.startswith(("torch._C._", "torch.cuda._", "sys._"))
                or dotted == "inspect.modulesbyfile"
                or ".modules.module._" in dotted
            ):
                found.append(f"{dotted} (line {node.lineno})")
        if isinstance(node, ast.ImportFrom) and node.module == "torch.nn.modules":
            found.append(f"from torch.nn.modules import ... (line {node.lineno})")
    return found


@pytest.mark.parametrize(
    "path",
    sorted(p for p in PACKAGE.rglob("*.py") if "_compat" not in p.parts),
    ids=lambda p: os.path.relpath(p, PACKAGE),
)
def test_no_private_torch_or_cpython_name_outside_compat(path: Path) -> None:
    names = _private_names(ast.parse(path.read_text(), str(path)))
    assert names == [], f"{path.name} reads private names; move them to _compat: {names}"


def test_the_checker_sees_a_private_name() -> None:
    assert _private_names(ast.parse("import sys\nsys._getframe(1)\ntorch._C._get_tracing_state()"))
    assert sys.version_info >= (3, 10)
