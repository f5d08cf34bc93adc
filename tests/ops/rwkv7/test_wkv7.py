"""RWKV-7 WKV (``tipad_transforms.ops.wkv7``): kernels against an independent reference.

The reference (written here, not imported from the package) is the recurrence of rwkv.md as
plain torch steps in float64, one per token, differentiated by autograd for the gradients.
"""

from __future__ import annotations

import math
import os
import typing
import warnings
from collections.abc import Iterator
from typing import assert_type

import pytest
import torch

from tipad_transforms.backends import TAICHI
from tipad_transforms.ops import wkv7
from tipad_transforms.ops.rwkv7 import op as ops_module
from tipad_transforms.ops.rwkv7 import taichi as wkv7_taichi

Inputs = list[torch.Tensor]


def recurrence_wkv7(
    r: torch.Tensor,
    w: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``S_t = S_{t-1} diag(exp(w_t)) + (S_{t-1} a_t) b_t^T + v_t k_t^T``, ``y_t = S_t r_t``,
    per (batch, head) with explicit matrices: one torch step per token."""
    n_b, n_t, n_h, n_n = r.shape
    s = r.new_zeros(n_b, n_h, n_n, n_n) if state is None else state
    ys = []
    for t in range(n_t):
        decay = torch.diag_embed(torch.exp(w[:, t]))  # (B, H, N, N)
        sa = s @ a[:, t].unsqueeze(-1)  # (B, H, N, 1)
        s = s @ decay + sa @ b[:, t].unsqueeze(-2) + v[:, t].unsqueeze(-1) @ k[:, t].unsqueeze(-2)
        ys.append((s @ r[:, t].unsqueeze(-1)).squeeze(-1))
    y = torch.stack(ys, 1) if ys else r.new_zeros(r.shape)
    return y, s


def make_inputs(
    n_b: int, n_t: int, n_h: int, n_n: int, dtype: torch.dtype = torch.float32, seed: int = 0
) -> Inputs:
    """x070-like operands: decays in (0.545, 1), ``a = -kk``, ``b = kk * iclr`` (kk unit)."""
    g = torch.Generator().manual_seed(seed)

    def randn() -> torch.Tensor:
        return torch.randn(n_b, n_t, n_h, n_n, generator=g, dtype=torch.float64)

    r, k, v = randn(), randn(), randn()
    w = -math.exp(-0.5) * torch.sigmoid(randn())
    kk = torch.nn.functional.normalize(randn(), dim=-1)
    iclr = torch.rand(n_b, n_t, n_h, n_n, generator=g, dtype=torch.float64)
    return [x.to(dtype) for x in (r, w, k, v, -kk, kk * iclr)]


def make_state(
    n_b: int, n_h: int, n_n: int, dtype: torch.dtype = torch.float32, seed: int = 1
) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_b, n_h, n_n, n_n, generator=g, dtype=torch.float64).to(dtype)


# The lane that compiles the GPU orders through Taichi's GPU compiler (Vulkan on lavapipe).
GPU_LANE = os.environ.get("TIPAD_TEST_ARCH") is not None


@pytest.fixture(params=["cpu", "gpu-simple", "gpu-block"])
def order(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every loop order: the CPU's, the GPU's simple one (a thread per row, global reads) and
    the GPU's block order (shared memory, barriers: only on a GPU arch)."""
    wkv7(*(torch.zeros(1, 1, 1, 1) for _ in range(6)))  # Taichi started: its own order first
    if request.param == "cpu" and GPU_LANE:
        pytest.skip("GPU lane: the CPU order on a GPU arch checks nothing the CPU run does not")
    if request.param == "gpu-block" and TAICHI.runtime_arch() == "cpu":
        pytest.skip("the block order needs a GPU arch (shared memory, barriers): Vulkan lane")
    monkeypatch.setattr(TAICHI, "gpu_order", request.param != "cpu")
    monkeypatch.setattr(wkv7_taichi, "GPU_BLOCK_ORDER", request.param != "gpu-simple")
    yield


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Checkpoints every 8 steps: several chunks, the last one partial, in short sequences."""
    monkeypatch.setattr(ops_module, "_CHUNK", 8)
    yield 8


@pytest.fixture(params=[0, 30, 1000], ids=["spread-1", "spread-few", "spread-many"])
def spreads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CPU loops' iterations per task (``backends.taichi.spread``): one, a few and
    hundreds (the launcher test's row groups: 4 to 16 tasks; its backward sums: 16). Small
    forwards run serially (spread 1): not here."""
    wkv7(*(torch.zeros(1, 1, 1, 1) for _ in range(6)))  # Taichi started: the real value first
    monkeypatch.setattr(TAICHI, "cpu_iterations", request.param)
    monkeypatch.setattr(TAICHI, "serial_bytes", 0)
    yield


def assert_close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> None:
    torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol)


