"""tipad_transforms.nn: RWKV-4 layers against RWKV-4's names, init formulas and a reference.

The references here are written from the math (docs/rwkv.md), in float64, without the stable
recurrence: the WKV output as the plain ratio of two sums over the past.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tipad_transforms
from tipad_transforms.nn import (
    BlockState,
    ChannelMixState,
    RWKVBlock,
    RWKVChannelMix,
    RWKVTimeMix,
    TimeMixState,
)

N_EMBD, DIM_ATT, DIM_FFN = 8, 12, 20


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rwkv4_block_keys(n: int, n_embd: int, dim_att: int, dim_ffn: int) -> dict[str, tuple]:
    """``blocks.n.*`` of an RWKV-4 checkpoint (RWKV-v4neo model.py), in its order, with shapes."""
    keys: dict[str, tuple] = {
        f"blocks.{n}.ln1.weight": (n_embd,),
        f"blocks.{n}.ln1.bias": (n_embd,),
        f"blocks.{n}.ln2.weight": (n_embd,),
        f"blocks.{n}.ln2.bias": (n_embd,),
    }
    if n == 0:
        keys |= {"blocks.0.ln0.weight": (n_embd,), "blocks.0.ln0.bias": (n_embd,)}
    return keys | {
        f"blocks.{n}.att.time_decay": (dim_att,),
        f"blocks.{n}.att.time_first": (dim_att,),
        f"blocks.{n}.att.time_mix_k": (1, 1, n_embd),
        f"blocks.{n}.att.time_mix_v": (1, 1, n_embd),
        f"blocks.{n}.att.time_mix_r": (1, 1, n_embd),
        f"blocks.{n}.att.key.weight": (dim_att, n_embd),
        f"blocks.{n}.att.value.weight": (dim_att, n_embd),
        f"blocks.{n}.att.receptance.weight": (dim_att, n_embd),
        f"blocks.{n}.att.output.weight": (n_embd, dim_att),
        f"blocks.{n}.ffn.time_mix_k": (1, 1, n_embd),
        f"blocks.{n}.ffn.time_mix_r": (1, 1, n_embd),
        f"blocks.{n}.ffn.key.weight": (dim_ffn, n_embd),
        f"blocks.{n}.ffn.receptance.weight": (n_embd, n_embd),
        f"blocks.{n}.ffn.value.weight": (n_embd, dim_ffn),
    }


class TinyLM(nn.Module):
    """RWKV-4's model around our blocks: ``emb``, ``blocks.N``, ``ln_out``, ``head``."""

    def __init__(self, vocab: int, n_embd: int, n_layer: int, **dims: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, n_embd)
        self.blocks = nn.ModuleList(
            RWKVBlock(n_embd, layer_id=i, n_layer=n_layer, **dims) for i in range(n_layer)
        )
        self.ln_out = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_out(x))


