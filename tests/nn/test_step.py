"""The recurrent form of a layer (issue 9, issue 23): ``nn/_recurrent.py``'s ``snapshot`` of an
``RWKVBlock`` or ``RWKV7Block`` runs the block's own math function on plain tensors and
``F.linear`` / ``F.layer_norm`` / ``F.group_norm``, calling no module. It must give the module
path's bits (the widening weights stored in the step's layout, so both read the same memory),
for one token or several, and leave anything that is not a plain module to be called as one;
the module path itself records graphs and compiles.
"""

from __future__ import annotations

from typing import Any

import pytest
import rwkv7_reference as ref
import torch
from torch import nn

from tipad_transforms.nn import RWKV4, RWKVBlock, RWKVChannelMix, RWKVTimeMix
from tipad_transforms.nn._recurrent import snapshot
from tipad_transforms.ops.rwkv4 import op as ops_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def refuse(*args: object, **kwargs: object) -> Any:
    raise AssertionError("a module ran where the recurrent step should have")


def leaves(tree: Any) -> list[torch.Tensor]:
    return torch.utils._pytree.tree_leaves(tree)  # type: ignore[no-any-return]


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
        y_ref, s_ref = block(x, state)
        step = snapshot(block)
        monkeypatch.setattr(nn.Linear, "forward", refuse)  # the step calls F.linear
        monkeypatch.setattr(RWKVTimeMix, "forward", refuse)
        monkeypatch.setattr(RWKVChannelMix, "forward", refuse)
        monkeypatch.setattr(RWKVBlock, "forward", refuse)
        y, s = step(x, state)
    assert torch.equal(y, y_ref)
    for a, r in zip(leaves(s), leaves(s_ref), strict=True):
        assert torch.equal(a, r)


def test_the_module_path_records_a_graph_and_gradients_flow(
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
    # The same gradients when a hook sits on a mixer.
    block.zero_grad()
    x2 = x.detach().clone().requires_grad_()
    hook = block.ffn.register_forward_pre_hook(lambda *args: None)
    y2, s2 = block(x2, state)
    hook.remove()
    (y2.square().sum() + s2.att.wkv.sum()).backward()
    for n, p in block.named_parameters():
        assert torch.equal(p.grad, grads[n]), n  # type: ignore[arg-type]
    # A frozen block (nothing requires grad) takes the op's direct route even with grad on.
    block.requires_grad_(False)
    calls.clear()
    block(x.detach(), state)
    assert calls == []


def test_replaced_children_are_called_as_modules(monkeypatch: pytest.MonkeyPatch) -> None:
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
        y, _ = block(x, state)
        assert calls == [1]
        y_step, _ = snapshot(block)(x, state)  # the snapshot calls it too
    assert calls == [1, 1]
    assert torch.equal(y_step, y)


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
    rec = model.recurrent()  # the one-token step's own row-major copies are made here
    with torch.no_grad():
        rec(torch.tensor([[1]]), None)
    for name, p in model.named_parameters():
        assert p.is_contiguous(), name  # still, after the step
    rows = [rec.blocks[0].ffn.key.keywords["weight"].t()]
    assert len(rows) == 1 and rows[0].shape == (16, 64) and rows[0].is_contiguous()
    assert rows[0].data_ptr() != key.data_ptr()
    torch.save(model.state_dict(), tmp_path / "m.pth")
    again = RWKV4(40, 16, 2)
    again.load_state_dict(torch.load(tmp_path / "m.pth", weights_only=True))
    assert again.blocks[0].ffn.key.weight.is_contiguous()
    assert torch.equal(again.blocks[0].ffn.key.weight, key)


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

        def run(layers: list[Any]) -> list[torch.Tensor]:
            out, h, vf = [], x, None
            for blk, s in zip(layers, states, strict=True):
                h, vf, s = blk(h, vf, s)
                out += [h, vf, *leaves(s)]
            return out

        expected = run(blocks)  # the module path
        steps = [snapshot(blk) for blk in blocks]
        for cls in (nn.Linear, nn.GroupNorm, nn.LayerNorm, RWKV7TimeMix, RWKV7ChannelMix,
                    RWKV7Block):  # fmt: skip
            monkeypatch.setattr(cls, "forward", refuse)
        fast = run(steps)
    for a, r in zip(fast, expected, strict=True):
        assert torch.equal(a, r)
