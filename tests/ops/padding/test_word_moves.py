"""Word moves of the CPU row walk (``ops/padding/taichi.py``: ``copy_run``, ``_word_span``).

The kernel copies an image row into the canvas 8 bytes at a time. An image row and its canvas
row rarely start at the same place in a word (odd widths, odd paddings, images at odd addresses
inside a larger buffer), so a canvas word is joined from the halves of two image words. These
tests run every relative alignment and every image phase for each lane width (1-, 2- and 4-byte
pixels), against the independent references, with poisoned outputs; check that the word path
was the one taken; that storages off the word (``torch.frombuffer``) move pixels, through the
lean launcher and Taichi's own call; in a child process with guard pages around the tensors,
that the kernel reads no byte outside the image's storage and writes none outside the canvas;
and under Taichi's debug mode (bounds-checked arrays), that it reads no word outside its view.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from reference import assert_bitwise_equal, numpy_pad, pad_ref, random_image, texture_pad_ref

import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI
from tipad_transforms.ops.padding import taichi as runtime_pad

# (dtype, lanes): pixels per 8-byte word.
LANE_DTYPES = ((torch.uint8, 8), (torch.int16, 4), (torch.float32, 2))


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The word spans the runtime found for each image (None: it moved pixels)."""
    F.pad(torch.zeros(1, 1, 1), 1)  # Taichi running, on the CPU row walk
    if TAICHI.gpu_order:
        pytest.skip("the row walk's word moves run on the CPU only")
    seen: list[Any] = []
    real = runtime_pad._word_span

    def spy(t: torch.Tensor, before: bool) -> tuple[int, int] | None:
        span = real(t, before)
        if before:
            seen.append(span)
        return span

    monkeypatch.setattr(runtime_pad, "_word_span", spy)
    yield seen


def _at_phase(x: torch.Tensor, phase: int) -> torch.Tensor:
    """``x``'s values in a contiguous view ``phase`` elements into a fresh (aligned) buffer."""
    flat = torch.empty(x.numel() + phase + 3, dtype=x.dtype)
    view = flat[phase : phase + x.numel()].view(x.shape)
    view.copy_(x)
    assert view.data_ptr() % 8 == phase * x.element_size() % 8
    return view


def _poisoned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype)
    out.view(torch.uint8).fill_(0xA5)
    return out


@pytest.mark.parametrize(("dtype", "lanes"), LANE_DTYPES, ids=lambda v: str(v))
def test_every_phase_and_relative_alignment(dtype: torch.dtype, lanes: int, spans: list) -> None:
    # Widths 1 .. 2*lanes+3 and one wide row; left paddings 0 .. lanes: each (row start, canvas
    # row start) pair mod lanes, at each image phase. Reflect reads the image for the border too.
    seed = 0
    for w in (*range(1, 2 * lanes + 4), 5 * lanes + 3):
        for phase in range(lanes):
            seed += 1
            x = _at_phase(random_image((3, 6, w), dtype, seed=seed), phase)
            for left in range(lanes + 1):
                pads = (left, 2, 1 + left % 3, 3)
                want = numpy_pad(x, pads, "edge")
                out = _poisoned(tuple(want.shape), dtype)
                F.pad(x, pads, padding_mode="edge", out=out)
                assert_bitwise_equal(out, want)
                assert_bitwise_equal(
                    F.pad(x, pads, padding_mode="constant", fill=7),
                    numpy_pad(x, pads, "constant", 7),
                )
    # Every image whose rows hold a whole word moved words (the spy saw a span).
    assert spans and all(s is not None for s in spans[-(lanes + 1) :])


@pytest.mark.parametrize(("dtype", "lanes"), LANE_DTYPES, ids=lambda v: str(v))
def test_texture_and_batches_at_odd_phases(dtype: torch.dtype, lanes: int, spans: list) -> None:
    # A batch of odd-sized images (the plan's one record, image b starting b*C*h*w further on:
    # each sample's rows at another relative alignment) and a texture border.
    texture = random_image((3, 5, 7), dtype, seed=1)
    for phase in range(lanes):
        x = _at_phase(random_image((3, 3, 11, 13), dtype, seed=10 + phase), phase)
        pads = (5, 2, 4, 1)
        got = F.texture_pad(x, pads, texture, stagger=2)
        assert_bitwise_equal(got, texture_pad_ref(x, pads, texture, stagger=2))
        assert_bitwise_equal(F.pad(x, pads, padding_mode="reflect"), pad_ref(x, pads, "reflect"))
    assert all(s is not None for s in spans)


