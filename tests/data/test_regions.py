"""``Regions`` through every torchvision v2 transform, checked two independent ways.

1. Against ``tv_tensors.BoundingBoxes``: the regions as float64 boxes travel in the same call
   (the same random draws), and the regions must equal those boxes with their edges rounded to
   the nearest pixel boundary: where torchvision moves a box, the region goes.
2. Against the pixels: every image is 1 on its real pixels and 0 on the padding
   (``PadCollate(padding_mode="constant")`` of all-ones images), so after the transform the
   pixels themselves say where each image lies: 1 (>= 0.5) inside the region, 0 (< 0.5) outside,
   up to one pixel at the edges (interpolation blends the edge pixel).

Every transform class of ``torchvision.transforms.v2`` is listed below in one of four groups
(a class that is in none fails ``test_every_v2_transform_is_classified``): those that move the
pixels and the regions with them, those that refuse the regions (no rectangle can describe
where the pixels went), those that leave the geometry alone (the regions stay as they are), and
those that move pixels by their own code (``DeviceLoader``/``GPUCollate`` refuse them with
regions in the batch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.nn import functional as nnF
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as tvF

from tipad_transforms import BrickPad, Pad, TexturePad
from tipad_transforms.data import DeviceLoader, GPUCollate, PadCollate, Regions
from tipad_transforms.data._device import UNFOLLOWABLE

CANVAS = (24, 36)
SIZES = [(10, 20), (24, 13), (17, 36), (9, 9)]
SEEDS = range(4)


def _batch(seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, Regions]:
    """``(B, 3, 24, 36)`` images, 1 on each image's pixels and 0 around, and their regions."""
    samples = [torch.ones(3, h, w, dtype=dtype) for h, w in SIZES]
    if dtype == torch.uint8:
        samples = [s * 255 for s in samples]
    collate = PadCollate(
        CANVAS,
        placement="random",
        padding_mode="constant",
        fill=0,
        return_regions=True,
        generator=torch.Generator().manual_seed(100 + seed),
    )
    images, regions = collate(samples)
    return images, regions


def _as_boxes(regions: Regions) -> tv_tensors.BoundingBoxes:
    top, left, h, w = regions.as_subclass(torch.Tensor).to(torch.float64).unbind(1)
    xyxy = torch.stack([left, top, left + w, top + h], 1)
    return tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=regions.canvas_size)


def _rounded(boxes: tv_tensors.BoundingBoxes) -> list[list[int]]:
    """(top, left, h, w) of each box, each edge rounded to the nearest integer (halves up)."""
    out = []
    for x1, y1, x2, y2 in boxes.tolist():
        left, top, right, bottom = (math.floor(v + 0.5) for v in (x1, y1, x2, y2))
        out.append([top, left, max(bottom - top, 0), max(right - left, 0)])
    return out


def _check_pixels(images: torch.Tensor, regions: Regions) -> None:
    """Each image is >= 0.5 on its region (but for its edge pixels) and < 0.5 away from it."""
    plain = images.as_subclass(torch.Tensor)
    values = plain[:, 0].to(torch.float64)
    if plain.dtype == torch.uint8:
        values = values / 255
    assert regions.canvas_size == tuple(values.shape[-2:])
    inside_seen = 0
    for i, (top, left, h, w) in enumerate(regions.tolist()):
        inside = torch.zeros(values.shape[-2:], dtype=torch.bool)
        inside[top : top + h, left : left + w] = True
        near = nnF.max_pool2d(inside[None, None].double(), 3, 1, 1)[0, 0].bool()
        core = ~nnF.max_pool2d((~inside)[None, None].double(), 3, 1, 1)[0, 0].bool()
        assert bool((values[i][core] >= 0.5).all()), f"image {i}: padding inside its region"
        assert bool((values[i][~near] < 0.5).all()), f"image {i}: real pixels outside its region"
        inside_seen += int(core.sum())
    assert inside_seen > 0, "no region kept an interior: the check checked nothing"


# -- the transforms that move the regions ------------------------------------------------------

NEAREST = v2.InterpolationMode.NEAREST
ZEROS = torch.zeros(3, 3, 4)

