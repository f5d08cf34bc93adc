"""``model.recurrent()`` (``nn/_recurrent.py``): RWKV4's and RWKV7's snapshot for one-token steps.

It must give the module path's bits, call no module where the model's parts are plain, call
as modules whatever is not (hooks, instance forwards, other classes), and, rebuilt after any
change to the model, compute what the changed model computes; ``model(idx, state)`` runs the
module path and sees every change at once. Every test compares against the module path by
blocks. The models here store their widening weights in the step's layout
(``rwkv7_reference.step_layout``), so the two paths read the same memory; test_layout.py covers
the default contiguous weights, whose row-major copies the snapshot holds.
"""

from __future__ import annotations

import copy
import gc
import io
import pickle
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pytest
import rwkv7_reference as ref
import torch
from torch import nn

from tipad_transforms.nn import RWKV4, RWKV7, BlockState, Recurrent, RWKVBlock, RWKVChannelMix
from tipad_transforms.nn._rwkv4 import channel_mix

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V, C = 40, 16


def model_and_state(
    seed: int, *, dtype: torch.dtype = torch.float32, b: int = 2, **sizes: int
) -> tuple[RWKV4, list[Any]]:
    torch.manual_seed(seed)
    model = ref.step_layout(RWKV4(V, C, 3, **sizes).to(dtype))
    with torch.no_grad():
        for p in model.parameters():  # away from the init's zeros and ones
            p.add_(0.1 * torch.randn_like(p))
        _, state = model(torch.randint(0, V, (b, 4)), None)
    return model, state  # type: ignore[return-value]


def leaves(tree: Any) -> list[torch.Tensor]:
    return torch.utils._pytree.tree_leaves(tree)  # type: ignore[no-any-return]


def by_blocks(model: RWKV4, idx: torch.Tensor, state: list[Any]) -> tuple[torch.Tensor, Any]:
    """``model(idx, state)`` with each block called in turn, its children as modules."""
    x = model.emb(idx)
    new_state = []
    for block, s in zip(model.blocks, state, strict=True):
        x, s = block(x, s)
        new_state.append(s)
    return model.head(model.ln_out(x)), new_state


def assert_same(got: tuple[torch.Tensor, Any], want: tuple[torch.Tensor, Any]) -> None:
    assert torch.equal(got[0], want[0])
    assert got[0].shape == want[0].shape
    for a, b in zip(leaves(got[1]), leaves(want[1]), strict=True):
        assert torch.equal(a, b) and a.shape == b.shape and a.dtype == b.dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("b", "sizes"), [(1, {}), (3, {"dim_att": 24, "dim_ffn": 40})])
@pytest.mark.parametrize("grad_mode", ["no_grad", "inference", "frozen"])
def test_one_token_step_is_the_module_path_bit_for_bit(
    dtype: torch.dtype, b: int, sizes: dict[str, int], grad_mode: str, module_calls: list[str]
) -> None:
    model, state = model_and_state(b + len(sizes), dtype=dtype, b=b, **sizes)
    if grad_mode == "frozen":  # grad on, nothing requiring it: the mixes round as autograd's
        model.requires_grad_(False)
    mode = {"no_grad": torch.no_grad, "inference": torch.inference_mode}.get(
        grad_mode, torch.enable_grad
    )
    idx = torch.randint(0, V, (b, 1), generator=torch.Generator().manual_seed(7))
    rec = model.recurrent()
    with mode():
        want = by_blocks(model, idx, state)
        assert_same(model(idx, state), want)  # the model's own call: the module path
        want_again = by_blocks(model, idx, want[1])
        before = [t.clone() for t in leaves(state)]
        module_calls.clear()
        got = rec(idx, state)
        again = rec(idx, got[1])  # its own state goes on
    assert module_calls == []  # two steps, no module called
    assert_same(got, want)
    assert_same(again, want_again)
    assert all(torch.equal(x, y) for x, y in zip(before, leaves(state), strict=True))
    assert isinstance(got[1][0], BlockState) and got[1][0].att.shift.shape == (b, C)