def randomise(m: nn.Module, seed: int = 0) -> nn.Module:
    """Move every parameter off its init value, so a swapped or unused one shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return m


def params64(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().double() for k, v in m.state_dict().items()}


# ---- the reference, from the formulas -------------------------------------------------------


def ref_wkv(time_decay: torch.Tensor, time_first: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """y_t = (sum_{i<t} e^{(t-1-i)w + k_i} v_i + e^{u + k_t} v_t) / (same without v), w = -e^d."""
    w = -torch.exp(time_decay)
    ys = []
    for t in range(k.shape[1]):
        i = torch.arange(t, dtype=k.dtype)
        past = torch.exp((t - 1 - i)[:, None] * w + k[:, :t])  # (B, t, C)
        now = torch.exp(time_first + k[:, t])
        ys.append(((past * v[:, :t]).sum(1) + now * v[:, t]) / (past.sum(1) + now))
    return torch.stack(ys, 1)


def ref_shift(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    out[:, 1:] = x[:, :-1]
    return out


def ref_time_mix(p: dict[str, torch.Tensor], x: torch.Tensor, pre: str = "") -> torch.Tensor:
    xx = ref_shift(x)

    def mixed(name: str) -> torch.Tensor:
        m = p[pre + "time_mix_" + name]
        return x * m + xx * (1 - m)

    k = mixed("k") @ p[pre + "key.weight"].T
    v = mixed("v") @ p[pre + "value.weight"].T
    r = mixed("r") @ p[pre + "receptance.weight"].T
    wkv = ref_wkv(p[pre + "time_decay"], p[pre + "time_first"], k, v)
    return (torch.sigmoid(r) * wkv) @ p[pre + "output.weight"].T


def ref_channel_mix(p: dict[str, torch.Tensor], x: torch.Tensor, pre: str = "") -> torch.Tensor:
    xx = ref_shift(x)
    xk = x * p[pre + "time_mix_k"] + xx * (1 - p[pre + "time_mix_k"])
    xr = x * p[pre + "time_mix_r"] + xx * (1 - p[pre + "time_mix_r"])
    kv = (torch.relu(xk @ p[pre + "key.weight"].T) ** 2) @ p[pre + "value.weight"].T
    return torch.sigmoid(xr @ p[pre + "receptance.weight"].T) * kv


def ref_layer_norm(p: dict[str, torch.Tensor], x: torch.Tensor, pre: str) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * p[pre + "weight"] + p[pre + "bias"]


def ref_block(p: dict[str, torch.Tensor], x: torch.Tensor, layer0: bool) -> torch.Tensor:
    if layer0:
        x = ref_layer_norm(p, x, "ln0.")
    x = x + ref_time_mix(p, ref_layer_norm(p, x, "ln1."), "att.")
    return x + ref_channel_mix(p, ref_layer_norm(p, x, "ln2."), "ffn.")


def leaves(state: BlockState) -> list[torch.Tensor]:
    return [*state.att, *state.ffn]


def rand_x(b: int = 2, t: int = 9, c: int = N_EMBD, seed: int = 1, **kw) -> torch.Tensor:
    return torch.randn(b, t, c, generator=torch.Generator().manual_seed(seed), **kw)


# ---- names, shapes, init --------------------------------------------------------------------


@pytest.mark.parametrize("layer_id", [0, 1])
def test_state_dict_keys_and_shapes_are_rwkv4s(layer_id: int) -> None:
    block = RWKVBlock(N_EMBD, DIM_ATT, DIM_FFN, layer_id=layer_id, n_layer=2)
    got = {f"blocks.{layer_id}.{k}": tuple(v.shape) for k, v in block.state_dict().items()}
    expected = rwkv4_block_keys(layer_id, N_EMBD, DIM_ATT, DIM_FFN)
    assert list(got.items()) == list(expected.items())
    assert all(v.dtype == torch.float32 for v in block.state_dict().values())


def test_default_widths_are_rwkv4s() -> None:
    block = RWKVBlock(16)
    assert block.att.dim_att == 16 and block.ffn.dim_ffn == 64
    assert block.att.time_decay.shape == (16,) and block.ffn.key.weight.shape == (64, 16)


def test_top_level_exports() -> None:
    assert tipad_transforms.RWKVTimeMix is RWKVTimeMix
    assert tipad_transforms.RWKVChannelMix is RWKVChannelMix
    assert tipad_transforms.RWKVBlock is RWKVBlock
    assert tipad_transforms.nn.RWKVBlock is RWKVBlock


@pytest.mark.parametrize(("layer_id", "n_layer"), [(0, 1), (0, 4), (1, 4), (3, 4), (2, 3)])
def test_init_values_follow_rwkv4_formulas(layer_id: int, n_layer: int) -> None:
    n_embd, dim_att = 10, 7
    # RWKV-LM divides by n_layer - 1; a lone layer is taken as a first layer (documented).
    r01 = layer_id / (n_layer - 1) if n_layer > 1 else 0.0
    r1a0 = 1.0 - layer_id / n_layer
    decay = [-5 + 8 * (h / (dim_att - 1)) ** (0.7 + 1.3 * r01) for h in range(dim_att)]
    first = [math.log(0.3) + ((h + 1) % 3 - 1) * 0.5 for h in range(dim_att)]
    ddd = [i / n_embd for i in range(n_embd)]
    mix_k = [d**r1a0 for d in ddd]
    mix_v = [d**r1a0 + 0.3 * r01 for d in ddd]
    mix_r = [d ** (0.5 * r1a0) for d in ddd]

    att = RWKVTimeMix(n_embd, dim_att, layer_id=layer_id, n_layer=n_layer)
    ffn = RWKVChannelMix(n_embd, layer_id=layer_id, n_layer=n_layer)

    def close(p: torch.Tensor, values: list[float]) -> None:
        torch.testing.assert_close(p.detach().flatten().double(), torch.tensor(values).double(),
                                   rtol=1e-6, atol=1e-7)  # fmt: skip

    close(att.time_decay, decay)
    close(att.time_first, first)
    close(att.time_mix_k, mix_k)
    close(att.time_mix_v, mix_v)
    close(att.time_mix_r, mix_r)
    close(ffn.time_mix_k, mix_k)
    close(ffn.time_mix_r, mix_k)


# ---- forward against the reference ----------------------------------------------------------


def test_time_mix_matches_reference() -> None:
    m = randomise(RWKVTimeMix(N_EMBD, DIM_ATT, layer_id=1, n_layer=3))
    x = rand_x()
    expected = ref_time_mix(params64(m), x.double())
    y = m(x)
    assert y.shape == x.shape and y.dtype == torch.float32
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=2e-5)


def test_channel_mix_matches_reference() -> None:
    m = randomise(RWKVChannelMix(N_EMBD, DIM_FFN, layer_id=2, n_layer=3))
    x = rand_x()
    torch.testing.assert_close(m(x).double(), ref_channel_mix(params64(m), x.double()),
                               rtol=1e-5, atol=2e-5)  # fmt: skip


@pytest.mark.parametrize("layer_id", [0, 1])
def test_block_matches_reference(layer_id: int) -> None:
    m = randomise(RWKVBlock(N_EMBD, DIM_ATT, DIM_FFN, layer_id=layer_id, n_layer=2))
    x = rand_x() * 3
    expected = ref_block(params64(m), x.double(), layer0=layer_id == 0)
    torch.testing.assert_close(m(x).double(), expected, rtol=1e-5, atol=5e-5)


def test_float64_module_matches_reference_closely() -> None:
    m = randomise(RWKVBlock(N_EMBD, DIM_ATT, DIM_FFN, layer_id=0, n_layer=1)).double()
    x = rand_x(dtype=torch.float64)
    y = m(x)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, ref_block(params64(m), x, layer0=True), rtol=1e-9, atol=1e-9)
    pieces, state = run_pieces(m, x, [5, 1, 3])
    assert state.att.wkv.dtype == torch.float64
    torch.testing.assert_close(pieces, y, rtol=1e-12, atol=1e-12)


# ---- state: pieces == whole -----------------------------------------------------------------


def make(kind: str) -> nn.Module:
    if kind == "att":
        return randomise(RWKVTimeMix(N_EMBD, DIM_ATT, layer_id=1, n_layer=2))
    if kind == "ffn":
        return randomise(RWKVChannelMix(N_EMBD, DIM_FFN, layer_id=1, n_layer=2))
    return randomise(RWKVBlock(N_EMBD, DIM_ATT, DIM_FFN, layer_id=int(kind[-1]), n_layer=2))


def run_pieces(m: nn.Module, x: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, object]:
    state = m.init_state(x.shape[0])
    ys, t = [], 0
    for n in sizes:
        y, state = m(x[:, t : t + n], state)
        assert y.shape == (x.shape[0], n, x.shape[2])
        ys.append(y)
        t += n
    return torch.cat(ys, 1), state


@pytest.mark.parametrize("kind", ["att", "ffn", "block0", "block1"])
@pytest.mark.parametrize("sizes", [[4, 5], [1] * 9, [3, 0, 6]], ids=["4+5", "rnn", "empty"])
def test_pieces_with_state_equal_the_whole_values_and_gradients(kind: str, sizes) -> None:
    m = make(kind)
    x = rand_x(requires_grad=True)
    whole = m(x)
    weights = torch.randn(whole.shape, generator=torch.Generator().manual_seed(5))
    grads = torch.autograd.grad((whole * weights).sum(), [x, *m.parameters()])

    pieces, _ = run_pieces(m, x, sizes)
    torch.testing.assert_close(pieces, whole, rtol=1e-5, atol=1e-5)
    # The state is not detached: the gradient crosses the cuts exactly as in the whole run.
    grads_pieces = torch.autograd.grad((pieces * weights).sum(), [x, *m.parameters()])
    for g, gp in zip(grads, grads_pieces, strict=True):
        torch.testing.assert_close(gp, g, rtol=1e-4, atol=1e-5)


def test_state_after_a_run_holds_the_last_token_and_the_wkv_state() -> None:
    m = make("block1")
    x = rand_x()
    _, state = run_pieces(m, x, [9])
    _, state2 = run_pieces(m, x, [2, 7])
    assert isinstance(state, BlockState)
    assert isinstance(state.att, TimeMixState) and isinstance(state.ffn, ChannelMixState)
    assert state.att.wkv.shape == (2, 3, DIM_ATT) and state.att.wkv.dtype == torch.float32
    torch.testing.assert_close(state.att.shift, m.ln1(x[:, -1]))  # the input of att, last token
    for a, b in zip(leaves(state), leaves(state2), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_detached_state_cuts_the_gradient_and_inputs_are_not_modified() -> None:
    m = make("block0")
    x = rand_x(requires_grad=True)
    state = m.init_state(2)
    _, state = m(x[:, :4], state)
    kept = [t.clone() for t in leaves(state)]
    x_before = x.detach().clone()
    y2, _ = m(x[:, 4:], state.detach())
    (gx,) = torch.autograd.grad(y2.sum(), x)
    assert torch.count_nonzero(gx[:, :4]) == 0 and torch.count_nonzero(gx[:, 4:]) > 0
    for before, after in zip(kept, leaves(state), strict=True):
        assert torch.equal(before, after)  # the state passed in is left as it was
    assert torch.equal(x.detach(), x_before)


def test_init_state_layout() -> None:
    m = RWKVBlock(N_EMBD, DIM_ATT, DIM_FFN)
    s = m.init_state(3)
    assert s.att.shift.shape == (3, N_EMBD) and s.ffn.shift.shape == (3, N_EMBD)
    assert torch.count_nonzero(s.att.shift) == 0 and torch.count_nonzero(s.ffn.shift) == 0
    assert s.att.wkv.shape == (3, 3, DIM_ATT) and s.att.wkv.dtype == torch.float32
    assert torch.count_nonzero(s.att.wkv[:, :2]) == 0 and bool((s.att.wkv[:, 2] == -1e38).all())
    half = m.init_state(1, dtype=torch.bfloat16)
    assert half.att.shift.dtype == torch.bfloat16 and half.att.wkv.dtype == torch.float32
    double = m.init_state(1, dtype=torch.float64)
    assert double.att.shift.dtype == torch.float64 and double.att.wkv.dtype == torch.float64


# ---- dtypes, gradients, training -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_runs_and_stays_close(dtype: torch.dtype) -> None:
    x = rand_x()
    m = make("block0")
    with torch.no_grad():
        expected = m(x)
    tol = 0.05 * float(expected.abs().max())
    low = copy.deepcopy(m).to(dtype)
    y = low(x.to(dtype))
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), expected, rtol=0.05, atol=tol)
    y_rnn, state = run_pieces(low, x.to(dtype), [1] * 9)
    assert state.att.wkv.dtype == torch.float32 and state.att.shift.dtype == dtype
    torch.testing.assert_close(y_rnn.float(), expected, rtol=0.05, atol=tol)


def test_gradients_reach_every_parameter() -> None:
    lm = TinyLM(11, N_EMBD, 2, dim_att=DIM_ATT, dim_ffn=DIM_FFN)
    idx = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(0))
    F.cross_entropy(lm(idx).flatten(0, 1), idx.roll(-1, 1).flatten()).backward()
    for name, p in lm.named_parameters():
        assert p.grad is not None and torch.count_nonzero(p.grad) > 0, name
        assert torch.isfinite(p.grad).all(), name


def test_tiny_language_model_learns() -> None:
    torch.manual_seed(0)
    text = "the quick brown fox jumps over the lazy dog. " * 8
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(c) for c in text])
    lm = TinyLM(len(vocab), 16, 2)
    opt = torch.optim.Adam(lm.parameters(), lr=1e-2)
    losses = []
    for step in range(25):
        start = (step * 7) % (len(data) - 33)
        batch = torch.stack([data[start : start + 33], data[start + 40 : start + 73]])
        loss = F.cross_entropy(lm(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < 0.5 * losses[0], losses


def test_loads_rwkv4_named_weights_strictly() -> None:
    vocab, n_embd, n_layer = 13, N_EMBD, 3
    g = torch.Generator().manual_seed(7)
    shapes = {"emb.weight": (vocab, n_embd)}
    for n in range(n_layer):
        shapes |= rwkv4_block_keys(n, n_embd, n_embd, 4 * n_embd)
    shapes |= {"ln_out.weight": (n_embd,), "ln_out.bias": (n_embd,), "head.weight": (vocab, n_embd)}
    checkpoint = {k: torch.randn(s, generator=g) for k, s in shapes.items()}

    lm = TinyLM(vocab, n_embd, n_layer)
    lm.load_state_dict(checkpoint, strict=True)
    for k, v in lm.state_dict().items():
        assert torch.equal(v, checkpoint[k]), k
    # One layer's attention weights, `blocks.N.att.*`, load into a lone RWKVTimeMix.
    att = RWKVTimeMix(n_embd, layer_id=1, n_layer=n_layer)
    pre = "blocks.1.att."
    att.load_state_dict({k[len(pre) :]: v for k, v in checkpoint.items() if k.startswith(pre)})
    assert torch.equal(att.time_decay, checkpoint[pre + "time_decay"])
    torch.testing.assert_close(lm.blocks[1].att(rand_x()), att(rand_x()))


# ---- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["att", "ffn", "block0"])
def test_bad_input_names_the_argument(kind: str) -> None:
    m = make(kind)
    with pytest.raises(ValueError, match=r"x must be \(B, T, n_embd=8\).*\(2, 9, 7\)"):
        m(torch.randn(2, 9, 7))
    with pytest.raises(ValueError, match=r"x must be \(B, T, n_embd=8\).*\(9, 8\)"):
        m(torch.randn(9, 8))
    with pytest.raises(TypeError, match="x must be float16"):
        m(torch.ones(2, 9, 8, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"state\.shift must be \(2, 8\).*got \(3, 8\)"):
        m(rand_x(), m.init_state(3))
    with pytest.raises(TypeError, match="state must be a"):
        m(rand_x(), torch.zeros(2, 8))


def test_bad_wkv_state_and_constructor_arguments() -> None:
    m = RWKVTimeMix(N_EMBD, DIM_ATT)
    shift, wkv_state = m.init_state(2)
    with pytest.raises(ValueError, match=r"state\.wkv must be \(2, 3, 12\)"):
        m(rand_x(), TimeMixState(shift, wkv_state[:, :, :8]))
    with pytest.raises(TypeError, match=r"state\.wkv must be torch.float32 for torch.float32 x"):
        m(rand_x(), TimeMixState(shift, wkv_state.double()))
    with pytest.raises(ValueError, match=r"layer_id must be an int in \[0, n_layer=2\), got 2"):
        RWKVBlock(8, layer_id=2, n_layer=2)
    with pytest.raises(ValueError, match="n_embd must be a positive int, got 0"):
        RWKVChannelMix(0)
    with pytest.raises(ValueError, match="dim_att must be a positive int, got -1"):
        RWKVTimeMix(8, dim_att=-1)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        m.init_state(0)
    with pytest.raises(TypeError, match="n_embd must be an int, got str"):
        RWKVTimeMix("8")  # type: ignore[arg-type]


# ---- the RWKV habit: `y, state = m(x, None)` -------------------------------------------------


@pytest.mark.parametrize("kind", ["att", "ffn", "block0", "block1"])
def test_none_state_starts_from_zeros_and_returns_the_pair(kind: str) -> None:
    # Issue 8: `y, state = block(x, None)` used to return y alone, and the unpacking split the
    # batch (two items) into "y" and "state" without an error.
    m = make(kind)
    x = rand_x()
    expected_y, expected_state = m(x, m.init_state(2))
    out = m(x, None)
    assert isinstance(out, tuple) and len(out) == 2
    y, state = out
    assert y.shape == x.shape
    torch.testing.assert_close(y, expected_y, rtol=0, atol=0)
    flat = leaves(state) if kind.startswith("block") else list(state)
    flat_expected = leaves(expected_state) if kind.startswith("block") else list(expected_state)
    for got, want in zip(flat, flat_expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    plain = m(x)  # without a state argument: y alone, as before
    assert isinstance(plain, torch.Tensor)
    torch.testing.assert_close(plain, y, rtol=1e-6, atol=1e-6)