# name -> (transform factory, pixels: whether the border stays < 0.5 so the pixel check holds)
FOLLOW: dict[str, tuple[Callable[[], Any], bool]] = {
    "CenterCrop": (lambda: v2.CenterCrop((14, 20)), True),
    "CenterCrop-larger": (lambda: v2.CenterCrop((30, 41)), True),
    "Pad": (lambda: v2.Pad([1, 2, 3, 4]), True),
    "RandomAffine-translate-scale": (
        lambda: v2.RandomAffine(0, translate=(0.2, 0.3), scale=(0.6, 1.4)),
        True,
    ),
    "RandomAffine-90": (lambda: v2.RandomAffine((90, 90)), True),
    "RandomCrop": (lambda: v2.RandomCrop((16, 30)), True),
    "RandomCrop-padded": (lambda: v2.RandomCrop((30, 40), pad_if_needed=True), True),
    "RandomHorizontalFlip": (lambda: v2.RandomHorizontalFlip(p=1), True),
    "RandomVerticalFlip": (lambda: v2.RandomVerticalFlip(p=1), True),
    "RandomPerspective-identity": (lambda: v2.RandomPerspective(0.0, p=1), True),
    "RandomResize": (lambda: v2.RandomResize(12, 48), True),
    "RandomResizedCrop": (lambda: v2.RandomResizedCrop((20, 28)), True),
    "RandomResizedCrop-nearest": (lambda: v2.RandomResizedCrop(16, interpolation=NEAREST), True),
    "RandomRotation-90": (lambda: v2.RandomRotation((90, 90)), True),
    "RandomRotation-180": (lambda: v2.RandomRotation((180, 180)), True),
    "RandomRotation-270-expand": (lambda: v2.RandomRotation((-90, -90), expand=True), True),
    "RandomShortestSize": (lambda: v2.RandomShortestSize([12, 30], max_size=60), True),
    "RandomZoomOut": (lambda: v2.RandomZoomOut(p=1), True),
    "Resize": (lambda: v2.Resize(20), True),
    "Resize-up-nearest": (lambda: v2.Resize((40, 50), interpolation=NEAREST), True),
    "Resize-max_size": (lambda: v2.Resize(30, max_size=40), True),
    "ScaleJitter": (lambda: v2.ScaleJitter((24, 36)), True),
    "Compose": (lambda: v2.Compose([v2.RandomHorizontalFlip(), v2.RandomResizedCrop(20)]), True),
    "RandomApply": (lambda: v2.RandomApply([v2.RandomVerticalFlip(1), v2.Resize(30)]), True),
    "RandomChoice": (lambda: v2.RandomChoice([v2.RandomCrop(12), v2.Pad(2)]), True),
    "RandomOrder": (lambda: v2.RandomOrder([v2.Pad(2), v2.RandomCrop(20)]), True),
    "tipad-Pad": (lambda: Pad((2, 3, 1, 0)), True),
    "tipad-TexturePad": (lambda: TexturePad(3, ZEROS, random_offset=True), True),
    "tipad-BrickPad": (lambda: BrickPad((2, 5)), False),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(FOLLOW))
def test_regions_follow_as_boxes_do_and_as_the_pixels_say(name: str, seed: int) -> None:
    factory, pixels = FOLLOW[name]
    images, regions = _batch(seed)
    boxes = _as_boxes(regions)
    torch.manual_seed(seed)
    out_images, out_boxes, out_regions = factory()(tv_tensors.Image(images), boxes, regions)
    assert type(out_regions) is Regions
    assert out_regions.dtype == torch.int64
    assert out_regions.canvas_size == tuple(out_boxes.canvas_size) == out_images.shape[-2:]
    assert out_regions.tolist() == _rounded(out_boxes)
    if pixels:
        _check_pixels(out_images, out_regions)
    assert regions.canvas_size == CANVAS and torch.equal(regions, _batch(seed)[1]), "input moved"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    ("transform", "constant"),
    [
        (lambda: v2.Pad([3, 1], padding_mode="reflect"), lambda: v2.Pad([3, 1])),
        (lambda: Pad((2, 1, 0, 4), padding_mode="symmetric"), lambda: v2.Pad([2, 1, 0, 4])),
        (
            lambda: v2.RandomCrop(24, padding=4, padding_mode="edge"),
            lambda: v2.RandomCrop(24, padding=4),
        ),
    ],
    ids=["Pad-reflect", "tipad-Pad-symmetric", "RandomCrop-padding-edge"],
)
def test_other_padding_modes_place_the_image_as_a_constant_pad_does(
    transform: Callable[[], Any], constant: Callable[[], Any], seed: int
) -> None:
    # torchvision refuses boxes with these modes (its box kernel knows no border but a
    # constant one); the image sits where a constant pad with the same draws puts it.
    images, regions = _batch(seed)
    torch.manual_seed(seed)
    out_images, out_regions = transform()(tv_tensors.Image(images), regions)
    torch.manual_seed(seed)
    _, out_boxes = constant()(tv_tensors.Image(images), _as_boxes(regions))
    assert out_regions.canvas_size == tuple(out_boxes.canvas_size) == out_images.shape[-2:]
    assert out_regions.tolist() == _rounded(out_boxes)