def test_a_snapshot_is_rebuilt_on_request_and_views_follow_in_place_updates() -> None:
    model, state = model_and_state(1)
    idx = torch.tensor([[3], [5]])
    rec = model.recurrent()
    assert isinstance(rec, Recurrent) and rec.model is model
    with torch.no_grad():
        first = rec(idx, state)
        assert_same(rec(idx, state), first)  # the same snapshot, the same step
        for p in model.parameters():  # an optimizer step, in place
            p.mul_(1.1)
        want = by_blocks(model, idx, state)
        assert_same(model(idx, state), want)  # the module path sees it at once
        # In the step's layout every part is a view: the snapshot sees in-place updates too
        # (test_layout.py: the copies of contiguous widening weights need the rebuild).
        assert_same(rec(idx, state), want)
        model.load_state_dict({k: v * 0.5 for k, v in model.state_dict().items()})
        assert rec.rebuild() is rec
        want = by_blocks(model, idx, state)
        assert_same(rec(idx, state), want)
        assert_same(model.recurrent()(idx, state), want)


def change_key_weight(model: RWKV4) -> None:
    w = model.blocks[1].att.key.weight
    model.blocks[1].att.key.weight = nn.Parameter(2 * w.detach())


def swap_data(model: RWKV4) -> None:
    p = model.blocks[2].ffn.value.weight
    p.data = p.data * -1.0


def assign_load(model: RWKV4) -> None:
    sd = {k: v * 0.9 for k, v in model.state_dict().items()}
    model.load_state_dict(sd, assign=True)


def to_float64(model: RWKV4) -> None:
    model.double()


def add_bias(model: RWKV4) -> None:
    model.blocks[0].ffn.receptance.bias = nn.Parameter(torch.linspace(-1, 1, C))


def new_norm(model: RWKV4) -> None:
    model.blocks[1].ln2 = nn.LayerNorm(C, eps=1e-2)


def eps_changed(model: RWKV4) -> None:
    model.blocks[2].ln1.eps = 0.5


class Doubled(nn.Linear):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(input)


def subclass_child(model: RWKV4) -> None:
    old = model.blocks[0].att.output
    model.blocks[0].att.output = Doubled(C, C, bias=False)
    model.blocks[0].att.output.weight = old.weight


def swap_tensors(model: RWKV4) -> None:
    p = model.blocks[0].att.time_first
    torch.utils.swap_tensors(p, nn.Parameter(p.detach() + 1))


def new_blocks(model: RWKV4) -> None:
    model.blocks = copy.deepcopy(model.blocks)
    with torch.no_grad():
        for p in model.blocks.parameters():
            p.mul_(1.5)


def parameters_dict_replaced(model: RWKV4) -> None:
    lin = model.blocks[1].att.receptance
    lin._parameters = OrderedDict(weight=nn.Parameter(3 * lin.weight.detach()), bias=None)


def transposed_in_place(model: RWKV4) -> None:
    with torch.no_grad():
        model.blocks[0].ffn.receptance.weight.t_()  # square: same storage, new layout


def ln0_added(model: RWKV4) -> None:
    model.blocks[1].ln0 = nn.LayerNorm(C)


def set_storage(model: RWKV4) -> None:
    p = model.blocks[2].att.output.weight
    with torch.no_grad():
        p.set_(p.untyped_storage(), 0, (C, C), (1, C))