def _loss_grads(
    fn: object, args: list[torch.Tensor], gy: torch.Tensor, gs: torch.Tensor
) -> list[torch.Tensor]:
    """Gradients of ``sum(y * gy) + sum(new_state * gs)`` w.r.t. all seven arguments."""
    leaves = [x.detach().clone().requires_grad_() for x in args]
    y, s = fn(*leaves)  # type: ignore[operator]
    ((y * gy).sum() + (s * gs).sum()).backward()
    return [leaf.grad for leaf in leaves]  # type: ignore[misc]


def _upstream(n_b: int, n_t: int, n_h: int, n_n: int, dtype: torch.dtype, seed: int) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    gy = torch.randn(n_b, n_t, n_h, n_n, generator=g, dtype=torch.float64)
    gs = torch.randn(n_b, n_h, n_n, n_n, generator=g, dtype=torch.float64)
    return [gy.to(dtype), gs.to(torch.float64 if dtype == torch.float64 else torch.float32)]


# ---------------------------------------------------------------------------------------------
# forward


@pytest.mark.parametrize("shape", [(2, 37, 3, 7), (1, 1, 2, 16), (2, 5, 1, 64)])
def test_forward_matches_reference(shape: tuple[int, int, int, int], order: None) -> None:
    n_b, _, n_h, n_n = shape
    xs = make_inputs(*shape, torch.float64)
    state = make_state(n_b, n_h, n_n, torch.float64)
    y_ref, s_ref = recurrence_wkv7(*xs, state)
    y, s = wkv7(*xs, state)
    assert y.dtype == torch.float64 and y.shape == shape and s.shape == state.shape
    assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    assert_close(s, s_ref, rtol=1e-12, atol=1e-12)
    y32, s32 = wkv7(*(x.float() for x in xs), state.float())
    assert y32.dtype == torch.float32 and s32.dtype == torch.float32
    assert_close(y32, y_ref, rtol=1e-4, atol=1e-4)
    assert_close(s32, s_ref, rtol=1e-4, atol=1e-4)
    # Without a state: zeros, and only y comes back.
    y0 = wkv7(*xs)
    assert isinstance(y0, torch.Tensor)
    assert_close(y0, recurrence_wkv7(*xs)[0], rtol=1e-12, atol=1e-12)


def test_long_sequence(order: None) -> None:
    xs = make_inputs(1, 1000, 2, 4, torch.float64, seed=2)
    state = make_state(1, 2, 4, torch.float64)
    y_ref, s_ref = recurrence_wkv7(*xs, state)
    y, s = wkv7(*xs, state)
    assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    assert_close(s, s_ref, rtol=1e-10, atol=1e-10)
    gy, gs = _upstream(1, 1000, 2, 4, torch.float64, seed=3)
    ref = _loss_grads(recurrence_wkv7, [*xs, state], gy, gs)
    got = _loss_grads(wkv7, [*xs, state], gy, gs)
    for x, z in zip(got, ref, strict=True):
        assert_close(x, z, rtol=1e-9, atol=1e-9)


def test_empty_sequence_passes_state_through() -> None:
    xs = make_inputs(2, 0, 3, 4)
    state = make_state(2, 3, 4)
    y, s = wkv7(*xs, state)
    assert y.shape == (2, 0, 3, 4)
    assert torch.equal(s, state) and s is not state
    gy, gs = _upstream(2, 0, 3, 4, torch.float32, seed=4)
    grads = _loss_grads(wkv7, [*xs, state], gy, gs)
    assert all(g.shape == x.shape for g, x in zip(grads, [*xs, state], strict=True))
    assert torch.equal(grads[6], gs)


