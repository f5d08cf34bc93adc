"""The padding kernel's GPU loop orders (``ops/padding/taichi.py``): a block per canvas row whose
threads stride across its columns (``GPU_ROW_BLOCKS``, the default) and the simple thread per
pixel, both bit-exact against the independent references, forward and backward.

On the CPU the GPU order is forced (``TAICHI.gpu_order``); on ``TIPAD_TEST_ARCH=vulkan`` it runs
through Taichi's GPU compiler. Canvas widths below and past a row's span of threads (32 for up
to 256 columns, then 64), so a thread writes 0 to 5 columns of its row; every mode; poisoned
outputs;
gradients of small integers in float32 (exact sums, and float32 atomics every Vulkan device has).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from reference import assert_bitwise_equal, numpy_pad, pad_ref, random_image, texture_pad_ref

import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI
from tipad_transforms.ops.padding import taichi as pad_taichi

STANDARD = ("constant", "edge", "reflect", "symmetric", "circular")
# (shape, padding [left, top, right, bottom]): out_w 9, 128, 129, 300 (spans 32, 32, 32, 64).
CASES = (
    ((2, 3, 5, 4), [2, 1, 3, 2]),
    ((1, 2, 6, 121), [3, 2, 4, 1]),
    ((2, 1, 3, 120), [0, 3, 9, 0]),
    ((1, 3, 4, 283), [9, 1, 8, 2]),
)


@pytest.fixture
def order(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """The GPU order with a span of threads per row (param True) or a thread per pixel."""
    F.pad(torch.zeros(1, 1, 1), 1)  # Taichi running first: init would reset gpu_order
    monkeypatch.setattr(TAICHI, "gpu_order", True)
    monkeypatch.setattr(pad_taichi, "GPU_ROW_BLOCKS", request.param)
    yield request.param


def test_row_spans() -> None:
    assert [pad_taichi._row_span(w) for w in (1, 9, 256, 257, 300, 2**30)] == [
        32, 32, 32, 64, 64, 2**27,
    ]  # fmt: skip


def _poisoned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype)
    out.view(torch.uint8).fill_(0xAB)
    return out


def _small_ints(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-8, 9, shape, generator=gen).to(torch.float32)


ORDERS = pytest.mark.parametrize("order", [True, False], ids=["row_blocks", "simple"],
                                 indirect=True)  # fmt: skip


@ORDERS
@pytest.mark.parametrize(("shape", "pads"), CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("mode", STANDARD)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=str)
def test_standard_modes(
    dtype: torch.dtype, mode: str, shape: tuple[int, ...], pads: list[int], order: bool
) -> None:
    x = random_image(shape, dtype, seed=len(mode) + shape[-1])
    want = numpy_pad(x, pads, mode, 5)
    out = _poisoned(tuple(want.shape), dtype)
    F.pad(x, pads, fill=5, padding_mode=mode, out=out)
    assert_bitwise_equal(out, want)


@ORDERS
@pytest.mark.parametrize(("shape", "pads"), CASES, ids=lambda v: str(v))
def test_texture(shape: tuple[int, ...], pads: list[int], order: bool) -> None:
    x = random_image(shape, torch.uint8, seed=shape[-1])
    tile = random_image((shape[1], 3, 7), torch.uint8, seed=2)
    want = texture_pad_ref(x, pads, tile, stagger=2, offset=(1, 3))
    out = _poisoned(tuple(want.shape), torch.uint8)
    F.texture_pad(x, pads, tile, stagger=2, offset=(1, 3), out=out)
    assert_bitwise_equal(out, want)


@ORDERS
@pytest.mark.parametrize("mode", [*STANDARD, "texture"])
def test_gradients(mode: str, order: bool) -> None:
    shape, pads = CASES[3]
    x = _small_ints(shape, seed=1).requires_grad_()
    tile = _small_ints((3, 3, 7), seed=2).requires_grad_()
    ref_x = x.detach().clone().requires_grad_()
    ref_tile = tile.detach().clone().requires_grad_()
    if mode == "texture":
        got = F.texture_pad(x, pads, tile, stagger=2)
        want = texture_pad_ref(ref_x, pads, ref_tile, stagger=2, differentiable=True)
    else:
        got = F.pad(x, pads, padding_mode=mode)
        want = pad_ref(ref_x, pads, mode, differentiable=True)
    g = _small_ints(tuple(got.shape), seed=3)
    got.backward(g)
    want.backward(g)
    assert x.grad is not None and ref_x.grad is not None
    assert_bitwise_equal(x.grad, ref_x.grad)
    if mode == "texture":
        assert tile.grad is not None and ref_tile.grad is not None
        assert_bitwise_equal(tile.grad, ref_tile.grad)


@ORDERS
@pytest.mark.parametrize("mode", ["reflect", "texture"])
def test_pad_stack(mode: str, order: bool) -> None:
    sizes = [(3, 130), (5, 7), (1, 1)]
    images = [random_image((2, h, w), torch.uint8, seed=h) for h, w in sizes]
    placement = torch.tensor([[1, 2], [0, 130], [5, 0]])
    tile = random_image((2, 4, 5), torch.uint8, seed=9)
    kw = {"texture": tile, "stagger": 1} if mode == "texture" else {}
    got = F.pad_stack(images, (6, 137), placement, padding_mode=mode, **kw)
    for i, ((h, w), im) in enumerate(zip(sizes, images, strict=True)):
        top, left = placement[i].tolist()
        pads = [left, top, 137 - left - w, 6 - top - h]
        if mode == "texture":
            want = texture_pad_ref(im, pads, tile, stagger=1)
        else:
            want = pad_ref(im, pads, mode)
        assert_bitwise_equal(got[i], want)
