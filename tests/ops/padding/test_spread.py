"""The CPU order's blocks of rows spread over Taichi's threads (``backends.taichi.spread``:
the kernel's loop gives each block ``spread`` iterations and works in the first).

Spreads of one, a few and hundreds iterations per block, every mode (constant through the
kernel), per-sample texture offsets with a stagger, batches, single images and 2-D inputs, the
forward bit-exact against the independent references into poisoned outputs, the backward
against the reference's autograd.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
from reference import assert_bitwise_equal, pad_ref, random_image, texture_pad_ref

import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI
from tipad_transforms.ops.padding import copies as pad_copies
from tipad_transforms.ops.padding import taichi as pad_taichi

MODES = ("constant", "edge", "reflect", "symmetric", "circular")
# (shape, padding): 3 * ceil(63 / 16) = 12 blocks of rows, 1 * ceil(49 / 16) = 4, and 4.
CASES = (
    ((2, 3, 37, 53), (5, 3, 7, 4)),
    ((3, 41, 29), (0, 6, 1, 2)),
    ((45, 61), (2, 0, 0, 9)),
)


@pytest.fixture(params=[0, 30, 1000], ids=["spread-1", "spread-few", "spread-many"])
def spreads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("the spread is the CPU order's (a GPU order runs a thread per row span)")
    F.pad(torch.zeros(1, 1, 1), 1)  # Taichi running first: its start sets the real values
    if TAICHI.gpu_order:
        pytest.skip("the spread is the CPU order's")
    monkeypatch.setattr(TAICHI, "cpu_iterations", request.param)
    monkeypatch.setattr(TAICHI, "serial_bytes", 0)  # every canvas a parallel launch
    for form in ("CONSTANT", "STANDARD", "TEXTURE", "LATTICES"):  # every canvas the kernel's
        monkeypatch.setattr(pad_copies, form, False)
    monkeypatch.setattr(pad_taichi, "_plans", {})  # a plan holds its spread
    monkeypatch.setattr(pad_taichi, "_bounds", {})
    yield


def _poisoned(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype)
    out.view(torch.uint8).fill_(0xAB)
    return out


@pytest.mark.usefixtures("spreads")
@pytest.mark.parametrize(("shape", "pads"), CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=str)
def test_every_block_of_rows_is_written(
    dtype: torch.dtype, shape: tuple[int, ...], pads: tuple[int, ...]
) -> None:
    x = random_image(shape, dtype, seed=len(shape))
    for mode in MODES:
        fill = 3 if mode == "constant" else 0
        want = pad_ref(x, pads, mode, fill)
        out = _poisoned(want.shape, dtype)
        F.pad(x, list(pads), fill=fill, padding_mode=mode, out=out)
        assert_bitwise_equal(out, want)
    tile = random_image((shape[-3] if len(shape) >= 3 else 1, 5, 7), dtype, seed=9)
    want = texture_pad_ref(x, pads, tile, stagger=3, offset=(1, -2))
    out = _poisoned(want.shape, dtype)
    F.texture_pad(x, list(pads), tile, stagger=3, offset=(1, -2), out=out)
    assert_bitwise_equal(out, want)


@pytest.mark.usefixtures("spreads")
@pytest.mark.parametrize("mode", MODES)
def test_gradients_match_the_reference(mode: str) -> None:
    x = random_image((2, 3, 37, 53), torch.float64, seed=4).requires_grad_()
    pads = [5, 3, 7, 4]
    g = random_image((2, 3, 44, 65), torch.float64, seed=5)
    F.pad(x, pads, padding_mode=mode).backward(g)
    ref = x.detach().clone().requires_grad_()
    pad_ref(ref, pads, mode, differentiable=True).backward(g)
    assert x.grad is not None and ref.grad is not None
    torch.testing.assert_close(x.grad, ref.grad, rtol=0, atol=1e-12)
