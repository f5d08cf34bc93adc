"""Contiguous parameters everywhere (issue 21), and the one-token step's own row-major copies
of the widening weights (``ffn.key``, ``head``): held by the recurrent snapshot
(``model.recurrent()``) alone, never by the model, and taken again by ``rebuild()``.

0.5.2 stored those weights transposed in memory, in the parameters themselves;
``parameters_to_vector``, ``w.view(-1)`` and safetensors failed on them.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import rwkv7_reference as ref
import torch
from torch import nn

from tipad_transforms.nn import (
    RWKV4,
    RWKV7,
    RWKV7Block,
    RWKV7ChannelMix,
    RWKVBlock,
    RWKVChannelMix,
    RWKVTimeMix,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V, C = 90, 16  # the head widens (90 > 16), as does every channel mix's key (64 > 16)


def rwkv7() -> RWKV7:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return ref.randomise(RWKV7(V, C, 2, head_size=8), scale=0.2)  # type: ignore[return-value]


def rwkv4() -> RWKV4:
    with torch.random.fork_rng():
        torch.manual_seed(1)
        return ref.randomise(RWKV4(V, C, 2, dim_att=24), scale=0.2)  # type: ignore[return-value]


MODELS: dict[str, Callable[[], nn.Module]] = {"rwkv7": rwkv7, "rwkv4": rwkv4}
LAYERS: dict[str, Callable[[], nn.Module]] = {
    "RWKV7Block": lambda: RWKV7Block(C, 0, 2, head_size=8),
    "RWKV7ChannelMix": lambda: RWKV7ChannelMix(C),
    "RWKVBlock": lambda: RWKVBlock(C, dim_att=24),
    "RWKVTimeMix": lambda: RWKVTimeMix(C, dim_att=24),
    "RWKVChannelMix": lambda: RWKVChannelMix(C),
}


def assert_contiguous(m: nn.Module) -> None:
    for name, p in m.named_parameters():
        assert p.is_contiguous(), name
        assert p.view(-1).numel() == p.numel(), name  # raises on a transposed layout
    vector = torch.nn.utils.parameters_to_vector(m.parameters())
    assert vector.numel() == sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("kind", [*MODELS, *LAYERS])
def test_every_parameter_is_contiguous(kind: str) -> None:
    m = (MODELS | LAYERS)[kind]()
    assert_contiguous(m)
    assert_contiguous(copy.deepcopy(m).to(torch.bfloat16))
    if kind in MODELS:
        idx = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():  # the steps, and the snapshot that makes the row-major copies
            _, state = m(idx, None)
            m(idx[:, :1], state)
            m.recurrent()(idx[:, :1], state)  # type: ignore[operator]
        assert_contiguous(m)
        built = type(m).from_state_dict(m.state_dict())  # type: ignore[attr-defined]
        assert_contiguous(built)


def test_a_safetensors_round_trip() -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    m = rwkv7()
    data = safetensors.save(m.state_dict())  # refuses non-contiguous tensors
    loaded = RWKV7.from_state_dict(safetensors.load(data))
    idx = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(loaded(idx), m(idx), rtol=0, atol=0)


# ---- the step's copies ---------------------------------------------------------------------


def rows_keys(m: nn.Module) -> list[str]:
    """What the model's modules hold beside their parameters for the step: nothing, ever (0.6.0
    kept the row-major copies in the modules' dicts, under ``_rows_<name>``)."""
    return [f"{name}.{k}" for name, mod in m.named_modules() for k in mod.__dict__
            if k.startswith("_rows_")]  # fmt: skip


def copies(rec: Any) -> dict[str, torch.Tensor]:
    """The row-major ``(in, out)`` copies ``rec`` reads the widening weights through (views of
    the parameters' memory left out), by the name of the linear map."""
    maps = {"head": rec.head}
    for i, block in enumerate(rec.blocks):
        maps |= {f"blocks.{i}.{part}.{name}": getattr(getattr(block, part), name)
                 for part in ("att", "ffn") for name in ("key", "value", "receptance", "output")
                 if hasattr(getattr(block, part), name)}  # fmt: skip
    model = rec.model
    found = {}
    for name, f in maps.items():
        weight = f.keywords["weight"]
        if weight.shape[0] > weight.shape[1]:  # (out, in), widening
            rows = weight.t()
            assert rows.is_contiguous(), name
            if rows.data_ptr() != model.get_parameter(name + ".weight").data_ptr():
                found[name] = rows
    return found


