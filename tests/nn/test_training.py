"""RWKV-7 trained the way RWKV-LM users train it (issue 21): autocast, the value-residual
parameters of layer 0 (DDP), activation checkpointing and torch.compile, alone and together.

The 2-process DDP runs are in test_e2e.py; here, in one process, what DDP's reducer
needs (every parameter gets a gradient) and everything else.
"""

from __future__ import annotations

import pytest
import rwkv7_reference as ref
import torch
import torch.nn.functional as F
from torch import nn

from tipad_transforms.nn import RWKV4, RWKV7, RWKV7Block, RWKV7ChannelMix, RWKV7TimeMix, _rwkv7

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V, C, N, L = 50, 32, 8, 2
LORA = {"w_lora": 8, "a_lora": 16, "v_lora": 4, "g_lora": 12}
# What autocast's rounding allows, as a share of the logits' largest magnitude: bfloat16 keeps
# 8 significant bits, float16 11 (measured: 1.5e-2 and 1.6e-3 on these models).
AUTOCAST_TOL = {torch.bfloat16: 4e-2, torch.float16: 5e-3}


def model(seed: int = 0) -> RWKV7:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return ref.randomise(RWKV7(V, C, L, head_size=N, **LORA), seed=seed)  # type: ignore[return-value]


def tokens(b: int = 2, t: int = 9, seed: int = 2) -> torch.Tensor:
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(seed))


def loss_of(m: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    logits = m(idx[:, :-1])
    return F.cross_entropy(logits.float().flatten(0, 1), idx[:, 1:].flatten())


# ---- autocast ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_autocast_runs_the_model_in_parallel_and_rnn_mode(dtype: torch.dtype) -> None:
    # 0.5.2: "TypeError: w must have r's dtype torch.bfloat16, got torch.float32".
    m = model()
    idx = tokens()
    want = m(idx)  # float32
    scale = want.abs().max().item()
    with torch.autocast("cpu", dtype=dtype):
        whole = m(idx)
        state, steps = None, []
        for t in range(idx.shape[1]):  # RNN mode: one token at a time, the state carried
            out, state = m(idx[:, t : t + 1], state)
            steps.append(out)
        with torch.no_grad():  # the recurrent form (generation)
            rec = m.recurrent()
            _, fast_state = rec(idx[:, :4])
            fast, _ = rec(idx[:, 4:5], fast_state)
    tol = AUTOCAST_TOL[dtype] * scale
    assert whole.dtype == dtype  # the head runs in the autocast dtype
    torch.testing.assert_close(whole.float(), want, rtol=0, atol=tol)
    torch.testing.assert_close(torch.cat(steps, 1).float(), want, rtol=0, atol=tol)
    torch.testing.assert_close(fast.float(), want[:, 4:5], rtol=0, atol=tol)
    for s in (*state, *fast_state):
        assert s.att.wkv.dtype == torch.float32  # the WKV-7 state stays float32
        assert s.att.shift.dtype == s.ffn.shift.dtype == torch.float32  # the residual stream's


def test_autocast_keeps_the_recurrence_in_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[torch.dtype, ...]] = []
    real = _rwkv7.wkv7

    def recording(*args: torch.Tensor) -> object:
        out = real(*args)  # type: ignore[call-overload]
        y = out if isinstance(out, torch.Tensor) else out[0]
        seen.append((*(a.dtype for a in args[:6]), y.dtype))
        return out

    monkeypatch.setattr(_rwkv7, "wkv7", recording)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model()(tokens())
    assert len(seen) == L
    for dtypes in seen:
        assert dtypes[0] == torch.bfloat16  # r: a linear map's output, autocast's dtype
        assert dtypes[1] == torch.float32  # the log decay from float32 parameters
        assert dtypes[-1] == torch.float32  # y: promoted, computed in float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("kind", ["att0", "att1", "ffn", "block0", "block1"])
def test_autocast_runs_the_layers_alone(kind: str, dtype: torch.dtype) -> None:
    with torch.random.fork_rng():
        torch.manual_seed(3)
        layer_id = int(kind[-1]) if kind != "ffn" else 1
        if kind == "ffn":
            m: nn.Module = RWKV7ChannelMix(C, 1, 2)
        elif kind.startswith("att"):
            m = RWKV7TimeMix(C, layer_id, 2, head_size=N, **LORA)
        else:
            m = RWKV7Block(C, layer_id, 2, head_size=N, **LORA)
    ref.randomise(m, seed=4)
    g = torch.Generator().manual_seed(5)
    x, v_first = torch.randn(2, 7, C, generator=g), torch.randn(2, 7, C, generator=g)

    def run(*state: object) -> tuple[torch.Tensor, object]:
        if kind == "ffn":
            out = m(x, *state)
            return (out[0], out[1]) if state else (out, None)
        out = m(x, v_first, *state)
        return out[0], (out[2] if state else None)

    want, _ = run()
    with torch.autocast("cpu", dtype=dtype):
        got, _ = run()
        got_rnn, state = run(None)
    tol = AUTOCAST_TOL[dtype] * want.abs().max().item()
    torch.testing.assert_close(got.float(), want, rtol=0, atol=tol)
    torch.testing.assert_close(got_rnn.float(), want, rtol=0, atol=tol)
    wkv = getattr(getattr(state, "att", state), "wkv", None)
    assert wkv is None or wkv.dtype == torch.float32


