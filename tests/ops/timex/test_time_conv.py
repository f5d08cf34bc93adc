"""tipad time_conv: the causal depthwise time convolution on its Taichi kernels.

References: ``conv_ref``, the formula written out in float64 (one einsum per lag), and
F.conv1d as a second, independent peer.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import tipad_transforms.ops  # noqa: F401  (registers torch.ops.tipad)
from tipad_transforms import backends
from tipad_transforms.backends import TAICHI
from tipad_transforms.ops import time_conv
from tipad_transforms.ops.timex import taichi as timex_taichi

# (B, C, T, L): L == T (RWKV's case), L < T, L > T, L == 1, T == 1, odd sizes.
SHAPES = [
    (2, 3, 8, 8),
    (3, 5, 17, 17),
    (2, 4, 19, 5),
    (1, 3, 6, 11),
    (3, 2, 9, 1),
    (2, 3, 1, 1),
    (1, 2, 1, 4),
    (5, 7, 13, 6),
    # long enough for the vectorised loop and its rounding into the padding (see _time_conv)
    (2, 3, 100, 100),
    (3, 2, 150, 41),
    (2, 3, 45, 77),
    # the GPU's tiled order: several tiles of outputs and rounds of taps, each with a tail
    (1, 2, 1100, 130),
    (2, 1, 530, 530),
]


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(torch.seed() % 2**32)


def _rand(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def conv_ref(w: torch.Tensor, k: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """``out[b,c,t] = eps + sum_{j <= min(t, L-1)} w[c, L-1-j] k[b,c,t-j]`` in float64."""
    w, k = w.double(), k.double()
    length, t_len = w.shape[1], k.shape[2]
    out = torch.full(k.shape, float(eps), dtype=torch.float64)
    for j in range(min(length, t_len)):  # lag j: k shifted right by j, times tap L-1-j
        out[:, :, j:] += torch.einsum("c,bct->bct", w[:, length - 1 - j], k[:, :, : t_len - j])
    return out


def conv_grads_ref(
    w: torch.Tensor, k: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rwkv.md backward formulas, lag by lag, in float64: ``(dw, dk)``."""
    w, k, g = w.double(), k.double(), g.double()
    length, t_len = w.shape[1], k.shape[2]
    dw, dk = torch.zeros_like(w), torch.zeros_like(k)
    for j in range(min(length, t_len)):
        dw[:, length - 1 - j] = torch.einsum("bct,bct->c", g[:, :, j:], k[:, :, : t_len - j])
        dk[:, :, : t_len - j] += g[:, :, j:] * w[None, :, length - 1 - j, None]
    return dw, dk