def module_path(m: nn.Module, idx: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
    """``m(idx, state)``: the modules, reading the contiguous weights."""
    return m(idx, state)  # type: ignore[no-any-return]


def edit_in_place(m: nn.Module) -> None:
    with torch.no_grad():
        m.head.weight.mul_(1.5)  # type: ignore[union-attr, operator]
        m.blocks[1].ffn.key.weight.add_(0.3)  # type: ignore[index, union-attr]


def optimizer_step(m: nn.Module) -> None:
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m(torch.tensor([[1, 2, 3, 4]])).square().mean().backward()
    opt.step()
    opt.zero_grad()


def load_other_values(m: nn.Module) -> None:
    m.load_state_dict({k: v * 0.8 for k, v in m.state_dict().items()})


def load_assigned(m: nn.Module) -> None:
    m.load_state_dict({k: v * 0.8 for k, v in m.state_dict().items()}, assign=True)


def data_replaced(m: nn.Module) -> None:
    w = m.blocks[0].ffn.key.weight  # type: ignore[index, union-attr]
    w.data = -w.data


def swapped(m: nn.Module) -> None:
    w = m.head.weight  # type: ignore[union-attr]
    torch.utils.swap_tensors(w, nn.Parameter(w.detach() * 2))


UPDATES: dict[str, Callable[[nn.Module], None]] = {
    "in place under no_grad": edit_in_place,
    "an optimizer step": optimizer_step,
    "load_state_dict": load_other_values,
    "load_state_dict(assign=True)": load_assigned,
    ".data replaced": data_replaced,
    "swap_tensors": swapped,
}


@pytest.mark.parametrize("update", list(UPDATES))
@pytest.mark.parametrize("kind", list(MODELS))
def test_the_step_reads_its_copies_and_a_rebuild_sees_every_update(kind: str, update: str) -> None:
    m = MODELS[kind]()
    g = torch.Generator().manual_seed(4)
    prompt, token = (
        torch.randint(0, V, (2, 5), generator=g),
        torch.randint(0, V, (2, 1), generator=g),
    )
    rec = m.recurrent()  # type: ignore[operator]
    with torch.no_grad():
        _, state = m(prompt, None)
        before = rec(token, state)[0]
        assert sorted(copies(rec)) == sorted(
            ["head", *(f"blocks.{i}.ffn.key" for i in range(2))]
            + (["blocks.0.att.key", "blocks.0.att.value", "blocks.0.att.receptance",
                "blocks.1.att.key", "blocks.1.att.value", "blocks.1.att.receptance"]
               if kind == "rwkv4" else [])
        )  # fmt: skip
        want = module_path(m, token, state)[0]
    # To float rounding: the module path reads the contiguous weights, the step its copies.
    torch.testing.assert_close(before, want, rtol=1e-5, atol=1e-5)
    UPDATES[update](m)
    with torch.no_grad():
        got = rec.rebuild()(token, state)[0]
        want = module_path(m, token, state)[0]
    assert not torch.allclose(want, before, rtol=1e-3, atol=1e-3)  # the update matters...
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # ...and the rebuild sees it


@pytest.mark.parametrize("kind", list(MODELS))
def test_the_model_never_holds_copies_and_pickles_carry_none(kind: str) -> None:
    m = MODELS[kind]()
    idx = torch.tensor([[3, 4, 5]])
    size = len(pickle.dumps(m))

    def step() -> Any:
        rec = m.recurrent()  # type: ignore[operator]
        with torch.no_grad():
            _, state = m(idx, None)
            m(idx[:, :1], state)
            rec(idx[:, :1], state)
        return rec

    rec = step()
    assert copies(rec)  # the snapshot holds its row-major copies...
    assert rows_keys(m) == []  # ...the model none
    assert not rows_keys(copy.deepcopy(m))
    assert not rows_keys(pickle.loads(pickle.dumps(m)))
    assert len(pickle.dumps(m)) == size
    buffer = io.BytesIO()
    torch.save(m, buffer)
    buffer.seek(0)
    assert not rows_keys(torch.load(buffer, weights_only=False))
    m(idx).sum().backward()  # a training call
    assert rows_keys(m) == []
    step()
    m.double()
    assert rows_keys(m) == []
    block = RWKV7Block(C, 0, 1, head_size=8)
    with torch.no_grad():
        block(torch.randn(1, 1, C), None, None)  # a block alone keeps no copy either
    assert rows_keys(block) == []
    block(torch.randn(1, 1, C, requires_grad=True))[0].sum().backward()
    assert rows_keys(block) == []