@pytest.mark.parametrize("seed", SEEDS)
def test_iou_crop_keeps_every_region(seed: int) -> None:
    # RandomIoUCrop zeroes the boxes whose centre leaves the crop, for SanitizeBoundingBoxes to
    # drop; a region keeps saying where its image's pixels are (an empty row where none are).
    images, regions = _batch(seed)
    torch.manual_seed(seed)
    out_images, out_boxes, out_regions = v2.RandomIoUCrop()(
        tv_tensors.Image(images), _as_boxes(regions), regions
    )
    for got, want, box in zip(
        out_regions.tolist(), _rounded(out_boxes), out_boxes.tolist(), strict=True
    ):
        if any(box):
            assert got == want
    _check_pixels(out_images, out_regions)


def test_identity_elastic_and_perspective_keep_the_regions() -> None:
    # torchvision's box kernel for elastic samples the displacement at pixel indices clamped
    # to the canvas (a box at the right edge shrinks by one pixel even with no displacement);
    # the regions of the identity map are the regions.
    images, regions = _batch(0)
    for t in (v2.ElasticTransform(alpha=0.0), v2.RandomPerspective(0.0, p=1)):
        out_images, out_regions = t(tv_tensors.Image(images), regions)
        assert type(out_regions) is Regions and torch.equal(out_regions, regions)
        assert out_regions.canvas_size == CANVAS
        _check_pixels(out_images, out_regions)


@pytest.mark.parametrize("size", [10, (12, 16), [20]])
@pytest.mark.parametrize("cls", [v2.FiveCrop, v2.TenCrop])
def test_five_and_ten_crops_give_each_crop_its_regions(cls: type, size: Any) -> None:
    images, regions = _batch(1)
    crops_images, crops_regions = cls(size)(tv_tensors.Image(images), regions)
    assert len(crops_images) == len(crops_regions) == (5 if cls is v2.FiveCrop else 10)
    boxes = _as_boxes(regions)
    ch, cw = (size, size) if isinstance(size, int) else (size[0], size[-1])
    h, w = CANVAS
    corners = [(0, 0), (0, w - cw), (h - ch, 0), (h - ch, w - cw)]
    want = [tvF.crop(boxes, t, left, ch, cw) for t, left in corners]
    want.append(tvF.center_crop(boxes, [ch, cw]))
    if cls is v2.TenCrop:
        flipped = tvF.horizontal_flip(boxes)
        want += [tvF.crop(flipped, t, left, ch, cw) for t, left in corners]
        want.append(tvF.center_crop(flipped, [ch, cw]))
    for crop_images, crop_regions, crop_boxes in zip(
        crops_images, crops_regions, want, strict=True
    ):
        assert type(crop_regions) is Regions and crop_regions.canvas_size == (ch, cw)
        assert crop_regions.tolist() == _rounded(crop_boxes)
        _check_pixels(crop_images, crop_regions)


# -- the transforms the regions cannot follow ------------------------------------------------

REFUSE: dict[str, Callable[[], Any]] = {
    "ElasticTransform": lambda: v2.ElasticTransform(),
    "RandomPerspective": lambda: v2.RandomPerspective(p=1),
    "RandomRotation-30": lambda: v2.RandomRotation((30, 30)),
    "RandomRotation-range": lambda: v2.RandomRotation((15, 25)),
    "RandomAffine-rotate": lambda: v2.RandomAffine((10, 10)),
    "RandomAffine-shear": lambda: v2.RandomAffine(0, shear=(15, 15)),
}


@pytest.mark.parametrize("name", list(REFUSE))
def test_transforms_that_bend_rectangles_refuse_the_regions(name: str) -> None:
    images, regions = _batch(2)
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"Regions cannot follow .*axis-aligned rectangle"):
        REFUSE[name]()(tv_tensors.Image(images), regions)
    # What the refusal avoids: the image's real pixels no longer fill a rectangle, so any row
    # (the enclosing box, say) would claim padding pixels as the image's own.
    torch.manual_seed(0)
    moved = REFUSE[name]()(tv_tensors.Image(images), _as_boxes(regions))
    out_images, out_boxes = moved
    enclosing = Regions(_rounded(out_boxes), canvas_size=tuple(out_boxes.canvas_size))
    with pytest.raises(AssertionError, match="padding inside its region"):
        _check_pixels(out_images, enclosing)