def conv1d_peer(w: torch.Tensor, k: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    length = w.shape[1]
    return F.conv1d(F.pad(k, (length - 1, 0)), w.unsqueeze(1), groups=w.shape[0]) + eps


@pytest.fixture(params=["cpu", "cpu-forms", "gpu-simple", "gpu-tiled"])
def loop_order(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every loop order: the tiled CPU kernel alone, the CPU's default choice of forms (torch's
    FFT and ``F.conv1d`` where they run), the GPU's simple order (a thread per output) and its
    tiled one (shared memory, barriers: only on a GPU arch, the Vulkan lane)."""
    time_conv(torch.ones(1, 1), torch.ones(1, 1, 1))  # starts the runtime: the real setting
    if request.param.startswith("cpu") and os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("Vulkan lane: the CPU loop order checks nothing new")
    if request.param == "gpu-tiled" and TAICHI.runtime_arch() == "cpu":
        pytest.skip("the tiled order needs a GPU arch (shared memory, barriers): Vulkan lane")
    monkeypatch.setattr(TAICHI, "gpu_order", request.param.startswith("gpu"))
    monkeypatch.setattr(timex_taichi, "GPU_TILES", request.param == "gpu-tiled")
    if request.param == "cpu":
        monkeypatch.setattr(timex_taichi, "FFT_MIN_TAPS", None)
        monkeypatch.setattr(timex_taichi, "TORCH_CONV", False)
    yield request.param


# ---------------------------------------------------------------------------------------------
# the launcher, on poisoned outputs


def _check_launcher(
    shape: tuple[int, int, int, int], dtype: torch.dtype, gen: torch.Generator
) -> None:
    """The launcher's forward (eps 0.25), dk alone and dw alone against the float64
    references, on poisoned outputs."""
    b, c, t, length = shape
    w, k, g = (
        _rand(gen, c, length, dtype=dtype),
        _rand(gen, b, c, t, dtype=dtype),
        _rand(gen, b, c, t, dtype=dtype),
    )
    # dw sums B * T products of unit-scale values: float32's rounding bound grows with their
    # count (a missing or doubled term would be off by about 1).
    atol = 1e-5 * max(1.0, b * t / 64)
    tol = {"rtol": 1e-5, "atol": atol} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    out = torch.full_like(k, float("nan"))
    timex_taichi.forward(w, k, out, 0.25)
    torch.testing.assert_close(out.double(), conv_ref(w, k, 0.25), **tol)
    dw_ref, dk_ref = conv_grads_ref(w, k, g)
    dk, dw = torch.full_like(k, float("nan")), torch.full_like(w, float("nan"))
    timex_taichi.backward(g, w, k, dw, dk, False, True)
    torch.testing.assert_close(dk.double(), dk_ref, **tol)
    assert dw.isnan().all()  # not asked for: not written
    timex_taichi.backward(g, w, k, dw, dk, True, False)
    torch.testing.assert_close(dw.double(), dw_ref, **tol)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_launcher_all_passes(
    shape: tuple[int, int, int, int], dtype: torch.dtype, loop_order: str, gen: torch.Generator
) -> None:
    _check_launcher(shape, dtype, gen)


@pytest.mark.parametrize("need", [0, 30, 1000], ids=["spread-1", "spread-few", "spread-many"])
@pytest.mark.parametrize("shape", [(2, 3, 70, 9), (1, 2, 530, 530)], ids=["short", "long"])
def test_cpu_kernel_spread_computes_every_task_once(
    shape: tuple[int, int, int, int], need: int, gen: torch.Generator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # The CPU loop's iterations per task (backends.taichi.spread): one, a few and hundreds;
    # forward and dk run a task per 16 tiles of a (b, c) row (12 and 18 tasks), dw per channel.
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("Vulkan lane: the CPU loop order checks nothing new")
    monkeypatch.setattr(TAICHI, "gpu_order", False)
    monkeypatch.setattr(timex_taichi, "FFT_MIN_TAPS", None)
    monkeypatch.setattr(timex_taichi, "TORCH_CONV", False)
    time_conv(torch.ones(1, 1), torch.ones(1, 1, 1))  # Taichi started (it sets the real value)
    monkeypatch.setattr(TAICHI, "cpu_iterations", need)
    _check_launcher(shape, torch.float32, gen)


def test_reference_agrees_with_conv1d(gen: torch.Generator) -> None:
    # The two references are independent; if they agree the tests below check the formula.
    for b, c, t, length in SHAPES:
        w, k = _rand(gen, c, length), _rand(gen, b, c, t)
        torch.testing.assert_close(conv_ref(w, k, 0.5), conv1d_peer(w, k, 0.5))
        wr, kr = w.clone().requires_grad_(), k.clone().requires_grad_()
        g = _rand(gen, b, c, t)
        got = torch.autograd.grad(conv1d_peer(wr, kr), (wr, kr), g)
        for a, e in zip(got, conv_grads_ref(w, k, g), strict=True):
            torch.testing.assert_close(a, e)


# ---------------------------------------------------------------------------------------------
# the public op


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_time_conv_forward_and_grads(
    shape: tuple[int, int, int, int], loop_order: str, gen: torch.Generator
) -> None:
    b, c, t, length = shape
    w = _rand(gen, c, length, dtype=torch.float32).requires_grad_()
    k = _rand(gen, b, c, t, dtype=torch.float32).requires_grad_()
    out = time_conv(w, k, eps=0.5)
    assert out.dtype == torch.float32 and out.shape == (b, c, t)
    # Sums of up to T (dw: B * T) float32 products: the rounding bound grows with their count.
    f32 = {"rtol": 1e-5, "atol": 1e-5 * max(1.0, t / 64)}
    torch.testing.assert_close(out.double(), conv_ref(w.detach(), k.detach(), 0.5), **f32)
    torch.testing.assert_close(out.detach(), conv1d_peer(w.detach(), k.detach(), 0.5), **f32)
    g = _rand(gen, b, c, t, dtype=torch.float32)
    dw, dk = torch.autograd.grad(out, (w, k), g)
    dw_ref, dk_ref = conv_grads_ref(w.detach(), k.detach(), g)
    grad_tol = {"rtol": 1e-5, "atol": 1e-4 * max(1.0, b * t / 256)}
    torch.testing.assert_close(dw.double(), dw_ref, **grad_tol)
    torch.testing.assert_close(dk.double(), dk_ref, **grad_tol)


def test_weight_with_unit_dim_and_only_one_grad(gen: torch.Generator) -> None:
    w3 = _rand(gen, 4, 1, 6).requires_grad_()
    k = _rand(gen, 2, 4, 9)
    out = time_conv(w3, k)
    torch.testing.assert_close(out, conv_ref(w3.detach()[:, 0], k))
    g = _rand(gen, 2, 4, 9)
    (dw,) = torch.autograd.grad(out, (w3,), g)
    assert dw.shape == (4, 1, 6)
    torch.testing.assert_close(dw[:, 0], conv_grads_ref(w3.detach()[:, 0], k, g)[0])
    kr = k.clone().requires_grad_()
    (dk,) = torch.autograd.grad(time_conv(w3.detach(), kr), (kr,), g)
    torch.testing.assert_close(dk, conv_grads_ref(w3.detach()[:, 0], k, g)[1])


def test_non_contiguous_inputs_and_inputs_unchanged(gen: torch.Generator) -> None:
    base_k = _rand(gen, 9, 3, 2 * 10, dtype=torch.float32)
    k = base_k.transpose(0, 1)[:, :, ::2]  # (3, 9, 10), strided in every dim
    w = _rand(gen, 12, 9, dtype=torch.float32).t()[:, :7]  # (9, 7), column-major slice
    assert not k.is_contiguous() and not w.is_contiguous()
    k_before, w_before = k.clone(), w.clone()
    out = time_conv(w, k, 1.5)
    torch.testing.assert_close(out.double(), conv_ref(w, k, 1.5), rtol=1e-5, atol=1e-5)
    wr, kr = w.clone().requires_grad_(), k.clone().requires_grad_()
    g = _rand(gen, 3, 9, 10, dtype=torch.float32).transpose(1, 2).contiguous().transpose(1, 2)
    g_before = g.clone()
    dw, dk = torch.autograd.grad(time_conv(wr, kr), (wr, kr), g)
    dw_ref, dk_ref = conv_grads_ref(w, k, g)
    torch.testing.assert_close(dw.double(), dw_ref, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(dk.double(), dk_ref, rtol=1e-5, atol=1e-4)
    for now, before in ((k, k_before), (w, w_before), (g, g_before), (wr, w), (kr, k)):
        assert torch.equal(now, before)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_compute_in_float32(dtype: torch.dtype, gen: torch.Generator) -> None:
    # Long sums of half-precision products: exact float32 math, rounded once at the end.
    w = _rand(gen, 4, 64, dtype=dtype).requires_grad_()
    k = _rand(gen, 3, 4, 64, dtype=dtype).requires_grad_()
    out = time_conv(w, k, 0.125)
    assert out.dtype == dtype
    want = conv_ref(w.detach(), k.detach(), 0.125).to(torch.float32)
    torch.testing.assert_close(out, want.to(dtype))  # within one rounding to the half type
    g = _rand(gen, 3, 4, 64, dtype=dtype)
    dw, dk = torch.autograd.grad(out, (w, k), g)
    assert dw.dtype == dtype and dk.dtype == dtype
    dw_ref, dk_ref = conv_grads_ref(w.detach(), k.detach(), g)
    torch.testing.assert_close(dw, dw_ref.to(dtype))
    torch.testing.assert_close(dk, dk_ref.to(dtype))
    # Mixed: float32 weights, half activations -> a float32 result.
    assert time_conv(w.detach().float(), k.detach()).dtype == torch.float32


def test_gradcheck_float64(gen: torch.Generator) -> None:
    for b, c, t, length in [(2, 3, 7, 7), (1, 2, 6, 3), (2, 2, 3, 5)]:
        w = _rand(gen, c, length).requires_grad_()
        k = _rand(gen, b, c, t).requires_grad_()
        assert torch.autograd.gradcheck(lambda w, k: time_conv(w, k, 0.3), (w, k))


@pytest.mark.parametrize("form", ["default", "fft"])
def test_opcheck(form: str, gen: torch.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ops pass opcheck on the default CPU forms and on the FFT form, whose dk once took
    the unconjugated spectrum wherever a dispatch mode runs it (opcheck's AOT dispatch test)."""
    if form == "fft":
        if os.environ.get("TIPAD_TEST_ARCH"):
            pytest.skip("the FFT form is the CPU order's; the lane runs the GPU order")
        monkeypatch.setattr(timex_taichi, "FFT_MIN_TAPS", 1)
        monkeypatch.setattr(TAICHI, "gpu_order", False)
    w = _rand(gen, 3, 5, dtype=torch.float32).requires_grad_()
    k = _rand(gen, 2, 3, 7, dtype=torch.float32).requires_grad_()
    assert timex_taichi._use_fft(w, k) == (form == "fft")
    torch.library.opcheck(torch.ops.tipad.time_conv_forward, (w, k, 0.5))
    g = _rand(gen, 2, 3, 7, dtype=torch.float32)
    torch.library.opcheck(
        torch.ops.tipad.time_conv_backward, (g, w.detach(), k.detach(), True, True)
    )


def test_torch_compile_fullgraph(gen: torch.Generator) -> None:
    @torch.compile(fullgraph=True, backend="aot_eager")
    def block(w: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.tanh(time_conv(w, k * 2.0, eps=0.1)).sum()

    w = _rand(gen, 4, 6, dtype=torch.float32).requires_grad_()
    k = _rand(gen, 2, 4, 6, dtype=torch.float32).requires_grad_()
    got = block(w, k)
    got.backward()
    wr, kr = w.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    want = torch.tanh(conv1d_peer(wr, kr * 2.0, 0.1)).sum()
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(w.grad, wr.grad)
    torch.testing.assert_close(k.grad, kr.grad)


def test_causal_non_finite_values_stay_in_their_future(
    loop_order: str, gen: torch.Generator
) -> None:
    # The kernel rounds its loops into zero padding; a NaN or inf must still reach only the
    # outputs whose sums contain it (0 * inf would be NaN).
    b, c, t = 2, 3, 130
    w = _rand(gen, c, t, dtype=torch.float32).requires_grad_()
    k = _rand(gen, b, c, t, dtype=torch.float32)
    k[:, :, 90] = float("inf")
    k[0, 1, 100] = float("nan")
    k.requires_grad_()
    out = time_conv(w, k)
    want = conv_ref(w.detach(), k.detach())
    assert torch.isfinite(out[:, :, :90]).all()
    torch.testing.assert_close(out[:, :, :90].double(), want[:, :, :90], rtol=1e-5, atol=1e-5)
    g = _rand(gen, b, c, t, dtype=torch.float32)
    g[:, :, 20] = float("inf")
    dk = torch.autograd.grad(out, (k,), g)[0]
    assert torch.isfinite(dk[:, :, 21:]).all()  # dk[u] sums g[t] over t >= u only


def test_empty_sizes(gen: torch.Generator) -> None:
    w = _rand(gen, 3, 4).requires_grad_()
    for shape in [(0, 3, 5), (2, 3, 0)]:
        k = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
        out = time_conv(w, k, 0.5)
        assert out.shape == shape
        dw, dk = torch.autograd.grad(out.sum(), (w, k))
        assert torch.equal(dw, torch.zeros_like(w)) and dk.shape == shape


# ---------------------------------------------------------------------------------------------
# the torch route


@pytest.mark.allow_fallback
def test_refused_device_uses_fallback_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, gen: torch.Generator
) -> None:
    w = _rand(gen, 5, 7).requires_grad_()
    k = _rand(gen, 3, 5, 11).requires_grad_()
    g = _rand(gen, 3, 5, 11)
    kernel_out = time_conv(w, k, 0.5)
    kernel_grads = torch.autograd.grad(kernel_out, (w, k), g)
    reason = "test refusal for time_conv"
    monkeypatch.setattr(TAICHI, "refusal", lambda device: reason)
    with backends.record() as ran:
        with pytest.warns(RuntimeWarning, match=reason) as record:
            out = time_conv(w, k, 0.5)
        assert record[0].filename == __file__
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per reason, not per call
            grads = torch.autograd.grad(out, (w, k), g)
    assert ran == [("time_conv", "forward", "torch"), ("time_conv", "backward", "torch")]
    torch.testing.assert_close(out, kernel_out, rtol=1e-12, atol=1e-12)
    for a, e in zip(grads, kernel_grads, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# bad input


def test_bad_inputs() -> None:
    w, k = torch.randn(3, 4), torch.randn(2, 3, 5)
    cases = [
        ((torch.randn(3), k), ValueError, "w must be"),
        ((torch.randn(3, 2, 4), k), ValueError, "w must be"),
        ((w, torch.randn(3, 5)), ValueError, "k must be"),
        ((torch.randn(4, 4), k), ValueError, "channels"),
        ((torch.randn(3, 0), k), ValueError, "L >= 1"),
        ((w.int(), k), TypeError, "w must be"),
        ((w, k.long()), TypeError, "k must be"),
        ((w, [[1.0]]), TypeError, "k must be a torch.Tensor"),
        ((w, k.to("meta")), ValueError, "w is on cpu, k on meta"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            time_conv(*args)
    with pytest.raises(TypeError, match="eps must be a real number"):
        time_conv(w, k, eps=torch.tensor(1.0))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("b", "c", "t", "length"), [(2, 3, 100, 100), (2, 2, 40, 70), (3, 2, 90, 9)]
)
@pytest.mark.parametrize("where", ["w", "k", "grad"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_values_propagate_like_conv1d(
    b: int, c: int, t: int, length: int, where: str, value: float, loop_order: str,
    gen: torch.Generator,
) -> None:  # fmt: skip
    # F.conv1d over the zero-padded k is the op's definition: a non-finite tap times the
    # padding's zeros is NaN (every output of its channel), a non-finite gradient reaches every
    # tap's gradient the same way, and dk has no padding term at all. The kernels once rounded
    # their loops into the padding only where convenient, so some of these NaNs were missing
    # and dk had spurious ones.
    w = _rand(gen, c, length, dtype=torch.float32)
    k = _rand(gen, b, c, t, dtype=torch.float32)
    grad = _rand(gen, b, c, t, dtype=torch.float32)
    target = {"w": w, "k": k, "grad": grad}[where]
    target[..., 1, target.shape[-1] // 3] = value
    wk = [w.clone().requires_grad_(), k.clone().requires_grad_()]
    out = time_conv(*wk)
    got = [out, *torch.autograd.grad(out, wk, grad)]
    wr, kr = w.double().requires_grad_(), k.double().requires_grad_()
    ref = F.conv1d(F.pad(kr, (length - 1, 0)), wr.unsqueeze(1), groups=c)
    want = [ref, *torch.autograd.grad(ref, (wr, kr), grad.double())]
    for name, a, e in zip(("out", "dw", "dk"), got, want, strict=True):
        assert torch.equal(a.isnan(), e.isnan()), name
        assert torch.equal(a.isinf(), e.isinf()) and torch.equal(a[a.isinf()], e[e.isinf()].float())
        finite = e.isfinite()
        torch.testing.assert_close(a[finite].double(), e[finite], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# the FFT form of the CPU backend (long kernels, finite inputs)


@pytest.mark.parametrize(
    ("b", "c", "t", "length"),
    [(2, 3, 50, 50), (2, 2, 30, 70), (3, 2, 61, 7), (2, 2, 1, 5), (1, 2, 13, 1)],
    ids=["L=T", "L>T", "short-L", "T=1", "L=1"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fft_form_matches_the_reference(
    b: int, c: int, t: int, length: int, dtype: torch.dtype, gen: torch.Generator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("the FFT form is the CPU order's; the lane runs the GPU order")
    monkeypatch.setattr(timex_taichi, "FFT_MIN_TAPS", 1)
    monkeypatch.setattr(TAICHI, "gpu_order", False)
    w, k, g = (_rand(gen, c, length), _rand(gen, b, c, t), _rand(gen, b, c, t))
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    out = torch.full((b, c, t), float("nan"), dtype=dtype)
    timex_taichi.forward(w.to(dtype), k.to(dtype), out, 0.25)
    torch.testing.assert_close(out.double(), conv_ref(w, k, 0.25), **tol)
    dw_ref, dk_ref = conv_grads_ref(w, k, g)
    dk = torch.full((b, c, t), float("nan"), dtype=dtype)
    dw = torch.full((c, length), float("nan"), dtype=dtype)
    timex_taichi.backward(g.to(dtype), w.to(dtype), k.to(dtype), dw, dk, True, True)
    torch.testing.assert_close(dk.double(), dk_ref, **tol)
    torch.testing.assert_close(dw.double(), dw_ref, **tol)


@pytest.mark.parametrize("form", ["fft", "conv1d"])
def test_cpu_torch_forms_write_views_and_each_gradient_alone(
    form: str, gen: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The FFT and ``F.conv1d`` forms write a view into a larger buffer in place, leaving the
    rest, and a whole output (which the ``F.conv1d`` form takes over, ``hand_over``); each
    gradient alone and both are right, into a view and into a whole ``dk`` (the FFT backward
    computes its products in place, dw's before dk's), inputs unchanged; the same under a
    pass-through dispatch mode, where the Conjugate key is off."""
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("the torch forms are the CPU order's; the lane runs the GPU order")
    monkeypatch.setattr(TAICHI, "gpu_order", False)
    monkeypatch.setattr(timex_taichi, "FFT_MIN_TAPS", 1 if form == "fft" else None)
    b, c, t, length = 3, 4, 37, 11
    w, k, g = (_rand(gen, c, length), _rand(gen, b, c, t), _rand(gen, b, c, t))
    saved = [x.clone() for x in (w, k, g)]
    assert timex_taichi._use_fft(w, k) == (form == "fft")
    buffer = torch.full((b + 1, c, t), float("nan"), dtype=torch.float64)
    timex_taichi.forward(w, k, buffer[1:], 0.25)  # a view: written in place
    torch.testing.assert_close(buffer[1:], conv_ref(w, k, 0.25), rtol=1e-12, atol=1e-12)
    assert buffer[0].isnan().all()
    out = torch.full((b, c, t), float("nan"), dtype=torch.float64)
    timex_taichi.forward(w, k, out, 0.25)  # whole: may take over the result's storage
    torch.testing.assert_close(out, conv_ref(w, k, 0.25), rtol=1e-12, atol=1e-12)
    empty = k.new_empty(0)  # what the op passes: sized by the form, or given its result
    timex_taichi.forward(w, k, empty, 0.25)
    torch.testing.assert_close(empty, conv_ref(w, k, 0.25), rtol=1e-12, atol=1e-12)
    dw_ref, dk_ref = conv_grads_ref(w, k, g)
    for grad_w, grad_k in [(True, False), (False, True), (True, True)]:
        dw = torch.full((c, length), float("nan"), dtype=torch.float64)
        dk_buffer = torch.full((b + 1, c, t), float("nan"), dtype=torch.float64)
        dk_whole = torch.full((b, c, t), float("nan"), dtype=torch.float64)
        timex_taichi.backward(g, w, k, dw, dk_buffer[:b], grad_w, grad_k)
        timex_taichi.backward(g, w, k, dw.clone(), dk_whole, False, grad_k)
        if grad_k:  # what the op passes where dk is asked for: sized or taken over
            dk_empty = k.new_empty(0)
            timex_taichi.backward(g, w, k, dw.clone(), dk_empty, False, True)
            torch.testing.assert_close(dk_empty, dk_ref, rtol=1e-12, atol=1e-12)
        if grad_w:
            torch.testing.assert_close(dw, dw_ref, rtol=1e-12, atol=1e-12)
        else:
            assert dw.isnan().all()
        if grad_k:
            torch.testing.assert_close(dk_buffer[:b], dk_ref, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(dk_whole, dk_ref, rtol=1e-12, atol=1e-12)
        else:
            assert dk_buffer[:b].isnan().all() and dk_whole.isnan().all()
        assert dk_buffer[b].isnan().all()
    with _PassThrough():  # the op's implementation, reached through Python dispatch
        dw, dk = torch.ops.tipad.time_conv_backward(g, w, k, True, True)
        out = torch.ops.tipad.time_conv_forward(w, k, 0.25)
    torch.testing.assert_close(dw, dw_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dk, dk_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, conv_ref(w, k, 0.25), rtol=1e-12, atol=1e-12)
    for before, after in zip(saved, (w, k, g), strict=True):
        assert torch.equal(before, after)


class _PassThrough(TorchDispatchMode):
    """Runs every op as it is: what a profiler or FlopCounterMode does to the kernels' calls."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


def test_hand_over_takes_whole_outputs_and_copies_into_views() -> None:
    from tipad_transforms.ops.timex.reference import hand_over

    result = torch.arange(12.0).reshape(3, 4)
    whole = torch.full((3, 4), float("nan"))
    hand_over(result, whole)
    assert torch.equal(whole, result) and whole.data_ptr() == result.data_ptr()
    buffer = torch.full((4, 4), float("nan"))
    hand_over(result, buffer[1:])
    assert torch.equal(buffer[1:], result) and buffer[0].isnan().all()
    columns = torch.full((3, 5), float("nan"))
    hand_over(result, columns[:, :4])  # not contiguous
    assert torch.equal(columns[:, :4], result) and columns[:, 4].isnan().all()
    wider = torch.full((3, 4), float("nan"), dtype=torch.float64)
    hand_over(result, wider)  # another dtype: converted by the copy
    assert torch.equal(wider, result.double())
    empty = result.new_empty(0)  # the op's output before a form sizes it
    hand_over(result, empty)
    assert torch.equal(empty, result) and empty.data_ptr() == result.data_ptr()
    empty = result.new_empty(0)
    hand_over(result.t(), empty)  # not contiguous: sized, then copied
    assert torch.equal(empty, result.t()) and empty.is_contiguous()


@pytest.mark.parametrize(
    "rows", [1, 2, 6, 1 << 20], ids=["row-blocks", "channel-blocks+tail", "samples+tail", "one"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fft_form_by_blocks_of_rows(
    rows: int, dtype: torch.dtype, gen: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The FFT form's blocks (``_fft_blocks``): single rows, channel blocks of one sample with
    a short last block (C = 3, 2 rows a block), two whole samples a block with a one-sample
    tail (B = 3), one block; forward and each gradient against the float64 references, and
    every row in exactly one block with its own channels."""
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("the FFT form is the CPU order's; the lane runs the GPU order")
    monkeypatch.setattr(TAICHI, "gpu_order", False)
    monkeypatch.setattr(timex_taichi, "FFT_MIN_TAPS", 1)
    b, c, t, length = 3, 3, 20, 20
    n = timex_taichi.fast_fft_length(t + length - 1)
    itemsize = torch.finfo(dtype).bits // 8
    monkeypatch.setattr(timex_taichi, "FFT_BLOCK_BYTES", rows * (n // 2 + 1) * 2 * itemsize)
    monkeypatch.setattr(timex_taichi, "FFT_BLOCKS_FROM", 0)
    blocks = list(timex_taichi._fft_blocks(b, c, n, itemsize))
    covered = [r for r0, r1, _, _ in blocks for r in range(r0, r1)]
    assert covered == list(range(b * c))
    for r0, r1, c0, c1 in blocks:
        assert [r % c for r in range(r0, r1)] == list(range(c0, c1)) * ((r1 - r0) // (c1 - c0))
    assert len(blocks) == {1: 9, 2: 6, 6: 2, 1 << 20: 1}[rows]
    w, k, g = (_rand(gen, c, length, dtype=dtype), _rand(gen, b, c, t, dtype=dtype),
               _rand(gen, b, c, t, dtype=dtype))  # fmt: skip
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    out = torch.full((b, c, t), float("nan"), dtype=dtype)
    timex_taichi.forward(w, k, out, 0.25)
    torch.testing.assert_close(out.double(), conv_ref(w, k, 0.25), **tol)
    dw_ref, dk_ref = conv_grads_ref(w, k, g)
    for grad_w, grad_k in [(True, False), (False, True), (True, True)]:
        dw = torch.full((c, length), float("nan"), dtype=dtype)
        dk = torch.full((b, c, t), float("nan"), dtype=dtype)
        timex_taichi.backward(g, w, k, dw, dk, grad_w, grad_k)
        assert dw.isnan().all() != grad_w and dk.isnan().all() != grad_k
        if grad_w:
            torch.testing.assert_close(dw.double(), dw_ref, **tol)
        if grad_k:
            torch.testing.assert_close(dk.double(), dk_ref, **tol)


def test_fft_blocks_only_for_batches_past_the_threshold() -> None:
    """The default policy: one block up to FFT_BLOCKS_FROM of spectra, then blocks of at most
    FFT_BLOCK_BYTES (whole samples while one sample fits, else channel ranges)."""
    row = lambda n, itemsize: (n // 2 + 1) * 2 * itemsize  # noqa: E731
    # (8, 256, 512) float32 with L = T: n = 1024, 8.4 MB of spectra, one block.
    assert list(timex_taichi._fft_blocks(8, 256, 1024, 4)) == [(0, 2048, 0, 256)]
    # (32, 768, 768) float32 with L = T: n = 1536, 151 MB, channel blocks of one sample.
    blocks = list(timex_taichi._fft_blocks(32, 768, 1536, 4))
    size = timex_taichi.FFT_BLOCK_BYTES // row(1536, 4)
    assert len(blocks) == 32 * -(-768 // size) and blocks[0] == (0, size, 0, size)
    assert all((r1 - r0) * row(1536, 4) <= timex_taichi.FFT_BLOCK_BYTES for r0, r1, *_ in blocks)
    # Many samples of few channels: whole samples a block.
    blocks = list(timex_taichi._fft_blocks(4096, 8, 1024, 8))
    assert blocks[0][2:] == (0, 8) and blocks[0][1] % 8 == 0 and len(blocks) > 1


def test_fft_form_only_for_long_finite_inputs_on_the_cpu_order(
    gen: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timex_taichi, "FFT_MIN_TAPS", 8)
    monkeypatch.setattr(TAICHI, "gpu_order", False)
    w, k = _rand(gen, 2, 8, dtype=torch.float32), _rand(gen, 1, 2, 8, dtype=torch.float32)
    assert timex_taichi._use_fft(w, k)
    assert not timex_taichi._use_fft(w[:, :7], k)  # fewer taps than the threshold
    assert not timex_taichi._use_fft(w, k[..., :7])  # fewer steps: min(L, T) counts
    bad = k.clone()
    bad[0, 1, 3] = float("inf")
    assert not timex_taichi._use_fft(w, bad)  # an FFT would spread it over every output
    huge = torch.full_like(k, 3e38)  # finite, but its sum overflows: the exact path, too
    assert not timex_taichi._use_fft(w, huge)
    for value in (float("nan"), float("-inf")):
        bad[0, 1, 3] = value
        assert not timex_taichi._use_fft(w, bad)
    bad[0, 1, 3] = float("inf")
    monkeypatch.setattr(TAICHI, "gpu_order", True)
    assert not timex_taichi._use_fft(w, k)
    monkeypatch.setattr(TAICHI, "gpu_order", False)
    monkeypatch.setattr(timex_taichi, "FFT_MIN_TAPS", None)
    assert not timex_taichi._use_fft(w, k)
    # F.conv1d: every other CPU call in the CPU order, non-finite inputs included
    assert timex_taichi._use_conv1d(bad) and not timex_taichi._use_conv1d(bad[:0])
    monkeypatch.setattr(timex_taichi, "TORCH_CONV", False)
    assert not timex_taichi._use_conv1d(k)
    monkeypatch.setattr(timex_taichi, "TORCH_CONV", True)
    monkeypatch.setattr(TAICHI, "gpu_order", True)
    assert not timex_taichi._use_conv1d(k)


def test_cpu_order_takes_conv1d_and_keeps_the_kernel_for_dw_and_non_finite_dk(
    gen: torch.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Below FFT_MIN_TAPS the CPU forward and dk are F.conv1d (no kernel launch); dw, and dk
    # with a non-finite w (F.conv1d's end padding would add w * 0 terms), stay on the kernel.
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("the CPU order's forms; the lane runs the GPU order")
    monkeypatch.setattr(TAICHI, "gpu_order", False)
    launched: list[int] = []
    real = timex_taichi._window_dot

    def counting(*args: Any, **kw: Any) -> None:
        launched.append(kw["offset"])
        real(*args, **kw)

    monkeypatch.setattr(timex_taichi, "_window_dot", counting)
    b, c, t, length = 2, 3, 40, 9
    w, k, g = _rand(gen, c, length), _rand(gen, b, c, t), _rand(gen, b, c, t)
    out = torch.full_like(k, float("nan"))
    timex_taichi.forward(w, k, out, 0.5)
    torch.testing.assert_close(out, conv_ref(w, k, 0.5))
    dw, dk = torch.full_like(w, float("nan")), torch.full_like(k, float("nan"))
    timex_taichi.backward(g, w, k, dw, dk, False, True)
    assert launched == []
    torch.testing.assert_close(dk, conv_grads_ref(w, k, g)[1])
    timex_taichi.backward(g, w, k, dw, dk, True, False)
    assert launched == [length - 1]  # dw: the kernel's batch sum
    w[1, 2] = float("inf")
    timex_taichi.backward(g, w, k, dw, dk, False, True)
    assert launched == [length - 1, 0]  # dk with an infinite tap: the kernel (offset 0)
    monkeypatch.setattr(timex_taichi, "TORCH_CONV", False)
    timex_taichi.forward(w, k, out, 0.5)
    assert launched == [length - 1, 0, length - 1]


def test_fast_fft_length() -> None:
    assert [timex_taichi.fast_fft_length(n) for n in (1, 2, 7, 17, 1023, 1025)] == [
        1, 2, 8, 18, 1024, 1080,
    ]  # fmt: skip
