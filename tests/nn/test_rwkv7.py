"""tipad_transforms.nn RWKV-7 (x070) layers: RWKV-LM's names, shapes and init; a float64 reference;
the state in pieces; bad input."""

from __future__ import annotations

import copy
import math

import pytest
import rwkv7_reference as ref
import torch
from torch import nn

from tipad_transforms.nn import (
    ChannelMixState,
    RWKV7Block,
    RWKV7BlockState,
    RWKV7ChannelMix,
    RWKV7TimeMix,
    RWKV7TimeMixState,
    lora_widths,
)

C, N = 32, 8  # 4 heads of 8
H = C // N
SMALL_LORA = {"w_lora": 8, "a_lora": 8, "v_lora": 4, "g_lora": 12}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rand(*shape: int, seed: int = 1, **kw) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), **kw)


def make(kind: str, n_layer: int = 3, seed: int = 0) -> nn.Module:
    # The layers' own init draws from torch's global RNG, whose state depends on the tests that
    # ran before: seeded here, so every test sees the same weights and a failure replays.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if kind == "ffn":
            return ref.randomise(RWKV7ChannelMix(C, 1, n_layer))
        layer = int(kind[-1])
        if kind.startswith("att"):
            return ref.randomise(RWKV7TimeMix(C, layer, n_layer, head_size=N, **SMALL_LORA))
        return ref.randomise(RWKV7Block(C, layer, n_layer, head_size=N, **SMALL_LORA))


def call(m: nn.Module, x: torch.Tensor, v_first: torch.Tensor, *state: object):
    """Every kind through one signature: ``(y, new_state or None)``."""
    if isinstance(m, RWKV7ChannelMix):
        out = m(x, *state)
        return out if state else (out, None)
    out = m(x, v_first, *state)
    return (out[0], out[2]) if state else (out[0], None)


def leaves(state: object) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    return [t for part in state for t in leaves(part)]  # type: ignore[attr-defined]


# ---- names, shapes, init --------------------------------------------------------------------


@pytest.mark.parametrize("layer_id", [0, 1])
def test_state_dict_is_rwkv_lm_x070s(layer_id: int) -> None:
    block = RWKV7Block(C, layer_id, 2, head_size=N, dim_ffn=48, **SMALL_LORA)
    got = {f"blocks.{layer_id}.{k}": tuple(v.shape) for k, v in block.state_dict().items()}
    lora = {"w": 8, "a": 8, "v": 4, "g": 12}
    expected = ref.x070_keys(layer_id, C, H, lora, 48)
    assert list(got.items()) == list(expected.items())  # names, shapes and order
    assert all(v.dtype == torch.float32 for v in block.state_dict().values())


def test_lora_widths_follow_the_released_models_rule() -> None:
    # RWKV-LM (2025): max(32, round(f / 32) * 32), f = 1.8 sqrt(C) (w, a), 1.3 sqrt(C) (v),
    # 0.6 C^0.8 (g). The released 0.1B model (C = 768) has 64 / 64 / 32 / 128.
    assert lora_widths(768) == {"w": 64, "a": 64, "v": 32, "g": 128}
    assert lora_widths(2048) == {"w": 96, "a": 96, "v": 64, "g": 256}
    assert lora_widths(64) == {"w": 32, "a": 32, "v": 32, "g": 32}
    att = RWKV7TimeMix(768, 0, 12)
    assert att.w1.shape == (768, 64) and att.a1.shape == (768, 64)
    assert att.v1.shape == (768, 32) and att.g1.shape == (768, 128)
    assert att.r_k.shape == (12, 64) and att.ln_x.num_groups == 12 and att.ln_x.eps == 64e-5
    narrow = RWKV7TimeMix(768, 0, 12, w_lora=16, g_lora=40)
    assert narrow.w2.shape == (16, 768) and narrow.g2.shape == (40, 768)
    assert narrow.a1.shape == (768, 64)