# -- the transforms that leave the geometry alone ---------------------------------------------

UNCHANGED: dict[str, Callable[[], Any]] = {
    "ColorJitter": lambda: v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "GaussianBlur": lambda: v2.GaussianBlur(3),
    "GaussianNoise": lambda: v2.GaussianNoise(),
    "Grayscale": lambda: v2.Grayscale(3),
    "RandomGrayscale": lambda: v2.RandomGrayscale(p=1),
    "Normalize": lambda: v2.Normalize([0.5] * 3, [0.2] * 3),
    "RandomAdjustSharpness": lambda: v2.RandomAdjustSharpness(2, p=1),
    "RandomAutocontrast": lambda: v2.RandomAutocontrast(p=1),
    "RandomEqualize": lambda: v2.RandomEqualize(p=1),
    "RandomInvert": lambda: v2.RandomInvert(p=1),
    "RandomPosterize": lambda: v2.RandomPosterize(3, p=1),
    "RandomSolarize": lambda: v2.RandomSolarize(0.5, p=1),
    "RandomPhotometricDistort": lambda: v2.RandomPhotometricDistort(p=1),
    "RandomChannelPermutation": lambda: v2.RandomChannelPermutation(),
    "RandomErasing": lambda: v2.RandomErasing(p=1),
    "JPEG": lambda: v2.JPEG(80),
    "ToDtype": lambda: v2.ToDtype(torch.float64, scale=True),
    "ConvertImageDtype": lambda: v2.ConvertImageDtype(torch.float64),
    "Identity": lambda: v2.Identity(),
    "RGB": lambda: v2.RGB(),
    "Lambda": lambda: v2.Lambda(lambda x: x),
    "ClampBoundingBoxes": lambda: v2.ClampBoundingBoxes(),
    "ClampKeyPoints": lambda: v2.ClampKeyPoints(),
    "ConvertBoundingBoxFormat": lambda: v2.ConvertBoundingBoxFormat("XYWH"),
    "SanitizeBoundingBoxes": lambda: v2.SanitizeBoundingBoxes(labels_getter=None),
    "SanitizeKeyPoints": lambda: v2.SanitizeKeyPoints(),
    "SetClampingMode": lambda: v2.SetClampingMode("hard"),
    "UniformTemporalSubsample": lambda: v2.UniformTemporalSubsample(2),
    "ToImage": lambda: v2.ToImage(),
    "ToPureTensor": lambda: v2.ToPureTensor(),
}
UINT8_ONLY = {"RandomPosterize", "JPEG", "RandomEqualize"}


@pytest.mark.parametrize("name", list(UNCHANGED))
def test_transforms_that_keep_the_geometry_keep_the_regions(name: str) -> None:
    images, regions = _batch(3, torch.uint8 if name in UINT8_ONLY else torch.float32)
    boxes = _as_boxes(regions)
    points = tv_tensors.KeyPoints([[1.0, 2.0], [30.0, 20.0]], canvas_size=CANVAS)
    torch.manual_seed(0)
    out_images, out_boxes, out_points, out_regions = UNCHANGED[name]()(
        tv_tensors.Image(images), boxes, points, regions
    )
    assert out_images.shape == images.shape
    if name == "ToPureTensor":  # its job: every tv_tensor becomes a plain tensor
        assert type(out_regions) is torch.Tensor and torch.equal(out_regions, regions)
        return
    assert type(out_regions) is Regions and out_regions.canvas_size == CANVAS
    assert torch.equal(out_regions, regions)
    assert torch.equal(out_points, points)
    # torchvision keeps the boxes where they were too (converted, at most).
    xyxy = tvF.convert_bounding_box_format(out_boxes, new_format="XYXY")
    assert xyxy.canvas_size == CANVAS and torch.allclose(xyxy.double(), boxes)


# -- the transforms that move pixels by their own code ------------------------------------------

