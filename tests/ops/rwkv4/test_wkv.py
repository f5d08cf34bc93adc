"""RWKV-4 WKV (``tipad_transforms.ops.wkv``): kernels against independent references.

References (written here, not imported from the package): the explicit O(T^2) softmax formula
in float64 (no state) and the plain stable recurrence in torch (with state), differentiated by
autograd for the gradients.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import assert_type

import pytest
import torch

from tipad_transforms.backends import TAICHI
from tipad_transforms.ops import init_wkv_state, wkv
from tipad_transforms.ops.rwkv4 import op as ops_module
from tipad_transforms.ops.rwkv4 import taichi as wkv_taichi

Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def explicit_wkv(
    td: torch.Tensor, tf: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """``y_t = sum_{i<=t} softmax_i(E_t) v_i`` with ``E_t[i] = (t-1-i) w + k_i`` for ``i < t``
    and ``u + k_t`` for ``i = t``: the rwkv.md formula, in float64, from an empty state."""
    td, tf, k, v = (x.double() for x in (td, tf, k, v))
    w = -torch.exp(td)
    t_count = k.shape[1]
    t = torch.arange(t_count)
    lag = (t[:, None] - 1 - t[None, :]).double()  # (T, T): row t, column i
    e = lag[None, :, :, None] * w + k[:, None, :, :]  # (B, T, T, C)
    diag = torch.eye(t_count, dtype=torch.bool)[None, :, :, None]
    e = torch.where(diag, (tf + k)[:, :, None, :], e)
    e = e.masked_fill((t[None, :] > t[:, None])[None, :, :, None], float("-inf"))
    return (torch.softmax(e, dim=2) * v[:, None, :, :]).sum(2)


def recurrence_wkv(
    td: torch.Tensor,
    tf: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stable recurrence, one torch step per token, differentiable by autograd."""
    w, u = -torch.exp(td), tf
    if state is None:
        state = init_wkv_state(k.shape[0], k.shape[2], dtype=k.dtype)
    aa, bb, pp = state[:, 0], state[:, 1], state[:, 2]
    ys = []
    for t in range(k.shape[1]):
        kt, vt = k[:, t], v[:, t]
        ww = u + kt
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        ys.append((e1 * aa + e2 * vt) / (e1 * bb + e2))
        ww = w + pp
        p = torch.maximum(ww, kt)
        e1, e2 = torch.exp(ww - p), torch.exp(kt - p)
        aa, bb, pp = e1 * aa + e2 * vt, e1 * bb + e2, p
    return torch.stack(ys, 1), torch.stack([aa, bb, pp], 1)


def make_inputs(
    b: int, t: int, c: int, dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 2.0
) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    td = torch.randn(c, generator=g, dtype=torch.float64) - 1
    tf = torch.randn(c, generator=g, dtype=torch.float64)
    k = torch.randn(b, t, c, generator=g, dtype=torch.float64) * scale
    v = torch.randn(b, t, c, generator=g, dtype=torch.float64)
    return tuple(x.to(dtype) for x in (td, tf, k, v))  # type: ignore[return-value]


def make_state(b: int, c: int, dtype: torch.dtype = torch.float32, seed: int = 1) -> torch.Tensor:
    """A state some tokens into a sequence: aa any sign, bb >= 1, pp anywhere."""
    g = torch.Generator().manual_seed(seed)
    aa = torch.randn(b, c, generator=g, dtype=torch.float64)
    bb = torch.rand(b, c, generator=g, dtype=torch.float64) + 1
    pp = torch.randn(b, c, generator=g, dtype=torch.float64) * 3
    return torch.stack([aa, bb, pp], 1).to(dtype)


