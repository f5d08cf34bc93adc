"""Fresh large CPU outputs: huge-page advice (``backends.taichi.advise_huge_pages``) and
what users get.

The advice must never change a value (fresh output == ``out=`` output bit for bit, an advised
tensor keeps its contents), must cover exactly the 2 MiB-aligned interior of a large CPU output
and nothing outside it, must skip small and non-CPU tensors, and the fresh outputs stay ordinary
tensors (offset 0, contiguous, their own resizable storage).
"""

from __future__ import annotations

import mmap
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from reference import assert_bitwise_equal, random_image, texture_pad_ref

import tipad_transforms.functional as F
from tipad_transforms.backends import taichi as taichi_backend

HUGE = 1 << 21
# 3 x 640 x 1250 float32 = 9.6 MB: above the advice's 8 MiB threshold, a few ms to pad.
BIG_PADDING = (600, 300)


class _RecordingLibc:
    """Stands in for libc: records ``madvise`` calls instead of making them."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def madvise(self, start: int, length: int, advice: int) -> int:
        self.calls.append((start, length, advice))
        return 0


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> _RecordingLibc:
    fake = _RecordingLibc()
    monkeypatch.setattr(taichi_backend, "_libc", [fake])
    monkeypatch.setattr(sys, "platform", "linux")
    return fake


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return random_image((3, 40, 50), seed=11), random_image((3, 48, 32), seed=12)


@pytest.mark.parametrize("padding", [BIG_PADDING, (5, 3)], ids=["advised", "small"])
def test_fresh_output_equals_poisoned_out_bit_for_bit(padding: tuple[int, int]) -> None:
    x, tile = _inputs()
    fresh = F.texture_pad(x, padding, tile, stagger=7)
    out = torch.full_like(fresh, float("nan"))
    got = F.texture_pad(x, padding, tile, stagger=7, out=out)
    assert got is out
    assert_bitwise_equal(fresh, out)
    assert_bitwise_equal(fresh, texture_pad_ref(x, padding, tile, stagger=7))
    if padding == BIG_PADDING:
        assert fresh.numel() * fresh.element_size() >= 4 * HUGE  # the advised path ran


def test_fresh_output_is_an_ordinary_tensor() -> None:
    x, tile = _inputs()
    fresh = F.texture_pad(x, BIG_PADDING, tile, stagger=7)
    assert fresh.storage_offset() == 0 and fresh.is_contiguous()
    storage = fresh.untyped_storage()
    assert storage.nbytes() == fresh.numel() * fresh.element_size()
    assert storage.resizable()
    before = fresh.clone()
    fresh.resize_(fresh.numel() + 1)  # a user may grow it as any torch output
    assert_bitwise_equal(fresh[:-1], before.reshape(-1))


def test_advice_covers_exactly_the_aligned_interior(libc: _RecordingLibc) -> None:
    # Offsets into one allocation give starts on, just past and just before a 2 MiB boundary.
    base = torch.empty(12 * HUGE + 2 * HUGE, dtype=torch.uint8)
    skip = (-base.data_ptr()) % HUGE
    for shift in (0, 64, HUGE - 64):
        for size in (10 * HUGE, 10 * HUGE + 4096, 10 * HUGE - 4096):
            t = base[skip + shift : skip + shift + size]
            libc.calls.clear()
            taichi_backend.advise_huge_pages(t)
            ((start, length, advice),) = libc.calls
            ptr, end = t.data_ptr(), t.data_ptr() + size
            assert advice == 14  # MADV_HUGEPAGE
            assert start % HUGE == 0 and length % HUGE == 0 and length > 0
            assert ptr <= start < ptr + HUGE  # the first whole huge page inside...
            assert end - HUGE < start + length <= end  # ...to the last: nothing outside


def test_advice_skips_small_and_non_cpu_tensors(libc: _RecordingLibc) -> None:
    taichi_backend.advise_huge_pages(torch.empty(4 * HUGE - 1, dtype=torch.uint8))
    taichi_backend.advise_huge_pages(torch.empty(16 * HUGE, dtype=torch.uint8, device="meta"))
    taichi_backend.advise_huge_pages(torch.empty(0))
    assert libc.calls == []
    taichi_backend.advise_huge_pages(torch.empty(4 * HUGE + 2 * HUGE, dtype=torch.uint8))
    assert len(libc.calls) == 1


def test_advice_skips_other_platforms(
    libc: _RecordingLibc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    taichi_backend.advise_huge_pages(torch.empty(8 * HUGE, dtype=torch.uint8))
    assert libc.calls == []


def test_advice_keeps_contents() -> None:
    t = random_image((6 * HUGE // 4 + 123,), torch.float32, seed=13)
    before = t.clone()
    taichi_backend.advise_huge_pages(t)  # real madvise, on memory already written
    assert_bitwise_equal(t, before)


def _vma_flags(addr: int) -> list[str]:
    """``VmFlags`` of the mapping holding ``addr`` in this process (Linux ``/proc``)."""
    current: Any = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                current = lo <= addr < hi
            elif head == "VmFlags:" and current:
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {addr:#x}")


@pytest.mark.skipif(
    not Path("/sys/kernel/mm/transparent_hugepage").is_dir(),
    reason="needs Linux with transparent huge pages (reads /proc/self/smaps)",
)
def test_advice_reaches_the_kernel_for_the_interior_only() -> None:
    # A mapping of its own: memory from torch's allocator may sit in a heap region that an
    # earlier tensor's advice already covers (glibc reuses freed memory), and then the head's
    # flags say nothing about this call. A fresh anonymous mapping carries no advice, so every
    # byte outside the interior must still be without it afterwards.
    size, offset = 8 * HUGE + 3 * 4096, 12345  # an odd offset: both ends are partial pages
    mm = mmap.mmap(-1, size)
    t = None
    try:
        t = torch.frombuffer(mm, dtype=torch.uint8, count=size - offset - 777, offset=offset)
        ptr = t.data_ptr()
        start = -(-ptr // HUGE) * HUGE
        end = (ptr + t.numel()) // HUGE * HUGE
        assert ptr < start < end < ptr + t.numel()
        assert "hg" not in _vma_flags(ptr) and "hg" not in _vma_flags(ptr + t.numel() - 1)
        taichi_backend.advise_huge_pages(t)
        assert "hg" in _vma_flags(start) and "hg" in _vma_flags(end - 1)
        assert "hg" not in _vma_flags(start - 1) and "hg" not in _vma_flags(ptr)
        assert "hg" not in _vma_flags(end) and "hg" not in _vma_flags(ptr + t.numel() - 1)
    finally:
        del t  # the tensor exports the mapping's buffer: it goes first
        mm.close()
