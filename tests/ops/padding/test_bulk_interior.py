"""The CPU order's bulk interior copy (``ops/padding/taichi.py``: ``_copy_interior``,
``BULK_INTERIOR``): one torch copy places the image, the kernel writes only the border.

Canvases just past the serial-launch limit (the copy runs only where the pool does), odd sizes
and paddings (rows start anywhere in a word), every mode, with the copy on and off (the switch),
bit-exact against the independent references, into poisoned outputs and fresh ones; a spy
proves which path ran, and a canvas past the cache limit takes the kernel's own row moves.
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

STANDARD = ("constant", "edge", "reflect", "symmetric", "circular")
# (shape, padding): canvases of 0.6-0.9 MB, above the serial limit (512 KiB), far below the cache
# limit; odd widths and uneven sides.
CASES = (
    (torch.uint8, (3, 3, 211, 301), (5, 3, 7, 4)),
    (torch.int16, (3, 3, 157, 203), (3, 6, 1, 2)),
    (torch.float32, (2, 3, 151, 203), (6, 5, 4, 7)),
)


@pytest.fixture
def copies(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """The bulk copy on (param True) or off; yields what each call's ``_copy_interior`` did."""
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("the bulk interior copy is the CPU order's (a GPU order writes every pixel)")
    F.pad(torch.zeros(1, 1, 1), 1)  # Taichi running first: init would reset gpu_order
    if TAICHI.gpu_order:
        pytest.skip("the bulk interior copy is the CPU order's")
    monkeypatch.setattr(pad_taichi, "BULK_INTERIOR", request.param)
    monkeypatch.setattr(pad_taichi, "CONSTANT_COPIES", False)  # constant mode's own copies
    seen: list[bool] = []
    real = pad_taichi._copy_interior

    def spy(*args: object) -> bool:
        done = real(*args)  # type: ignore[arg-type]
        seen.append(done)
        return done

    monkeypatch.setattr(pad_taichi, "_copy_interior", spy)
    yield seen


def _poisoned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype)
    out.view(torch.uint8).fill_(0xAB)
    return out


@pytest.mark.parametrize("copies", [True, False], ids=["bulk", "kernel"], indirect=True)
@pytest.mark.parametrize(("dtype", "shape", "pads"), CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("mode", STANDARD)
def test_standard_modes_match_numpy(
    mode: str, dtype: torch.dtype, shape: tuple[int, ...], pads: tuple[int, ...],
    copies: list[bool],
) -> None:  # fmt: skip
    x = random_image(shape, dtype, seed=STANDARD.index(mode) + dtype.itemsize)
    fill = 7 if mode == "constant" else 0
    want = numpy_pad(x, pads, mode, fill)
    assert_bitwise_equal(want, pad_ref(x, pads, mode, fill))  # the two references agree
    out = _poisoned(tuple(want.shape), dtype)
    F.pad(x, list(pads), fill=fill, padding_mode=mode, out=out)
    assert_bitwise_equal(out, want)
    assert_bitwise_equal(F.pad(x, list(pads), fill=fill, padding_mode=mode), want)
    assert copies == [True] * 2 if pad_taichi.BULK_INTERIOR else copies == []


@pytest.mark.parametrize("copies", [True, False], ids=["bulk", "kernel"], indirect=True)
@pytest.mark.parametrize(("dtype", "shape", "pads"), CASES, ids=lambda v: str(v))
def test_texture_matches_reference(
    dtype: torch.dtype, shape: tuple[int, ...], pads: tuple[int, ...], copies: list[bool]
) -> None:
    x = random_image(shape, dtype, seed=11)
    tile = random_image((3, 5, 7), dtype, seed=12)  # odd tile: columns wrap mid-word
    want = texture_pad_ref(x, pads, tile, stagger=3, offset=(1, 2))
    out = _poisoned(tuple(want.shape), dtype)
    F.texture_pad(x, list(pads), tile, stagger=3, offset=(1, 2), out=out)
    assert_bitwise_equal(out, want)
    assert copies == [True] if pad_taichi.BULK_INTERIOR else copies == []


@pytest.mark.parametrize("copies", [True], ids=["bulk"], indirect=True)
def test_past_the_cache_limit_the_kernel_moves_rows(
    copies: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pad_taichi, "_BULK_BYTES", 1 << 16)
    monkeypatch.setattr(pad_taichi, "_plans", {})  # a plan holds its choice
    dtype, shape, pads = CASES[0]
    x = random_image(shape, dtype, seed=3)
    got = F.pad(x, list(pads), padding_mode="reflect")
    assert_bitwise_equal(got, numpy_pad(x, pads, "reflect"))
    assert copies == []  # the plan said no: _copy_interior never asked


@pytest.mark.parametrize("copies", [True], ids=["bulk"], indirect=True)
def test_gradients_unchanged(copies: list[bool]) -> None:
    # Backward never takes the bulk copy; the forward that precedes it may.
    x = random_image((2, 3, 151, 203), torch.float64, seed=5).requires_grad_()
    pads = [6, 5, 4, 7]
    g = random_image((2, 3, 163, 213), torch.float64, seed=6)
    F.pad(x, pads, padding_mode="symmetric").backward(g)
    ref = x.detach().clone().requires_grad_()
    pad_ref(ref, pads, "symmetric", differentiable=True).backward(g)
    assert x.grad is not None and ref.grad is not None
    torch.testing.assert_close(x.grad, ref.grad, rtol=0, atol=1e-12)
