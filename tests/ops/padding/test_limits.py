"""The kernels at the edges of their index range: canvases near 2**31 elements, empty outputs
with huge paddings. Big tensors are uint8 (about 2 GB), one alive at a time."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tipad_transforms import ops

_ROOT = str(Path(__file__).resolve().parents[3])  # the repository

_EMPTY_OUTPUT = """
import resource, sys, torch
# 6 GB of address space: the index maps of a 2**30 reflect padding alone took 16 GB.
resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))
from tipad_transforms import ops
from tipad_transforms.backends import TAICHI
none = torch.empty(0)
big = [0, 0, 2**30, 2**30]
for route, mode in [(r, m) for r in ("kernel", "torch") for m in ("reflect", "circular")]:
    if route == "torch":
        TAICHI.refusal = lambda device: "refused by test_kernel_limits"
    x = torch.zeros(0, 3, 4, 4, requires_grad=True)
    index = torch.zeros(0, dtype=torch.int32)
    out = ops.pad(x, big, mode, none, none, torch.zeros(0, 2, dtype=torch.int32), index, 0)
    assert out.shape == (0, 3, 4 + 2**30, 4 + 2**30), out.shape
    out.sum().backward()
    assert x.grad.shape == x.shape
    sizes = torch.tensor([[4, 4, 0, 0]] * 0, dtype=torch.int64).reshape(0, 4)
    stacked = ops.pad_stack(none, sizes, [3, 2**30, 2**30], mode, none, none,
                            torch.zeros(0, 2, dtype=torch.int32), index, 0)
    assert stacked.shape == (0, 3, 2**30, 2**30)
    zero_channels = ops.pad(torch.zeros(1, 0, 4, 4), big, mode, none, none,
                            torch.zeros(1, 2, dtype=torch.int32),
                            torch.zeros(1, dtype=torch.int32), 0)
    assert zero_channels.shape == (1, 0, 4 + 2**30, 4 + 2**30)
print("ok")
"""


def test_empty_output_with_huge_padding_allocates_nothing() -> None:
    # Kernel and torch route, in a subprocess so the address-space limit spares the session.
    env = dict(os.environ, PYTHONPATH=_ROOT, PYTHONWARNINGS="ignore")
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_EMPTY_OUTPUT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


# Canvases near 2**31 elements (the runtime's cap): every index the kernel forms must stay
# exact. Each test holds one ~2 GB uint8 canvas and checks all of it without a second one:
# a border is checked for its first period, then for periodicity with torch.equal on
# overlapping views (no temporary).
_NEAR = 2**31 - 8  # > 2**31 - 16: (out_h + 15) // 16 once overflowed to no rows at all
_I32_MAX = 2**31 - 1


def _lattice(n: int, oy: int = 0, ox: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([[oy, ox]] * n, dtype=torch.int32), torch.zeros(n, dtype=torch.int32)


def _assert_periodic(line: torch.Tensor, period: int, first: torch.Tensor) -> None:
    assert torch.equal(line[:period], first)
    assert torch.equal(line[period:], line[:-period])


@pytest.fixture
def big() -> Iterator[None]:
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip(
            "Vulkan lane: a 2**31-element canvas through lavapipe takes minutes (each launch "
            "copies it to the device and back)"
        )
    gc.collect()
    yield
    gc.collect()


@pytest.mark.slow  # 2**31 rows of one pixel: about 20 s on one free core
def test_tall_texture_canvas_with_offset_near_int32_max(big: None) -> None:
    # Over 2**31 - 16 rows, (out_h + 15) // 16 blocks overflowed: no row was written. The image
    # sits at the bottom (top near 2**31) and oy is near 2**31: y = Y - top - oy once wrapped
    # around in int32. (Constant mode runs as a 1x1 texture: the same loop.)
    th = 251  # prime: no accidental agreement of wrong tile rows
    tex = torch.arange(th, dtype=torch.uint8).reshape(1, 1, th, 1)
    top, oy = _NEAR - 1, _I32_MAX - 3
    offset, index = _lattice(1, oy=oy)
    x = torch.tensor([[[200]]], dtype=torch.uint8)
    none = torch.empty(0, dtype=torch.uint8)
    out = ops.pad(x, [0, top, 0, 0], "texture", none, tex, offset, index, 0)
    line = out.view(-1)
    first = tex.view(-1)[(torch.arange(th) - top - oy).remainder(th)]
    _assert_periodic(line[:top], th, first)
    assert int(line[top]) == 200
    del out, line


def test_wide_texture_canvas_with_offset_near_int32_max(big: None) -> None:
    # The image sits at the right end (left near 2**31) and ox is near 2**31: -left - ox once
    # wrapped around in int32. A staggered bank texture, two rows of tiles.
    th, tw, stagger = 2, 253, 100
    tex = torch.randint(0, 256, (3, 1, th, tw), dtype=torch.uint8, generator=_gen())
    width = _NEAR // 2
    left, ox, oy = width - 1, _I32_MAX - 1, 1
    offset = torch.tensor([[oy, ox]], dtype=torch.int32)
    index = torch.tensor([2], dtype=torch.int32)
    x = torch.tensor([[[200]]], dtype=torch.uint8)
    none = torch.empty(0, dtype=torch.uint8)
    out = ops.pad(x, [left, 1, 0, 0], "texture", none, tex, offset, index, stagger)
    assert out.shape == (1, 2, width)
    for y in range(2):
        line = out[0, y]
        yy = y - 1 - oy
        v, ty = yy // th, yy % th
        tx = (torch.arange(tw) - left - ox - v * stagger).remainder(tw)
        end = left if y == 1 else width
        _assert_periodic(line[:end], tw, tex[2, 0, ty][tx])
    assert int(out[0, 1, left]) == 200
    del out, line


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(8)
