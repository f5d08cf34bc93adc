"""The eager inference path of RWKV-4 one-token steps (issue 9).

``ops.wkv`` without a graph to record runs the custom op's implementation directly, and
``RWKVBlock`` with a state and no graph runs one flat function on ``F.linear`` /
``F.layer_norm`` instead of its children's modules. Both must give the op path's bits, be
taken only when they may (never under grad, hooks or tracing), allocate for a state update only
what they return, and leave the op path to autograd and torch.compile.
"""

from __future__ import annotations

from typing import Any

import pytest
import rwkv7_reference as ref
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from tipad_transforms import _runtime
from tipad_transforms.nn import RWKV4, RWKVBlock, RWKVChannelMix, RWKVTimeMix
from tipad_transforms.ops import _wkv as ops_module
from tipad_transforms.ops import init_wkv_state, wkv

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
    launch = _runtime.launch_wkv_forward

    def spy(*tensors: torch.Tensor) -> None:
        written.extend(tensors[5:])  # y, the new state
        launch(*tensors)

    monkeypatch.setattr(_runtime, "launch_wkv_forward", spy)
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


def block_and_state(
    dtype: torch.dtype, layer_id: int, b: int, seed: int, t: int = 1
) -> tuple[Any, ...]:
    torch.manual_seed(seed)
    # The widening weights in the step's layout: the module path then rounds as the step.
    block = ref.step_layout(
        RWKVBlock(16, dim_att=24, dim_ffn=40, layer_id=layer_id, n_layer=3).to(dtype)
    )
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
        x0 = torch.randn(b, 3, 16, dtype=dtype)
        _, state = block(x0, None)
    return block, state, torch.randn(b, t, 16, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("layer_id", "b", "t"), [(0, 1, 1), (1, 3, 1), (1, 2, 4), (0, 2, 0)])
