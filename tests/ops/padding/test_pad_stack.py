"""``functional.pad_stack`` / ``tipad::pad_stack``: variable-size images padded in one launch.

Every canvas is checked against the numpy reference applied to its own image with its own
padding ``(left_i, top_i, W - left_i - w_i, H - top_i - h_i)``, on fresh random inputs.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
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
from tipad_transforms import backends
from tipad_transforms.backends import TAICHI
from tipad_transforms.ops.padding import PadCall, StackGeometry
from tipad_transforms.ops.padding import taichi as pad_taichi

MODES = (*STANDARD_MODES, "texture")
SIZE = (13, 17)  # (H, W) of every canvas


def _layout(n: int, mode: str, seed: int) -> list[tuple[int, int, int, int]]:
    """``(h, w, top, left)`` per image: random sizes and placements, plus the corner cases
    (an image as large as the canvas, one at the bottom-right edge, one at the top-left corner
    and, where the mode takes one, an empty image)."""
    gen = torch.Generator().manual_seed(seed)
    out_h, out_w = SIZE

    def rand(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (), generator=gen))

    rows = [(out_h, out_w, 0, 0), (3, 5, out_h - 3, out_w - 5), (4, 1, 0, 0)]
    if mode in ("constant", "texture"):  # empty images: no rows, no columns (at the edge)
        rows += [(0, 4, 2, 3), (5, 0, 1, out_w)]
    else:
        rows += [(1, 1, 6, 16), (2, 1, out_h - 2, 9)]
    while len(rows) < n:
        h, w = rand(1, out_h), rand(1, out_w)
        rows.append((h, w, rand(0, out_h - h), rand(0, out_w - w)))
    order = torch.randperm(len(rows), generator=gen).tolist()
    return [rows[i] for i in order]


def _case(
    mode: str, dtype: torch.dtype, seed: int, n: int = 6, channels: int = 3
) -> tuple[list[torch.Tensor], torch.Tensor, dict[str, Any]]:
    """Images, placement and pad_stack keyword arguments (per-sample offsets and bank indices)."""
    layout = _layout(n, mode, seed)
    images = [
        random_image((channels, h, w), dtype, seed=seed * 100 + i)
        for i, (h, w, _, _) in enumerate(layout)
    ]
    placement = torch.tensor([[top, left] for _, _, top, left in layout])
    kw: dict[str, Any] = {"padding_mode": mode}
    if mode == "texture":
        gen = torch.Generator().manual_seed(seed + 1)
        kw.update(
            texture=random_image((3, channels, 4, 5), dtype, seed=seed + 2),
            stagger=3,
            offset=torch.randint(-40, 40, (n, 2), generator=gen),
            texture_index=torch.randint(0, 3, (n,), generator=gen),
        )
    elif mode == "constant":
        if dtype == torch.bool:
            kw["fill"] = [True, False, True]
        else:
            kw["fill"] = [1, 0.5, -2] if dtype.is_floating_point else [7, 0, 200]
    return images, placement, kw


def _reference(
    images: list[torch.Tensor], placement: torch.Tensor, differentiable: bool = False, **kw: Any
) -> torch.Tensor:
    """Each image padded alone by the numpy reference, stacked."""
    out_h, out_w = SIZE
    mode = kw.get("padding_mode", "constant")
    canvases = []
    for i, im in enumerate(images):
        top, left = placement[i].tolist()
        padding = (left, top, out_w - left - im.shape[2], out_h - top - im.shape[1])
        if mode == "texture":
            canvases.append(
                texture_pad_ref(
                    im,
                    padding,
                    kw["texture"],
                    stagger=kw.get("stagger", 0),
                    offset=kw["offset"][i],
                    texture_index=int(kw["texture_index"][i]),
                    differentiable=differentiable,
                )
            )
        else:
            fill = kw.get("fill", 0)
            canvases.append(pad_ref(im, padding, mode, fill, differentiable=differentiable))
    return torch.stack(canvases)


@pytest.fixture
def per_pixel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """Run under the CPU row walk (False) or the GPU order (True)."""
    if not request.param and os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("Vulkan lane: the CPU row walk is the CPU's order (word moves, serial rows)")
    F.pad(torch.zeros(1, 1, 1), 1)  # initialise first: init would reset the switch
    monkeypatch.setattr(TAICHI, "gpu_order", request.param)
    yield request.param


# ---------------------------------------------------------------------------------------------
# values


@pytest.mark.parametrize("per_pixel", [False, True], ids=["rows", "per_pixel"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_matches_reference_per_sample(mode: str, dtype: torch.dtype, per_pixel: bool) -> None:
    images, placement, kw = _case(mode, dtype, seed=MODES.index(mode) + 7 * dtype.itemsize)
    got = F.pad_stack(images, SIZE, placement, **kw)
    assert_bitwise_equal(got, _reference(images, placement, **kw))


@pytest.mark.parametrize("per_pixel", [False, True], ids=["rows", "per_pixel"], indirect=True)
@pytest.mark.parametrize("mode", MODES)
def test_launcher_writes_every_element(mode: str, per_pixel: bool) -> None:
    # Poisoned canvas: an element the kernel skipped would keep its NaN payload.
    images, placement, kw = _case(mode, torch.float32, seed=30 + MODES.index(mode), n=5)
    sizes = torch.cat([torch.tensor([im.shape[1:] for im in images]), placement], 1)
    canvas = torch.full((5, 3, *SIZE), float("nan"))
    if mode == "texture":
        bank, offset, index = kw["texture"], kw["offset"], kw["texture_index"]
    else:
        bank, offset, index = torch.empty(0), torch.zeros(5, 2), torch.zeros(5)
    fill = torch.tensor(kw.get("fill", []), dtype=torch.float32)
    call = PadCall(StackGeometry(sizes, 3, *SIZE), mode, fill, bank, offset.to(torch.int32),
                   index.to(torch.int32), kw.get("stagger", 0))  # fmt: skip
    pad_taichi.forward(call, torch.cat([im.reshape(-1) for im in images]), canvas)
    assert_bitwise_equal(canvas, _reference(images, placement, **kw))


def test_lattice_is_anchored_at_each_image_and_values_are_reduced() -> None:
    # Offsets and stagger beyond int32 (reduced by the pattern's periods, as texture_pad does;
    # small enough for the reference's int64 products) and a 1-channel texture broadcast over
    # 4 channels; int16 runs the word moves.
    images, placement, kw = _case("texture", torch.int16, seed=3, n=5, channels=4)
    kw["texture"] = random_image((2, 1, 3, 7), torch.int16, seed=4)
    kw["texture_index"] = torch.tensor([1, 0, 1, 1, 0])
    kw["offset"] = torch.tensor([[2**31 + 3, -(2**32)], [0, 0], [-7, 9], [-(2**31), 5], [1, -1]])
    kw["stagger"] = 2**31 + 11
    got = F.pad_stack(images, SIZE, placement, **kw)
    assert_bitwise_equal(got, _reference(images, placement, **kw))
    # One image per call through texture_pad gives the same canvases.
    for i, im in enumerate(images):
        top, left = placement[i].tolist()
        padding = (left, top, SIZE[1] - left - im.shape[2], SIZE[0] - top - im.shape[1])
        alone = F.texture_pad(
            im,
            padding,
            kw["texture"],
            stagger=kw["stagger"],
            offset=kw["offset"][i],
            texture_index=kw["texture_index"][i],
        )
        assert_bitwise_equal(got[i], alone)


def test_out_of_bank_index_is_clamped_in_the_kernel() -> None:
    # A device-resident index skips the op's host check; the kernel clamps it into the bank.
    images, placement, kw = _case("texture", torch.float32, seed=5, n=5)
    sizes = torch.cat([torch.tensor([im.shape[1:] for im in images]), placement], 1)
    canvas = torch.full((5, 3, *SIZE), float("nan"))
    bad = torch.tensor([-5, 9, 2, 2**31 - 1, 1], dtype=torch.int32)
    call = PadCall(StackGeometry(sizes, 3, *SIZE), "texture", torch.empty(0), kw["texture"],
                   kw["offset"].to(torch.int32), bad, 3)  # fmt: skip
    pad_taichi.forward(call, torch.cat([im.reshape(-1) for im in images]), canvas)
    kw["texture_index"] = bad.clamp(0, 2)
    assert_bitwise_equal(canvas, _reference(images, placement, **kw))


def test_one_launch_forward_and_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    F.pad(torch.zeros(1, 1, 1), 1)  # the kernel family exists from here on
    kernels = TAICHI.kernels["pad"]
    launches = []

    def counting(*args: Any) -> None:
        launches.append(args[8])  # the `backward` switch (after the 7 tensors and `lanes`)
        kernels_pad_canvas(*args)

    kernels_pad_canvas = kernels["pad_canvas"]
    monkeypatch.setitem(kernels, "pad_canvas", counting)
    images, placement, kw = _case("texture", torch.float64, seed=6, n=16)
    images = [im.requires_grad_() for im in images]
    out = F.pad_stack(images, SIZE, placement, **kw)
    assert launches == [False]
    out.backward(random_image(tuple(out.shape), torch.float64, seed=7))
    assert launches == [False, True]


# ---------------------------------------------------------------------------------------------
# gradients


@pytest.mark.parametrize("per_pixel", [False, True], ids=["rows", "per_pixel"], indirect=True)
@pytest.mark.parametrize("mode", MODES)
def test_gradients_match_reference_autograd(mode: str, per_pixel: bool) -> None:
    images, placement, kw = _case(mode, torch.float64, seed=40 + MODES.index(mode), n=5)
    images = [im.requires_grad_() for im in images]
    inputs = tuple(images)
    if mode == "texture":
        kw["texture"] = kw["texture"].requires_grad_()
        inputs = (*images, kw["texture"])
    got = F.pad_stack(images, SIZE, placement, **kw)
    want = _reference(images, placement, differentiable=True, **kw)
    assert_bitwise_equal(got, want)
    upstream = random_image(tuple(want.shape), torch.float64, seed=41)
    for g, w in zip(
        torch.autograd.grad(got, inputs, upstream),
        torch.autograd.grad(want, inputs, upstream),
        strict=True,
    ):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["texture", "reflect", "constant"])
def test_gradcheck(mode: str) -> None:
    gen = torch.Generator().manual_seed(8)
    shapes = [(2, 2, 3), (2, 1, 1), (2, 3, 2)]
    images = tuple(
        torch.randn(s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes
    )
    bank = torch.randn(2, 2, 2, 3, generator=gen, dtype=torch.float64).requires_grad_()
    placement = torch.tensor([[0, 2], [3, 0], [1, 3]])
    kw: dict[str, Any] = {"padding_mode": mode}
    if mode == "texture":
        kw.update(stagger=1, offset=torch.tensor([[1, -1], [0, 2], [3, 3]]), texture_index=1)
    elif mode == "constant":
        kw["fill"] = 0.5

    def fn(*tensors: torch.Tensor) -> torch.Tensor:
        if mode == "texture":
            return F.pad_stack(list(tensors[:-1]), (4, 5), placement, texture=tensors[-1], **kw)
        return F.pad_stack(list(tensors), (4, 5), placement, **kw)

    assert torch.autograd.gradcheck(fn, (*images, bank) if mode == "texture" else images)


# ---------------------------------------------------------------------------------------------
# the ops


def _op_args(mode: str) -> tuple[Any, ...]:
    images, placement, kw = _case(mode, torch.float64, seed=50, n=5)
    packed = torch.cat([im.reshape(-1) for im in images]).requires_grad_()
    sizes = torch.cat([torch.tensor([im.shape[1:] for im in images]), placement], 1)
    empty = packed.new_empty(0)
    texture = kw["texture"].requires_grad_() if mode == "texture" else empty
    fill = torch.tensor(kw["fill"], dtype=torch.float64) if mode == "constant" else empty
    offset = kw["offset"] if mode == "texture" else torch.zeros(5, 2)
    index = kw["texture_index"] if mode == "texture" else torch.zeros(5)
    int32 = torch.int32
    return (packed, sizes, [3, *SIZE], mode, fill, texture, offset.to(int32), index.to(int32), 2)


@pytest.mark.parametrize("mode", ["texture", "symmetric", "constant"])
def test_opcheck(mode: str) -> None:
    args = _op_args(mode)
    torch.library.opcheck(torch.ops.tipad.pad_stack.default, args)
    packed, sizes, canvas, _, _, texture, offset, index, stagger = args
    grad = random_image((5, *canvas), torch.float64, seed=51)
    backward = (grad, sizes, packed.numel(), mode, texture.detach(), offset, index, stagger)
    torch.library.opcheck(torch.ops.tipad.pad_stack_backward.default, backward)


# ---------------------------------------------------------------------------------------------
# the torch route


@pytest.mark.allow_fallback
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float64], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_fallback_equals_kernel(
    mode: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    images, placement, kw = _case(mode, dtype, seed=60 + MODES.index(mode), n=5)
    grads = dtype.is_floating_point
    images = [im.requires_grad_(grads) for im in images]
    if mode == "texture":
        kw["texture"] = kw["texture"].requires_grad_(grads)
    inputs = (*images, kw["texture"]) if mode == "texture" else tuple(images)
    kernel = F.pad_stack(images, SIZE, placement, **kw)
    reason = f"test refusal of pad_stack, {mode} {dtype}"
    monkeypatch.setattr(TAICHI, "refusal", lambda device: reason)
    with pytest.warns(RuntimeWarning, match=reason):
        fallback = F.pad_stack(images, SIZE, placement, **kw)
    assert_bitwise_equal(fallback, kernel)
    if grads:
        upstream = random_image(tuple(kernel.shape), dtype, seed=61)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # warned once per reason
            fb_grads = torch.autograd.grad(fallback, inputs, upstream)
        monkeypatch.undo()
        for g, w in zip(fb_grads, torch.autograd.grad(kernel, inputs, upstream), strict=True):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_fallback_routes_are_guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    # The conftest guard must cover pad_stack's torch routes too, or a silent fallback would
    # pass every value test above.
    images, placement, kw = _case("reflect", torch.float32, seed=62, n=2)
    monkeypatch.setattr(TAICHI, "refusal", lambda device: "refused by test_pad_stack")
    with pytest.warns(RuntimeWarning), pytest.raises(backends.Forbidden, match="torch backend"):
        F.pad_stack(images, SIZE, placement, **kw)


# ---------------------------------------------------------------------------------------------
# bad input


def test_bad_inputs_name_the_argument_and_sample() -> None:
    im = [random_image((3, 4, 5), torch.uint8, seed=i) for i in range(3)]
    at = torch.tensor([[0, 0], [1, 1], [2, 2]])
    with pytest.raises(ValueError, match=r"images\[2\] of size \(4, 5\) at placement \(9, 2\)"):
        F.pad_stack(im, (12, 12), torch.tensor([[0, 0], [1, 1], [9, 2]]))
    with pytest.raises(ValueError, match=r"images\[1\] is empty.*'edge'"):
        F.pad_stack([im[0], im[1][:, :0], im[2]], (9, 9), at, padding_mode="edge")
    with pytest.raises(ValueError, match=r"images\[1\]"):
        F.pad_stack([im[0], im[1].float(), im[2]], (9, 9), at)
    with pytest.raises(ValueError, match=r"images\[2\] must be \(C, H, W\)"):
        F.pad_stack([im[0], im[1], im[2][0]], (9, 9), at)
    with pytest.raises(TypeError, match=r"images\[0\] must be a torch.Tensor"):
        F.pad_stack([[1, 2]], (9, 9), at[:1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="placement must be"):
        F.pad_stack(im, (9, 9), at[:2])
    with pytest.raises(TypeError, match="placement must hold integers"):
        F.pad_stack(im, (9, 9), at.float())
    with pytest.raises(ValueError, match="size must be"):
        F.pad_stack(im, (9, -1), at)
    with pytest.raises(ValueError, match="texture_index must lie in"):
        F.pad_stack(im, (9, 9), at, texture=im[0][:, :2], texture_index=1, padding_mode="texture")
    with pytest.raises(ValueError, match="offset must broadcast"):
        F.pad_stack(
            im, (9, 9), at, texture=im[0], offset=torch.zeros(2, 2).long(), padding_mode="texture"
        )
    with pytest.raises(ValueError, match="needs a texture"):
        F.pad_stack(im, (9, 9), at, padding_mode="texture")
    with pytest.raises(ValueError, match="mode must be one of"):
        F.pad_stack(im, (9, 9), at, padding_mode="mirror")
    # Direct op calls: the size table is checked before the kernel trusts it.
    packed = torch.cat([t.reshape(-1) for t in im])
    sizes = torch.tensor([[4, 5, 0, 0], [4, 5, 5, 1], [4, 5, 0, 0]])
    args = (packed.new_empty(0), im[0][None], torch.zeros(3, 2, dtype=torch.int32))
    index = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"sample 1: .* does not fit a \(8, 8\) canvas"):
        torch.ops.tipad.pad_stack(packed, sizes, [3, 8, 8], "texture", *args, index, 0)
    with pytest.raises(ValueError, match="sizes and 3 channels describe 180"):
        torch.ops.tipad.pad_stack(packed[1:], sizes, [3, 9, 9], "texture", *args, index, 0)
    sizes[2, :2] = 0
    with pytest.raises(ValueError, match="sample 2: mode 'reflect' needs a non-empty image"):
        torch.ops.tipad.pad_stack(packed[:120], sizes, [3, 9, 9], "reflect", *args, index, 0)
    with pytest.raises(ValueError, match="texture_index"):
        torch.ops.tipad.pad_stack(packed[:120], sizes, [3, 9, 9], "constant", *args, index[:2], 0)


def test_inputs_are_not_modified() -> None:
    images, placement, kw = _case("texture", torch.float32, seed=70, n=5)
    before = [im.clone() for im in (*images, placement, kw["texture"], kw["offset"])]
    F.pad_stack(images, SIZE, placement, **kw)
    for b, a in zip(before, (*images, placement, kw["texture"], kw["offset"]), strict=True):
        assert_bitwise_equal(a, b)


@pytest.mark.parametrize("mode", MODES)
def test_a_stack_of_one_geometry_runs_as_a_batch(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Equal sizes at equal placements: the single-geometry op (and its CPU forms), same values
    # and gradients; the stack op would be a mistake here.
    from tipad_transforms.functional import _stack

    def no_stack(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("pad_stack_direct ran for a stack of one geometry")

    monkeypatch.setattr(_stack, "pad_stack_direct", no_stack)
    images = [
        random_image((3, 5, 6), torch.float64, seed=40 + i).requires_grad_() for i in range(4)
    ]
    placement = torch.tensor([[2, 7]] * 4)  # (top, left) on the 13x17 canvas
    tile = random_image((3, 4, 5), torch.float64, seed=45)
    extra = {"texture": tile, "stagger": 2, "offset": (1, -2)} if mode == "texture" else {}
    got = F.pad_stack(images, SIZE, placement, 0.5, mode, **extra)
    sides = [7, 2, SIZE[1] - 7 - 6, SIZE[0] - 2 - 5]
    grad = random_image((4, 3, *SIZE), torch.float64, seed=46)
    got.backward(grad)
    for i, img in enumerate(images):
        ref_img = img.detach().clone().requires_grad_()
        if mode == "texture":
            want = texture_pad_ref(ref_img, sides, tile, stagger=2, offset=(1, -2),
                                   differentiable=True)  # fmt: skip
        else:
            want = pad_ref(ref_img, sides, mode, 0.5, differentiable=True)
        assert_bitwise_equal(got[i].detach(), want.detach())
        want.backward(grad[i])
        assert img.grad is not None and ref_img.grad is not None
        torch.testing.assert_close(img.grad, ref_img.grad, rtol=1e-12, atol=1e-12)


def _spy_list_form(monkeypatch: pytest.MonkeyPatch, *forms: str) -> list[tuple[str, int, bool]]:
    """For a test of the list form: packing the images into a batch fails the test, every
    canvas is poisoned before it is written, and each call of the ``copies`` functions named
    in ``forms`` is recorded as ``(name, batch size, images given as one tensor)``."""
    from tipad_transforms.functional import _stack
    from tipad_transforms.ops.padding import copies as pad_copies
    from tipad_transforms.ops.padding import op as pad_op

    def packed(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the images were packed into a batch")

    monkeypatch.setattr(_stack, "pad_direct", packed)
    seen: list[tuple[str, int, bool]] = []
    for name in forms:
        real = getattr(pad_copies, name)

        def spy(call: Any, images: Any, canvas: torch.Tensor, name: str = name,
                real: Any = real) -> None:  # fmt: skip
            seen.append((name, call.geometry.n, isinstance(images, torch.Tensor)))
            real(call, images, canvas)

        monkeypatch.setattr(pad_copies, name, spy)
    real_allocate = pad_op._allocate

    def poisoned(shape: list[int], like: torch.Tensor, name: str) -> torch.Tensor:
        out = real_allocate(shape, like, name)
        out.view(torch.uint8).fill_(0xAB)  # every element must be written
        return out

    monkeypatch.setattr(pad_op, "_allocate", poisoned)
    return seen


def _samples(dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """Four (3, 5, 6) images of ``dtype``: a channels-last one, a contiguous one, a slice."""
    base = random_image((4, 5, 6, 3), dtype, seed=seed)  # channels-last storage
    return [base[0].permute(2, 0, 1), random_image((3, 5, 6), dtype, seed=seed + 1),
            random_image((3, 7, 9), dtype, seed=seed + 2)[:, 1:6, 2:8],  # a slice
            random_image((3, 5, 6), dtype, seed=seed + 3)]  # fmt: skip


@pytest.mark.parametrize(
    "dtype",
    [torch.uint8, torch.bool, torch.int16, torch.bfloat16, torch.float32, torch.int64],
    ids=str,
)
@pytest.mark.parametrize("mode", ["constant", "texture"])
def test_a_stack_of_one_border_is_its_first_canvas_copied_without_packing(
    mode: str, dtype: torch.dtype, border_form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Equal sizes, equal placements and one border (constant mode; a texture at one offset):
    # in texture mode the backend pads image 0 and every other canvas copies it; in constant
    # mode the fill covers every canvas. Each takes its image straight from the list (any
    # strides), never packed into a batch first. Poisoned canvases, bit-exact against the
    # per-image reference, NaN payloads included; inputs untouched.
    seen = _spy_list_form(monkeypatch, "repeat_first", "fill_samples")
    seed = 60 + dtype.itemsize
    images = _samples(dtype, seed)
    if dtype.is_floating_point:
        images[1].view(-1)[::7] = float("nan")
    befores = [im.clone() for im in images]
    placement = torch.tensor([[2, 7]] * 4)  # (top, left) on the 13x17 canvas
    sides = [7, 2, SIZE[1] - 7 - 6, SIZE[0] - 2 - 5]
    tile = random_image((3, 4, 5), dtype, seed=seed + 4)
    fill = [1, 0, 1] if dtype == torch.bool else [3, float("nan"), -2] if dtype.is_floating_point \
        else [3, 1, 2]  # fmt: skip
    extra = {"texture": tile, "stagger": 2, "offset": (1, -2)} if mode == "texture" else {}
    got = F.pad_stack(images, SIZE, placement, fill, mode, **extra)
    for canvas, img in zip(got, images, strict=True):
        if mode == "texture":
            want = texture_pad_ref(img, sides, tile, stagger=2, offset=(1, -2))
        else:
            want = pad_ref(img, sides, mode, fill)
        assert_bitwise_equal(canvas, want)
    for img, before in zip(images, befores, strict=True):
        assert_bitwise_equal(img, before)
    form = "fill_samples" if mode == "constant" else "repeat_first"
    assert seen == [(form, 4, False)]


@pytest.mark.parametrize(
    "dtype",
    [torch.uint8, torch.bool, torch.int16, torch.bfloat16, torch.float32, torch.int64],
    ids=str,
)
def test_a_stack_of_own_lattices_is_crops_of_one_wall_without_packing(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Equal sizes at equal placements, a lattice offset per sample, one bank index (a
    # collate's random offsets): every canvas is its crop of the texture's wall, each image
    # taken straight from the list (any strides). Poisoned canvases, bit-exact against the
    # per-image reference; inputs untouched.
    seen = _spy_list_form(monkeypatch, "crop_walls")
    seed = 80 + dtype.itemsize
    images = _samples(dtype, seed)
    placement = torch.tensor([[2, 7]] * 4)  # (top, left) on the 13x17 canvas
    sides = [7, 2, SIZE[1] - 7 - 6, SIZE[0] - 2 - 5]
    bank = random_image((2, 3, 4, 5), dtype, seed=seed + 4)
    if dtype.is_floating_point:  # NaN payloads move as bits
        images[1].view(-1)[::7] = float("nan")
        bank.view(-1)[::5] = float("nan")
    befores = [im.clone() for im in images]
    offsets = torch.tensor([[0, 0], [1, -2], [-7, 3], [3, 11]])
    got = F.pad_stack(images, SIZE, placement, padding_mode="texture", texture=bank, stagger=3,
                      offset=offsets, texture_index=1)  # fmt: skip
    for canvas, img, off in zip(got, images, offsets.tolist(), strict=True):
        want = texture_pad_ref(img, sides, bank[1], stagger=3, offset=tuple(off))
        assert_bitwise_equal(canvas, want)
    for img, before in zip(images, befores, strict=True):
        assert_bitwise_equal(img, before)
    assert seen == [("crop_walls", 4, False)]


def test_a_stack_of_one_geometry_packs_where_borders_differ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Per-sample bank indices, one image, autograd: the batch is assembled and the
    # single-geometry op pads it (the list form would be wrong or slower there); per-sample
    # lattices of one bank index are the wall's crops, unpacked, in every dtype.
    from tipad_transforms.functional import _stack
    from tipad_transforms.ops.padding import op as pad_op

    ran: list[str] = []
    real_packed, real_samples = _stack.pad_direct, pad_op.pad_samples_direct

    def packed(*args: Any, **kwargs: Any) -> Any:
        ran.append("packed")
        return real_packed(*args, **kwargs)

    def samples(images: Any, call: Any) -> Any:
        got = real_samples(images, call)
        ran.append("samples" if got is not None else "declined")
        return got

    monkeypatch.setattr(_stack, "pad_direct", packed)
    monkeypatch.setattr(_stack, "pad_samples_direct", samples)
    placement = torch.tensor([[1, 2]] * 3)
    u8 = [random_image((3, 4, 5), torch.uint8, seed=70 + i) for i in range(3)]
    tile = random_image((3, 3, 4), torch.uint8, seed=74)
    offsets = torch.tensor([[0, 0], [1, 2], [0, 0]])
    got = F.pad_stack(u8, SIZE, placement, padding_mode="texture", texture=tile, offset=offsets)
    sides = [2, 1, SIZE[1] - 2 - 5, SIZE[0] - 1 - 4]
    for canvas, img, off in zip(got, u8, offsets.tolist(), strict=True):
        assert_bitwise_equal(canvas, texture_pad_ref(img, sides, tile, offset=tuple(off)))
    f32 = [im.float() for im in u8]
    got = F.pad_stack(f32, SIZE, placement, padding_mode="texture", texture=tile.float(),
                      offset=offsets)  # fmt: skip
    for canvas, img, off in zip(got, f32, offsets.tolist(), strict=True):
        assert_bitwise_equal(canvas, texture_pad_ref(img, sides, tile.float(), offset=tuple(off)))
    bank = torch.stack([tile, tile.flip(-1)])
    index = torch.tensor([0, 1, 0])
    got = F.pad_stack(u8, SIZE, placement, padding_mode="texture", texture=bank,
                      texture_index=index)  # fmt: skip
    for canvas, img, i in zip(got, u8, index.tolist(), strict=True):
        assert_bitwise_equal(canvas, texture_pad_ref(img, sides, bank[i]))
    F.pad_stack(u8[:1], SIZE, placement[:1])
    grads = [im.double().requires_grad_() for im in u8]
    F.pad_stack(grads, SIZE, placement).sum().backward()
    assert all(g.grad is not None and float(g.grad.sum()) == 4 * 5 * 3 for g in grads)
    assert ran == ["samples"] * 2 + ["declined", "packed"] * 3
