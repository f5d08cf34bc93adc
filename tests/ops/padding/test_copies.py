"""The CPU order's bulk-copy forms (``ops/padding/copies.py``): constant mode as the fill
around the window and the image into it; edge, reflect, symmetric and circular as the
window, the left and right border runs, then runs of whole rows.

Every dtype the kernels take (NaN fills and payloads included, as bits), per-channel fills,
batches, single images and 2-D inputs, uneven and zero sides, borders that fold over the image
several times (several runs a side) and so many times that the kernel keeps them, canvases
above and below the serial limit, each switch on and off, bit-exact against the independent
references into poisoned and fresh outputs; a spy proves which path ran.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from reference import assert_bitwise_equal, numpy_pad, pad_ref, random_image, texture_pad_ref

import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI
from tipad_transforms.ops.padding import copies as pad_copies
from tipad_transforms.ops.padding import taichi as pad_taichi
from tipad_transforms.ops.padding.geometry import PadGeometry

DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool)  # fmt: skip
STANDARD = ("edge", "reflect", "symmetric", "circular")
# (shape, padding): batches, one image and a 2-D image; zero sides, uneven sides; a border
# folding over a small image twice (two runs a side).
CASES = (
    ((2, 3, 37, 53), (5, 3, 7, 4)),
    ((3, 41, 29), (0, 6, 1, 0)),
    ((45, 61), (2, 0, 0, 9)),
    ((2, 2, 5, 6), (7, 9, 8, 6)),
)


@pytest.fixture
def copies(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Both copy forms on (param True) or off, every canvas a parallel launch (serial limit
    0); yields what each call's ``copies.write`` did."""
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("the copies are the CPU order's (a GPU order writes every pixel)")
    F.pad(torch.zeros(1, 1, 1), 1)  # Taichi running first: init would reset gpu_order
    if TAICHI.gpu_order:
        pytest.skip("the copies are the CPU order's")
    monkeypatch.setattr(pad_copies, "CONSTANT", request.param)
    monkeypatch.setattr(pad_copies, "STANDARD", request.param)
    monkeypatch.setattr(TAICHI, "serial_bytes", 0)
    monkeypatch.setattr(pad_taichi, "_plans", {})  # a plan holds its serial choice
    seen: list[bool] = []
    real = pad_copies.write

    def spy(*args: object, **kwargs: bool) -> bool:
        done = real(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(done)
        return done

    monkeypatch.setattr(pad_copies, "write", spy)
    yield seen


def _fill(dtype: torch.dtype, channels: int) -> float | list[float]:
    if dtype == torch.bool:
        return 1
    if dtype.is_floating_point:
        return [float("nan"), -2.5, 3.0][:channels] if channels > 1 else -2.5
    return [7, 1, 5][:channels] if channels > 1 else 7


def _check(x: torch.Tensor, pads: tuple[int, ...], mode: str, fill: float | list[float]) -> None:
    """Into a poisoned ``out=`` and fresh: bit-equal to the reference; ``x`` untouched."""
    want = pad_ref(x, pads, mode, fill)
    before = x.clone()
    out = torch.empty(want.shape, dtype=x.dtype)
    out.view(torch.uint8).fill_(0xAB)  # poisoned: every element must be written
    F.pad(x, list(pads), fill=fill, padding_mode=mode, out=out)
    assert_bitwise_equal(out, want)
    assert_bitwise_equal(F.pad(x, list(pads), fill=fill, padding_mode=mode), want)
    assert_bitwise_equal(x, before)


@pytest.mark.parametrize("copies", [True, False], ids=["copies", "kernel"], indirect=True)
@pytest.mark.parametrize(("shape", "pads"), CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_constant_bit_exact_against_the_references(
    dtype: torch.dtype, shape: tuple[int, ...], pads: tuple[int, ...], copies: list[bool],
    border_form: str,
) -> None:  # fmt: skip
    x = random_image(shape, dtype, seed=len(shape) + dtype.itemsize)
    fill = _fill(dtype, shape[-3] if len(shape) >= 3 else 1)
    numeric = dtype != torch.bfloat16 and not (dtype.is_floating_point and isinstance(fill, list))
    if numeric and x.dim() >= 3:  # numpy_pad: no bfloat16, no NaN among fills, (.., C, H, W)
        assert_bitwise_equal(pad_ref(x, pads, "constant", fill),
                             numpy_pad(x, pads, "constant", fill))  # fmt: skip
    _check(x, pads, "constant", fill)
    assert copies == ([True] * 2 if pad_copies.CONSTANT else [False] * 2)


@pytest.mark.parametrize("copies", [True, False], ids=["copies", "kernel"], indirect=True)
@pytest.mark.parametrize(("shape", "pads"), CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("mode", STANDARD)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_standard_modes_bit_exact_against_the_references(
    dtype: torch.dtype, mode: str, shape: tuple[int, ...], pads: tuple[int, ...],
    copies: list[bool],
) -> None:  # fmt: skip
    x = random_image(shape, dtype, seed=len(shape) + dtype.itemsize)
    if dtype not in (torch.bfloat16, torch.bool) and x.dim() >= 3:
        assert_bitwise_equal(pad_ref(x, pads, mode), numpy_pad(x, pads, mode))
    _check(x, pads, mode, 0)
    taken = pad_copies.STANDARD and dtype.itemsize <= pad_copies.STANDARD_MAX_BYTES
    assert copies == [taken] * 2


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
@pytest.mark.parametrize("mode", STANDARD)
def test_a_border_of_many_folds_keeps_the_kernel(mode: str, copies: list[bool]) -> None:
    # 3 wide padded by 40: a dozen or more runs a side, but edge's one constant run.
    x = random_image((2, 3, 4, 3), torch.uint8, seed=5)
    _check(x, (40, 1, 2, 40), mode, 0)
    assert copies == [mode == "edge"] * 2


@pytest.mark.parametrize(
    ("h", "w", "sides"),
    [(5, 6, (2, 3, 1, 4)), (1, 6, (2, 3, 1, 4)), (5, 1, (0, 0, 0, 0)), (4, 7, (0, 2, 0, 1)),
     (3, 4, (3, 0, 0, 2)), (1, 1, (0, 0, 3, 0)), (6, 5, (4, 1, 2, 0))],
)  # fmt: skip
def test_borders_and_windows_cover_every_element_once(
    h: int, w: int, sides: tuple[int, int, int, int]
) -> None:
    # The views constant mode and repeat_first write: with the windows they partition the
    # canvas (single rows, no side borders, no rows above or below, a one-pixel image).
    g = PadGeometry(3, 2, h, w, *sides)
    count = torch.zeros(g.n, g.c, g.out_h, g.out_w, dtype=torch.int32)
    for part in pad_copies.borders(g, count):
        part += 1
    window = count[:, :, g.top : g.top + h, g.left : g.left + w]
    assert int(window.sum()) == 0  # no border view reaches into a window
    window += 1
    assert torch.equal(count, torch.ones_like(count))
    assert sum(p.numel() for p in pad_copies.borders(g, count)) == count.numel() - window.numel()


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
def test_borders_serve_large_canvases_of_long_rows(
    copies: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default thresholds: a 1.2 MB batch of 256-byte rows is filled around its windows;
    # 150-byte rows, or a canvas under 1 MiB, are filled whole. Values as the reference's.
    widths: list[int] = []
    real = pad_copies.borders

    def spy(g: PadGeometry, planes: torch.Tensor) -> list[torch.Tensor]:
        widths.append(g.w)
        return real(g, planes)

    monkeypatch.setattr(pad_copies, "borders", spy)
    for shape in ((4, 3, 256, 256), (8, 3, 160, 150), (2, 3, 256, 256)):
        _check(random_image(shape, torch.uint8, seed=shape[-1]), (32, 32, 32, 32), "constant", 9)
    assert widths == [256, 256]  # the first shape, into out= and fresh
    # Into an out= that starts inside a larger tensor (the views are offset from its storage's
    # start): the window and borders land in it, the elements around it stay as they were.
    x = random_image((4, 3, 256, 256), torch.uint8, seed=3)
    big = random_image((3, 4, 3, 320, 320), torch.uint8, seed=4)
    before = big.clone()
    F.pad(x, 32, fill=9, out=big[1])
    assert widths == [256] * 3
    assert_bitwise_equal(big[1], pad_ref(x, (32, 32, 32, 32), "constant", 9))
    assert_bitwise_equal(big[0], before[0])
    assert_bitwise_equal(big[2], before[2])


def test_runs_step_by_one_minus_one_or_zero() -> None:
    index = [3, 2, 1, 0, 1, 2, 2, 2, 7, 5]
    assert pad_copies._runs(index, 0, len(index)) == [
        (0, 4, 3, -1), (4, 2, 1, 1), (6, 2, 2, 0), (8, 1, 7, 1), (9, 1, 5, 1),
    ]  # fmt: skip
    assert pad_copies._runs([4, 4, 4], 0, 3) == [(0, 3, 4, 0)]
    assert pad_copies._runs(index, 2, 2) == []


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16], ids=str)
def test_a_small_serial_launch_keeps_the_kernel_but_for_constant_mode(
    dtype: torch.dtype, copies: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TAICHI, "serial_bytes", 1 << 19)
    x = random_image((3, 20, 30), dtype, seed=1)
    assert_bitwise_equal(F.pad(x, [2, 3, 4, 5], padding_mode="reflect"),
                         pad_ref(x, [2, 3, 4, 5], "reflect"))  # fmt: skip
    assert copies == []  # below SERIAL_MIN_ELEMENTS: copies.write never asked
    # Constant mode's two copies cost less than a serial launch: they run at every size.
    assert_bitwise_equal(F.pad(x, [2, 3, 4, 5], fill=9), pad_ref(x, [2, 3, 4, 5], "constant", 9))
    assert copies == [True]
    # A serial canvas of SERIAL_MIN_ELEMENTS or more: the copies.
    side = int((pad_copies.SERIAL_MIN_ELEMENTS / 3) ** 0.5) + 1
    big = random_image((3, side - 9, side - 6), dtype, seed=2)
    assert 3 * side * side * dtype.itemsize <= TAICHI.serial_bytes
    assert_bitwise_equal(F.pad(big, [2, 3, 4, 6], padding_mode="symmetric"),
                         pad_ref(big, [2, 3, 4, 6], "symmetric"))  # fmt: skip
    assert copies == [True, True]


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
def test_textures_stacks_and_gradients_keep_the_kernel(copies: list[bool]) -> None:
    x = random_image((2, 3, 17, 19), torch.float64, seed=2).requires_grad_()
    pads = [3, 1, 2, 4]
    tile = random_image((3, 5, 7), torch.float64, seed=3)
    assert_bitwise_equal(F.texture_pad(x.detach(), pads, tile),
                         texture_pad_ref(x.detach(), pads, tile))  # fmt: skip
    assert copies == [False]  # asked, and texture mode is the kernel's
    small = random_image((1, 6, 5), torch.uint8, seed=6)
    big = random_image((1, 9, 8), torch.uint8, seed=7)
    placement = torch.tensor([[2, 3], [1, 2]])  # (top, left) of each on a 12x12 canvas
    stacked = F.pad_stack([small, big], (12, 12), placement, padding_mode="reflect")
    for got, img, sides in zip(stacked, (small, big), ([3, 2, 4, 4], [2, 1, 2, 2]), strict=True):
        assert_bitwise_equal(got, pad_ref(img, sides, "reflect"))
    assert copies[1:] == [False]
    g = random_image((2, 3, 22, 24), torch.float64, seed=4)
    F.pad(x, pads, fill=1.5).backward(g)
    ref = x.detach().clone().requires_grad_()
    pad_ref(ref, pads, "constant", 1.5, differentiable=True).backward(g)
    assert x.grad is not None and ref.grad is not None
    torch.testing.assert_close(x.grad, ref.grad, rtol=0, atol=0)
    assert copies[2:] == [True]  # the constant pad's forward only; the backward is the kernel's


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16], ids=str)
def test_constant_stacks_copy_runs_of_equal_geometry(
    dtype: torch.dtype, copies: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pad_copies, "STACK_MIN_BYTES", 0)
    sizes = [(6, 5), (6, 5), (9, 8), (6, 5), (1, 1), (9, 8)]
    images = [random_image((3, h, w), dtype, seed=10 + i) for i, (h, w) in enumerate(sizes)]
    # Runs of equal geometry: the first two share theirs, the fourth's placement differs.
    placement = torch.tensor([[2, 3], [2, 3], [1, 2], [0, 0], [5, 7], [1, 2]])
    fill = _fill(dtype, 3)
    befores = [img.clone() for img in images]
    got = F.pad_stack(images, (12, 12), placement, fill)
    for canvas, img, (top, left) in zip(got, images, placement.tolist(), strict=True):
        h, w = img.shape[-2:]
        sides = [left, top, 12 - left - w, 12 - top - h]
        assert_bitwise_equal(canvas, pad_ref(img, sides, "constant", fill))
    for img, before in zip(images, befores, strict=True):
        assert_bitwise_equal(img, before)
    assert copies == [True]
    monkeypatch.setattr(pad_copies, "STACK_MIN_BYTES", 1 << 30)  # small images: the kernel's
    assert_bitwise_equal(F.pad_stack(images, (12, 12), placement, fill), got)
    assert copies == [True, False]