@pytest.fixture(
    params=[*wkv_taichi._WIDTHS, 1], ids=lambda n: f"cpu-order-{n}" if n > 1 else "cuda-order"
)
def lanes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Both loop orders of the kernels: lanes of adjacent channels (CPU), at every width the
    host may pick (whichever it picked), and one chain per task."""
    wkv(torch.zeros(1), torch.zeros(1), torch.zeros(1, 1, 1), torch.zeros(1, 1, 1))  # started
    monkeypatch.setattr(TAICHI, "gpu_order", request.param == 1)
    if request.param > 1:
        monkeypatch.setattr(wkv_taichi, "_LANES", request.param)
    yield


@pytest.fixture(params=[0, 30, 1000], ids=["spread-1", "spread-few", "spread-many"])
def spreads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CPU loops' iterations per task (``backends.taichi.spread``): one, a few (4 tasks of
    8 lanes at (2, 6, 11): 8; 22 chains in the GPU order: 2) and hundreds. Small forwards run
    serially (spread 1): not here."""
    wkv(torch.zeros(1), torch.zeros(1), torch.zeros(1, 1, 1), torch.zeros(1, 1, 1))  # started
    monkeypatch.setattr(TAICHI, "cpu_iterations", request.param)
    monkeypatch.setattr(wkv_taichi, "_SERIAL_BYTES", 0)
    yield


def assert_close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> None:
    torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# forward


@pytest.mark.parametrize("shape", [(3, 11, 13), (2, 9, 16), (2, 5, 24), (1, 1, 5), (5, 1, 7)])
def test_forward_matches_explicit_formula(shape: tuple[int, int, int], lanes: None) -> None:
    # B*C of 39 and 35: not a multiple of the lane count; (2, 9, 16): whole lanes only;
    # (2, 5, 24): whole lanes of 8, and 16 lanes with a partial block.
    td, tf, k, v = make_inputs(*shape)
    expected = explicit_wkv(td, tf, k, v)
    y = wkv(td, tf, k, v)
    assert y.dtype == torch.float32 and y.shape == shape
    assert_close(y, expected, rtol=1e-5, atol=1e-5)
    y64 = wkv(*(x.double() for x in (td, tf, k, v)))
    assert y64.dtype == torch.float64
    assert_close(y64, expected, rtol=1e-12, atol=1e-12)


def test_forward_with_state_matches_recurrence(lanes: None) -> None:
    td, tf, k, v = make_inputs(3, 10, 21, torch.float64)
    state = make_state(3, 21, torch.float64)
    y_ref, s_ref = recurrence_wkv(td, tf, k, v, state)
    y, s = wkv(td, tf, k, v, state)
    assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    assert_close(s, s_ref, rtol=1e-12, atol=1e-12)
    y32, s32 = wkv(td.float(), tf.float(), k.float(), v.float(), state.float())
    assert s32.dtype == torch.float32
    assert_close(y32, y_ref, rtol=1e-5, atol=1e-5)
    assert_close(s32, s_ref, rtol=1e-5, atol=1e-5)


def test_exponential_accuracy() -> None:
    # With pp = 0 >= k, bb = 0 and w = -0 one step leaves bb' = exp(k): the kernel's float32
    # exponential (a polynomial) read off directly, over its whole range.
    x = torch.linspace(-90, 0, 200_001, dtype=torch.float64).float()
    c = x.numel()
    td = torch.full((c,), -200.0)  # w = -exp(-200) = -0.0 in float32
    state = torch.zeros(1, 3, c)
    _, s = wkv(td, torch.zeros(c), x.reshape(1, 1, c), torch.ones(1, 1, c), state)
    got = s[0, 1].double()
    exact = torch.exp(x.double())
    normal = exact >= torch.finfo(torch.float32).tiny
    ulp = torch.finfo(torch.float32).eps * exact[normal]
    assert ((got[normal] - exact[normal]).abs() / ulp).max() <= 2
    # Below the normal range the result is flushed towards 0, never above the smallest normal.
    assert (got[~normal] <= torch.finfo(torch.float32).tiny).all()
    assert (got[~normal] >= 0).all()


def test_stress_large_keys_long_sequence() -> None:
    # k ~ U(-1000, 1000): e^k overflows any float, the recurrence must stay finite.
    g = torch.Generator().manual_seed(3)
    b, t, c = 1, 8192, 6
    k = torch.rand(b, t, c, generator=g, dtype=torch.float64) * 2000 - 1000
    v = torch.randn(b, t, c, generator=g, dtype=torch.float64)
    td = torch.randn(c, generator=g, dtype=torch.float64)
    tf = torch.randn(c, generator=g, dtype=torch.float64)
    args = [x.float().requires_grad_() for x in (td, tf, k, v)]
    y = wkv(*args)
    assert torch.isfinite(y).all()
    # Against the same float32 recurrence: the running max drifts by float32 rounding over
    # thousands of decays (w + pp), so a float64 run differs by more than the kernel's error.
    y_ref, _ = recurrence_wkv(*(a.detach() for a in args))
    assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
    y.backward(torch.randn(y.shape, generator=g))
    assert all(torch.isfinite(a.grad).all() for a in args)  # type: ignore[arg-type]


