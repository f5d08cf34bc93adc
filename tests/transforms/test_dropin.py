"""tipad as a torchvision drop-in: per-type dispatch, torchvision's pad semantics, thin transforms.

torchvision itself is the reference here: ``tipad_transforms.functional.pad`` must equal
``torchvision.transforms.v2.functional.pad`` on everything torchvision accepts, and the texture
functionals must treat each input type as torchvision's geometry functionals do.
"""

from __future__ import annotations

import itertools
from typing import Any

import PIL.Image
import pytest
import torch
from reference import assert_bitwise_equal, random_image, texture_pad_ref
from torch.utils.data import DataLoader, default_collate
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as tvF

import tipad_transforms.functional as F
from tipad_transforms import BrickPad, TexturePad
from tipad_transforms.data import DeviceLoader, PadCollate, Regions
from tipad_transforms.transforms import Pad

TV_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
             torch.bfloat16, torch.float32, torch.float64, torch.bool)  # fmt: skip
TV_MODES = ("constant", "edge", "reflect", "symmetric")
PADDINGS: list[Any] = [2, [1, 3], [3, 0, 1, 2], [-1, 2, 0, -2], [0, -3], [-2]]
TEX = torch.rand(3, 4, 5, generator=torch.Generator().manual_seed(0))


def _torchvision(x: torch.Tensor, padding: Any, fill: Any, mode: str) -> torch.Tensor | None:
    try:
        return tvF.pad(x, padding, fill=fill, padding_mode=mode)
    except (RuntimeError, ValueError, IndexError):
        return None  # an input torchvision does not accept


@pytest.mark.parametrize("dtype", TV_DTYPES, ids=str)
@pytest.mark.parametrize("mode", TV_MODES)
def test_pad_equals_torchvision_on_everything_it_accepts(mode: str, dtype: torch.dtype) -> None:
    x = random_image((2, 3, 5, 6), dtype, seed=4)
    fills: list[Any] = [0, 1, 7.9, [1, 0, 1], None] if mode == "constant" else [0]
    compared = 0
    for padding, fill in itertools.product(PADDINGS, fills):
        want = _torchvision(x, padding, fill, mode)
        if want is None or (dtype in (torch.int32, torch.int64) and mode in ("edge", "reflect")):
            continue  # through float32 in torchvision; exact here (see the test below)
        got = F.pad(x, padding, fill, mode)
        assert_bitwise_equal(got, want)
        compared += 1
    exact_here = dtype in (torch.int32, torch.int64) and mode in ("edge", "reflect")
    assert compared >= (0 if exact_here else len(PADDINGS) - 2)


@pytest.mark.parametrize("mode", ["edge", "reflect"])
def test_integer_images_stay_exact_where_torchvision_casts_through_float(mode: str) -> None:
    for dtype in (torch.int32, torch.int64):
        x = random_image((2, 3, 5, 6), dtype, seed=4)
        x[0, 0, 0, :3] = torch.tensor([2**30 + 1, 2**30 + 3, 5])  # inexact in float32
        for padding in PADDINGS:
            want = _torchvision(x.double(), padding, 0, mode)  # exact in float64
            if want is not None:
                assert_bitwise_equal(F.pad(x, padding, padding_mode=mode), want.to(dtype))
    x = torch.zeros(1, 2, 2, dtype=torch.int64)
    assert F.pad(x, 1, fill=2**53 + 1)[0, 0, 0].item() == 2**53 + 1  # torchvision: 2**53


FILLS: list[Any] = [20.2, 20.7, -1, -1.0, 255, 256, -0.5, 127.9, 1e10, float("nan"),
                    float("inf"), 65519, 65520, 2**31, True, 0.5, 1e-8, 3.4e38, 1e39,
                    [300, 1, -1], [20.2, 0.5, 3]]  # fmt: skip


@pytest.mark.parametrize("dtype", [*TV_DTYPES, torch.uint16], ids=str)
def test_fill_is_converted_as_torchvision_converts_it(dtype: torch.dtype) -> None:
    x = torch.zeros(3, 2, 2, dtype=dtype)
    for fill in FILLS:
        want = _torchvision(x, 1, fill, "constant")
        if want is None:
            with pytest.raises(ValueError, match="fill"):
                F.pad(x, 1, fill=fill)
        else:
            assert_bitwise_equal(F.pad(x, 1, fill=fill), want)


def test_pad_argument_order_and_names_are_torchvisions() -> None:
    import inspect

    ours = list(inspect.signature(F.pad).parameters)[:4]
    assert ours == list(inspect.signature(tvF.pad).parameters)[:4]
    x = random_image((3, 4, 4), torch.uint8, seed=1)
    assert_bitwise_equal(F.pad(x, [1, 2], 9, "constant"), tvF.pad(x, [1, 2], 9, "constant"))


# -- per-type dispatch --------------------------------------------------------------------------


