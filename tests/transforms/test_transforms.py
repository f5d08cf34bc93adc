"""The v2 transform classes ``TexturePad`` and ``BrickPad``.

Image outputs are checked against the functional (the transforms must be thin wrappers over it)
and, where the texture mapping matters, against the independent reference in ``reference.py``.
Boxes and keypoints are checked against coordinates computed here from the spec (shift by
``(left, top)``, canvas grown by the padding), masks against a border filled by hand.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch
from reference import assert_bitwise_equal, texture_pad_ref
from torchvision import transforms as v1
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as tvF

import tipad_transforms
import tipad_transforms.functional as F
from tipad_transforms import BrickPad, TexturePad

PADDINGS = [2, (1, 3), (3, 0, 1, 2)]
# Small bricks keep the tile (12 x 16) smaller than the test images' borders, so the wall
# pattern (not one flat brick) is what gets compared.
BRICK = {"brick_size": (4, 6), "mortar": 2, "bricks_per_tile": 2, "courses": 2}


def sides(padding: Any) -> tuple[int, int, int, int]:
    if isinstance(padding, int):
        return (padding,) * 4
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    return tuple(padding)


def rand_u8(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)


def rand_tex(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------
# image-like inputs


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_plain_tensor_matches_functional_and_reference(padding: Any, dtype: torch.dtype) -> None:
    x = rand_u8(2, 3, 5, 6).to(dtype)
    tex = rand_tex(3, 4, 5)
    t = TexturePad(padding, tex, stagger=2, offset=(1, -3))
    out = t(x)
    assert type(out) is torch.Tensor
    expected = F.texture_pad(x, padding, tex, stagger=2, offset=(1, -3))
    assert_bitwise_equal(out, expected)
    assert_bitwise_equal(out, texture_pad_ref(x, padding, tex, stagger=2, offset=(1, -3)))


@pytest.mark.parametrize("kind", [tv_tensors.Image, tv_tensors.Video])
def test_tv_tensor_image_and_video_keep_their_type(kind: type) -> None:
    x = kind(rand_u8(2, 3, 4, 5))
    tex = rand_tex(3, 3, 4)
    out = TexturePad((2, 1), tex, stagger=1)(x)
    assert type(out) is kind
    assert out.shape == (2, 3, 6, 9)
    assert_bitwise_equal(out, F.texture_pad(x.as_subclass(torch.Tensor), (2, 1), tex, stagger=1))


@pytest.mark.parametrize("shape", [(5, 6), (1, 5, 6), (3, 5, 6), (4, 5, 6), (2, 3, 5, 6)])
def test_brickpad_matches_brick_pad(shape: tuple[int, ...]) -> None:
    x = rand_u8(*shape)
    t = BrickPad((3, 2, 9, 4), **BRICK)
    expected = F.brick_pad(x, (3, 2, 9, 4), **BRICK)
    assert_bitwise_equal(t(x), expected)
    # The transform builds its tiles once; a second call (cached conversion) must agree.
    assert_bitwise_equal(t(x), expected)


def test_brickpad_options_and_stagger_reach_the_texture() -> None:
    x = rand_u8(3, 4, 5).float() / 255
    opts = {**BRICK, "seed": 7, "noise": 0.1, "channels": 1}
    t = BrickPad(8, stagger=5, offset=(2, 3), **opts)
    expected = F.brick_pad(x, 8, stagger=5, offset=(2, 3), **opts)
    assert_bitwise_equal(t(x), expected)
    assert t.tile_size == (12, 16) == tuple(F.make_brick_texture(**opts).shape[-2:])
    # Default stagger: the one that continues the tile's running bond.
    assert BrickPad(1, **BRICK).stagger == F.running_bond_stagger(**BRICK)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "I", "F", "P"])
def test_pil_round_trip_texture_pad(mode: str) -> None:
    rgb = PIL.Image.fromarray(rand_u8(5, 7, 3).numpy(), "RGB")
    img = rgb.convert(mode)
    tex = rand_tex(4, 5)
    t = TexturePad((2, 1, 3, 4), tex, stagger=1)
    out = t(img)
    assert isinstance(out, PIL.Image.Image)
    assert out.mode == mode
    assert out.size == (7 + 2 + 3, 5 + 1 + 4)
    expected = F.texture_pad(img, (2, 1, 3, 4), tex, stagger=1)
    np.testing.assert_array_equal(np.array(out), np.array(expected))
    # The image itself comes back untouched (compared as RGB: palette indices may differ).
    inner = out.crop((2, 1, 2 + 7, 1 + 5))
    np.testing.assert_array_equal(np.array(inner.convert("RGB")), np.array(img.convert("RGB")))
    # The border is the texture, not left black: the top row is not all zero.
    assert np.array(out.convert("RGB") if mode == "P" else out)[:1].any()


@pytest.mark.parametrize(
    "mode",
    [
        "L",
        "RGB",
        "RGBA",
        "F",
        "P",
        "I",
    ],
)
def test_pil_round_trip_brickpad(mode: str) -> None:
    img = PIL.Image.fromarray(rand_u8(6, 5, 3).numpy(), "RGB").convert(mode)
    out = BrickPad(4, **BRICK)(img)
    assert isinstance(out, PIL.Image.Image) and out.mode == mode
    assert out.size == (13, 14)
    np.testing.assert_array_equal(np.array(out), np.array(F.brick_pad(img, 4, **BRICK)))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16])
def test_float_texture_on_wide_integer_image(dtype: torch.dtype) -> None:
    x = rand_u8(1, 3, 3).to(dtype)
    tex = torch.tensor([[[0.0, 0.5], [1.0, 0.25]]])
    out = TexturePad(2, tex)(x)
    assert_bitwise_equal(out, F.texture_pad(x, 2, tex))
    # (Y, X) = (1, 2) shows texel (1, 0) = 1.0 -> the maximum; (2, 0) shows texel (0, 0) = 0.
    assert int(out[0, 1, 2]) == torch.iinfo(dtype).max and int(out[0, 2, 0]) == 0


def test_unknown_inputs_pass_through() -> None:
    img = tv_tensors.Image(rand_u8(3, 4, 4))
    extra = torch.arange(5)
    label = 3
    out = TexturePad(1, rand_tex(3, 2, 2))({"image": img, "extra": extra, "label": label})
    assert out["extra"] is extra  # a plain tensor next to an explicit image is not an image
    assert out["label"] == 3
    assert out["image"].shape == (3, 6, 6)


# ------------------------------------------------------------------------------------------
# boxes, keypoints, masks

# Rectangles well inside a 20 x 30 (h x w) canvas, so clamping cannot interfere.
# float64: rotated formats go through trigonometry on conversion and soft clamping.
_XYXY = torch.tensor([[2.0, 3.0, 10.0, 9.0], [12.5, 4.0, 20.0, 15.5]], dtype=torch.float64)
_ROTATED_CXCYWHR = torch.tensor(
    [[10.0, 8.0, 6.0, 4.0, 30.0], [20.0, 12.0, 4.0, 3.0, -45.0]], dtype=torch.float64
)
FORMATS = list(tv_tensors.BoundingBoxFormat)


def is_rotated(fmt: tv_tensors.BoundingBoxFormat) -> bool:
    return fmt.value in ("XYWHR", "CXCYWHR", "XYXYXYXY")


def make_boxes(fmt: tv_tensors.BoundingBoxFormat) -> tv_tensors.BoundingBoxes:
    src_fmt, data = ("CXCYWHR", _ROTATED_CXCYWHR) if is_rotated(fmt) else ("XYXY", _XYXY)
    boxes = tv_tensors.BoundingBoxes(data, format=src_fmt, canvas_size=(20, 30))
    return tvF.convert_bounding_box_format(boxes, new_format=fmt)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.value)
@pytest.mark.parametrize("padding", PADDINGS)
def test_boxes_shift_by_left_top(fmt: tv_tensors.BoundingBoxFormat, padding: Any) -> None:
    left, top, right, bottom = sides(padding)
    boxes = make_boxes(fmt)
    img = tv_tensors.Image(rand_u8(3, 20, 30))
    _, out = BrickPad(padding, **BRICK)(img, boxes)
    assert isinstance(out, tv_tensors.BoundingBoxes)
    assert out.format == fmt and out.dtype == boxes.dtype
    assert out.canvas_size == (20 + top + bottom, 30 + left + right)
    # Compare corner points: every format's corners move by (left, top), nothing else changes.
    corner_fmt, n_corners = ("XYXYXYXY", 4) if is_rotated(fmt) else ("XYXY", 2)
    corners = tvF.convert_bounding_box_format(boxes, new_format=corner_fmt)
    out_corners = tvF.convert_bounding_box_format(out, new_format=corner_fmt)
    shift = torch.tensor([left, top] * n_corners, dtype=corners.dtype)
    torch.testing.assert_close(out_corners.as_subclass(torch.Tensor), corners + shift)
    # Sizes and angles are untouched: only the position columns moved.
    moved = out.as_subclass(torch.Tensor) - boxes.as_subclass(torch.Tensor)
    n_pos = 8 if fmt.value == "XYXYXYXY" else (4 if fmt.value == "XYXY" else 2)
    torch.testing.assert_close(moved[:, n_pos:], torch.zeros_like(moved[:, n_pos:]))


def test_keypoints_shift_and_canvas() -> None:
    pts = tv_tensors.KeyPoints(
        torch.tensor([[0.0, 0.0], [5.5, 3.25], [29.0, 19.0]]), canvas_size=(20, 30)
    )
    out = TexturePad((1, 2, 3, 4), rand_tex(3, 2, 2))(tv_tensors.Image(rand_u8(3, 20, 30)), pts)[1]
    assert isinstance(out, tv_tensors.KeyPoints)
    assert out.canvas_size == (26, 34)
    torch.testing.assert_close(
        out.as_subclass(torch.Tensor), pts.as_subclass(torch.Tensor) + torch.tensor([1.0, 2.0])
    )


@pytest.mark.parametrize(
    ("shape", "dtype", "fill"),
    [((5, 6), torch.uint8, 255), ((2, 5, 6), torch.uint8, 7), ((5, 6), torch.bool, True)],
)
def test_mask_padded_with_mask_fill(shape: tuple[int, ...], dtype: torch.dtype, fill: Any) -> None:
    values = rand_u8(*shape, seed=4)
    mask = tv_tensors.Mask(values > 127 if dtype == torch.bool else (values % 3).to(dtype))
    img = tv_tensors.Image(rand_u8(3, 5, 6))
    _, out = TexturePad((1, 2, 3, 0), rand_tex(3, 2, 2), mask_fill=fill)(img, mask)
    assert type(out) is tv_tensors.Mask and out.dtype == dtype
    expected = torch.full((*shape[:-2], 7, 10), fill, dtype=dtype)
    expected[..., 2:7, 1:7] = mask
    assert_bitwise_equal(out, expected)


def test_mask_fill_not_representable_is_rejected_at_call_time() -> None:
    t = TexturePad(1, rand_tex(3, 2, 2), mask_fill=300)
    with pytest.raises(ValueError, match="fill"):
        t(tv_tensors.Image(rand_u8(3, 4, 4)), tv_tensors.Mask(torch.zeros(4, 4, dtype=torch.uint8)))


@pytest.mark.parametrize("cls", ["TexturePad", "BrickPad"])
@pytest.mark.parametrize(
    "fill",
    [9, {tv_tensors.Mask: 9}, {tv_tensors.Mask: 9, "others": 3}, {"others": 9}],
    ids=["number", "dict", "dict+others", "others"],
)
def test_fill_is_taken_as_v2_pad_takes_it(cls: str, fill: Any) -> None:
    # BrickPad(2, fill={tv_tensors.Mask: 9}) raised "unexpected keyword argument 'fill'": a
    # v2.Pad user's mask fill (255 as the ignore index) had to be respelled mask_fill.
    # Reference: v2.Pad with the same fill on the mask; the images get the texture as without.
    img = tv_tensors.Image(rand_u8(3, 5, 6, seed=7))
    mask = tv_tensors.Mask(rand_u8(5, 6, seed=8) % 4)
    padding = (1, 2, 3, 0)
    tex = rand_tex(3, 2, 2)
    make = (
        (lambda **kw: TexturePad(padding, tex, **kw))
        if cls == "TexturePad"
        else (lambda **kw: BrickPad(padding, **BRICK, **kw))
    )
    out_img, out_mask = make(fill=fill)(img, mask)
    want_img, _ = make()(img, mask)
    assert_bitwise_equal(out_img, want_img)
    want_mask = v2.Pad(list(padding), fill=fill)(mask)
    assert type(out_mask) is tv_tensors.Mask
    assert_bitwise_equal(out_mask, want_mask)
    assert int(out_mask[0, 0]) == 9
    # The functionals take it per call.
    functional = F.texture_pad if cls == "TexturePad" else F.brick_pad
    args = (tex,) if cls == "TexturePad" else ()
    assert_bitwise_equal(functional(mask, padding, *args, fill=9), want_mask)


@pytest.mark.parametrize("cls", ["TexturePad", "BrickPad"])
def test_mask_fill_is_an_alias_that_wins_for_masks(cls: str) -> None:
    mask = tv_tensors.Mask(rand_u8(5, 6, seed=9) % 4)
    kw: dict[str, Any] = {"texture": rand_tex(3, 2, 2)} if cls == "TexturePad" else BRICK
    build = TexturePad if cls == "TexturePad" else BrickPad
    alias = build(2, mask_fill=255, **kw)(mask)
    assert_bitwise_equal(alias, build(2, fill={tv_tensors.Mask: 255}, **kw)(mask))
    assert_bitwise_equal(build(2, fill=7, mask_fill=255, **kw)(mask), alias)
    assert "mask_fill=255" in repr(build(2, mask_fill=255, **kw))
    assert "fill={" in repr(build(2, fill={tv_tensors.Mask: 255}, **kw))


# ------------------------------------------------------------------------------------------
# random offsets, texture banks, replay


def test_random_offset_per_sample_in_range_and_matches_reference() -> None:
    x = rand_u8(16, 3, 4, 5)
    tex = rand_tex(3, 5, 7)
    t = TexturePad((2, 3, 4, 1), tex, stagger=2, random_offset=True)
    params = t.make_params([x])
    offset = params["offset"]
    assert offset.shape == (16, 2) and offset.dtype == torch.int64
    assert bool(((offset[:, 0] >= 0) & (offset[:, 0] < 5)).all())
    assert bool(((offset[:, 1] >= 0) & (offset[:, 1] < 7)).all())
    assert len({tuple(o) for o in offset.tolist()}) > 1  # not one draw for the whole batch
    out = t.transform(x, params)
    assert_bitwise_equal(out, texture_pad_ref(x, (2, 3, 4, 1), tex, stagger=2, offset=offset))


def test_random_offset_reproducible_with_manual_seed() -> None:
    x = rand_u8(8, 3, 4, 4)
    t = BrickPad(3, random_offset=True, **BRICK)
    torch.manual_seed(123)
    a = t(x)
    torch.manual_seed(123)
    b = t(x)
    c = t(x)  # the RNG moved on: another draw
    assert_bitwise_equal(a, b)
    assert not torch.equal(a, c)


def test_random_offset_with_generator_leaves_global_rng_alone() -> None:
    x = rand_u8(8, 3, 4, 4)
    t1 = BrickPad(3, random_offset=True, generator=torch.Generator().manual_seed(5), **BRICK)
    t2 = BrickPad(3, random_offset=True, generator=torch.Generator().manual_seed(5), **BRICK)
    state = torch.get_rng_state()
    a, b = t1(x), t2(x)
    assert torch.equal(torch.get_rng_state(), state)
    assert_bitwise_equal(a, b)
    assert not torch.equal(t1(x), a)


def test_fixed_offset_draws_nothing() -> None:
    t = TexturePad(2, rand_tex(3, 4, 4), offset=(1, 2))
    state = torch.get_rng_state()
    params = t.make_params([rand_u8(4, 3, 5, 5)])
    assert torch.equal(torch.get_rng_state(), state)
    assert tuple(params["offset"]) == (1, 2) and params["texture_index"] is None


def test_random_offset_leading_dims_and_one_draw_for_all_inputs() -> None:
    x = rand_u8(2, 3, 3, 4, 4)  # plain tensor: every leading index is a sample
    mask = tv_tensors.Mask(torch.zeros(2, 3, 4, 4, dtype=torch.uint8))
    t = TexturePad(2, rand_tex(3, 6, 6), random_offset=True)
    assert t.make_params([x])["offset"].shape == (2, 3, 2)
    img = tv_tensors.Image(x)
    torch.manual_seed(0)
    params = t.make_params([img, mask])
    torch.manual_seed(0)
    out_img, out_other = t(img, tv_tensors.Image(x.flip(-1)))
    assert_bitwise_equal(out_img, t.transform(img, params))
    assert_bitwise_equal(out_other, t.transform(tv_tensors.Image(x.flip(-1)), params))


def test_video_gets_one_offset_per_clip() -> None:
    video = tv_tensors.Video(rand_u8(2, 3, 3, 4, 4))  # (B, T, C, H, W)
    tex = rand_tex(3, 5, 6)
    t = TexturePad(3, tex, random_offset=True, generator=torch.Generator().manual_seed(1))
    params = t.make_params([video])
    assert params["offset"].shape == (2, 2)
    out = t.transform(video, params)
    per_frame = params["offset"][:, None, :].expand(2, 3, 2)
    expected = texture_pad_ref(video.as_subclass(torch.Tensor), 3, tex, offset=per_frame)
    assert_bitwise_equal(out, expected)


def test_random_offset_rejects_images_of_different_batch_shapes() -> None:
    t = TexturePad(1, rand_tex(3, 2, 2), random_offset=True)
    a, b = tv_tensors.Image(rand_u8(2, 3, 4, 4)), tv_tensors.Image(rand_u8(3, 3, 4, 4))
    with pytest.raises(ValueError, match="leading"):
        t(a, b)


def test_random_texture_index_from_bank() -> None:
    bank = rand_tex(4, 3, 3, 5)
    x = rand_u8(16, 3, 4, 4)
    t = TexturePad(2, bank, texture_index="random", stagger=1)
    torch.manual_seed(3)
    params = t.make_params([x])
    index = params["texture_index"]
    assert index.shape == (16,) and int(index.min()) >= 0 and int(index.max()) < 4
    assert len(set(index.tolist())) > 1
    torch.manual_seed(3)
    out = t(x)
    assert_bitwise_equal(out, texture_pad_ref(x, 2, bank, stagger=1, texture_index=index))
    fixed = TexturePad(2, bank, texture_index=2)(x)
    assert_bitwise_equal(fixed, F.texture_pad(x, 2, bank, texture_index=2))


def test_replay_stored_params_on_other_inputs() -> None:
    tex = rand_tex(3, 4, 5)
    t = TexturePad(2, tex, random_offset=True)
    x1, x2 = rand_u8(4, 3, 4, 4, seed=1), rand_u8(4, 3, 4, 4, seed=2)
    params = t.make_params([x1])
    stored = copy.deepcopy(params)
    first = t.transform(x1, params)
    torch.manual_seed(99)  # replay does not depend on the RNG
    assert_bitwise_equal(t.transform(x1, stored), first)
    assert_bitwise_equal(
        t.transform(x2, stored), F.texture_pad(x2, 2, tex, offset=stored["offset"])
    )
    # Params built by hand work too (Kornia style).
    hand = {"offset": torch.tensor([[0, 1], [2, 3], [3, 4], [1, 0]]), "texture_index": None}
    assert_bitwise_equal(t.transform(x1, hand), texture_pad_ref(x1, 2, tex, offset=hand["offset"]))


# ------------------------------------------------------------------------------------------
# composition


def test_v2_compose_nested_sample() -> None:
    tex = rand_tex(3, 4, 4)
    padding = (2, 1, 0, 3)
    pad = TexturePad(padding, tex, random_offset=True)
    pipeline = v2.Compose(
        [pad, v2.RandomHorizontalFlip(p=1.0), v2.ToDtype(torch.float32, scale=True)]
    )
    img = tv_tensors.Image(rand_u8(3, 20, 30))
    boxes = make_boxes(tv_tensors.BoundingBoxFormat.XYXY)
    mask = tv_tensors.Mask(rand_u8(20, 30) % 4)
    pts = tv_tensors.KeyPoints(torch.tensor([[1.0, 2.0], [7.0, 9.0]]), canvas_size=(20, 30))
    sample = ({"image": img, "mask": mask}, [boxes, pts], 7)

    torch.manual_seed(11)
    params = pad.make_params([img])  # TexturePad draws first in the pipeline
    torch.manual_seed(11)
    (out_d, (out_boxes, out_pts), label) = pipeline(sample)

    assert label == 7
    expected_img = tvF.to_dtype(
        tvF.horizontal_flip(pad.transform(img, params)), torch.float32, scale=True
    )
    assert type(out_d["image"]) is tv_tensors.Image
    assert_bitwise_equal(out_d["image"], expected_img)
    expected_mask = tvF.horizontal_flip(F.pad(mask.as_subclass(torch.Tensor), padding, fill=0))
    assert_bitwise_equal(out_d["mask"], expected_mask)
    torch.testing.assert_close(
        out_boxes.as_subclass(torch.Tensor),
        tvF.horizontal_flip(tvF.pad(boxes, padding=list(padding))).as_subclass(torch.Tensor),
    )
    assert out_boxes.canvas_size == out_pts.canvas_size == (24, 32)
    # Flipped keypoints: x' = W' - 1 - (x + left) in torchvision's convention, y' = y + top.
    flipped = tvF.horizontal_flip(tvF.pad(pts, padding=list(padding)))
    torch.testing.assert_close(out_pts.as_subclass(torch.Tensor), flipped.as_subclass(torch.Tensor))


def test_v1_compose_with_pil() -> None:
    img = PIL.Image.fromarray(rand_u8(6, 7, 3).numpy(), "RGB")
    pipeline = v1.Compose([BrickPad((3, 2), **BRICK), v1.ToTensor()])
    out = pipeline(img)
    expected = v1.ToTensor()(F.brick_pad(img, (3, 2), **BRICK))
    assert out.shape == (3, 10, 13)
    assert_bitwise_equal(out, expected)


# ------------------------------------------------------------------------------------------
# texture handling: cache, gradients, copies


def test_texture_modified_in_place_is_seen() -> None:
    tex = rand_tex(3, 3, 3)
    x = rand_u8(3, 4, 4)
    t = TexturePad(2, tex)
    t(x)  # fills the uint8 conversion cache
    tex.mul_(0.5)
    assert_bitwise_equal(t(x), F.texture_pad(x, 2, tex))


def test_learned_texture_gets_gradients_every_call() -> None:
    tex = rand_tex(3, 3, 3).requires_grad_()
    x = torch.rand(2, 3, 4, 4)
    t = TexturePad(1, tex)
    for _ in range(2):
        tex.grad = None
        t(x).sum().backward()
        assert tex.grad is not None and float(tex.grad.sum()) > 0


def test_deepcopy_and_pickle_give_the_same_transform() -> None:
    t = BrickPad(2, offset=(1, 1), mask_fill=5, **BRICK)
    x = rand_u8(3, 4, 4)
    expected = t(x)
    for clone in (copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
        assert_bitwise_equal(clone(x), expected)
        assert repr(clone) == repr(t)


# ------------------------------------------------------------------------------------------
# repr and argument checks


def test_repr() -> None:
    s = F.running_bond_stagger()
    assert repr(BrickPad(4)) == f"BrickPad(padding=[4, 4, 4, 4], stagger={s}, random_offset=False)"
    r = repr(BrickPad((1, 2), stagger=3, random_offset=True, mask_fill=255, brick_size=(4, 6)))
    assert r == (
        "BrickPad(padding=[1, 2, 1, 2], stagger=3, random_offset=True, mask_fill=255, "
        "brick_size=(4, 6))"
    )
    tex = torch.rand(4, 3, 64, 64)
    r = repr(TexturePad((1, 2, 3, 4), tex, stagger=3, texture_index="random"))
    assert r == (
        "TexturePad(padding=[1, 2, 3, 4], texture=Tensor(shape=[4, 3, 64, 64], "
        "dtype=torch.float32, device=cpu), stagger=3, random_offset=False, "
        "texture_index='random')"
    )


def test_package_exports() -> None:
    assert tipad_transforms.BrickPad is BrickPad
    assert tipad_transforms.transforms.TexturePad is TexturePad
    assert isinstance(BrickPad(1), v2.Transform)


TEX = torch.rand(3, 2, 2)


@pytest.mark.parametrize(
    ("build", "error", "name"),
    [
        (lambda: TexturePad(2**31, TEX), ValueError, "padding"),
        (lambda: TexturePad((1, 2, 3), TEX), ValueError, "padding"),
        (lambda: TexturePad(1.5, TEX), TypeError, "padding"),
        (lambda: TexturePad(1, TEX.numpy()), TypeError, "texture"),
        (lambda: TexturePad(1, torch.rand(5)), ValueError, "texture"),
        (lambda: TexturePad(1, torch.rand(3, 0, 2)), ValueError, "texture"),
        (lambda: TexturePad(1, torch.rand(3, 2, 2, dtype=torch.cfloat)), TypeError, "texture"),
        (lambda: TexturePad(1, TEX, stagger=1.0), TypeError, "stagger"),
        (lambda: TexturePad(1, TEX, stagger=True), TypeError, "stagger"),
        (lambda: TexturePad(1, TEX, offset=(1, 2, 3)), ValueError, "offset"),
        (lambda: TexturePad(1, TEX, offset=(1.0, 2)), TypeError, "offset"),
        (lambda: TexturePad(1, TEX, offset="0"), TypeError, "offset"),
        (lambda: TexturePad(1, TEX, random_offset=1), TypeError, "random_offset"),
        (lambda: TexturePad(1, TEX, offset=(1, 0), random_offset=True), ValueError, "offset"),
        (lambda: TexturePad(1, TEX, texture_index="random"), ValueError, "texture_index"),
        (lambda: TexturePad(1, TEX, texture_index=1), ValueError, "texture_index"),
        (lambda: TexturePad(1, TEX[None], texture_index=-1), ValueError, "texture_index"),
        (lambda: TexturePad(1, TEX[None], texture_index="all"), ValueError, "texture_index"),
        (lambda: TexturePad(1, TEX[None], texture_index=1.0), TypeError, "texture_index"),
        (lambda: TexturePad(1, TEX, mask_fill="0"), TypeError, "mask_fill"),
        (lambda: TexturePad(1, TEX, mask_fill=[0]), TypeError, "mask_fill"),
        (lambda: TexturePad(1, TEX, fill="0"), TypeError, "fill"),
        (lambda: BrickPad(1, fill={tv_tensors.Mask: "x"}), TypeError, "fill"),
        (lambda: TexturePad(1, TEX, generator=0), TypeError, "generator"),
        (lambda: BrickPad(-(2**31)), ValueError, "padding"),
        (lambda: BrickPad(1, stagger=2.5), TypeError, "stagger"),
        (lambda: BrickPad(1, offset=(0, 0, 0)), ValueError, "offset"),
        (lambda: BrickPad(1, generator=42), TypeError, "generator"),
        (lambda: BrickPad(1, bricks=3), TypeError, "bricks"),
        (lambda: BrickPad(1, mortar=-1), ValueError, "mortar"),
        (lambda: BrickPad(1, brick_size=(0, 4)), ValueError, "brick_size"),
    ],
)
def test_bad_arguments(build: Any, error: type[Exception], name: str) -> None:
    with pytest.raises(error, match=name):
        build()


def test_channel_mismatch_raises_at_call_time() -> None:
    t = TexturePad(1, torch.rand(2, 2, 2))
    with pytest.raises(ValueError, match="texture"):
        t(rand_u8(3, 4, 4))


def test_docstring_examples_run() -> None:
    import doctest

    result = doctest.testmod(tipad_transforms.transforms, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10 and result.failed == 0