def test_empty_sequence_passes_state_through() -> None:
    td, tf, k, v = make_inputs(2, 0, 5)
    state = make_state(2, 5)
    y, s = wkv(td, tf, k, v, state)
    assert y.shape == (2, 0, 5)
    assert torch.equal(s, state) and s is not state


def test_init_state() -> None:
    s = init_wkv_state(2, 3)
    assert s.shape == (2, 3, 3) and s.dtype == torch.float32
    assert (s[:, :2] == 0).all() and (s[:, 2] == -1e38).all()
    assert init_wkv_state(1, 2, dtype=torch.float64).dtype == torch.float64
    with pytest.raises(TypeError, match="dtype"):
        init_wkv_state(1, 2, dtype=torch.float16)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
def test_half_inputs(dtype: torch.dtype, tol: float) -> None:
    td, tf, k, v = make_inputs(2, 12, 10, dtype)
    state = make_state(2, 10)
    y, s = wkv(td, tf, k, v, state)
    assert y.dtype == dtype and s.dtype == torch.float32
    y_ref, s_ref = recurrence_wkv(*(x.double() for x in (td, tf, k, v)), state.double())
    assert_close(y, y_ref, rtol=tol, atol=tol)  # float32 inside: only the output is rounded
    assert_close(s, s_ref, rtol=1e-5, atol=1e-5)
    args = [x.requires_grad_() for x in (td, tf, k, v)]
    wkv(*args).sum().backward()
    assert all(a.grad is not None and a.grad.dtype == dtype for a in args)


def test_noncontiguous_inputs() -> None:
    td, tf, k, v = make_inputs(3, 7, 9)
    expected = explicit_wkv(td, tf, k, v)
    k_t = k.transpose(1, 2).contiguous().transpose(1, 2)  # (B, T, C) with channel stride T
    v_s = torch.stack([v, v], 3)[..., 0]  # strides (T*C*2, C*2, 2)
    td_s = torch.stack([td, td], 1)[:, 1]
    assert not (k_t.is_contiguous() or v_s.is_contiguous() or td_s.is_contiguous())
    assert_close(wkv(td_s, tf, k_t, v_s), expected, rtol=1e-5, atol=1e-5)


def test_inputs_not_modified() -> None:
    td, tf, k, v = make_inputs(2, 6, 5)
    state = make_state(2, 5)
    args = [x.requires_grad_() for x in (td, tf, k, v, state)]
    before = [a.detach().clone() for a in args]
    y, s = wkv(*args)
    (y.sum() + s.sum()).backward()
    assert all(torch.equal(a.detach(), b) for a, b in zip(args, before, strict=True))


# ---------------------------------------------------------------------------------------------
# gradients


def _loss_grads(
    fn: object, args: list[torch.Tensor], gy: torch.Tensor, gs: torch.Tensor
) -> list[torch.Tensor]:
    leaves = [a.detach().clone().requires_grad_() for a in args]
    y, s = fn(*leaves)  # type: ignore[operator]
    ((y * gy).sum() + (s * gs).sum()).backward()
    return [leaf.grad for leaf in leaves]  # type: ignore[misc]