@pytest.mark.parametrize("grad_mode", ["no_grad", "frozen"])
def test_block_step_is_the_module_path_bit_for_bit(
    dtype: torch.dtype,
    layer_id: int,
    b: int,
    t: int,
    grad_mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both ways to have no graph: grad off, or grad on and nothing requiring it (the token
    # mixes then round as the autograd path does: _mixer).
    block, state, x = block_and_state(dtype, layer_id, b, seed=layer_id + b + t, t=t)
    if grad_mode == "frozen":
        block.requires_grad_(False)
    context = torch.no_grad() if grad_mode == "no_grad" else torch.enable_grad()
    with context:
        hook = block.att.register_forward_hook(lambda *args: None)  # forces the module path
        y_ref, s_ref = block(x, state)
        hook.remove()
        monkeypatch.setattr(nn.Linear, "forward", refuse)  # the fast step calls F.linear
        monkeypatch.setattr(RWKVTimeMix, "forward", refuse)
        monkeypatch.setattr(RWKVChannelMix, "forward", refuse)
        y, s = block(x, state)
    assert torch.equal(y, y_ref)
    for a, r in zip(torch.utils._pytree.tree_leaves(s), torch.utils._pytree.tree_leaves(s_ref),
                    strict=True):  # fmt: skip
        assert torch.equal(a, r)


def test_block_step_not_taken_under_grad_and_gradients_flow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    block, state, x = block_and_state(torch.float64, 1, 2, seed=5)
    calls = []
    op = ops_module.wkv_forward

    def counting(*args: Any) -> Any:
        calls.append(args[-1])
        return op(*args)

    monkeypatch.setattr(ops_module, "wkv_forward", counting)
    x.requires_grad_()
    y, s = block(x, state)
    assert calls == [True]  # through the op, saving for its backward
    (y.square().sum() + s.att.wkv.sum()).backward()
    assert x.grad is not None and block.att.time_decay.grad is not None
    grads = {n: p.grad.clone() for n, p in block.named_parameters()}  # type: ignore[union-attr]
    # The same gradients when the module path is forced by a hook.
    block.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    hook = block.ffn.register_forward_pre_hook(lambda *args: None)
    y2, s2 = block(x2, state)
    hook.remove()
    (y2.square().sum() + s2.att.wkv.sum()).backward()
    for n, p in block.named_parameters():
        assert torch.equal(p.grad, grads[n]), n  # type: ignore[arg-type]
    # A frozen block (nothing requires grad) takes the eager step even with grad enabled.
    block.requires_grad_(False)
    calls.clear()
    block(x.detach(), state)
    assert calls == []


def test_block_step_not_taken_for_replaced_children(monkeypatch: pytest.MonkeyPatch) -> None:
    block, state, x = block_and_state(torch.float32, 1, 1, seed=6)

    class Scaled(nn.Linear):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(input)

    old = block.ffn.receptance
    block.ffn.receptance = Scaled(16, 16, bias=False)
    block.ffn.receptance.weight = old.weight
    calls = []
    monkeypatch.setattr(Scaled, "forward", lambda self, i: calls.append(1) or old(i) * 2)
    with torch.no_grad():
        block(x, state)
    assert calls == [1]


def test_compile_traces_the_op_under_no_grad() -> None:
    block, state, x = block_and_state(torch.float32, 1, 1, seed=7)
    seen: list[str] = []

    def backend(gm: torch.fx.GraphModule, example: Any) -> Any:
        seen.extend(str(n.target) for n in gm.graph.nodes)
        return gm.forward

    with torch.no_grad():
        compiled = torch.compile(block, fullgraph=True, backend=backend)
        y, s = compiled(x, state)
        y_ref, s_ref = block(x, state)
    assert any("wkv_forward" in name for name in seen)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s.att.wkv, s_ref.att.wkv, rtol=1e-5, atol=1e-5)


def test_every_parameter_is_contiguous_and_the_step_keeps_its_own_copy(tmp_path: Any) -> None:
    # 0.5.2 stored the widening weights (out > in) transposed in memory; nn.Linear users,
    # parameters_to_vector, w.view(-1) and safetensors expect contiguous ones.
    model = RWKV4(40, 16, 2)
    for name, p in model.named_parameters():
        assert p.is_contiguous(), name
        p.view(-1)  # would raise on a transposed layout
    assert torch.nn.utils.parameters_to_vector(model.parameters()).numel() == sum(
        p.numel() for p in model.parameters()
    )
    key = model.blocks[0].ffn.key.weight
    with torch.no_grad():
        model(torch.tensor([[1]]), None)  # a one-token step: the row-major copies are made
    for name, p in model.named_parameters():
        assert p.is_contiguous(), name  # still, after the step
    rows = [v for k, v in model.blocks[0].ffn.__dict__.items() if k.startswith("_rows_")]
    assert len(rows) == 1 and rows[0][2].shape == (16, 64) and rows[0][2].is_contiguous()
    assert rows[0][2].data_ptr() != key.data_ptr()
    torch.save(model.state_dict(), tmp_path / "m.pth")
    again = RWKV4(40, 16, 2)
    again.load_state_dict(torch.load(tmp_path / "m.pth", weights_only=True))
    assert again.blocks[0].ffn.key.weight.is_contiguous()
    assert torch.equal(again.blocks[0].ffn.key.weight, key)


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
    from tipad_transforms.ops import _wkv7, wkv7

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("b", [1, 2])
def test_rwkv7_block_step_is_the_module_path_bit_for_bit(
    dtype: torch.dtype, b: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tipad_transforms.nn import RWKV7Block, RWKV7ChannelMix, RWKV7TimeMix

    torch.manual_seed(b)
    blocks = [ref.step_layout(RWKV7Block(32, i, 2, head_size=8).to(dtype)) for i in range(2)]
    with torch.no_grad():
        for p in (p for blk in blocks for p in blk.parameters()):
            p.add_(0.1 * torch.randn_like(p))
        prompt, x = torch.randn(b, 3, 32, dtype=dtype), torch.randn(b, 1, 32, dtype=dtype)
        states, h, vf = [], prompt, None
        for blk in blocks:
            h, vf, s = blk(h, vf, None)
            states.append(s)

        def run() -> list[torch.Tensor]:
            out, h, vf = [], x, None
            for blk, s in zip(blocks, states, strict=True):
                h, vf, s = blk(h, vf, s)
                out += [h, vf, *torch.utils._pytree.tree_leaves(s)]
            return out

        hooks = [blk.ffn.register_forward_hook(lambda *args: None) for blk in blocks]
        expected = run()  # the module path (hooks force it)
        for hook in hooks:
            hook.remove()
        for cls in (nn.Linear, nn.GroupNorm, RWKV7TimeMix, RWKV7ChannelMix):
            monkeypatch.setattr(cls, "forward", refuse)
        fast = run()
    for a, r in zip(fast, expected, strict=True):
        assert torch.equal(a, r)