OWN_CODE: dict[str, Callable[[], Any]] = {
    "AutoAugment": lambda: v2.AutoAugment(),
    "RandAugment": lambda: v2.RandAugment(),
    "TrivialAugmentWide": lambda: v2.TrivialAugmentWide(),
    "AugMix": lambda: v2.AugMix(),
    "CutMix": lambda: v2.CutMix(num_classes=4),
    "MixUp": lambda: v2.MixUp(num_classes=4),
    "LinearTransformation": lambda: v2.LinearTransformation(
        torch.eye(3 * 24 * 36), torch.zeros(3 * 24 * 36)
    ),
    "Compose-AutoAugment": lambda: v2.Compose([v2.RandomHorizontalFlip(), v2.AutoAugment()]),
}


@pytest.mark.parametrize("name", list(OWN_CODE))
def test_loaders_refuse_regions_before_transforms_that_bypass_the_kernels(name: str) -> None:
    images, regions = _batch(0, torch.uint8)
    labels = torch.arange(len(SIZES))
    batch = (images, labels, regions)
    transform = OWN_CODE[name]()
    with pytest.raises(ValueError, match=r"the batch holds Regions, which .* cannot move"):
        list(DeviceLoader([batch], "cpu", transform))
    samples = [torch.full((3, h, w), 255, dtype=torch.uint8) for h, w in SIZES]
    with pytest.raises(ValueError, match="the batch holds Regions"):
        GPUCollate("cpu", transform, size=CANVAS, return_regions=True)(samples)
    # Without regions the same transform runs (the refusal is about the regions only).
    if name not in ("CutMix", "MixUp"):  # those want float images and the labels
        (out,) = DeviceLoader([(images, labels)], "cpu", transform)
        assert out[0].shape[0] == len(SIZES)


@pytest.mark.parametrize(
    "name", [n for n in OWN_CODE if n not in ("LinearTransformation", "Compose-AutoAugment")]
)
def test_those_transforms_refuse_boxes_in_torchvision_itself(name: str) -> None:
    """The same reason: torchvision does not let boxes through them either."""
    images, regions = _batch(0, torch.uint8)
    labels = torch.arange(len(SIZES))
    with pytest.raises((TypeError, ValueError)):
        OWN_CODE[name]()(tv_tensors.Image(images), _as_boxes(regions), labels)


def test_every_v2_transform_is_classified() -> None:
    """A torchvision release with a new transform fails here until it is put in a group."""
    classes = {
        name
        for name in dir(v2)
        if isinstance(getattr(v2, name), type)
        and issubclass(getattr(v2, name), v2.Transform)
        and getattr(v2, name) is not v2.Transform
    }
    listed = {name.split("-")[0] for name in (*FOLLOW, *REFUSE, *UNCHANGED, *OWN_CODE)}
    listed |= {"FiveCrop", "TenCrop", "RandomIoUCrop"}  # their own tests above
    # Conversions to and from PIL and the deprecated ToTensor take single images, not batches.
    listed |= {"PILToTensor", "ToPILImage", "ToTensor"}
    assert classes - listed == set(), "classify these transforms in this file"
    assert {type(OWN_CODE[n]()) for n in OWN_CODE if "-" not in n} == set(UNFOLLOWABLE)


# -- the reproducers: DeviceLoader and GPUCollate with torchvision's own transforms ------------


def test_device_loader_flip_and_resize_move_the_regions() -> None:
    # A 40x30 image on a 40x40 canvas at the left: after the flip it starts at 10.
    samples = [(torch.ones(3, 40, 30), 0)]
    collate = PadCollate(40, placement="top_left", padding_mode="constant", return_regions=True)
    batch = collate(samples)
    assert batch[2].tolist() == [[0, 0, 40, 30]]
    ((_, _, regions),) = DeviceLoader([batch], "cpu", v2.RandomHorizontalFlip(p=1))
    assert type(regions) is Regions and regions.tolist() == [[0, 10, 40, 30]]
    ((images, _, regions),) = DeviceLoader(
        [batch], "cpu", [v2.RandomHorizontalFlip(p=1), v2.Resize(20)]
    )
    assert images.shape == (1, 3, 20, 20) and type(images) is torch.Tensor
    assert regions.tolist() == [[0, 5, 20, 15]] and regions.canvas_size == (20, 20)
    _check_pixels(images, regions)