@pytest.mark.parametrize("c", [11, 48], ids=["partial-lanes", "whole-lanes"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradients_match_autograd_reference(dtype: torch.dtype, c: int, lanes: None) -> None:
    # C = 48: float32 arrays go as vectors at either width (6 of 8, 3 of 16).
    b, t = 2, 13
    td, tf, k, v = make_inputs(b, t, c, dtype, seed=4)
    state = make_state(b, c, dtype, seed=5)
    g = torch.Generator().manual_seed(6)
    gy = torch.randn(b, t, c, generator=g, dtype=dtype)
    gs = torch.randn(b, 3, c, generator=g, dtype=dtype)
    args = [td, tf, k, v, state]
    ref = _loss_grads(recurrence_wkv, [a.double() for a in args], gy.double(), gs.double())
    got = _loss_grads(wkv, args, gy, gs)
    tol = 1e-10 if dtype == torch.float64 else 2e-4
    for name, a, r in zip(("time_decay", "time_first", "k", "v", "state"), got, ref, strict=True):
        assert a.dtype == dtype, name
        assert_close(a, r, rtol=tol, atol=tol)


def test_gradients_without_state_match_explicit_formula() -> None:
    td, tf, k, v = make_inputs(2, 8, 6, torch.float64, seed=7)
    gy = torch.randn(2, 8, 6, dtype=torch.float64)
    leaves = [x.clone().requires_grad_() for x in (td, tf, k, v)]
    (explicit_wkv(*leaves) * gy).sum().backward()
    mine = [x.clone().requires_grad_() for x in (td, tf, k, v)]
    (wkv(*mine) * gy).sum().backward()
    for a, r in zip(mine, leaves, strict=True):
        assert_close(a.grad, r.grad, rtol=1e-10, atol=1e-10)  # type: ignore[arg-type]


def test_gradcheck_float64() -> None:
    td, tf, k, v = make_inputs(2, 5, 3, torch.float64, seed=8)
    state = make_state(2, 3, torch.float64, seed=9)
    args = tuple(x.requires_grad_() for x in (td, tf, k, v, state))
    assert torch.autograd.gradcheck(wkv, args)
    assert torch.autograd.gradcheck(wkv, args[:4])


def test_backward_recomputes_states_when_not_saved() -> None:
    # The forward saves the per-step states only under grad; a direct op call without them
    # still differentiates (the backward recomputes them).
    td, tf, k, v = make_inputs(2, 7, 5, torch.float64, seed=10)
    state = make_state(2, 5, torch.float64)
    y, s, saved = ops_module.wkv_forward(td, tf, k, v, state, False)
    assert saved.shape == (3, 2, 0, 5)  # nothing saved: the new state is the second output
    gy, gs = torch.randn_like(y), torch.randn_like(s)
    a = ops_module.wkv_backward(td, tf, k, v, state, saved, gy, gs)
    _, _, full = ops_module.wkv_forward(td, tf, k, v, state, True)
    assert full.shape == (3, 2, 8, 5)
    b = ops_module.wkv_backward(td, tf, k, v, state, full, gy, gs)
    for x, z in zip(a, b, strict=True):
        assert torch.equal(x, z)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_chunks_equal_whole(dtype: torch.dtype) -> None:
    b, t, c = 2, 9, 10
    td, tf, k, v = make_inputs(b, t, c, dtype, seed=11)
    state = make_state(b, c, dtype, seed=12)
    g = torch.Generator().manual_seed(13)
    gy = torch.randn(b, t, c, generator=g, dtype=dtype)
    gs = torch.randn(b, 3, c, generator=g, dtype=dtype)

    def chunked(td: torch.Tensor, tf: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        ys = []
        for lo, hi in ((0, 4), (4, 5), (5, 9)):
            y, s = wkv(td, tf, k[:, lo:hi], v[:, lo:hi], s)  # type: ignore[misc]
            ys.append(y)
        return torch.cat(ys, 1), s

    whole = wkv(td, tf, k, v, state)
    parts = chunked(td, tf, k, v, state)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    for x, z in zip(parts, whole, strict=True):
        assert_close(x, z, rtol=tol, atol=tol)
    args = [td, tf, k, v, state]
    for x, z in zip(
        _loss_grads(chunked, args, gy, gs), _loss_grads(wkv, args, gy, gs), strict=True
    ):
        assert_close(x, z, rtol=10 * tol, atol=10 * tol)


# ---------------------------------------------------------------------------------------------
# launchers, custom ops, compile


@pytest.mark.parametrize("c", [11, 32], ids=["partial-lanes", "whole-lanes"])
@pytest.mark.parametrize("save", [False, True])
def test_launchers_write_every_output(save: bool, c: int, lanes: None, spreads: None) -> None:
    b, t = 2, 6
    td, tf, k, v = make_inputs(b, t, c, seed=14)
    state = make_state(b, c)
    y = torch.full((b, t, c), float("nan"))
    states = torch.full((3, b, t + 1, c) if save else (b, 3, c), float("nan"))
    wkv_taichi.forward(td, tf, state, k, v, y, states)
    y_ref, s_ref = recurrence_wkv(td.double(), tf.double(), k.double(), v.double(), state.double())
    assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    final = states[:, :, -1].transpose(0, 1) if save else states
    assert_close(final, s_ref, rtol=1e-5, atol=1e-5)
    if not save:
        return
    assert_close(states[:, :, 0].transpose(0, 1), state, rtol=0, atol=0)
    assert torch.isfinite(states).all()
    gy, gs = torch.randn(b, t, c), torch.randn(b, 3, c)
    gk, gv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
    grads = torch.full((5 * b * c,), float("nan"))
    w = -torch.exp(td)  # the backward takes w itself
    wkv_taichi.backward(td, w, tf, k, v, state, states, gy, gs, gk, gv, grads)
    assert torch.isfinite(gk).all() and torch.isfinite(gv).all() and torch.isfinite(grads).all()
    ref = _loss_grads(recurrence_wkv, [td, tf, k, v, state], gy, gs)
    assert_close(gk, ref[2], rtol=2e-4, atol=2e-4)
    assert_close(gv, ref[3], rtol=2e-4, atol=2e-4)
    assert_close(grads[2 * b * c :].view(b, 3, c), ref[4], rtol=2e-4, atol=2e-4)
    assert_close(grads[b * c : 2 * b * c].view(b, c).sum(0), ref[1], rtol=2e-4, atol=2e-4)
    gw = grads[: b * c].view(b, c).sum(0)
    assert_close(gw * w, ref[0], rtol=2e-4, atol=2e-4)


def test_opcheck() -> None:
    td, tf, k, v = make_inputs(2, 5, 4, seed=15)
    state = make_state(2, 4)
    for save in (False, True):
        args = [x.clone().requires_grad_() for x in (td, tf, k, v, state)]
        torch.library.opcheck(torch.ops.tipad.wkv_forward.default, (*args, save))
    y, s, saved = ops_module.wkv_forward(td, tf, k, v, state, True)
    # The backward is not differentiable itself: plain tensors.
    torch.library.opcheck(
        torch.ops.tipad.wkv_backward.default,
        (td, tf, k, v, state, saved, torch.randn_like(y), torch.randn_like(s)),
    )


@pytest.mark.slow
def test_compile_fullgraph() -> None:
    td, tf, k, v = make_inputs(2, 6, 5, seed=16)
    state = make_state(2, 5)

    def step(td: torch.Tensor, tf: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             s: torch.Tensor) -> torch.Tensor:  # fmt: skip
        y, s = wkv(td, tf, k, v, s)  # type: ignore[misc]
        return (y * y).sum() + s.sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    args = [x.clone().requires_grad_() for x in (td, tf, k, v, state)]
    compiled(*args).backward()
    ref = [x.clone().requires_grad_() for x in (td, tf, k, v, state)]
    step(*ref).backward()
    for a, r in zip(args, ref, strict=True):
        assert_close(a.grad, r.grad, rtol=1e-6, atol=1e-6)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# fallback route, bad input


@pytest.mark.allow_fallback
def test_fallback_route_equals_kernel_route(monkeypatch: pytest.MonkeyPatch) -> None:
    td, tf, k, v = make_inputs(2, 9, 7, seed=17)
    state = make_state(2, 7)
    g = torch.Generator().manual_seed(18)
    gy, gs = torch.randn(2, 9, 7, generator=g), torch.randn(2, 3, 7, generator=g)
    args = [td, tf, k, v, state]
    kernel = wkv(*args), _loss_grads(wkv, args, gy, gs)
    monkeypatch.setattr(TAICHI, "refusal", lambda device: "refused by test_wkv")
    with pytest.warns(RuntimeWarning, match="refused by test_wkv"):
        torch_route = wkv(*args), _loss_grads(wkv, args, gy, gs)
    for a, b in zip(kernel[0], torch_route[0], strict=True):  # type: ignore[arg-type]
        assert_close(a, b, rtol=1e-6, atol=1e-6)
    for a, b in zip(kernel[1], torch_route[1], strict=True):
        assert_close(a, b, rtol=1e-5, atol=1e-5)


def _bad_cases() -> list[object]:
    td, tf, k, v = make_inputs(2, 3, 4)
    s = make_state(2, 4)
    cases = [
        ("k 2-D", dict(k=k[0], v=v[0]), ValueError, "k must be"),
        ("v shape", dict(v=v[:, :2]), ValueError, "v must have"),
        ("v dtype", dict(v=v.double()), TypeError, "v must have k's dtype"),
        ("td shape", dict(time_decay=td[:3]), ValueError, "time_decay must be"),
        ("tf 2-D", dict(time_first=tf[None]), ValueError, "time_first must be"),
        ("k int", dict(k=k.long()), TypeError, "k must be float"),
        ("td list", dict(time_decay=[0.0] * 4), TypeError, "time_decay must be a torch.Tensor"),
        ("state shape", dict(state=s[:, :2]), ValueError, "state must be"),
        ("state batch", dict(state=s[:1]), ValueError, "state must be"),
        ("state dtype", dict(state=s.half()), TypeError, "state must be torch.float32"),
        (
            "state f32 for f64",
            dict(k=k.double(), v=v.double(), state=s),
            TypeError,
            "state must be torch.float64",
        ),
        ("state type", dict(state=s.tolist()), TypeError, "state must be a torch.Tensor"),
        ("device", dict(time_first=tf.to("meta")), ValueError, "time_first is on meta"),
        ("state device", dict(state=s.to("meta")), ValueError, "state is on meta"),
    ]
    return [pytest.param(*case[1:], id=case[0]) for case in cases]


@pytest.mark.parametrize(("change", "error", "match"), _bad_cases())
def test_bad_input(change: dict[str, object], error: type[Exception], match: str) -> None:
    td, tf, k, v = make_inputs(2, 3, 4)
    args: dict[str, object] = dict(time_decay=td, time_first=tf, k=k, v=v, state=make_state(2, 4))
    args.update(change)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may reach a kernel or the fallback
        with pytest.raises(error, match=match):
            wkv(**args)  # type: ignore[arg-type, call-overload]


# ---------------------------------------------------------------------------------------------
# non-finite inputs


def _poisoned(
    dtype: torch.dtype, where: str, value: float
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Inputs (with a state) holding one ``value`` in ``where``, and gradients of the outputs."""
    b, t, c = 2, 6, 16  # C a multiple of the lanes: the packed float32 loads run too
    td, tf, k, v = make_inputs(b, t, c, dtype, seed=21)
    state = make_state(b, c, torch.float64 if dtype == torch.float64 else torch.float32)
    args = dict(time_decay=td, time_first=tf, k=k, v=v, state=state)
    target = args[where].clone()
    if target.dim() == 1:
        target[5] = value
    else:  # a late step of one chain, or the last row (the running max) of the state
        target[..., 5].view(-1)[-2] = value
    args[where] = target
    g = torch.Generator().manual_seed(22)
    gy = torch.randn(b, t, c, generator=g).to(dtype)
    gs = torch.randn(b, 3, c, generator=g).to(state.dtype)
    return list(args.values()), gy, gs


def _nonfinite_pattern(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    t = t.double()
    return t.isnan(), t == float("inf"), t == float("-inf")


_NONFINITE = [
    *((torch.float32, value) for value in (float("nan"), float("inf"), float("-inf"))),
    *((dtype, float("nan")) for dtype in (torch.float16, torch.bfloat16, torch.float64)),
    (torch.float64, float("inf")),
]


@pytest.mark.allow_fallback
@pytest.mark.parametrize(("dtype", "value"), _NONFINITE, ids=lambda p: str(p).split(".")[-1])
@pytest.mark.parametrize("where", ["k", "v", "time_decay", "time_first", "state"])
def test_nonfinite_inputs_propagate_like_torch_route(
    dtype: torch.dtype, value: float, where: str, lanes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The float32 kernels' fast exponential once clamped its argument with a max, which turns
    # NaN into -88: a NaN in k, time_decay or time_first vanished (finite loss, finite grads).
    args, gy, gs = _poisoned(dtype, where, value)
    kernel = wkv(*args), _loss_grads(wkv, args, gy, gs)
    if value != value:
        # NaN: the independent float64 recurrence says which outputs it reaches.
        y_ref, s_ref = recurrence_wkv(*(a.double() for a in args))
        assert torch.equal(kernel[0][0].isnan(), y_ref.isnan())  # type: ignore[index]
        assert torch.equal(kernel[0][1].isnan(), s_ref.isnan())  # type: ignore[index]
        # A NaN in any input made the loss NaN (not finite, as it once was with a finite loss
        # and finite gradients).
        assert any(g.isnan().any() for g in kernel[1])
    monkeypatch.setattr(TAICHI, "refusal", lambda device: "refused by test_wkv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        torch_route = wkv(*args), _loss_grads(wkv, args, gy, gs)
    outputs = [*kernel[0], *kernel[1]]  # type: ignore[misc]
    expected_outputs = [*torch_route[0], *torch_route[1]]  # type: ignore[misc]
    pairs = list(zip(outputs, expected_outputs, strict=True))
    for i, (a, b) in enumerate(pairs):
        for got, expected in zip(_nonfinite_pattern(a), _nonfinite_pattern(b), strict=True):
            assert torch.equal(got, expected), f"output {i}"
        finite = torch.isfinite(b.double())
        tol = 1e-9 if dtype == torch.float64 else 2e-2
        assert_close(a.double()[finite], b.double()[finite], rtol=tol, atol=tol)


_POS_INF = [
    (torch.float32, "k"),
    (torch.float32, "time_first"),
    (torch.float32, "state"),
    (torch.float32, "v"),
    (torch.float64, "k"),
    (torch.float64, "time_first"),
    (torch.float64, "state"),
    (torch.float16, "k"),  # a float16 k that overflowed: 1e5 rounds to +inf
    (torch.bfloat16, "time_first"),
]


@pytest.mark.allow_fallback
@pytest.mark.parametrize("route", ["kernel", "torch route"])
@pytest.mark.parametrize(("dtype", "where"), _POS_INF, ids=lambda p: str(p).split(".")[-1])
def test_pos_inf_propagates_as_the_formula(
    dtype: torch.dtype, where: str, route: str, lanes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A +inf in k, time_first or the state's running max was weighted as e**0 = 1 by the
    # exp-of-the-max-pair shortcut (kernel and torch route alike) where the formula gives
    # e**(inf - inf) = NaN: the channel froze with finite outputs ([1, 2, 2, 2, 2] for
    # [1, NaN, NaN, NaN, NaN]). Reference: the plain recurrence in float64, from the same inputs.
    b, t, c = 2, 6, 16  # C a multiple of the lanes: the packed float32 loads run too
    td, tf, k, v = make_inputs(b, t, c, torch.float32, seed=31)
    state = make_state(b, c, seed=32)
    if where == "k":
        k[1, 2, 5] = 1e5 if dtype == torch.float16 else float("inf")
    elif where == "v":
        v[0, 3, 9] = float("inf")
    elif where == "time_first":
        tf[5] = float("inf")
    else:
        state[1, 2, 5] = float("inf")  # the running max pp
    td, tf, k, v = (x.to(dtype) for x in (td, tf, k, v))
    state = state.to(torch.float64 if dtype == torch.float64 else torch.float32)
    assert not torch.isfinite(
        torch.cat([x.double().reshape(-1) for x in (td, tf, k, v, state)])
    ).all()
    y_ref, s_ref = recurrence_wkv(*(x.double() for x in (td, tf, k, v, state)))
    assert not torch.isfinite(y_ref).all()  # NaN (inf in v: +-inf), which the shortcut lost
    if route == "torch route":
        monkeypatch.setattr(TAICHI, "refusal", lambda device: "refused by test_wkv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y, s = wkv(td, tf, k, v, state)
    tol = (
        1e-9
        if dtype == torch.float64
        else 2e-2
        if dtype in (torch.float16, torch.bfloat16)
        else 1e-4
    )
    for got, want in ((y, y_ref.to(y.dtype)), (s, s_ref)):
        for a, e in zip(_nonfinite_pattern(got), _nonfinite_pattern(want), strict=True):
            assert torch.equal(a, e)
        finite = torch.isfinite(want.double())
        assert_close(got.double()[finite], want.double()[finite], rtol=tol, atol=tol)


def test_overloads_type_the_two_call_forms() -> None:
    # `mypy` on this function fails without wkv's overloads (a union of tensor and tuple).
    td, tf, k, v = make_inputs(1, 3, 2)
    y = wkv(td, tf, k, v)
    assert_type(y, torch.Tensor)
    y2, s = wkv(td, tf, k, v, make_state(1, 2))
    assert_type(y2, torch.Tensor)
    assert_type(s, torch.Tensor)
    assert isinstance(y, torch.Tensor) and isinstance(s, torch.Tensor)
    assert y.shape == y2.shape == (1, 3, 2) and s.shape == (1, 3, 2)
