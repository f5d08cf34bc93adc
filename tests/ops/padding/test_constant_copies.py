"""Constant mode's two-copy path on the CPU (``ops/padding/taichi.py``: ``_constant_copies``,
``CONSTANT_COPIES``): the fill over the whole canvas, then the image into its window.

Every dtype the kernels take (NaN fills and payloads included, as bits), per-channel fills,
batches, single images and 2-D inputs, uneven and zero sides, canvases above and below the
serial limit, with the switch on and off, bit-exact against the independent references into
poisoned and fresh outputs; a spy proves which path ran.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
from reference import assert_bitwise_equal, numpy_pad, pad_ref, random_image, texture_pad_ref

import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI
from tipad_transforms.ops.padding import taichi as pad_taichi

DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool)  # fmt: skip
# (shape, padding): batches, one image and a 2-D image; zero sides, uneven sides.
CASES = (
    ((2, 3, 37, 53), (5, 3, 7, 4)),
    ((3, 41, 29), (0, 6, 1, 0)),
    ((45, 61), (2, 0, 0, 9)),
)


@pytest.fixture
def copies(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """The two-copy path on (param True) or off, every canvas a parallel launch (serial limit
    0); yields what each call's ``_constant_copies`` did."""
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("the two-copy path is the CPU order's (a GPU order writes every pixel)")
    F.pad(torch.zeros(1, 1, 1), 1)  # Taichi running first: init would reset gpu_order
    if TAICHI.gpu_order:
        pytest.skip("the two-copy path is the CPU order's")
    monkeypatch.setattr(pad_taichi, "CONSTANT_COPIES", request.param)
    monkeypatch.setattr(TAICHI, "serial_bytes", 0)
    monkeypatch.setattr(pad_taichi, "_plans", {})  # a plan holds its serial choice
    seen: list[bool] = []
    real = pad_taichi._constant_copies

    def spy(*args: object) -> bool:
        done = real(*args)  # type: ignore[arg-type]
        seen.append(done)
        return done

    monkeypatch.setattr(pad_taichi, "_constant_copies", spy)
    yield seen


def _fill(dtype: torch.dtype, channels: int) -> float | list[float]:
    if dtype == torch.bool:
        return 1
    if dtype.is_floating_point:
        return [float("nan"), -2.5, 3.0][:channels] if channels > 1 else -2.5
    return [7, 1, 5][:channels] if channels > 1 else 7


@pytest.mark.parametrize("copies", [True, False], ids=["copies", "kernel"], indirect=True)
@pytest.mark.parametrize(("shape", "pads"), CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bit_exact_against_the_references(
    dtype: torch.dtype, shape: tuple[int, ...], pads: tuple[int, ...], copies: list[bool]
) -> None:
    x = random_image(shape, dtype, seed=len(shape) + dtype.itemsize)
    fill = _fill(dtype, shape[-3] if len(shape) >= 3 else 1)
    want = pad_ref(x, pads, "constant", fill)
    numeric = dtype != torch.bfloat16 and not (dtype.is_floating_point and isinstance(fill, list))
    if numeric and x.dim() >= 3:  # numpy_pad: no bfloat16, no NaN among fills, (.., C, H, W)
        assert_bitwise_equal(want, numpy_pad(x, pads, "constant", fill))  # references agree
    before = x.clone()
    out = torch.empty(want.shape, dtype=dtype)
    out.view(torch.uint8).fill_(0xAB)  # poisoned: every element must be written
    F.pad(x, list(pads), fill=fill, out=out)
    assert_bitwise_equal(out, want)
    assert_bitwise_equal(F.pad(x, list(pads), fill=fill), want)
    assert_bitwise_equal(x, before)
    assert copies == ([True] * 2 if pad_taichi.CONSTANT_COPIES else [])


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
def test_a_serial_launch_keeps_the_kernel(
    copies: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TAICHI, "serial_bytes", 1 << 19)
    x = random_image((3, 20, 30), torch.uint8, seed=1)
    assert_bitwise_equal(F.pad(x, [2, 3, 4, 5], fill=9), pad_ref(x, [2, 3, 4, 5], "constant", 9))
    assert copies == []  # the plan said serial: _constant_copies never asked


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
def test_other_modes_stacks_and_gradients_keep_the_kernel(copies: list[bool]) -> None:
    x = random_image((2, 3, 17, 19), torch.float64, seed=2).requires_grad_()
    pads = [3, 1, 2, 4]
    for mode in ("reflect", "edge", "symmetric", "circular"):
        assert_bitwise_equal(F.pad(x.detach(), pads, padding_mode=mode),
                             pad_ref(x.detach(), pads, mode))  # fmt: skip
    tile = random_image((3, 5, 7), torch.float64, seed=3)
    assert_bitwise_equal(F.texture_pad(x.detach(), pads, tile),
                         texture_pad_ref(x.detach(), pads, tile))  # fmt: skip
    g = random_image((2, 3, 22, 24), torch.float64, seed=4)
    F.pad(x, pads, fill=1.5).backward(g)
    ref = x.detach().clone().requires_grad_()
    pad_ref(ref, pads, "constant", 1.5, differentiable=True).backward(g)
    assert x.grad is not None and ref.grad is not None
    torch.testing.assert_close(x.grad, ref.grad, rtol=0, atol=0)
    assert copies == [True]  # the forward of the constant pad only; the backward is the kernel's