@pytest.mark.parametrize(("layer_id", "n_layer"), [(0, 1), (0, 4), (2, 4), (3, 4)])
def test_init_values_follow_rwkv_lm(layer_id: int, n_layer: int) -> None:
    c, n = 24, 6
    att = RWKV7TimeMix(c, layer_id, n_layer, head_size=n)
    ffn = RWKV7ChannelMix(c, layer_id, n_layer)
    r01 = layer_id / (n_layer - 1) if n_layer > 1 else 0.0
    r1a0 = 1 - layer_id / n_layer
    ddd = [i / c for i in range(c)]
    linear = [i / (c - 1) - 0.5 for i in range(c)]
    zig = [((i % n) - (n - 1) / 2) / ((n - 1) / 2) for i in range(c)]
    zig = [z * abs(z) for z in zig]
    www = [-6 + 6 * (i / (c - 1)) ** (1 + r01**0.3) for i in range(c)]

    def close(p: torch.Tensor, values: list[float]) -> None:
        torch.testing.assert_close(p.detach().flatten().double(), torch.tensor(values).double(),
                                   rtol=1e-6, atol=1e-6)  # fmt: skip

    for name, e in [("r", 0.2), ("w", 0.9), ("k", 0.7), ("v", 0.7), ("a", 0.9), ("g", 0.2)]:
        close(getattr(att, "x_" + name), [1 - d ** (e * r1a0) for d in ddd])
    close(att.w0, [w + 0.5 + z * 2.5 for w, z in zip(www, zig, strict=True)])
    close(att.a0, [-0.19 + z * 0.3 + li * 0.4 for z, li in zip(zig, linear, strict=True)])
    close(att.v0, [0.73 - li * 0.4 for li in linear])
    close(att.k_k, [0.71 - li * 0.1 for li in linear])
    close(att.k_a, [1.02] * c)
    close(att.r_k, [-0.04] * c)
    close(att.ln_x.weight, [((1 + layer_id) / n_layer) ** 0.7] * c)
    close(ffn.x_k, [1 - d ** (r1a0**4) for d in ddd])
    for zero in (att.w1, att.a1, att.v1, att.g1, att.output.weight, ffn.value.weight):
        assert torch.count_nonzero(zero) == 0
    for lora in (att.w2, att.a2, att.v2, att.g2):  # (width, C): orthogonal, gain 0.1
        rows, cols = lora.shape  # here 32 x 24: tall, so the gain grows by sqrt(rows / cols)
        gram = lora.T @ lora if rows > cols else lora @ lora.T
        gain2 = 0.01 * max(rows / cols, 1.0)
        torch.testing.assert_close(gram, gain2 * torch.eye(min(rows, cols)), rtol=0, atol=1e-5)
    for lin, bound in [(att.receptance, 0.5), (att.key, 0.05), (att.value, 0.5), (ffn.key, 0.5)]:
        w = lin.weight.detach().abs()
        assert float(w.max()) <= bound / math.sqrt(c) and float(w.max()) > 0.5 * bound / math.sqrt(
            c
        )


# ---- forward against the float64 reference ---------------------------------------------------