@pytest.fixture
def repeats(copies: list[bool], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batch sizes of the textured batches written as their first canvas and copies."""
    seen: list[int] = []
    real = pad_copies.repeat_first

    def spy(call: Any, image: torch.Tensor, canvas: torch.Tensor) -> None:
        seen.append(call.geometry.n)
        real(call, image, canvas)

    monkeypatch.setattr(pad_copies, "repeat_first", spy)
    return seen


@pytest.mark.parametrize("copies", [True, False], ids=["copies", "kernel"], indirect=True)
@pytest.mark.parametrize(("shape", "pads"), [CASES[0], CASES[3], ((3, 2, 0, 4), (2, 3, 1, 2))],
                         ids=lambda v: str(v))  # fmt: skip
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_textured_batch_of_one_border_is_its_first_canvas_copied(
    dtype: torch.dtype, shape: tuple[int, ...], pads: tuple[int, ...], copies: list[bool],
    repeats: list[int], border_form: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    for form in ("TEXTURE", "LATTICES"):  # the fixture's switch (the wall would serve too)
        monkeypatch.setattr(pad_copies, form, pad_copies.CONSTANT)
    x = random_image(shape, dtype, seed=20 + dtype.itemsize)
    tile = random_image((shape[1], 5, 7), dtype, seed=21)
    before = x.clone()
    for offset in ((2, -3), torch.tensor([[1, 4]]).expand(shape[0], 2)):
        want = texture_pad_ref(x, pads, tile, stagger=3, offset=offset)
        out = torch.empty(want.shape, dtype=dtype)
        out.view(torch.uint8).fill_(0xAB)  # poisoned: every element must be written
        F.texture_pad(x, list(pads), tile, stagger=3, offset=offset, out=out)
        assert_bitwise_equal(out, want)
        assert_bitwise_equal(F.texture_pad(x, list(pads), tile, stagger=3, offset=offset), want)
    assert_bitwise_equal(x, before)
    taken = pad_copies.TEXTURE and dtype.itemsize <= pad_copies.TEXTURE_MAX_BYTES
    assert repeats == ([shape[0]] * 4 if taken else [])


@pytest.fixture
def walls(copies: list[bool], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batch sizes of the textured batches written as crops of one wall, the wall form
    switched on or off with the ``copies`` fixture's forms."""
    monkeypatch.setattr(pad_copies, "LATTICES", pad_copies.CONSTANT)
    seen: list[int] = []
    real = pad_copies.crop_walls

    def spy(call: Any, images: Any, canvas: torch.Tensor) -> None:
        seen.append(call.geometry.n)
        real(call, images, canvas)

    monkeypatch.setattr(pad_copies, "crop_walls", spy)
    return seen


@pytest.mark.parametrize("copies", [True, False], ids=["copies", "kernel"], indirect=True)
@pytest.mark.parametrize(
    ("shape", "pads"),
    [CASES[0], CASES[3], ((3, 2, 0, 4), (2, 3, 1, 2)), ((2, 2, 3, 9, 7), (4, 0, 13, 6))],
    ids=lambda v: str(v),
)
@pytest.mark.parametrize("stagger", [0, 3, -5, 17])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_textured_batch_of_own_lattices_is_crops_of_one_wall(
    dtype: torch.dtype, shape: tuple[int, ...], pads: tuple[int, ...], stagger: int,
    copies: list[bool], walls: list[int],
) -> None:  # fmt: skip
    # Per-sample lattice offsets (negative, beyond a tile), one bank index (not 0), a tile of
    # the images' channels and a one-channel one; single rows and an image smaller than its
    # border, empty images, clips of frames; into poisoned out= and fresh.
    x = random_image(shape, dtype, seed=40 + dtype.itemsize)
    lead = shape[:-3]
    n = int(torch.tensor(lead).prod())
    gen = torch.Generator().manual_seed(41 + abs(stagger))
    offset = torch.randint(-20, 20, (*lead, 2), generator=gen)
    before = x.clone()
    for channels in (shape[-3], 1):
        bank = random_image((2, channels, 5, 7), dtype, seed=42 + channels)
        index = torch.ones(lead, dtype=torch.int64)
        kw = {"stagger": stagger, "offset": offset, "texture_index": index}
        want = texture_pad_ref(x, pads, bank, **kw)
        out = torch.empty(want.shape, dtype=dtype)
        out.view(torch.uint8).fill_(0xAB)  # poisoned: every element must be written
        F.texture_pad(x, list(pads), bank, out=out, **kw)
        assert_bitwise_equal(out, want)
        assert_bitwise_equal(F.texture_pad(x, list(pads), bank, **kw), want)
    assert_bitwise_equal(x, before)
    taken = pad_copies.LATTICES and dtype.itemsize <= pad_copies.TEXTURE_MAX_BYTES
    assert walls == ([n] * 4 if taken else [])


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
def test_a_wall_follows_its_texture_written_in_place(walls: list[int]) -> None:
    # The walls are kept per texture: a tile written in place between calls gets a new wall.
    x = random_image((4, 3, 6, 5), torch.uint8, seed=50)
    tile = random_image((3, 4, 6), torch.uint8, seed=51)
    offset = torch.tensor([[0, 1], [2, 3], [-1, 7], [5, 0]])
    for _ in range(2):
        want = texture_pad_ref(x, (3, 2, 4, 5), tile, stagger=2, offset=offset)
        got = F.texture_pad(x, [3, 2, 4, 5], tile, stagger=2, offset=offset)
        assert_bitwise_equal(got, want)
        tile[:, 1:3] = 255 - tile[:, 1:3]
    assert walls == [4, 4]


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=str)
def test_single_images_of_many_sizes_share_one_growing_wall(
    dtype: torch.dtype, walls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One image per call, launches serial: from SERIAL_MIN_ELEMENTS the wall's crop. The
    # first canvas draws the wall, a taller or wider one grows it, a smaller one crops it as
    # it is; a canvas whose own wall passes WALL_MAX_PIXELS, or one below SERIAL_MIN_ELEMENTS,
    # is the kernel's. Per-call lattice offsets, negative and beyond a tile.
    monkeypatch.setattr(TAICHI, "serial_bytes", 1 << 30)
    monkeypatch.setattr(pad_copies, "SERIAL_MIN_ELEMENTS", 200)
    monkeypatch.setattr(pad_copies, "_walls", type(pad_copies._walls)(8))
    draws: list[tuple[int, int]] = []
    real = pad_copies._wall

    def drawing(call: Any, texture: torch.Tensor, height: int, width: int) -> torch.Tensor:
        draws.append((height, width))
        return real(call, texture, height, width)

    monkeypatch.setattr(pad_copies, "_wall", drawing)
    tile = random_image((3, 4, 6), dtype, seed=54)  # (th, tw) = (4, 6)
    cases = [  # (h, w, padding (l, t, r, b), offset): canvases 11x14, 17x9, 8x10, 19x18
        (5, 7, (3, 2, 4, 4), (1, -7)),
        (9, 4, (2, 5, 3, 3), (-9, 13)),
        (3, 3, (4, 2, 3, 3), (0, 0)),
        (11, 9, (5, 4, 4, 4), (2, 2)),
    ]
    for i, (h, w, pads, offset) in enumerate(cases):
        x = random_image((3, h, w), dtype, seed=55 + i)
        want = texture_pad_ref(x, pads, tile, stagger=5, offset=offset)
        got = F.texture_pad(x, list(pads), tile, stagger=5, offset=offset)
        assert_bitwise_equal(got, want)
    assert walls == [1] * 4
    # 15x20 drawn; 21x20 grown (taller); 12x16 cropped from it; 23x24 grown each way.
    assert draws == [(15, 20), (21, 20), (23, 24)]
    # Tall and wide canvases in turn, where one wall for both would pass WALL_MAX_PIXELS:
    # each draws its own once (two kept per texture), then both are cropped, never redrawn.
    monkeypatch.setattr(pad_copies, "WALL_MAX_PIXELS", 30 * 25)  # one for both: 28 x 30
    monkeypatch.setattr(pad_copies, "_walls", type(pad_copies._walls)(8))
    draws.clear()
    tall, wide = random_image((3, 20, 6), dtype, seed=62), random_image((3, 6, 20), dtype, seed=63)
    for _ in range(3):
        for x in (tall, wide):  # canvases 24x10 and 10x24: walls 28x16 and 14x30
            got = F.texture_pad(x, 2, tile, stagger=5, offset=(3, -1))
            assert_bitwise_equal(got, texture_pad_ref(x, 2, tile, stagger=5, offset=(3, -1)))
    assert draws == [(28, 16), (14, 30)]
    assert walls == [1] * 10
    monkeypatch.setattr(pad_copies, "WALL_MAX_PIXELS", 23 * 24 - 1)
    x = random_image((3, 11, 9), dtype, seed=60)
    got = F.texture_pad(x, [5, 4, 4, 4], tile, stagger=5)
    assert_bitwise_equal(got, texture_pad_ref(x, (5, 4, 4, 4), tile, stagger=5))
    small = random_image((3, 2, 2), dtype, seed=61)  # a 3 x 7 x 8 canvas: 168 elements
    got = F.texture_pad(small, [3, 2, 3, 3], tile, stagger=5)
    assert_bitwise_equal(got, texture_pad_ref(small, (3, 2, 3, 3), tile, stagger=5))
    assert walls == [1] * 10  # both the kernel's


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
def test_a_wall_another_thread_puts_in_meanwhile_is_not_cropped(
    walls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A call reads the texture's walls once: another thread that puts a wall too small for
    # this canvas (drawn for its own) after that read does not make this call crop it.
    stand_in = torch.zeros(3, 1, 1, dtype=torch.uint8)

    class Swapping(list):  # type: ignore[type-arg]
        reads = 0

        def __getitem__(self, i: Any) -> Any:
            Swapping.reads += 1  # from a call's second read on: what the other thread left
            if Swapping.reads == 1:
                return super().__getitem__(i)
            return [stand_in] if isinstance(i, slice) else stand_in

    kept = Swapping()
    monkeypatch.setattr(pad_copies._walls, "get", lambda t, extra, make: kept)
    x = random_image((2, 3, 9, 11), torch.uint8, seed=63)
    tile = random_image((3, 4, 6), torch.uint8, seed=62)
    offset = torch.tensor([[1, -3], [7, 2]])
    want = texture_pad_ref(x, (4, 3, 5, 2), tile, stagger=3, offset=offset)
    for _ in range(2):  # the first call draws the wall and puts it, the second reads it
        Swapping.reads = 0
        got = F.texture_pad(x, [4, 3, 5, 2], tile, stagger=3, offset=offset)
        assert_bitwise_equal(got, want)
    assert walls == [2, 2]
    assert len(kept) == 1  # one wall drawn and kept


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
def test_a_tile_larger_than_the_batchs_canvases_keeps_the_kernel(walls: list[int]) -> None:
    # Its wall would cost more to compare and keep than the kernel's lattice arithmetic.
    x = random_image((3, 2, 4, 5), torch.uint8, seed=52)
    tile = random_image((2, 15, 16), torch.uint8, seed=53)  # 240 pixels; canvases 3 x 8 x 9
    offset = torch.tensor([[0, 1], [2, 3], [-1, 7]])
    want = texture_pad_ref(x, (1, 2, 3, 2), tile, stagger=4, offset=offset)
    assert_bitwise_equal(F.texture_pad(x, [1, 2, 3, 2], tile, stagger=4, offset=offset), want)
    assert walls == []


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
def test_textured_samples_of_their_own_textures_keep_the_kernel(
    repeats: list[int], walls: list[int]
) -> None:
    x = random_image((3, 2, 6, 5), torch.uint8, seed=30)
    bank = random_image((2, 2, 4, 3), torch.uint8, seed=31)
    pads = (3, 2, 4, 1)
    offsets = torch.tensor([[0, 0], [0, 0], [1, 0]])  # the last sample's lattice differs
    want = texture_pad_ref(x, pads, bank, offset=offsets, texture_index=torch.tensor([1, 1, 1]))
    got = F.texture_pad(x, list(pads), bank, offset=offsets, texture_index=torch.tensor([1, 1, 1]))
    assert_bitwise_equal(got, want)
    index = torch.tensor([0, 0, 1])  # one lattice, the last sample's texture differs
    want = texture_pad_ref(x, pads, bank, texture_index=index)
    assert_bitwise_equal(F.texture_pad(x, list(pads), bank, texture_index=index), want)
    same = torch.tensor([1, 1, 1])  # one lattice, one texture: one border
    want = texture_pad_ref(x, pads, bank, texture_index=same)
    assert_bitwise_equal(F.texture_pad(x, list(pads), bank, texture_index=same), want)
    assert repeats == [3]
    assert walls == [3]  # the first call: its own lattices, one texture


@pytest.mark.parametrize("copies", [True], ids=["copies"], indirect=True)
def test_the_walls_of_all_textures_stay_within_their_byte_budget(
    walls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Textures in turn, each with its own wall: once the walls held and a new one would pass
    # WALLS_MAX_BYTES, the cache drops them all and keeps the new one. The canvases stay exact
    # and a texture dropped is drawn again when it comes back.
    monkeypatch.setattr(TAICHI, "serial_bytes", 1 << 30)
    monkeypatch.setattr(pad_copies, "SERIAL_MIN_ELEMENTS", 200)
    monkeypatch.setattr(pad_copies, "_walls", type(pad_copies._walls)(8))
    x = random_image((3, 12, 10), torch.float32, seed=70)  # canvases 3 x 16 x 14
    tiles = [random_image((3, 4, 6), torch.float32, seed=71 + i) for i in range(3)]
    draws: list[int] = []
    real = pad_copies._wall

    def drawing(call: Any, texture: torch.Tensor, height: int, width: int) -> torch.Tensor:
        bits = texture.view(torch.float32)
        draws.append(next(i for i, t in enumerate(tiles) if torch.equal(t, bits)))
        return real(call, texture, height, width)

    monkeypatch.setattr(pad_copies, "_wall", drawing)
    one_wall = 3 * (16 + 4) * (14 + 6) * 4  # bytes: a canvas and a tile each way
    monkeypatch.setattr(pad_copies, "WALLS_MAX_BYTES", 2 * one_wall)
    for tile in [*tiles, tiles[0], tiles[2]]:
        got = F.texture_pad(x, 2, tile, stagger=3, offset=(1, 2))
        assert_bitwise_equal(got, texture_pad_ref(x, 2, tile, stagger=3, offset=(1, 2)))
        held = sum(w.nbytes for kept in pad_copies._walls.values() for w in kept)
        assert held <= 2 * one_wall
    # Drawn: 0, 1, then 2 (dropping 0 and 1), 0 again (2 stays), and 2 cropped.
    assert draws == [0, 1, 2, 0]
    assert walls == [1] * 5