def test_nan_and_inf_propagate() -> None:
    xs = make_inputs(1, 6, 2, 4, seed=5)
    xs[1][0, 2, 0, 1] = float("nan")  # one decay of head 0 at step 2
    xs[2][0, 3, 1, 0] = float("inf")  # one key of head 1 at step 3
    y = wkv7(*xs)
    assert isinstance(y, torch.Tensor)
    assert torch.isfinite(y[0, :2]).all()
    assert torch.isnan(y[0, 2:, 0]).all()
    assert torch.isfinite(y[0, :3, 1]).all() and not torch.isfinite(y[0, 3:, 1]).any()


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float16, 4e-3), (torch.bfloat16, 3e-2)])
def test_half_inputs(dtype: torch.dtype, tol: float) -> None:
    xs = make_inputs(2, 12, 2, 16, dtype)
    state = make_state(2, 2, 16)
    y, s = wkv7(*xs, state)
    assert y.dtype == dtype and s.dtype == torch.float32
    y_ref, s_ref = recurrence_wkv7(*(x.double() for x in xs), state.double())
    scale = y_ref.abs().max().item()
    assert_close(y, y_ref, rtol=tol, atol=tol * scale)  # float32 inside: the output is rounded
    assert_close(s, s_ref, rtol=1e-4, atol=1e-4)
    leaves = [x.clone().requires_grad_() for x in (*xs, state)]
    y, s = wkv7(*leaves)
    (y.float().sum() + s.sum()).backward()
    assert all(x.grad is not None and x.grad.dtype == x.dtype for x in leaves)


# What torch.autocast hands the x070 time mix: r, k, v from linear maps in the autocast dtype,
# w, a, b from float32 parameters. (A float64 input promotes everything to float64.)
MIXES = {
    "bf16 r k v": (torch.bfloat16, torch.float32, torch.bfloat16, torch.bfloat16)
    + (torch.float32,) * 2,
    "fp16 r v": (torch.float16, torch.float32, torch.float32, torch.float16) + (torch.float32,) * 2,
    "bf16 with fp16": (torch.bfloat16, torch.float16) * 3,
    "all bf16": (torch.bfloat16,) * 6,
    "fp32 with f64 b": (torch.float32,) * 5 + (torch.float64,),
}


@pytest.mark.parametrize("mix", list(MIXES))
def test_mixed_dtypes_are_promoted_and_computed_in_float32(mix: str) -> None:
    dtypes = MIXES[mix]
    want = dtypes[0]
    for d in dtypes[1:]:
        want = torch.promote_types(want, d)  # torch's rule: the dtype of y
    math_dtype = torch.float64 if want == torch.float64 else torch.float32
    xs = [x.to(d) for x, d in zip(make_inputs(2, 11, 2, 16, seed=30), dtypes, strict=True)]
    state = make_state(2, 2, 16, math_dtype)
    y, s = wkv7(*xs, state)
    assert y.dtype == want and s.dtype == math_dtype
    # The reference on the very values given (rounded as they are), in float64: a recurrence
    # run in bfloat16 or float16 would miss it by ~1e-2, float32 math by ~1e-6.
    y_ref, s_ref = recurrence_wkv7(*(x.double() for x in xs), state.double())
    tol = 1e-10 if want == torch.float64 else 1e-5
    out_tol = {torch.bfloat16: 8e-3, torch.float16: 1e-3}.get(want, tol)  # y's own rounding
    scale = y_ref.abs().max().item()
    assert_close(y, y_ref, rtol=out_tol, atol=out_tol * scale)
    assert_close(s, s_ref, rtol=tol, atol=tol * s_ref.abs().max().item())
    leaves = [x.clone().requires_grad_() for x in (*xs, state)]
    y, s = wkv7(*leaves)
    (y.double().square().sum() + s.sum()).backward()
    assert [x.grad.dtype for x in leaves] == [*dtypes, math_dtype]  # type: ignore[union-attr]