def test_packed_images_of_odd_sizes(spans: list) -> None:
    # pad_stack packs images back to back: each starts at its own place in a word.
    gen = torch.Generator().manual_seed(3)
    sizes = [(int(h), int(w)) for h, w in torch.randint(1, 20, (7, 2), generator=gen)]
    images = [random_image((3, h, w), torch.uint8, seed=20 + i) for i, (h, w) in enumerate(sizes)]
    placement = torch.tensor([[20 - h, (20 - w) // 2] for h, w in sizes])
    got = F.pad_stack(images, (20, 20), placement, padding_mode="symmetric")
    for i, (h, w) in enumerate(sizes):
        top, left = placement[i].tolist()
        pads = (left, top, 20 - w - left, 20 - h - top)
        assert_bitwise_equal(got[i], numpy_pad(images[i], pads, "symmetric"))
    assert spans and spans[-1] is not None


def _odd_storage(nbytes: int, dtype: torch.dtype, keep: list[bytearray]) -> torch.Tensor:
    """A 1-D ``dtype`` tensor over a storage that does not start on an 8-byte word (a buffer
    made by someone else, ``torch.frombuffer`` at an odd offset)."""
    buffer = bytearray(nbytes + 16)
    keep.append(buffer)
    for offset in range(1, 8):
        t = torch.frombuffer(buffer, dtype=dtype, offset=offset, count=nbytes // dtype.itemsize)
        if t.untyped_storage().data_ptr() % 8:
            return t
    raise AssertionError("frombuffer's storage started on a word at every offset")


@pytest.mark.parametrize("dtype", (torch.uint8, torch.int16, torch.float32), ids=str)
@pytest.mark.parametrize("launcher", ("lean", "public"))
def test_storage_off_the_word(
    dtype: torch.dtype, launcher: str, spans: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The image (or the out= canvas) in a storage that starts off a word, at every element
    # offset: no words (the pixel phase would not be whole, and a word view of the storage
    # cannot be made), the reference's bits, through the lean launcher and Taichi's own.
    if launcher == "public":  # every call makes its arrays' views (runtime_pad._view)
        monkeypatch.setattr(runtime_pad, "_bounds", _NoBounds())
    keep: list[bytearray] = []
    pads = (3, 1, 2, 2)
    for elem in range(8):
        base = _odd_storage(1024, dtype, keep)
        x = base[elem : elem + 3 * 5 * 11].view(3, 5, 11)
        x.copy_(random_image((3, 5, 11), dtype, seed=elem))
        assert_bitwise_equal(F.pad(x, pads, padding_mode="edge"), numpy_pad(x, pads, "edge"))
        assert spans[-1] is None
        # The canvas there, at a word-aligned address of that storage.
        image = random_image((3, 5, 11), dtype, seed=50 + elem)
        canvas = _odd_storage(2048, dtype, keep)
        at = (-canvas.data_ptr() % 8) // dtype.itemsize + elem * (8 // dtype.itemsize)
        out = canvas[at : at + 3 * 8 * 16].view(3, 8, 16)
        F.pad(image, pads, padding_mode="edge", out=out)
        assert_bitwise_equal(out, numpy_pad(image, pads, "edge"))


class _NoBounds(dict):
    """A lean-launcher table that never holds one: every launch goes through Taichi's call."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


DEBUG = textwrap.dedent(
    """
    import taichi as ti
    ti.init(arch=ti.cpu, debug=True, cpu_max_num_threads=1)  # bounds-checked ndarray access
    import os
    os.environ["TIPAD_WARMUP"] = "0"
    import numpy as np
    import torch
    import tipad_transforms.functional as F

    bad = []
    for dtype in (torch.uint8, torch.int16, torch.float32):
        for w in (3, 9, 10, 11, 13, 21):
            for phase in range(8 // dtype.itemsize):
                for left in range(0, 9, 3):
                    buf = torch.arange(2 * w + phase).to(dtype)
                    x = buf[phase:].view(1, 2, w)  # the image ends where its storage does
                    pads = (left, 1, 8 - left, 0)
                    got = F.pad(x, pads, padding_mode="edge")
                    want = np.pad(x.numpy(), ((0, 0), (1, 0), (left, 8 - left)), mode="edge")
                    if not np.array_equal(got.numpy(), want):
                        bad.append((dtype, w, phase, left))
    print("bad", bad)
    """
)


def test_reads_stay_in_the_word_view() -> None:
    # Under Taichi's debug mode every ndarray access is bounds-checked: a read of the image's
    # partial last word (which no guard page can catch: it never leaves a page) raises.
    run = subprocess.run([sys.executable, "-c", DEBUG], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "bad []" in run.stdout, (run.stdout[-1000:], run.stderr[-2000:])


GUARDED = textwrap.dedent(
    """
    import ctypes, mmap, os, sys
    os.environ["TIPAD_WARMUP"] = "0"
    import torch
    import tipad_transforms.functional as F

    PAGE = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

    def guarded(nbytes, at_end):
        # nbytes of memory with a PROT_NONE page right after (at_end) or right before it.
        pages = -(-nbytes // PAGE)
        area = mmap.mmap(-1, (pages + 2) * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(area))
        for page in (base, base + (pages + 1) * PAGE):
            assert libc.mprotect(page, PAGE, 0) == 0
        start = base + (pages + 1) * PAGE - nbytes if at_end else base + PAGE
        keep.append(area)
        return torch.frombuffer((ctypes.c_char * nbytes).from_address(start), dtype=torch.uint8)

    keep = []
    torch.manual_seed(0)
    for h, w, pads in ((7, 13, (3, 1, 4, 2)), (5, 255, (1, 1, 0, 2)), (4, 9, (0, 0, 8, 0))):
        x = torch.randint(0, 256, (3, h, w), dtype=torch.uint8)
        want = F.pad(x.clone(), pads, padding_mode="edge")
        # The image ends on a page's last byte; it starts at an odd address inside its storage.
        image = guarded(x.numel() + 3, at_end=True)[3:].view(x.shape)
        image.copy_(x)
        assert torch.equal(F.pad(image, pads, padding_mode="edge"), want)
        # The image starts on a page's first byte; the canvas ends on a page's last byte.
        image = guarded(x.numel(), at_end=False).view(x.shape)
        image.copy_(x)
        out = guarded(want.numel(), at_end=True).view(want.shape)
        F.pad(image, pads, padding_mode="edge", out=out)
        assert torch.equal(out, want)
    print("ok")
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through libc")
def test_no_access_outside_the_tensors() -> None:
    # A read or write one byte past an image or canvas would fault on the guard page.
    run = subprocess.run(
        [sys.executable, "-c", GUARDED], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]