def test_gpu_collate_transforms_move_the_regions() -> None:
    samples = [{"image": torch.ones(3, h, w), "label": i} for i, (h, w) in enumerate(SIZES)]
    collate = GPUCollate(
        "cpu",
        [v2.RandomVerticalFlip(p=1), v2.CenterCrop((20, 30))],
        size=CANVAS,
        placement="top_left",
        padding_mode="constant",
        return_regions=True,
    )
    batch = collate(samples)
    regions = batch["region"]
    assert regions.canvas_size == (20, 30)
    # Flipped: the image's bottom rows sit at the canvas's bottom; the crop takes rows 2..22
    # and columns 3..33 of the 24x36 canvas.
    want = []
    for h, w in SIZES:
        top, bottom = max(24 - h - 2, 0), min(24 - 2, 20)
        want.append([top, 0, bottom - top, min(w - 3, 30)])
    assert regions.tolist() == want
    _check_pixels(batch["image"], regions)


def test_regions_without_a_canvas_size_say_what_is_missing() -> None:
    images, regions = _batch(0)
    legacy = Regions(regions.as_subclass(torch.Tensor))
    assert legacy.canvas_size is None
    # A pad needs no canvas: the rows move, as before.
    _, padded = v2.Pad([2, 1])(tv_tensors.Image(images), legacy)
    assert torch.equal(padded, regions + torch.tensor([1, 2, 0, 0])) and padded.canvas_size is None
    with pytest.raises(ValueError, match=r"Regions without a canvas_size cannot follow .*flip"):
        v2.RandomHorizontalFlip(p=1)(tv_tensors.Image(images), legacy)


def test_regions_keep_their_canvas_through_copies_and_pickling() -> None:
    import copy
    import pickle

    _, regions = _batch(0)
    for copied in (
        regions.clone(),
        regions.to("cpu"),
        regions.detach(),
        copy.deepcopy(regions),
        pickle.loads(pickle.dumps(regions)),
    ):
        assert type(copied) is Regions and copied.canvas_size == CANVAS
        assert torch.equal(copied, regions)
    assert "canvas_size=(24, 36)" in repr(regions)
    assert type(regions[0]) is torch.Tensor and type(regions + 1) is torch.Tensor


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (([0, 0, 1, 1],), {}, ValueError, r"shape \(B, 4\)"),
        (([[0, 0, 1, 1, 1]],), {}, ValueError, r"shape \(B, 4\)"),
        (([[0, 0, 1, 1]],), {"dtype": torch.float32}, TypeError, "integer dtype"),
        (([[0, 0, 1, 1]],), {"dtype": torch.bool}, TypeError, "integer dtype"),
        (([[0, 0, -1, 1]],), {}, ValueError, "heights and widths >= 0"),
        (([[-1, 0, 1, 1]],), {}, ValueError, "top and left >= 0"),
        (([[0, 3, 2, 2]],), {"canvas_size": (4, 4)}, ValueError, "leaves its canvas_size"),
        (([[0, 0, 1, 1]],), {"canvas_size": 4}, TypeError, "canvas_size must be"),
        (([[0, 0, 1, 1]],), {"canvas_size": (4.0, 4)}, TypeError, "canvas_size must be"),
        (([[0, 0, 1, 1]],), {"canvas_size": "44"}, TypeError, "canvas_size must be"),
        (([[0, 0, 1, 1]],), {"canvas_size": (4, -1)}, ValueError, "canvas_size must lie in"),
    ],
)
def test_bad_regions_name_what_is_wrong(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Regions(*args, **kwargs)


def test_good_regions() -> None:
    regions = Regions([[0, 1, 2, 3]], canvas_size=[4, 4], dtype=torch.int32)
    assert regions.dtype == torch.int32 and regions.canvas_size == (4, 4)
    assert Regions(torch.empty(0, 4, dtype=torch.int64), canvas_size=(0, 0)).shape == (0, 4)
    # int32 rows stay int32 through a transform.
    moved = v2.RandomHorizontalFlip(p=1)(regions)
    assert moved.dtype == torch.int32 and moved.tolist() == [[0, 0, 2, 3]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_regions_on_cuda_through_pinned_memory_and_the_side_stream() -> None:
    samples = [(torch.ones(3, h, w), i) for i, (h, w) in enumerate(SIZES)]
    collate = PadCollate(CANVAS, padding_mode="constant", return_regions=True)
    loader = DataLoader(samples, batch_size=2, collate_fn=collate, pin_memory=True)
    transforms = [v2.RandomHorizontalFlip(p=1), v2.Resize(12)]
    seen = 0
    for images, _, regions in DeviceLoader(loader, "cuda", transforms):
        assert type(regions) is Regions and regions.device.type == "cuda"
        assert regions.canvas_size == (12, 18) == images.shape[-2:]
        _check_pixels(images.cpu(), regions.cpu())
        seen += 1
    assert seen == 2
