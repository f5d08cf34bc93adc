"""Autograd (gradcheck, float32 vs reference), torch.library.opcheck and torch.compile."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from reference import (
    STANDARD_MODES,
    assert_bitwise_equal,
    pad_ref,
    random_image,
    texture_pad_ref,
)

import tipad_transforms.functional as F
import tipad_transforms.ops  # noqa: F401  (registers torch.ops.tipad)

SMALL = (1, 0, 2, 1)
LARGE = (5, 4, 7, 6)  # larger than the 2x3 image: many outputs read one input pixel


def _f64(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return random_image(shape, torch.float64, seed=seed).requires_grad_()


# ---------------------------------------------------------------------------------------------
# gradcheck (float64)


@pytest.mark.parametrize("padding", [SMALL, LARGE])
@pytest.mark.parametrize("mode", STANDARD_MODES)
def test_gradcheck_standard_modes(mode: str, padding: tuple[int, ...]) -> None:
    x = _f64((2, 2, 3), seed=1)
    assert torch.autograd.gradcheck(lambda t: F.pad(t, padding, padding_mode=mode, fill=0.5), (x,))


@pytest.mark.parametrize("padding", [SMALL, LARGE])
def test_gradcheck_texture_single(padding: tuple[int, ...]) -> None:
    x = _f64((2, 2, 3), seed=2)
    tex = _f64((2, 2, 3), seed=3)
    assert torch.autograd.gradcheck(
        lambda a, b: F.texture_pad(a, padding, b, stagger=2, offset=(1, -1)), (x, tex)
    )


def test_gradcheck_texture_one_channel_broadcast() -> None:
    x = _f64((3, 2, 2), seed=4)
    tex = _f64((2, 3), seed=5)  # one channel serves all three: its gradient sums them
    assert torch.autograd.gradcheck(lambda a, b: F.texture_pad(a, LARGE, b, stagger=1), (x, tex))


def test_gradcheck_texture_bank_per_sample() -> None:
    x = _f64((3, 2, 2, 2), seed=6)
    bank = _f64((2, 2, 2, 3), seed=7)
    index = torch.tensor([1, 0, 1])
    offset = torch.tensor([[0, 0], [2, -1], [-3, 5]])
    assert torch.autograd.gradcheck(
        lambda a, b: F.texture_pad(
            a, (3, 2, 1, 4), b, stagger=-1, offset=offset, texture_index=index
        ),
        (x, bank),
    )


# ---------------------------------------------------------------------------------------------
# float32 / half gradients against the reference's autograd


def _grads(out: torch.Tensor, inputs: tuple[torch.Tensor, ...], seed: int) -> tuple[Any, ...]:
    upstream = random_image(tuple(out.shape), out.dtype, seed=seed)
    return torch.autograd.grad(out, inputs, upstream, allow_unused=True)


@pytest.mark.parametrize("mode", STANDARD_MODES)
def test_float32_grads_match_reference(mode: str) -> None:
    x = random_image((2, 3, 3, 4), torch.float32, seed=8).requires_grad_()
    got = _grads(F.pad(x, (9, 2, 6, 11), padding_mode=mode, fill=1.0), (x,), seed=9)[0]
    want = _grads(pad_ref(x, (9, 2, 6, 11), mode, 1.0, differentiable=True), (x,), seed=9)[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)


def test_float32_texture_grads_match_reference() -> None:
    x = random_image((2, 3, 3, 4), torch.float32, seed=10).requires_grad_()
    bank = random_image((2, 3, 2, 5), torch.float32, seed=11).requires_grad_()
    kw: dict[str, Any] = {
        "stagger": 3,
        "offset": torch.tensor([[1, 2], [-4, 0]]),
        "texture_index": torch.tensor([1, 1]),
    }
    got = _grads(F.texture_pad(x, (6, 5, 4, 7), bank, **kw), (x, bank), seed=12)
    ref = texture_pad_ref(x, (6, 5, 4, 7), bank, differentiable=True, **kw)
    want = _grads(ref, (x, bank), seed=12)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert bool((got[1][0] == 0).all()), "bank entry 0 is unused and gets no gradient"


def test_texture_grad_keeps_texture_dtype() -> None:
    x = random_image((3, 4, 4), torch.float32, seed=13).requires_grad_()
    tex = random_image((3, 2, 2), torch.float64, seed=14).requires_grad_()
    got = _grads(F.texture_pad(x, 3, tex, stagger=1), (x, tex), seed=15)
    want = _grads(texture_pad_ref(x, 3, tex, stagger=1, differentiable=True), (x, tex), seed=15)
    assert got[1].dtype == torch.float64
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_grads(dtype: torch.dtype) -> None:
    x = random_image((2, 3, 4), dtype, seed=16).requires_grad_()
    tex = random_image((2, 2, 3), dtype, seed=17).requires_grad_()
    got = _grads(F.texture_pad(x, 4, tex, stagger=1), (x, tex), seed=18)
    x32, tex32 = (t.detach().float().requires_grad_() for t in (x, tex))
    ref = texture_pad_ref(x32, 4, tex32, stagger=1, differentiable=True)
    upstream = random_image(tuple(ref.shape), dtype, seed=18).float()
    want = torch.autograd.grad(ref, (x32, tex32), upstream)
    assert got[0].dtype == dtype and got[1].dtype == dtype
    torch.testing.assert_close(got[0].float(), want[0].to(dtype).float())
    torch.testing.assert_close(got[1].float(), want[1].to(dtype).float())
    # And a standard mode.
    gx = _grads(F.pad(x, (5, 1, 0, 6), padding_mode="symmetric"), (x,), seed=19)[0]
    ref = pad_ref(x32, (5, 1, 0, 6), "symmetric", differentiable=True)
    upstream = random_image(tuple(ref.shape), dtype, seed=19).float()
    torch.testing.assert_close(
        gx.float(), torch.autograd.grad(ref, x32, upstream)[0].to(dtype).float()
    )


def test_only_requested_grads() -> None:
    x = random_image((3, 2, 2), torch.float64, seed=20)
    tex = random_image((3, 2, 2), torch.float64, seed=21).requires_grad_()
    out = F.texture_pad(x, 2, tex)
    assert out.requires_grad
    (gt,) = torch.autograd.grad(out.sum(), tex)
    # Each texture pixel is read by the border pixels that map to it: count them.
    want = torch.autograd.grad(texture_pad_ref(x, 2, tex, differentiable=True).sum(), tex)[0]
    assert_bitwise_equal(gt, want)
    y = F.pad(x, 2, padding_mode="reflect")
    assert not y.requires_grad


# ---------------------------------------------------------------------------------------------
# opcheck: the ops as the functional layer calls them


def _op_args(
    x: torch.Tensor,
    padding: list[int],
    mode: str,
    *,
    fill: torch.Tensor | None = None,
    texture: torch.Tensor | None = None,
    offset: torch.Tensor | None = None,
    index: torch.Tensor | None = None,
    stagger: int = 0,
) -> tuple[Any, ...]:
    n = 1
    for s in x.shape[:-3]:
        n *= s
    empty = x.new_empty(0)
    return (
        x,
        padding,
        mode,
        empty if fill is None else fill,
        empty if texture is None else texture,
        torch.zeros(n, 2, dtype=torch.int32) if offset is None else offset,
        torch.zeros(n, dtype=torch.int32) if index is None else index,
        stagger,
    )


def _op_cases() -> list[tuple[Any, ...]]:
    x = random_image((2, 3, 4, 5), torch.float64, seed=22).requires_grad_()
    bank = random_image((2, 3, 2, 3), torch.float64, seed=23).requires_grad_()
    offset = torch.tensor([[1, -2], [0, 3]], dtype=torch.int32)
    index = torch.tensor([1, 0], dtype=torch.int32)
    xu = random_image((3, 4, 5), torch.uint8, seed=24)
    return [
        _op_args(x, [1, 2, 3, 4], "texture", texture=bank, offset=offset, index=index, stagger=3),
        _op_args(x, [6, 5, 7, 8], "texture", texture=bank[:1, :1], stagger=1),
        _op_args(x, [1, 2, 3, 4], "reflect"),
        _op_args(x, [9, 8, 7, 6], "symmetric"),
        _op_args(
            x, [2, 2, 2, 2], "constant", fill=torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
        ),
        _op_args(xu, [3, 1, 0, 2], "circular"),
        _op_args(xu, [3, 1, 0, 2], "texture", texture=random_image((1, 3, 2, 2), torch.uint8)),
    ]


@pytest.mark.parametrize("case", range(7))
def test_opcheck_pad(case: int) -> None:
    args = _op_cases()[case]
    torch.library.opcheck(torch.ops.tipad.pad.default, args)


@pytest.mark.parametrize("case", [0, 3, 5])
def test_opcheck_pad_out(case: int) -> None:
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in _op_cases()[case])
    want = torch.ops.tipad.pad(*args)
    out = torch.full_like(want, 7)
    torch.library.opcheck(torch.ops.tipad.pad_out.default, (*args, out))
    torch.ops.tipad.pad_out(*args, out)
    assert_bitwise_equal(out, want)


def test_opcheck_pad_backward() -> None:
    x, padding, mode, _fill, bank, offset, index, stagger = _op_cases()[0]
    grad = random_image((2, 3, 10, 9), torch.float64, seed=25)
    args = (grad, list(x.shape), padding, mode, bank.detach(), offset, index, stagger)
    torch.library.opcheck(torch.ops.tipad.pad_backward.default, args)


# ---------------------------------------------------------------------------------------------
# torch.compile


def _compiled_matches_eager(fn: Any, *args: torch.Tensor, backend: str = "aot_eager") -> None:
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    assert_bitwise_equal(compiled(*args), fn(*args))


def test_compile_texture_pad_with_bank_and_per_sample_params() -> None:
    offset = torch.tensor([[1, -2], [0, 3]])
    index = torch.tensor([1, 0])

    def fn(x: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
        y = F.texture_pad(x, (1, 2, 3, 4), bank, stagger=3, offset=offset, texture_index=index)
        return y * 2

    x = random_image((2, 3, 4, 5), seed=26)
    bank = random_image((2, 3, 2, 3), seed=27)
    _compiled_matches_eager(fn, x, bank)


@pytest.mark.parametrize("mode", STANDARD_MODES)
def test_compile_pad(mode: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (7, 1, 2, 6), fill=[1, 2, 3], padding_mode=mode) + 1

    _compiled_matches_eager(fn, random_image((2, 3, 4, 5), torch.float32, seed=28))


def test_compile_brick_pad_uint8() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.brick_pad(x, 5, brick_size=(3, 5), mortar=1)

    _compiled_matches_eager(fn, random_image((2, 3, 4, 5), torch.uint8, seed=29), backend="eager")


def test_compile_out() -> None:
    def fn(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        F.pad(x, 2, out=out, padding_mode="reflect")
        return out

    x = random_image((3, 4, 5), torch.uint8, seed=30)
    out = torch.zeros(3, 8, 9, dtype=torch.uint8)
    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(x, out)
    assert_bitwise_equal(got, pad_ref(x, 2, "reflect"))
    assert_bitwise_equal(out, pad_ref(x, 2, "reflect"))


def test_compile_backward() -> None:
    def fn(x: torch.Tensor, tex: torch.Tensor) -> torch.Tensor:
        return (F.texture_pad(x, 3, tex, stagger=1) ** 2).sum() + F.pad(
            x, 4, padding_mode="wrap"
        ).sum()

    x = random_image((2, 3, 4), torch.float64, seed=31).requires_grad_()
    tex = random_image((2, 2, 3), torch.float64, seed=32).requires_grad_()
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(x, tex), (x, tex))
    want = torch.autograd.grad(fn(x, tex), (x, tex))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_compile_inductor() -> None:
    def fn(x: torch.Tensor, tex: torch.Tensor) -> torch.Tensor:
        return F.texture_pad(x * 2, (2, 1, 3, 0), tex, stagger=1) - 1

    x = random_image((2, 3, 4, 5), seed=33)
    tex = random_image((3, 2, 3), seed=34)
    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=True)(x, tex)
    torch.testing.assert_close(got, fn(x, tex), rtol=0, atol=0)


def test_compile_dynamic_shapes() -> None:
    def fn(x: torch.Tensor, tex: torch.Tensor) -> torch.Tensor:
        return F.texture_pad(x, (1, 2, 3, 4), tex, stagger=2, offset=(1, 2)) + F.pad(
            x, (1, 2, 3, 4), padding_mode="reflect"
        )

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend="aot_eager")
    tex = random_image((3, 2, 3), seed=35)
    for shape in [(2, 3, 5, 6), (3, 3, 7, 9)]:
        x = random_image(shape, seed=36)
        assert_bitwise_equal(compiled(x, tex), fn(x, tex))
