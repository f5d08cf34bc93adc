"""The direct route of ``ops.wkv`` and ``ops.wkv7`` (issue 9): without a graph to record, they
run the custom op's implementation directly instead of through the dispatcher. It must give
the op's bits, be taken only when it may (never under grad or a dispatch mode), allocate for a
state update only what it returns, and leave the op path to autograd and torch.compile.

(Ops tests, moved out of the nn tests' ``test_rwkv_step.py``; they reach the ops' internals.)
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tipad_transforms.ops import init_wkv_state, wkv
from tipad_transforms.ops.rwkv4 import op as ops_module
from tipad_transforms.ops.rwkv4 import taichi as wkv_taichi

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def inputs(b: int, t: int, c: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    td = (torch.randn(c, generator=g, dtype=torch.float64) - 1).to(dtype)
    tf = torch.randn(c, generator=g, dtype=torch.float64).to(dtype)
    k = (2 * torch.randn(b, t, c, generator=g, dtype=torch.float64)).to(dtype)
    v = torch.randn(b, t, c, generator=g, dtype=torch.float64).to(dtype)
    aa = torch.randn(b, c, generator=g, dtype=torch.float64)
    bb = torch.rand(b, c, generator=g, dtype=torch.float64) + 1
    pp = 3 * torch.randn(b, c, generator=g, dtype=torch.float64)
    return td, tf, k, v, torch.stack([aa, bb, pp], 1).to(dtype)


def refuse(*args: object, **kwargs: object) -> Any:
    raise AssertionError("the op path ran where the eager path should have")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("b", "t", "c"), [(1, 1, 768), (1, 1, 11), (3, 1, 16), (2, 5, 13)])
@pytest.mark.parametrize("with_state", [True, False])
def test_eager_wkv_is_the_op_bit_for_bit(
    dtype: torch.dtype, b: int, t: int, c: int, with_state: bool
) -> None:
    td, tf, k, v, state = inputs(b, t, c, dtype, seed=b * 100 + t * 10 + c)
    s = state if with_state else init_wkv_state(b, c, dtype=dtype)
    y_op, s_op, _ = torch.ops.tipad.wkv_forward(td, tf, k, v, s, False)
    before = s.clone()
    with torch.no_grad():
        y, new = wkv(td, tf, k, v, s)
    assert torch.equal(y, y_op) and torch.equal(new, s_op)
    assert torch.equal(s, before)  # the incoming state is never written
    if not with_state:
        assert torch.equal(wkv(td, tf, k, v), y_op)  # no grad needed: eager too


def test_eager_path_is_taken_only_without_a_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    td, tf, k, v, state = inputs(2, 1, 8, torch.float32, seed=1)
    monkeypatch.setattr(ops_module, "wkv_forward", refuse)
    with torch.no_grad():
        wkv(td, tf, k, v, state)
    wkv(td, tf, k, v, state)  # grad enabled, nothing requires it: eager
    with torch.inference_mode():
        wkv(td, tf, k, v, state)
    for needs in range(5):
        args = [x.clone() for x in (td, tf, k, v, state)]
        args[needs].requires_grad_()
        with pytest.raises(AssertionError, match="op path ran"):
            wkv(*args)


class Allocations(TorchDispatchMode):
    """Records the size of every tensor an aten op creates (neither a view nor in place)."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if all(r.alias_info is None for r in func._schema.returns):
            leaves = out if isinstance(out, (tuple, list)) else [out]
            self.sizes += [t.numel() for t in leaves if isinstance(t, torch.Tensor)]
        return out


def test_eager_step_allocates_only_what_it_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel writes y and the new state straight into the tensors the call returns.
    b, c = 2, 24
    td, tf, k, v, state = inputs(b, 1, c, torch.float32, seed=2)
    written: list[torch.Tensor] = []
    launch = wkv_taichi.forward

    def spy(*tensors: torch.Tensor) -> None:
        written.extend(tensors[5:])  # y, the new state
        launch(*tensors)

    monkeypatch.setattr(wkv_taichi, "forward", spy)
    with torch.no_grad():
        y, new = wkv(td, tf, k, v, state)
    assert [t.data_ptr() for t in written] == [y.data_ptr(), new.data_ptr()]
    assert new.shape == (b, 3, c) and new.is_contiguous()
    # Every tensor the call creates: y and the new state (the kernel derives w from
    # time_decay itself); nothing for the op's `saved`.
    monkeypatch.undo()
    allocations = Allocations()
    # Under a dispatch mode a call goes through the op (the mode sees tipad::wkv_forward):
    # let this one take the direct route anyway, the route whose allocations are counted.
    monkeypatch.setattr(ops_module, "eager", lambda *tensors: True)
    with torch.no_grad(), allocations:
        wkv(td, tf, k, v, state)
    assert sorted(allocations.sizes) == sorted([b * c, 3 * b * c])


def test_a_dispatch_mode_sees_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    td, tf, k, v, state = inputs(2, 1, 8, torch.float32, seed=3)
    seen: list[str] = []

    class Names(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Names():
        y, new = wkv(td, tf, k, v, state)
    assert any("tipad.wkv_forward" in name for name in seen)
    with torch.no_grad():
        y_direct, new_direct = wkv(td, tf, k, v, state)
    assert torch.equal(y, y_direct) and torch.equal(new, new_direct)


def wkv7_inputs(b: int, t: int, h: int, n: int, dtype: torch.dtype, seed: int) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    r, k, v = (torch.randn(b, t, h, n, generator=g, dtype=torch.float64) for _ in range(3))
    w = -torch.rand(b, t, h, n, generator=g, dtype=torch.float64) - 0.1
    kk = torch.nn.functional.normalize(torch.randn(b, t, h, n, generator=g, dtype=torch.float64),
                                       dim=-1)  # fmt: skip
    state = 0.5 * torch.randn(b, h, n, n, generator=g, dtype=torch.float64)
    return [x.to(dtype) for x in (r, w, k, v, -kk, 0.5 * kk, state)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("b", "t", "h", "n"), [(1, 1, 3, 64), (2, 1, 2, 5), (1, 4, 2, 16)])
def test_eager_wkv7_is_the_op_bit_for_bit(
    dtype: torch.dtype, b: int, t: int, h: int, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tipad_transforms.ops import wkv7
    from tipad_transforms.ops.rwkv7 import op as _wkv7

    args = wkv7_inputs(b, t, h, n, dtype, seed=b + t + h + n)
    y_op, s_op, _ = torch.ops.tipad.wkv7_forward(*args, False)
    before = args[-1].clone()
    monkeypatch.setattr(_wkv7, "wkv7_forward", refuse)
    with torch.no_grad():
        y, s = wkv7(*args)
    assert torch.equal(y, y_op) and torch.equal(s, s_op)
    assert torch.equal(args[-1], before)
    grad_args = [x.clone().requires_grad_() for x in args]
    with pytest.raises(AssertionError, match="op path ran"):
        wkv7(*grad_args)