def test_mixed_dtypes_pass_opcheck_and_compile_under_autocast() -> None:
    xs = make_inputs(2, 5, 2, 4, seed=31)
    mixed = [x.to(d) for x, d in zip(xs, MIXES["bf16 r k v"], strict=True)]
    state = make_state(2, 2, 4)
    for save in (False, True):
        args = [x.clone().requires_grad_() for x in (*mixed, state)]
        torch.library.opcheck(torch.ops.tipad.wkv7_forward.default, (*args, save))

    def step(r: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        # As the x070 time mix runs under autocast: r from a linear map, the rest float32.
        with torch.autocast("cpu", dtype=torch.bfloat16):
            r = torch.nn.functional.linear(r, torch.eye(r.shape[-1]))
            y, new = wkv7(r, *rest)  # type: ignore[misc]
        return y.square().sum() + new.sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    args = [x.clone().requires_grad_() for x in (*xs, state)]
    compiled(*args).backward()
    ref = [x.clone().requires_grad_() for x in (*xs, state)]
    step(*ref).backward()
    for x, z in zip(args, ref, strict=True):
        assert_close(x.grad, z.grad, rtol=1e-6, atol=1e-6)  # type: ignore[arg-type]


def test_meta_inputs_give_meta_results() -> None:
    xs = [x.to("meta") for x in make_inputs(2, 5, 2, 4, MIXES["bf16 r k v"][0])]
    y = wkv7(*xs)
    assert y.is_meta and y.shape == (2, 5, 2, 4) and y.dtype == torch.bfloat16
    y, s = wkv7(*xs, torch.zeros(2, 2, 4, 4, device="meta"))
    assert y.is_meta and s.is_meta and s.shape == (2, 2, 4, 4) and s.dtype == torch.float32


def test_overloads_type_the_two_call_forms() -> None:
    # `y: Tensor = wkv7(...)` type-checks only with the overloads (else a union of a tensor
    # and a tuple): the two declared forms, read back as mypy reads them.
    xs = make_inputs(1, 3, 1, 4)
    y = wkv7(*xs)
    assert_type(y, torch.Tensor)
    y2, s = wkv7(*xs, make_state(1, 1, 4))
    assert_type(y2, torch.Tensor)
    assert_type(s, torch.Tensor)
    forms = typing.get_overloads(ops_module.wkv7)
    hints = [typing.get_type_hints(f) for f in forms]
    assert [(h["state"], h["return"]) for h in hints] == [
        (type(None), torch.Tensor),
        (torch.Tensor, tuple[torch.Tensor, torch.Tensor]),
    ]


def test_noncontiguous_inputs() -> None:
    xs = make_inputs(2, 7, 3, 7, seed=6)
    state = make_state(2, 3, 7)
    expected = recurrence_wkv7(*(x.double() for x in xs), state.double())
    strided = [x.transpose(1, 2).contiguous().transpose(1, 2) for x in xs[:3]]
    strided += [torch.stack([x, x], -1)[..., 1] for x in xs[3:]]
    s_t = state.transpose(2, 3).contiguous().transpose(2, 3)
    assert not any(x.is_contiguous() for x in strided)
    got = wkv7(*strided, s_t)
    for x, z in zip(got, expected, strict=True):
        assert_close(x, z, rtol=1e-4, atol=1e-4)


def test_inputs_not_modified() -> None:
    xs = make_inputs(2, 9, 2, 4, seed=7)
    state = make_state(2, 2, 4)
    leaves = [x.requires_grad_() for x in (*xs, state)]
    before = [x.detach().clone() for x in leaves]
    y, s = wkv7(*leaves)
    (y.sum() + s.sum()).backward()
    assert all(torch.equal(x.detach(), z) for x, z in zip(leaves, before, strict=True))


# ---------------------------------------------------------------------------------------------
# gradients


@pytest.mark.parametrize("n_n", [7, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradients_match_reference(
    dtype: torch.dtype, n_n: int, order: None, small_chunks: int
) -> None:
    shape = (2, 21, 2, n_n)  # chunks of 8, 8 and 5 steps
    xs = make_inputs(*shape, dtype, seed=8)
    state = make_state(2, 2, n_n, gy_dtype(dtype), seed=9)
    gy, gs = _upstream(*shape, dtype, seed=10)
    ref = _loss_grads(recurrence_wkv7, [x.double() for x in (*xs, state)], gy.double(), gs.double())
    got = _loss_grads(wkv7, [*xs, state], gy, gs)
    tol = 1e-10 if dtype == torch.float64 else 2e-4
    for name, x, z in zip(("r", "w", "k", "v", "a", "b", "state"), got, ref, strict=True):
        assert x.dtype == (state.dtype if name == "state" else dtype), name
        scale = max(1.0, z.abs().max().item())
        assert_close(x, z, rtol=tol, atol=tol * scale)


def gy_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def test_gradcheck_float64(small_chunks: int) -> None:
    xs = make_inputs(1, 10, 1, 4, torch.float64, seed=11)
    state = make_state(1, 1, 4, torch.float64, seed=12)
    args = tuple(x.requires_grad_() for x in (*xs, state))
    assert torch.autograd.gradcheck(wkv7, args)
    assert torch.autograd.gradcheck(wkv7, args[:6])


def test_backward_recomputes_checkpoints_when_not_saved(small_chunks: int) -> None:
    xs = make_inputs(2, 19, 2, 4, torch.float64, seed=13)
    state = make_state(2, 2, 4, torch.float64)
    y, s, saved = ops_module.wkv7_forward(*xs, state, False)
    assert saved.shape == (2, 2, 1, 4, 4)
    gy, gs = torch.randn_like(y), torch.randn_like(s)
    got = ops_module.wkv7_backward(*xs, state, saved, gy, gs)
    _, _, full = ops_module.wkv7_forward(*xs, state, True)
    assert full.shape == (2, 2, 3 + 1, 4, 4)  # checkpoints before steps 0, 8, 16; the final
    assert torch.equal(full[:, :, -1], s)
    again = ops_module.wkv7_backward(*xs, state, full, gy, gs)
    for x, z in zip(got, again, strict=True):
        assert torch.equal(x, z)


def test_checkpoints_are_few() -> None:
    # The backward's memory: a state every _CHUNK steps, not one per step.
    xs = make_inputs(1, 100, 1, 4)
    leaves = [x.requires_grad_() for x in xs]
    shapes: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        wkv7(*leaves)
    assert (1, 1, math.ceil(100 / ops_module._CHUNK) + 1, 4, 4) in shapes
    assert all(math.prod(s) <= 100 * 4 for s in shapes)  # nothing larger than an input


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_chunks_equal_whole(dtype: torch.dtype, small_chunks: int) -> None:
    shape = (2, 37, 2, 7)
    xs = make_inputs(*shape, dtype, seed=14)
    state = make_state(2, 2, 7, gy_dtype(dtype), seed=15)
    gy, gs = _upstream(*shape, dtype, seed=16)

    def chunked(*args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        *ins, s = args
        ys = []
        for lo, hi in ((0, 13), (13, 14), (14, 14), (14, 37)):
            y, s = wkv7(*(x[:, lo:hi] for x in ins), s)  # type: ignore[misc]
            ys.append(y)
        return torch.cat(ys, 1), s

    whole = wkv7(*xs, state)
    parts = chunked(*xs, state)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for x, z in zip(parts, whole, strict=True):
        assert_close(x, z, rtol=tol, atol=tol)
    args = [*xs, state]
    for x, z in zip(
        _loss_grads(chunked, args, gy, gs), _loss_grads(wkv7, args, gy, gs), strict=True
    ):
        assert_close(x, z, rtol=10 * tol, atol=10 * tol)


# ---------------------------------------------------------------------------------------------
# launchers, custom ops, compile


# 24: a last, partial group of rows; 7, 24: blocks with idle threads; 128: the largest head
@pytest.mark.parametrize("n_n", [128, 64, 24, 7])
def test_launchers_write_every_output(n_n: int, order: None, spreads: None) -> None:
    if n_n == 128 and not TAICHI.gpu_order:
        pytest.skip("N = 128 in the CPU order: its 2048-number local arrays compile for 10 s")
    n_b, n_t, n_h, chunk = 2, 11, 2, 4
    xs = make_inputs(n_b, n_t, n_h, n_n, seed=17)
    state = make_state(n_b, n_h, n_n)
    ops = [x.clone() for x in xs]
    ops[1] = torch.exp(ops[1])
    for save in (False, True):
        slots = math.ceil(n_t / chunk) + 1 if save else 1
        y = torch.full((n_b, n_t, n_h, n_n), float("nan"))
        states = torch.full((n_b, n_h, slots, n_n, n_n), float("nan"))
        wkv7_taichi.forward(*ops, state, y, states, chunk)
        y_ref, s_ref = recurrence_wkv7(*(x.double() for x in xs), state.double())
        assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
        assert_close(states[:, :, -1], s_ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(states[:, :, 0], state)
    for c in range(1, slots - 1):  # the checkpoints: the state before step c * chunk
        mid = recurrence_wkv7(*(x[:, : c * chunk].double() for x in xs), state.double())[1]
        assert_close(states[:, :, c], mid, rtol=1e-4, atol=1e-4)
    gy, gs = _upstream(n_b, n_t, n_h, n_n, torch.float32, seed=18)
    grads = torch.full((6, n_b, n_t, n_h, n_n), float("nan"))
    g_state = gs.clone()
    wkv7_taichi.backward(*ops, state, states, gy, g_state, grads, chunk)
    ref = _loss_grads(recurrence_wkv7, [x.double() for x in (*xs, state)], gy.double(), gs.double())
    ref[1] = ref[1] / torch.exp(xs[1].double())  # the launcher's is d/d(decay)
    for x, z in zip([*grads.unbind(0), g_state], ref, strict=True):
        scale = max(1.0, z.abs().max().item())
        assert_close(x, z, rtol=2e-4, atol=2e-4 * scale)


def test_gpu_arch_takes_the_block_order(monkeypatch: pytest.MonkeyPatch) -> None:
    wkv7(*(torch.zeros(1, 1, 1, 1) for _ in range(6)))
    if TAICHI.runtime_arch() == "cpu":
        pytest.skip("the block order needs a GPU arch (shared memory, barriers): Vulkan lane")
    taken: list[tuple[str, bool]] = []
    pick = wkv7_taichi._gpu_kernel

    def spy(kernels: dict[str, object], simple: str, block: str) -> tuple[object, bool]:
        kernel, is_block = pick(kernels, simple, block)
        taken.append((simple, is_block))
        return kernel, is_block

    monkeypatch.setattr(wkv7_taichi, "_gpu_kernel", spy)
    xs = [x.requires_grad_() for x in make_inputs(1, 3, 1, 5, seed=23)]
    y = wkv7(*xs)
    assert isinstance(y, torch.Tensor)
    y.sum().backward()
    assert taken == [("forward", True), ("backward_chunk", True)]
    monkeypatch.setattr(wkv7_taichi, "GPU_BLOCK_ORDER", False)
    taken.clear()
    wkv7(*(x.detach() for x in xs), make_state(1, 1, 5))
    assert taken == [("forward", False)]


def test_opcheck() -> None:
    xs = make_inputs(2, 5, 2, 4, seed=19)
    state = make_state(2, 2, 4)
    for save in (False, True):
        args = [x.clone().requires_grad_() for x in (*xs, state)]
        torch.library.opcheck(torch.ops.tipad.wkv7_forward.default, (*args, save))
    y, s, saved = ops_module.wkv7_forward(*xs, state, True)
    torch.library.opcheck(
        torch.ops.tipad.wkv7_backward.default,
        (*xs, state, saved, torch.randn_like(y), torch.randn_like(s)),
    )


def test_compile_fullgraph() -> None:
    xs = make_inputs(2, 6, 2, 4, seed=20)
    state = make_state(2, 2, 4)

    def step(*args: torch.Tensor) -> torch.Tensor:
        y, s = wkv7(*args)  # type: ignore[misc]
        return (y * y).sum() + s.sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    args = [x.clone().requires_grad_() for x in (*xs, state)]
    compiled(*args).backward()
    ref = [x.clone().requires_grad_() for x in (*xs, state)]
    step(*ref).backward()
    for x, z in zip(args, ref, strict=True):
        assert_close(x.grad, z.grad, rtol=1e-6, atol=1e-6)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# fallback route, bad input


@pytest.mark.allow_fallback
def test_fallback_route_equals_kernel_route(
    monkeypatch: pytest.MonkeyPatch, small_chunks: int
) -> None:
    shape = (2, 19, 2, 7)
    xs = make_inputs(*shape, seed=21)
    state = make_state(2, 2, 7)
    gy, gs = _upstream(*shape, torch.float32, seed=22)
    args = [*xs, state]
    kernel = wkv7(*args), _loss_grads(wkv7, args, gy, gs)
    monkeypatch.setattr(TAICHI, "refusal", lambda device: "refused by test_wkv7")
    with pytest.warns(RuntimeWarning, match="refused by test_wkv7"):
        torch_route = wkv7(*args), _loss_grads(wkv7, args, gy, gs)
    for x, z in zip(kernel[0], torch_route[0], strict=True):  # type: ignore[arg-type]
        assert_close(x, z, rtol=1e-5, atol=1e-5)
    for x, z in zip(kernel[1], torch_route[1], strict=True):
        assert_close(x, z, rtol=1e-4, atol=1e-4)


def _bad_cases() -> list[object]:
    r, w, k, v, a, b = make_inputs(2, 3, 2, 4)
    s = make_state(2, 2, 4)
    cases = [
        ("r 3-D", dict(r=r[0]), ValueError, "r must be"),
        ("k shape", dict(k=k[:, :2]), ValueError, "k must have r's shape"),
        # float64 among float32 inputs promotes the math to float64: the state must follow.
        ("a float64", dict(a=a.double()), TypeError, "state must be torch.float64 for torch.fl"),
        ("a sparse", dict(a=a.to_sparse()), TypeError, "a must be a dense"),
        ("state sparse", dict(state=s.to_sparse()), TypeError, "state must be a dense"),
        ("w complex", dict(w=w.to(torch.complex64)), TypeError, "w must be float"),
        ("w int", dict(w=w.long()), TypeError, "w must be float"),
        ("b list", dict(b=b.tolist()), TypeError, "b must be a torch.Tensor"),
        ("head size", {n: torch.zeros(1, 2, 1, 129) for n in "rwkvab"}, ValueError, "at most"),
        ("state shape", dict(state=s[:, :, :3]), ValueError, "state must be"),
        ("state batch", dict(state=s[:1]), ValueError, "state must be"),
        ("state dtype", dict(state=s.half()), TypeError, "state must be torch.float32"),
        (
            "state f32 for f64",
            {**{n: x.double() for n, x in zip("rwkvab", (r, w, k, v, a, b), strict=True)}},
            TypeError,
            "state must be torch.float64",
        ),
        ("state type", dict(state=s.tolist()), TypeError, "state must be a torch.Tensor"),
        ("device", dict(v=v.to("meta")), ValueError, "v is on meta"),
        ("state device", dict(state=s.to("meta")), ValueError, "state is on meta"),
    ]
    return [pytest.param(*case[1:], id=case[0]) for case in cases]


@pytest.mark.parametrize(("change", "error", "match"), _bad_cases())
def test_bad_input(change: dict[str, object], error: type[Exception], match: str) -> None:
    names = ("r", "w", "k", "v", "a", "b")
    args: dict[str, object] = dict(zip(names, make_inputs(2, 3, 2, 4), strict=True))
    args["state"] = make_state(2, 2, 4)
    args.update(change)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may reach a kernel or the fallback
        with pytest.raises(error, match=match):
            wkv7(**args)  # type: ignore[arg-type]


def test_direct_op_call_checks_shapes() -> None:
    xs = make_inputs(2, 3, 2, 4)
    with pytest.raises(ValueError, match="state must be"):
        ops_module.wkv7_forward(*xs, make_state(2, 2, 3), False)