class Other(tv_tensors.TVTensor):
    """A tv_tensor type no functional knows: passed through, as torchvision does."""


def _inputs() -> dict[str, Any]:
    return {
        "tensor": random_image((3, 6, 7), torch.uint8, seed=2),
        "image": tv_tensors.Image(random_image((3, 6, 7), torch.uint8, seed=3)),
        "video": tv_tensors.Video(random_image((2, 3, 6, 7), torch.uint8, seed=4)),
        "mask": tv_tensors.Mask(random_image((6, 7), torch.uint8, seed=5)),
        "boxes": tv_tensors.BoundingBoxes([[1, 2, 4, 5]], format="XYXY", canvas_size=(6, 7)),
        "keypoints": tv_tensors.KeyPoints([[1, 2], [3, 4]], canvas_size=(6, 7)),
        "other": torch.ones(2).as_subclass(Other),
        "pil": PIL.Image.new("RGB", (7, 6), (10, 20, 30)),
    }


CALLS = {
    "pad": lambda inpt, p: F.pad(inpt, p, fill=3),
    "texture_pad": lambda inpt, p: F.texture_pad(inpt, p, TEX, mask_fill=3),
    "brick_pad": lambda inpt, p: F.brick_pad(inpt, p, mask_fill=3),
}


@pytest.mark.parametrize("name", CALLS)
def test_each_functional_dispatches_on_input_type(name: str) -> None:
    call = CALLS[name]
    padding = [1, 2, 3, 4]
    for kind, inpt in _inputs().items():
        out = call(inpt, padding)
        if kind == "pil":
            assert isinstance(out, PIL.Image.Image) and out.mode == inpt.mode
            assert out.size == (7 + 4, 6 + 6)
            continue
        assert type(out) is type(inpt), kind
        if kind == "other":
            assert out is inpt
        elif kind in ("boxes", "keypoints"):
            want = tvF.pad(inpt, padding)  # shifted by (left, top), canvas_size grown
            assert torch.equal(out, want) and out.canvas_size == want.canvas_size == (12, 11)
        elif kind == "mask":  # a constant border of the mask fill, whatever the functional
            assert_bitwise_equal(out, tvF.pad(inpt, padding, fill=3))
        else:
            assert out.shape[-2:] == (12, 11)
            assert_bitwise_equal(out[..., 2:8, 1:8], inpt)


@pytest.mark.parametrize("name", CALLS)
def test_functionals_refuse_what_is_neither_tensor_nor_image(name: str) -> None:
    with pytest.raises(TypeError, match="inpt"):
        CALLS[name]([[1, 2], [3, 4]], 1)


def test_video_frames_of_a_clip_share_one_lattice() -> None:
    video = tv_tensors.Video(random_image((2, 3, 3, 4, 5), torch.float32, seed=7))
    offset = torch.tensor([[1, 2], [3, 0]])  # one per clip
    out = F.texture_pad(video, 2, TEX, offset=offset)
    for b, t in itertools.product(range(2), range(3)):
        want = texture_pad_ref(video[b, t].as_subclass(torch.Tensor), 2, TEX, offset=offset[b])
        assert_bitwise_equal(out[b, t], want)


def test_register_kernel_adds_an_input_type_in_one_place() -> None:
    class Heatmap(tv_tensors.TVTensor):
        pass

    @F.register_kernel(F.brick_pad, Heatmap)
    def _brick_pad_heatmap(inpt: torch.Tensor, padding: Any, **_: Any) -> torch.Tensor:
        return F.pad(inpt, padding, fill=-1.0)

    heat = torch.zeros(1, 2, 2).as_subclass(Heatmap)
    out = BrickPad(1)(heat)  # the transform finds the new kernel through the functional
    assert type(out) is Heatmap and out.shape == (1, 4, 4) and float(out[0, 0, 0]) == -1.0


# -- transforms are thin: the class equals its functional -----------------------------------------


@pytest.mark.parametrize("dtype", TV_DTYPES, ids=str)
def test_brickpad_equals_brick_pad_for_every_dtype(dtype: torch.dtype) -> None:
    for shape in [(4, 5), (1, 4, 5), (2, 4, 5), (3, 4, 5), (4, 4, 5), (6, 4, 5), (2, 3, 4, 5)]:
        x = random_image(shape, dtype, seed=len(shape))
        assert_bitwise_equal(BrickPad((2, 1, 3, 0))(x), F.brick_pad(x, (2, 1, 3, 0)))
    x = random_image((3, 4, 5), dtype, seed=1)
    assert_bitwise_equal(
        BrickPad(2, offset=(3, 7), mortar=1)(x), F.brick_pad(x, 2, offset=(3, 7), mortar=1)
    )