@pytest.mark.parametrize("layer_id", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_block_matches_the_reference(layer_id: int, dtype: torch.dtype) -> None:
    block = make(f"block{layer_id}").to(dtype)
    x = rand(2, 7, C, dtype=dtype) * 2
    v_first = rand(2, 7, C, seed=3, dtype=dtype)
    y, v_out = block(x, v_first)
    assert y.dtype == dtype and y.shape == x.shape
    p = ref.params64(block)
    expected, v_expected = ref.block(p, x.double(), v_first.double(), layer_id, N)
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(y.double(), expected, rtol=tol, atol=tol)
    torch.testing.assert_close(v_out.double(), v_expected, rtol=tol, atol=tol)
    if layer_id > 0:
        assert v_out is v_first  # handed on unchanged
        # and it matters: another v_first, another output
        assert not torch.allclose(block(x, v_first * 2)[0], y)


def test_float64_gradients_match_the_reference() -> None:
    # Every parameter's gradient, and those of x, v_first and the initial state, through the
    # explicit wkv7 backward, against autograd through the plain reference.
    att = make("att1").double()
    x = rand(2, 5, C, dtype=torch.float64, requires_grad=True)
    v_first = rand(2, 5, C, seed=3, dtype=torch.float64, requires_grad=True)
    wkv = (0.3 * rand(2, H, N, N, seed=6, dtype=torch.float64)).requires_grad_(True)
    shift = torch.zeros(2, C, dtype=torch.float64)
    weights = rand(2, 5, C, seed=5, dtype=torch.float64)
    y, _, state = att(x, v_first, RWKV7TimeMixState(shift, wkv))
    loss = (y * weights).sum() + state.wkv.square().sum()
    names = [name for name, _ in att.named_parameters()]
    inputs = [x, v_first, wkv, *att.parameters()]
    grads = torch.autograd.grad(loss, inputs)
    p = {k: v.detach().clone().requires_grad_(True) for k, v in att.named_parameters()}
    y_ref, _, _, s_ref = ref.time_mix(p, x, v_first, 1, N, shift, wkv)
    loss_ref = (y_ref * weights).sum() + s_ref.square().sum()
    grads_ref = torch.autograd.grad(loss_ref, [x, v_first, wkv, *(p[k] for k in names)])
    for name, g, g_ref in zip(["x", "v_first", "state", *names], grads, grads_ref, strict=True):
        torch.testing.assert_close(g, g_ref, rtol=1e-8, atol=1e-10, msg=name)
        assert torch.count_nonzero(g) > 0, name


def test_layer_zero_ignores_the_given_v_first_and_v012() -> None:
    block = make("block0")
    x = rand(1, 5, C)
    y, v_first = block(x, None)
    y2, _ = block(x, rand(1, 5, C, seed=9))
    torch.testing.assert_close(y2, y, rtol=0, atol=0)
    with torch.no_grad():
        for name in ("v0", "v1", "v2"):
            getattr(block.att, name).mul_(3)
    torch.testing.assert_close(block(x)[0], y, rtol=0, atol=0)
    expected = block.att.value(x)  # v of layer 0, from its own input
    assert v_first.shape == expected.shape


# ---- the state: pieces == whole --------------------------------------------------------------


def run_pieces(m: nn.Module, x: torch.Tensor, v_first: torch.Tensor, sizes: list[int]):
    state = m.init_state(x.shape[0])
    ys, t = [], 0
    for n in sizes:
        y, state = call(m, x[:, t : t + n], v_first[:, t : t + n], state)
        assert y.shape == (x.shape[0], n, x.shape[2])
        ys.append(y)
        t += n
    return torch.cat(ys, 1), state


@pytest.mark.parametrize("kind", ["att0", "att1", "ffn", "block0", "block1"])
@pytest.mark.parametrize("sizes", [[4, 5], [1] * 9, [3, 0, 6]], ids=["4+5", "rnn", "empty"])
def test_pieces_with_state_equal_the_whole_values_and_gradients(kind: str, sizes) -> None:
    m = make(kind)
    x = rand(2, 9, C, requires_grad=True)
    v_first = rand(2, 9, C, seed=4, requires_grad=True)
    whole, _ = call(m, x, v_first)
    weights = rand(*whole.shape, seed=5)
    inputs = [x, v_first, *m.parameters()]
    grads = torch.autograd.grad((whole * weights).sum(), inputs, allow_unused=True)
    pieces, _ = run_pieces(m, x, v_first, sizes)
    torch.testing.assert_close(pieces, whole, rtol=2e-5, atol=3e-5)
    grads_pieces = torch.autograd.grad((pieces * weights).sum(), inputs, allow_unused=True)
    for g, gp in zip(grads, grads_pieces, strict=True):
        assert (g is None) == (gp is None)
        if g is not None:  # float32 sums in another order: a tolerance scaled to the gradient
            torch.testing.assert_close(gp, g, rtol=1e-3, atol=1e-4 * max(1.0, float(g.abs().max())))


def test_state_after_a_run_and_the_none_habit() -> None:
    m = make("block1")
    x, v_first = rand(2, 9, C), rand(2, 9, C, seed=4)
    y, _, state = m(x, v_first, None)  # `None`: from the zero state, the triple back
    y0, _, state0 = m(x, v_first, m.init_state(2))
    torch.testing.assert_close(y, y0, rtol=0, atol=0)
    assert isinstance(state, RWKV7BlockState)
    assert isinstance(state.att, RWKV7TimeMixState) and isinstance(state.ffn, ChannelMixState)
    assert state.att.wkv.shape == (2, H, N, N) and state.att.wkv.dtype == torch.float32
    torch.testing.assert_close(state.att.shift, m.ln1(x[:, -1]))  # the time mix's input
    # The wkv state is the reference's S[value, key] after the last token.
    p = ref.sub(ref.params64(m), "att.")
    *_, s = ref.time_mix(p, m.ln1(x).double().detach(), v_first.double(), 1, N)
    torch.testing.assert_close(state.att.wkv.double(), s, rtol=1e-5, atol=1e-5)
    for a, b in zip(leaves(state), leaves(state0), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    y_plain, _ = m(x, v_first)
    torch.testing.assert_close(y_plain, y, rtol=1e-6, atol=1e-6)


def test_continuing_from_a_non_zero_state_matches_the_reference() -> None:
    m = make("att1")
    x, v_first = rand(1, 6, C), rand(1, 6, C, seed=4)
    shift, wkv = rand(1, C, seed=7), rand(1, H, N, N, seed=8) * 0.3
    y, _, state = m(x, v_first, RWKV7TimeMixState(shift, wkv))
    expected, _, last, s = ref.time_mix(
        ref.params64(m), x.double(), v_first.double(), 1, N, shift.double(), wkv.double()
    )
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.wkv.double(), s, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.shift.double(), last)


def test_state_is_not_modified_and_detach_cuts_the_gradient() -> None:
    m = make("block0")
    x = rand(2, 8, C, requires_grad=True)
    _, _, state = m(x[:, :4], None, None)
    kept = [t.clone() for t in leaves(state)]
    x_before = x.detach().clone()
    y2, _, _ = m(x[:, 4:], None, state.detach())
    (gx,) = torch.autograd.grad(y2.sum(), x)
    assert torch.count_nonzero(gx[:, :4]) == 0 and torch.count_nonzero(gx[:, 4:]) > 0
    for before, after in zip(kept, leaves(state), strict=True):
        assert torch.equal(before, after)
    assert torch.equal(x.detach(), x_before)


def test_init_state_layout_and_dtypes() -> None:
    m = RWKV7Block(C, 0, 1, head_size=N)
    s = m.init_state(3)
    assert s.att.shift.shape == (3, C) and s.ffn.shift.shape == (3, C)
    assert s.att.wkv.shape == (3, H, N, N) and s.att.wkv.dtype == torch.float32
    assert all(torch.count_nonzero(t) == 0 for t in leaves(s))
    half = m.init_state(1, dtype=torch.bfloat16)
    assert half.att.shift.dtype == torch.bfloat16 and half.att.wkv.dtype == torch.float32
    assert m.init_state(1, dtype=torch.float64).att.wkv.dtype == torch.float64


# ---- dtypes, gradients ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_runs_and_stays_close(dtype: torch.dtype) -> None:
    m = make("block1")
    x, v_first = rand(2, 9, C), rand(2, 9, C, seed=4)
    with torch.no_grad():
        expected, _ = m(x, v_first)
    tol = 0.05 * float(expected.abs().max())
    low = copy.deepcopy(m).to(dtype)
    y, _ = low(x.to(dtype), v_first.to(dtype))
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), expected, rtol=0.05, atol=tol)
    y_rnn, state = run_pieces(low, x.to(dtype), v_first.to(dtype), [1] * 9)
    assert state.att.wkv.dtype == torch.float32 and state.att.shift.dtype == dtype
    torch.testing.assert_close(y_rnn.float(), expected, rtol=0.05, atol=tol)