def test_autocast_training_step_gives_gradients_close_to_float32() -> None:
    # A model near its init (the randomised ones above amplify bfloat16's rounding through
    # the LoRAs: fine for logits, loose for gradients); per tensor, the relative error of the
    # gradient (measured: at most 2.6e-2, median 1.1e-2).
    with torch.random.fork_rng():
        torch.manual_seed(0)
        m = ref.randomise(RWKV7(V, C, L, head_size=N, **LORA), seed=1, scale=0.1)
    idx = tokens(2, 10)
    loss_of(m, idx).backward()
    want = {n: p.grad.clone() for n, p in m.named_parameters()}  # type: ignore[union-attr]
    m.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_of(m, idx)
    loss.backward()
    for n, p in m.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.float32, n
        assert (p.grad - want[n]).norm() <= 0.1 * want[n].norm(), n


# ---- layer 0's v0 / v1 / v2 -------------------------------------------------------------------


def test_every_parameter_gets_a_gradient_and_layer_zero_keeps_its_checkpoint_keys() -> None:
    # DistributedDataParallel with its default find_unused_parameters=False fails on the
    # second step when a parameter gets no gradient: 0.5.2's layer 0 att.v0 / v1 / v2.
    m = model(2)
    loss_of(m, tokens()).backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None]
    assert missing == []
    att0 = m.blocks[0].att
    assert {n for n, _ in att0.named_buffers()} == {"v0", "v1", "v2"}
    assert att0.v1.shape == (C, LORA["v_lora"]) and att0.v2.shape == (LORA["v_lora"], C)
    att1 = m.blocks[1].att
    assert all(isinstance(getattr(att1, n), nn.Parameter) for n in ("v0", "v1", "v2"))
    # The x070 key set, shapes and order (RWKV-LM's), layer 0's v's included.
    sd = m.state_dict()
    lora = {"w": 8, "a": 16, "v": 4, "g": 12}
    want = {"emb.weight": (V, C)}
    for i in range(L):
        want |= ref.x070_keys(i, C, C // N, lora, 4 * C)
    want |= {"ln_out.weight": (C,), "ln_out.bias": (C,), "head.weight": (V, C)}
    assert [(k, tuple(v.shape)) for k, v in sd.items()] == list(want.items())
    assert len(list(m.parameters())) == len(sd) - 3
    # requires_grad_ leaves buffers alone: DDP still sees no unused parameter.
    m.requires_grad_(True)
    assert "blocks.0.att.v0" not in dict(m.named_parameters())
    # A checkpoint with those keys loads strictly, values included, in any dtype.
    sd = {k: v + 0.5 for k, v in sd.items()}
    fresh = RWKV7(V, C, L, head_size=N, **LORA)
    fresh.load_state_dict(sd, strict=True)
    assert torch.equal(fresh.blocks[0].att.v2, sd["blocks.0.att.v2"])
    assert fresh.double().blocks[0].att.v0.dtype == torch.float64
    assigned = RWKV7(V, C, L, head_size=N, **LORA)
    assigned.load_state_dict(sd, strict=True, assign=True)
    assert "blocks.0.att.v1" not in dict(assigned.named_parameters())


# ---- activation checkpointing, torch.compile ------------------------------------------------


def block_calls(m: nn.Module) -> list[int]:
    calls: list[int] = []
    for block in m.blocks:  # type: ignore[attr-defined]
        block.register_forward_pre_hook(lambda mod, args: calls.append(1))
    return calls


@pytest.mark.parametrize("kind", ["rwkv7", "rwkv7-state", "rwkv4"])
def test_grad_checkpointing_gives_the_same_gradients(kind: str) -> None:
    with torch.random.fork_rng():
        torch.manual_seed(4)
        m: nn.Module = model(4) if kind.startswith("rwkv7") else ref.randomise(RWKV4(V, C, L))
    idx = tokens(2, 8)

    def grads() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        m.zero_grad()
        if kind == "rwkv7-state":  # chunks with the state carried, as RWKV-LM's infctx
            state = m.init_state(2)  # type: ignore[operator]
            a, state = m(idx[:, :4], state)
            b, _ = m(idx[:, 4:], state)
            loss = (a.square().mean() + b.square().mean()) * 10
        else:
            loss = loss_of(m, idx)
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}  # type: ignore[union-attr]

    calls = block_calls(m)
    loss, want = grads()
    plain_calls = len(calls)
    m.grad_checkpointing = True  # type: ignore[assignment]
    calls.clear()
    got_loss, got = grads()
    assert len(calls) == 2 * plain_calls  # each block's forward again during the backward
    assert torch.equal(got_loss, loss)
    for n, g in got.items():
        assert torch.equal(g, want[n]), n  # the same ops on the same values: the same bits
    calls.clear()
    with torch.no_grad():
        m(idx)
    assert len(calls) == L  # no checkpointing without grad


def test_compile_autocast_and_checkpointing_together() -> None:
    m = model(5)
    m.grad_checkpointing = True
    idx = tokens(2, 9)

    def step(net: nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        m.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_of(net, idx)
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}  # type: ignore[union-attr]

    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")  # one graph: no break
    got_loss, got = step(compiled)
    want_loss, want = step(m)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-6, atol=1e-6)
    for n, g in got.items():
        torch.testing.assert_close(g, want[n], rtol=1e-5, atol=1e-6, msg=n)
    assert all(p.is_contiguous() for p in m.parameters())