def test_brickpad_equals_brick_pad_on_pil_and_video() -> None:
    img = PIL.Image.new("LA", (5, 4), (100, 200))
    assert BrickPad(3)(img).tobytes() == F.brick_pad(img, 3).tobytes()
    video = tv_tensors.Video(random_image((2, 3, 4, 5), torch.uint8, seed=3))
    assert_bitwise_equal(BrickPad(3)(video), F.brick_pad(video, 3))


def test_pad_transform_equals_torchvision_pad_on_a_whole_sample() -> None:
    inputs = _inputs()
    sample = {k: inputs[k] for k in ("image", "mask", "boxes", "keypoints", "other")}
    sample["label"] = torch.tensor(3)
    fill = {tv_tensors.Image: 7, tv_tensors.Mask: 255, "others": 0}
    for padding in ([1, 2], [2, 0, 1, 3], [-1, 2, 0, 1]):
        ours, theirs = Pad(padding, fill=fill)(sample), v2.Pad(padding, fill=fill)(sample)
        for key in sample:
            assert type(ours[key]) is type(theirs[key]), key
            assert_bitwise_equal(ours[key].as_subclass(torch.Tensor), theirs[key])
        assert ours["boxes"].canvas_size == theirs["boxes"].canvas_size
    x = inputs["image"]
    assert_bitwise_equal(
        Pad(3, padding_mode="symmetric")(x), v2.Pad(3, padding_mode="symmetric")(x)
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: BrickPad(4, p=0.5),
        lambda: TexturePad(4, TEX, p=0.5),
        lambda: Pad(4, mode="reflect"),
    ],
)
def test_unknown_keywords_name_the_class_and_list_its_options(make: Any) -> None:
    with pytest.raises(TypeError) as info:
        make()
    message = str(info.value)
    name = message.split("(")[0]
    assert name in ("BrickPad", "TexturePad", "Pad"), message
    assert "padding" in message and ("'p'" in message or "'mode'" in message), message
    if name == "BrickPad":
        assert "mortar" in message and "random_offset" in message


def test_mask_fill_errors_name_mask_fill() -> None:
    mask = tv_tensors.Mask(torch.zeros(2, 2, dtype=torch.uint8))
    for t in (TexturePad(1, TEX, mask_fill=300), BrickPad(1, mask_fill=300)):
        with pytest.raises(ValueError, match="mask_fill=300"):
            t(mask)


# -- data: default_collate's structure, regions that follow pads ---------------------------------


def _samples() -> list[tuple[torch.Tensor, int]]:
    return [(random_image((3, 5 + i, 7 - i), torch.uint8, seed=i), i) for i in range(4)]


def test_pad_collate_returns_default_collates_structure() -> None:
    samples = _samples()
    batch = PadCollate()(samples)
    plain = default_collate([(torch.zeros(1), label) for _, label in samples])
    assert type(batch) is type(plain) and len(batch) == len(plain) == 2
    images, labels = batch
    assert images.shape == (4, 3, 8, 7) and torch.equal(labels, plain[1])
    loader = DataLoader(samples, batch_size=2, collate_fn=PadCollate())
    assert [labels.tolist() for _images, labels in loader] == [[0, 1], [2, 3]]
    dicts = [{"image": im, "label": label} for im, label in samples]
    assert set(PadCollate()(dicts)) == {"image", "label"}
    assert set(PadCollate(return_regions=True)(dicts)) == {"image", "label", "region"}


def test_regions_follow_tipad_and_torchvision_pads() -> None:
    images, labels, regions = PadCollate(return_regions=True)(_samples())
    assert type(regions) is Regions
    moved = regions.as_subclass(torch.Tensor) + torch.tensor([2, 1, 0, 0])
    for t in (BrickPad((1, 2)), TexturePad((1, 2), TEX), Pad((1, 2)), v2.Pad((1, 2))):
        _, out_labels, out_regions = t(images, labels, regions)
        assert type(out_regions) is Regions and torch.equal(out_regions, moved), t
        assert torch.equal(out_labels, labels)
    (batch,) = DeviceLoader([(images, labels, regions)], "cpu", v2.Pad((1, 2)))
    assert torch.equal(batch[2], moved) and type(batch[0]) is torch.Tensor
    for i, (top, left, h, w) in enumerate(batch[2].tolist()):
        assert_bitwise_equal(batch[0][i, :, top : top + h, left : left + w], _samples()[i][0])


def test_negative_padding_into_out() -> None:
    x = random_image((2, 3, 5, 6), torch.uint8, seed=9)
    want = tvF.pad(x, [-1, 2, 3, -2], fill=4)
    out = torch.full_like(want, 77)
    assert F.pad(x, [-1, 2, 3, -2], fill=4, out=out) is out
    assert_bitwise_equal(out, want)
    for bad in (
        torch.empty(2, 3, 6, 9, dtype=torch.uint8),
        torch.empty_like(want, dtype=torch.int16),
    ):
        with pytest.raises(ValueError, match="out"):
            F.pad(x, [-1, 2, 3, -2], fill=4, out=bad)