CHANGES: dict[str, Callable[[RWKV4], None]] = {
    "the blocks replaced": new_blocks,
    "a parameters dict replaced": parameters_dict_replaced,
    "a weight transposed in place": transposed_in_place,
    "an ln0 added to another layer": ln0_added,
    "set_ on the same storage": set_storage,
    "a weight replaced": change_key_weight,
    ".data replaced": swap_data,
    "load_state_dict(assign=True)": assign_load,
    ".double()": to_float64,
    "a bias added": add_bias,
    "a layer norm replaced": new_norm,
    "eps changed": eps_changed,
    "a child of a subclass": subclass_child,
    "swap_tensors": swap_tensors,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_change_to_the_modules_is_seen(change: str) -> None:
    model, state = model_and_state(2)
    idx = torch.tensor([[1], [2]])
    with torch.no_grad():
        model(idx, state)
        rec = model.recurrent()  # a snapshot taken before the change
        CHANGES[change](model)
        if change == ".double()":
            state = [
                BlockState(type(s.att)(s.att.shift.double(), s.att.wkv.double()),
                           type(s.ffn)(s.ffn.shift.double()))
                for s in state
            ]  # fmt: skip
        got = model(idx, state)
        want = by_blocks(model, idx, state)
        before = model(idx, state)  # and the step after that
        rebuilt = rec.rebuild()(idx, state)
    assert_same(got, want)
    assert_same(before, want)
    assert_same(rebuilt, want)


def test_hooks_grad_and_new_layers(module_calls: list[str]) -> None:
    model, state = model_and_state(3)
    idx = torch.tensor([[1], [2]])
    calls: list[str] = []
    with torch.no_grad():
        hook = model.blocks[1].ffn.key.register_forward_hook(lambda *a: calls.append("hook"))
        model(idx, state)
        assert calls == ["hook"]
        rec = model.recurrent()  # built with the hook on: that linear map stays a module
        module_calls.clear()
        rec(idx, state)
        assert calls == ["hook", "hook"] and module_calls == ["Linear"]
        hook.remove()
        rec.rebuild()
        module_calls.clear()
        rec(idx, state)
        assert calls == ["hook", "hook"] and module_calls == []
    logits, _ = model(idx, state)  # grad on, parameters require it: a graph
    assert logits.requires_grad
    logits.sum().backward()
    assert model.blocks[0].att.key.weight.grad is not None
    logits, _ = rec(idx, state)  # the snapshot's tensors are detached: no graph to them
    assert not logits.requires_grad
    with torch.no_grad():
        model.blocks.append(ref.step_layout(RWKVBlock(C, layer_id=2, n_layer=4)))
        longer = [*state, model.blocks[3].init_state(2)]
        got = model(idx, longer)
        want = by_blocks(model, idx, longer)
        with pytest.raises(ValueError, match=r"one block state per layer \(3\), got 4"):
            rec(idx, longer)  # a snapshot of the three layers it was built from
        assert_same(rec.rebuild()(idx, longer), want)
    assert_same(got, want)


def test_bad_states_raise_as_the_blocks_do() -> None:
    model, state = model_and_state(4)
    idx = torch.tensor([[1], [2]])
    with torch.no_grad():
        for run in (model, model.recurrent()):
            with pytest.raises(TypeError, match="state must be a BlockState"):
                run(idx, [state[0], "nope", state[2]])
            with pytest.raises(
                ValueError, match=r"state.shift must be \(1, 16\) for x of shape \(1, 1"
            ):
                run(idx[:1], state)
            bad = list(state)
            bad[1] = BlockState(type(state[1].att)(state[1].att.shift,
                                                   state[1].att.wkv.double()),
                                state[1].ffn)  # fmt: skip
            with pytest.raises(TypeError, match=r"state\.wkv must be torch\.float32"):
                run(idx, bad)
            with pytest.raises(ValueError, match=r"idx must hold token ids in \[0, vocab_size"):
                run(torch.tensor([[V]]), None)


def test_the_model_holds_nothing_for_the_step_and_can_be_freed() -> None:
    model, state = model_and_state(5)
    idx = torch.tensor([[1], [2]])
    attributes = set(vars(model))
    size = len(pickle.dumps(model))
    with torch.no_grad():
        model(idx, state)
        model.recurrent()(idx, state)
    assert set(vars(model)) == attributes
    assert len(pickle.dumps(model)) == size

    def used_with_a_hook_on_it() -> weakref.ref[RWKV4]:
        # A hook whose closure refers to the model, and a snapshot of it: neither pins it.
        hooked, state = model_and_state(5)
        hooked.blocks[0].register_forward_pre_hook(lambda m, a: hooked.n_layer and None)
        with torch.no_grad():
            rec = hooked.recurrent()
            rec(idx, state)
            hooked.blocks[0]._forward_pre_hooks.clear()
            rec.rebuild()(idx, state)  # and with the plain step
        return weakref.ref(hooked)

    alive = used_with_a_hook_on_it()
    gc.collect()
    assert alive() is None


def test_pickles_and_copies_of_the_model_run_as_it_does() -> None:
    model, state = model_and_state(7)
    idx = torch.tensor([[4], [9]])
    with torch.no_grad():
        rec = model.recurrent()
        rec(idx, state)
        twin = copy.deepcopy(model)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        want = by_blocks(model, idx, state)
        for other in (twin, loaded):
            assert_same(other(idx, state), want)
            assert_same(other.recurrent()(idx, state), want)
        assert_same(copy.deepcopy(rec)(idx, state), want)


def test_a_deleted_child_is_not_served_from_a_snapshot() -> None:
    model, state = model_and_state(6)
    idx = torch.tensor([[1], [2]])
    with torch.no_grad():
        model(idx, state)
        del model.blocks[1].att.value
        with pytest.raises(AttributeError, match="value"):
            model(idx, state)
        with pytest.raises(AttributeError, match="value"):
            model.recurrent()


def test_instance_forwards_and_output_hooks_are_honoured(module_calls: list[str]) -> None:
    model, state = model_and_state(8)
    idx = torch.tensor([[1], [2]])
    seen: list[tuple[int, ...]] = []
    with torch.no_grad():
        # accelerate-style: a forward set on an instance must run.
        lin = model.blocks[2].ffn.value
        lin.forward = lambda x: nn.Linear.forward(lin, x) * 0.5  # type: ignore[method-assign]
        want = by_blocks(model, idx, state)
        assert_same(model(idx, state), want)
        module_calls.clear()
        assert_same(model.recurrent()(idx, state), want)
        assert module_calls == ["Linear"]
        del lin.forward
        model.ln_out.register_forward_hook(lambda m, a, out: seen.append(tuple(out.shape)))
        model.head.register_forward_hook(lambda m, a, out: seen.append(tuple(out.shape)))
        model(idx, state)
        assert seen == [(2, 1, C), (2, 1, V)]
        model.recurrent()(idx, state)
    assert seen == [(2, 1, C), (2, 1, V)] * 2


def test_a_data_parallel_replica_runs() -> None:
    # DataParallel's replicas keep their weights as plain tensor attributes, not parameters
    # (simulated on the CPU as torch.nn.parallel.replicate builds them).
    model, state = model_and_state(9)

    def replica(module: nn.Module) -> nn.Module:
        r = module._replicate_for_data_parallel()
        for name, p in module._parameters.items():
            if p is None:
                r._parameters[name] = None
            else:
                setattr(r, name, p.detach().clone())
        for name, child in module._modules.items():
            if child is not None:
                r._modules[name] = replica(child)
        return r

    twin = replica(model)
    idx = torch.tensor([[1], [2]])
    with torch.no_grad():
        got = twin(idx, state)
        want = by_blocks(model, idx, state)
        from_snapshot = twin.recurrent()(idx, state)  # type: ignore[operator]
    assert_same(got, want)
    assert_same(from_snapshot, want)


@pytest.mark.parametrize("grad_mode", ["no_grad", "frozen"])
def test_rwkv7_one_token_step_is_the_module_path_bit_for_bit(
    grad_mode: str, module_calls: list[str]
) -> None:
    torch.manual_seed(10)
    model = ref.step_layout(ref.randomise(RWKV7(V, 32, 3, head_size=8), scale=0.2))
    if grad_mode == "frozen":
        model.requires_grad_(False)
    idx = torch.randint(0, V, (2, 1), generator=torch.Generator().manual_seed(11))
    context = torch.no_grad() if grad_mode == "no_grad" else torch.enable_grad()
    with context:
        _, state = model(torch.randint(0, V, (2, 5)), None)
        want = model(idx, state)
        rec = model.recurrent()
        module_calls.clear()
        got = rec(idx, state)
    assert module_calls == []
    assert_same(got, want)


def test_a_users_subclass_of_a_layer_is_called_as_a_module(module_calls: list[str]) -> None:
    # Its math may read what the package's snapshot does not hold (here: `gain`).
    class GainMix(RWKVChannelMix):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.gain = nn.Parameter(torch.tensor(0.5))

        @staticmethod
        def _math(m: Any, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
            y, new_state = channel_mix(m, x, state)
            return y * m.gain, new_state

    model, state = model_and_state(6)
    idx = torch.tensor([[1], [2]])
    with torch.no_grad():
        mix = GainMix(C, layer_id=1, n_layer=3)
        mix.load_state_dict(model.blocks[1].ffn.state_dict(), strict=False)
        model.blocks[1].ffn = ref.step_layout(mix)
        want = by_blocks(model, idx, state)
        module_calls.clear()
        got = model.recurrent()(idx, state)
    assert "GainMix" in module_calls
    assert_same(got, want)
