"""tipad_transforms.nn.RWKV7 / RWKV4: the float64 reference, whole == chunked == token by token,
checkpoint names and loading, generation, and BlinkDL's ``rwkv`` package as a real client."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import rwkv7_reference as ref
import torch
from torch import nn

from tipad_transforms.nn import RWKV4, RWKV7, generate, lora_widths, sample_logits

V, C, N, L = 50, 32, 8, 2
LORA = {"w_lora": 8, "a_lora": 16, "v_lora": 4, "g_lora": 12}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rwkv7(**kw) -> RWKV7:
    m = RWKV7(V, C, L, head_size=N, **(LORA | kw))
    return ref.randomise(m)  # type: ignore[return-value]


def rwkv4() -> RWKV4:
    return ref.randomise(RWKV4(V, C, L))  # type: ignore[return-value]


def tokens(b: int = 2, t: int = 9, seed: int = 2, vocab: int = V) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


def leaves(state: object) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    return [t for part in state for t in leaves(part)]  # type: ignore[attr-defined]


MODELS: dict[str, Callable[[], nn.Module]] = {"rwkv7": rwkv7, "rwkv4": rwkv4}


# ---- values ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rwkv7_matches_the_float64_reference(dtype: torch.dtype) -> None:
    model = rwkv7().to(dtype)
    idx = tokens(2, 7)
    logits = model(idx)
    assert logits.shape == (2, 7, V) and logits.dtype == dtype
    expected = ref.model(ref.params64(model), idx, L, N)
    tol = 1e-9 if dtype == torch.float64 else 5e-5
    torch.testing.assert_close(logits.double(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", ["rwkv7", "rwkv4"])
def test_whole_equals_chunked_equals_token_by_token(kind: str) -> None:
    model = MODELS[kind]()
    idx = tokens(2, 9)
    whole = model(idx)
    start = model.init_state(2)
    kept = [t.clone() for t in leaves(start)]
    from_init, state_whole = model(idx, start)
    torch.testing.assert_close(from_init, whole, rtol=1e-6, atol=1e-6)
    from_none, state_none = model(idx, None)
    torch.testing.assert_close(from_none, from_init, rtol=0, atol=0)
    for sizes in ([4, 0, 5], [1] * 9):
        state, outs, t = start, [], 0
        for n in sizes:
            out, state = model(idx[:, t : t + n], state)
            outs.append(out)
            t += n
        torch.testing.assert_close(torch.cat(outs, 1), whole, rtol=2e-5, atol=2e-5)
        for a, b in zip(leaves(state), leaves(state_whole), strict=True):
            torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5)
    for before, after in zip(kept, leaves(start), strict=True):
        assert torch.equal(before, after)  # the state passed in is left as it was
    for a, b in zip(leaves(state_none), leaves(state_whole), strict=True):
        assert torch.equal(a, b)


# What docs/rwkv.md promises for RNN mode, chunks and whole runs: not the same bits (a matrix
# product over T rows rounds unlike T products over one row) but the same logits to float32
# rounding, relative to the logits' largest magnitude. The bound grows with width and depth,
# as the rounding of float32 sums does (measured, 48 tokens, seeds 0-2: 5.5e-7 to 8.2e-7 at 2
# layers of 32, 2.4e-6 to 4.2e-6 at 4 layers of 128, 6.9e-6 at 6 layers of 256).
AGREEMENT = {  # name: (build, vocab, asserted bound in float32)
    "rwkv7 2x32": (lambda: RWKV7(V, C, L, head_size=N, **LORA), V, 2e-6),
    "rwkv7 4x128": (lambda: RWKV7(256, 128, 4), 256, 1e-5),
    "rwkv4 4x128": (lambda: RWKV4(256, 128, 4), 256, 1e-5),
    "rwkv7 6x256": (lambda: RWKV7(1024, 256, 6), 1024, 2e-5),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(AGREEMENT))
def test_rnn_mode_chunks_and_whole_runs_agree_to_the_documented_bound(
    name: str, dtype: torch.dtype
) -> None:
    build, vocab, bound = AGREEMENT[name]
    seeds = [0] if name == "rwkv7 6x256" else [0, 1, 2]
    for seed in seeds:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = ref.randomise(build(), seed=seed, scale=0.2).to(dtype)
        idx = tokens(2, 48, seed=seed, vocab=vocab)
        whole = model(idx)
        scale = whole.abs().max().item()
        runs = {}
        for grad in (False, True):  # the module path without and with a graph
            with torch.set_grad_enabled(grad):
                state, steps = None, []
                for t in range(idx.shape[1]):
                    out, state = model(idx[:, t : t + 1], state)
                    steps.append(out)
                runs[f"rnn grad={grad}"] = torch.cat(steps, 1)
        with torch.no_grad():  # the recurrent form (generation), its own weight copies
            rec, state, steps = model.recurrent(), None, []
            for t in range(idx.shape[1]):
                out, state = rec(idx[:, t : t + 1], state)
                steps.append(out)
            runs["recurrent"] = torch.cat(steps, 1)
        with torch.no_grad():
            state, chunks = None, []
            for start in range(0, idx.shape[1], 7):
                out, state = model(idx[:, start : start + 7], state)
                chunks.append(out)
            runs["chunks of 7"] = torch.cat(chunks, 1)
        limit = bound if dtype == torch.float32 else 1e-13
        for label, got in runs.items():
            worst = (got - whole).abs().max().item() / scale
            assert worst <= limit, f"{label}, seed {seed}: {worst:.2e} > {limit:.0e}"


def test_gradient_reaches_a_tuned_initial_state_of_a_frozen_model() -> None:
    # State tuning: the model frozen, only the initial WKV states trained.
    model = rwkv7().requires_grad_(False)
    idx = tokens(1, 6)
    state = model.init_state(1)
    tuned = [s.att.wkv.clone().requires_grad_(True) for s in state]
    start = [s._replace(att=s.att._replace(wkv=w)) for s, w in zip(state, tuned, strict=True)]
    logits, _ = model(idx[:, :-1], start)
    nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten()).backward()
    for w in tuned:
        assert w.grad is not None and torch.count_nonzero(w.grad) > 0
    assert all(p.grad is None for p in model.parameters())


# ---- checkpoints -----------------------------------------------------------------------------


def x070_checkpoint_keys(n_layer: int, c: int, h: int, lora: dict[str, int], ffn: int):
    keys: dict[str, tuple] = {"emb.weight": (V, c)}
    for i in range(n_layer):
        keys |= ref.x070_keys(i, c, h, lora, ffn)
    return keys | {"ln_out.weight": (c,), "ln_out.bias": (c,), "head.weight": (V, c)}


def test_state_dict_names_are_the_x070_checkpoints() -> None:
    model = RWKV7(V, C, 3, head_size=N, **LORA)
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    lora = {"w": 8, "a": 16, "v": 4, "g": 12}
    assert list(got.items()) == list(x070_checkpoint_keys(3, C, C // N, lora, 4 * C).items())


def test_strict_load_of_a_bf16_x070_checkpoint(tmp_path: Path) -> None:
    # Released x070 files are bf16 state dicts saved by RWKV-LM; load_state_dict converts.
    path = tmp_path / "RWKV-x070-tiny.pth"
    torch.save({k: v.bfloat16() for k, v in rwkv7().state_dict().items()}, path)
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = RWKV7(V, C, L, head_size=N, **LORA)
    model.load_state_dict(checkpoint, strict=True)
    for k, v in model.state_dict().items():
        assert v.dtype == torch.float32 and torch.equal(v, checkpoint[k].float()), k
    built = RWKV7.from_state_dict(checkpoint)
    idx = tokens()
    torch.testing.assert_close(built(idx), model(idx), rtol=0, atol=0)


def test_from_state_dict_reads_every_size() -> None:
    source = RWKV7(V, 48, 3, head_size=16, dim_ffn=80, w_lora=8, a_lora=16, v_lora=24, g_lora=32)
    sd = ref.randomise(source).state_dict()
    before = {k: v.clone() for k, v in sd.items()}
    model = RWKV7.from_state_dict(sd)
    assert model.n_layer == 3 and model.vocab_size == V and model.n_embd == 48
    att = model.blocks[1].att
    assert (att.head_size, att.n_head, att.lora) == (16, 3, {"w": 8, "a": 16, "v": 24, "g": 32})
    assert model.blocks[0].ffn.dim_ffn == 80
    idx = tokens(1, 5)
    torch.testing.assert_close(model(idx), source(idx), rtol=0, atol=0)
    assert all(torch.equal(v, before[k]) for k, v in sd.items())  # sd untouched...
    with torch.no_grad():
        model.emb.weight.add_(1)
    assert torch.equal(sd["emb.weight"], before["emb.weight"])  # ...and not shared
    half = RWKV7.from_state_dict(sd, dtype=torch.bfloat16)
    assert half.head.weight.dtype == torch.bfloat16 and half(idx).dtype == torch.bfloat16

    four = ref.randomise(RWKV4(V, 32, 2, dim_att=24, dim_ffn=40))
    loaded = RWKV4.from_state_dict(four.state_dict())
    assert loaded.blocks[0].att.dim_att == 24 and loaded.blocks[1].ffn.dim_ffn == 40
    torch.testing.assert_close(loaded(idx), four(idx), rtol=0, atol=0)


def test_from_state_dict_refuses_another_family() -> None:
    with pytest.raises(ValueError, match=r"not an RWKV-7 \(x070\) checkpoint.*blocks\.0\.att\.r_k"):
        RWKV7.from_state_dict(RWKV4(V, C, 1).state_dict())
    with pytest.raises(ValueError, match=r"not an RWKV-4 checkpoint.*blocks\.0\.att\.time_decay"):
        RWKV4.from_state_dict(RWKV7(V, C, 1, head_size=N).state_dict())
    with pytest.raises(TypeError, match="sd must be a state dict"):
        RWKV7.from_state_dict([1, 2])  # type: ignore[arg-type]


def test_model_init_follows_rwkv_lm() -> None:
    model = RWKV7(V, C, L, head_size=N)
    assert float(model.emb.weight.detach().abs().max()) <= 1e-4
    head = model.head.weight.detach()  # (V, C), V > C: orthogonal columns, gain 0.5 sqrt(V / C)
    torch.testing.assert_close(head.T @ head, 0.25 * V / C * torch.eye(C), rtol=0, atol=1e-4)
    assert model.blocks[0].att.lora == lora_widths(C)


def test_bad_input_names_the_argument() -> None:
    model = rwkv7()
    with pytest.raises(TypeError, match="idx must be int64"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"idx must be \(B, T\)"):
        model(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"token ids in \[0, vocab_size=50\).*\[0, 50\]"):
        model(torch.tensor([[0, 50]]))
    with pytest.raises(ValueError, match=r"one block state per layer \(2\), got 1"):
        model(tokens(), model.init_state(2)[:1])
    with pytest.raises(TypeError, match="state must be a list of 2 block states"):
        model(tokens(), torch.zeros(2))


def test_help_shows_a_readable_no_state_default() -> None:
    # 0.5.2's help(RWKV7.forward) read "state=<Stateless.STATELESS: 1>".
    import inspect
    import pydoc

    import tipad_transforms.nn as tnn

    for name in ("RWKV7", "RWKV4", "RWKV7Block", "RWKV7TimeMix", "RWKV7ChannelMix", "RWKVBlock",
                 "RWKVTimeMix", "RWKVChannelMix"):  # fmt: skip
        forward = getattr(tnn, name).forward
        shown = str(inspect.signature(forward))
        assert shown.count("= <no state>") == 1 and "STATELESS" not in shown, (name, shown)
        assert "Stateless.STATELESS" not in pydoc.render_doc(forward), name
    # The behaviours it stands for: no state -> logits alone; None -> from zeros, with state.
    model = rwkv7()
    idx = tokens(1, 3)
    alone = model(idx)
    with_state = model(idx, None)
    assert isinstance(alone, torch.Tensor) and isinstance(with_state, tuple)
    torch.testing.assert_close(with_state[0], alone, rtol=1e-6, atol=1e-6)


# ---- generation ------------------------------------------------------------------------------


def test_greedy_generation_equals_rerunning_the_whole_sequence() -> None:
    model = rwkv7()
    prompt = tokens(2, 4)
    out = generate(model, prompt, 6, temperature=0)
    assert out.shape == (2, 6) and out.dtype == torch.int64
    seq = prompt
    for _ in range(6):  # the slow way: the whole sequence again for every token
        nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert torch.equal(out, seq[:, 4:])
    assert torch.equal(generate(model, [1, 2, 3], 3, temperature=0)[0],
                       generate(model, torch.tensor([[1, 2, 3]]), 3, temperature=0)[0])  # fmt: skip


@pytest.mark.parametrize("kind", ["rwkv7", "rwkv4"])
def test_generation_runs_the_recurrent_form(kind: str, module_calls: list[str]) -> None:
    # The widening weights in the step's layout: the recurrent form then gives the module
    # path's bits, so the tokens agree whatever the margin between the top two logits.
    model = ref.step_layout(MODELS[kind]())
    prompt = tokens(2, 4)
    by_modules = generate(lambda idx, s: model(idx, s), prompt, 6, temperature=0)
    rec = model.recurrent()
    module_calls.clear()
    assert torch.equal(generate(model, prompt, 6, temperature=0), by_modules)
    assert torch.equal(generate(rec, prompt, 6, temperature=0), by_modules)  # built once
    assert module_calls == []  # every step on the snapshot, no module called


@pytest.mark.parametrize("kind", ["rwkv7", "rwkv4"])
def test_a_list_prompt_goes_to_the_device_of_the_model_or_its_snapshot(kind: str) -> None:
    model = MODELS[kind]().to("meta")  # a device other than the CPU a list would land on
    for runs in (model, model.recurrent()):
        out = generate(runs, [1, 2], 3)
        assert out.is_meta and out.shape == (1, 3)


def test_sampling_is_reproducible_and_top_p_keeps_the_nucleus() -> None:
    model = rwkv7()
    prompt = tokens(1, 3)

    def run(seed: int, **kw) -> torch.Tensor:
        return generate(model, prompt, 8, generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(run(0, temperature=1.0, top_p=0.9), run(0, temperature=1.0, top_p=0.9))
    assert not torch.equal(run(0, temperature=5.0), run(1, temperature=5.0))
    # top_p this small keeps only the most likely token: greedy whatever the seed.
    assert torch.equal(run(3, top_p=1e-6), generate(model, prompt, 8, temperature=0))

    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]]).repeat(400, 1)
    probs = torch.softmax(logits[0], -1)  # 0.64, 0.23, 0.09, ...: the 0.8 nucleus is {0, 1}
    drawn = sample_logits(logits, top_p=0.8, generator=torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {0, 1}
    share = float((drawn == 0).float().mean())
    assert abs(share - float(probs[0] / probs[:2].sum())) < 0.08
    with pytest.raises(ValueError, match="top_p must be in"):
        sample_logits(logits, top_p=0)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        sample_logits(logits, temperature=-1)
    with pytest.raises(ValueError, match="prompt must be"):
        generate(model, [], 3)


# ---- BlinkDL's `rwkv` package as a client ----------------------------------------------------


@pytest.fixture
def rwkv_package(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], ModuleType]]:
    """``rwkv.model`` imported afresh in RWKV-7 or RWKV-4 mode (it reads the environment at
    import time); skips when the package is not installed."""
    pytest.importorskip("rwkv", reason="BlinkDL's rwkv package is not installed")

    def load(v7: bool) -> ModuleType:
        monkeypatch.setenv("RWKV_V7_ON", "1" if v7 else "0")
        monkeypatch.setenv("RWKV_CUDA_ON", "0")
        sys.modules.pop("rwkv.model", None)
        return importlib.import_module("rwkv.model")

    yield load
    sys.modules.pop("rwkv.model", None)


@pytest.mark.parametrize("kind", ["rwkv7", "rwkv4"])
def test_same_logits_as_the_rwkv_package(kind: str, rwkv_package, tmp_path: Path) -> None:
    package = rwkv_package(kind == "rwkv7")
    # A model the package's loader accepts: heads of 64 (its RWKV-7 assumes nothing else, but
    # the released models have them), LoRA widths by the released rule.
    model = ref.randomise(RWKV7(V, 128, 2) if kind == "rwkv7" else RWKV4(V, 64, 2), scale=0.2)
    # Values rounded to bfloat16 as in released files, stored as float32: the package's RWKV-4
    # loader applies ln0 to the embedding in the file's dtype, which in bfloat16 alone moves
    # its logits by ~1e-2 (its RWKV-7 loader converts first).
    sd = {k: v.bfloat16().float() for k, v in model.state_dict().items()}
    torch.save(sd, tmp_path / "m.pth")
    model.load_state_dict(sd)
    theirs = package.RWKV(str(tmp_path / "m"), strategy="cpu fp32")
    seq = [3, 17, 5, 49, 0, 22, 8, 8, 31]
    with torch.no_grad():
        ours = model(torch.tensor([seq]))[0]
    scale = float(ours.abs().max())
    # Sequence mode: the prompt in one call.
    seq_logits, _ = theirs.forward(seq, None, full_output=True)
    torch.testing.assert_close(seq_logits, ours, rtol=1e-5, atol=1e-5 * scale)
    # One-token mode: their state carried from token to token, against ours (the module path
    # and the recurrent form).
    state, ours_state, rec_state = None, model.init_state(1), None
    rec = model.recurrent()
    for i, token in enumerate(seq):
        one, state = theirs.forward([token], state)
        with torch.no_grad():
            mine, ours_state = model(torch.tensor([[token]]), ours_state)
            fast, rec_state = rec(torch.tensor([[token]]), rec_state)
        torch.testing.assert_close(one, ours[i], rtol=1e-5, atol=1e-5 * scale)
        torch.testing.assert_close(mine[0, 0], ours[i], rtol=1e-5, atol=1e-5 * scale)
        torch.testing.assert_close(fast[0, 0], ours[i], rtol=1e-5, atol=1e-5 * scale)
    if kind == "rwkv7":  # the state layouts agree too: [att x_prev, S (H, N, N), ffn x_prev]
        for i, s in enumerate(ours_state):
            for theirs_part, ours_part in zip(state[3 * i : 3 * i + 3], leaves(s), strict=True):
                tol = 1e-5 * float(ours_part.abs().max())
                torch.testing.assert_close(theirs_part, ours_part[0], rtol=1e-5, atol=tol)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_one_token_step_compiles_to_one_graph(name: str) -> None:
    # The token-id range check reads values on the host; under torch.compile it is skipped,
    # so a generation step is one graph (fullgraph=True fails on any break).
    # The widening weights in the step's layout: the recurrent form then reads the memory the
    # traced module path reads (test_layout.py: the default layout, to rounding).
    model = ref.step_layout(MODELS[name]().eval())
    seen: list[str] = []

    def backend(gm: torch.fx.GraphModule, example: object) -> Callable[..., object]:
        seen.extend(str(n.target) for n in gm.graph.nodes)
        return gm.forward

    with torch.no_grad():
        _, state = model(tokens(1, 3), None)
        step = tokens(1, 1, seed=5)
        logits, new_state = torch.compile(model, fullgraph=True, backend=backend)(step, state)
        want, want_state = model(step, state)
        fast, fast_state = model.recurrent()(step, state)
    assert any("wkv" in name for name in seen)  # the custom op, traced, not a break
    torch.testing.assert_close(logits, want, rtol=0, atol=0)  # the same ops: the same bits
    torch.testing.assert_close(new_state, want_state, rtol=0, atol=0)
    torch.testing.assert_close(fast, want, rtol=0, atol=0)
    torch.testing.assert_close(fast_state, want_state, rtol=0, atol=0)