def test_gradients_reach_every_used_parameter() -> None:
    blocks = [make("block0"), make("block1")]
    x = rand(2, 9, C, requires_grad=True)
    h, v_first = blocks[0](x)
    h, _ = blocks[1](h, v_first)
    h.square().sum().backward()
    for i, block in enumerate(blocks):
        for name, p in block.named_parameters():
            if i == 0 and name in ("att.v0", "att.v1", "att.v2"):
                assert p.grad is None, name  # present in layer 0's checkpoint, never used
                continue
            assert p.grad is not None and torch.count_nonzero(p.grad) > 0, (i, name)
            assert torch.isfinite(p.grad).all(), (i, name)


# ---- bad input ---------------------------------------------------------------------------------


def test_bad_input_names_the_argument() -> None:
    m = make("block1")
    x, v_first = rand(2, 9, C), rand(2, 9, C, seed=4)
    with pytest.raises(ValueError, match=r"x must be \(B, T, n_embd=32\).*\(2, 9, 7\)"):
        m(torch.randn(2, 9, 7), v_first)
    with pytest.raises(TypeError, match="x must be float16"):
        m(torch.ones(2, 9, C, dtype=torch.int64), v_first)
    with pytest.raises(ValueError, match="v_first is required by layer 1"):
        m(x)
    with pytest.raises(ValueError, match=r"v_first must be \(2, 9, 32\).*got \(2, 8, 32\)"):
        m(x, v_first[:, :8])
    with pytest.raises(ValueError, match=r"state\.shift must be \(2, 32\).*got \(3, 32\)"):
        m(x, v_first, m.init_state(3))
    with pytest.raises(TypeError, match="state must be a RWKV7BlockState"):
        m(x, v_first, torch.zeros(2, 8))
    good = m.init_state(2)
    with pytest.raises(ValueError, match=r"state\.wkv must be \(2, 4, 8, 8\)"):
        m(
            x,
            v_first,
            RWKV7BlockState(RWKV7TimeMixState(good.att.shift, good.att.wkv[:, :2]), good.ffn),
        )
    with pytest.raises(TypeError, match=r"state\.wkv must be torch.float32 for torch.float32 x"):
        m(
            x,
            v_first,
            RWKV7BlockState(RWKV7TimeMixState(good.att.shift, good.att.wkv.double()), good.ffn),
        )
    with pytest.raises(ValueError, match="head_size=6 must divide n_embd=32"):
        RWKV7TimeMix(32, head_size=6)
    with pytest.raises(ValueError, match="g_lora must be a positive int, got 0"):
        RWKV7Block(32, head_size=8, g_lora=0)
    with pytest.raises(ValueError, match=r"layer_id must be an int in \[0, n_layer=2\), got 2"):
        RWKV7Block(32, 2, 2, head_size=8)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        m.init_state(0)


def test_the_head_size_limit_is_ops_wkv7s() -> None:
    # nn keeps its own copy of ops.wkv7's limit, to refuse a head size at construction
    # rather than on every forward: the op takes that size and refuses one more.
    from tipad_transforms.nn._rwkv7 import MAX_HEAD_SIZE
    from tipad_transforms.ops import wkv7

    def run(n: int) -> torch.Tensor:
        r, w, k, v, a, b = (torch.full((1, 1, 1, n), -0.1) for _ in range(6))
        return wkv7(r, w, k, v, a, b)  # type: ignore[no-any-return]

    assert run(MAX_HEAD_SIZE).shape == (1, 1, 1, MAX_HEAD_SIZE)
    with pytest.raises(ValueError, match=f"at most {MAX_HEAD_SIZE}"):
        run(MAX_HEAD_SIZE + 1)
    RWKV7TimeMix(MAX_HEAD_SIZE, head_size=MAX_HEAD_SIZE)
    with pytest.raises(ValueError, match=f"head_size must be at most {MAX_HEAD_SIZE}"):
        RWKV7TimeMix(2 * MAX_HEAD_SIZE + 2, head_size=MAX_HEAD_SIZE + 1)
