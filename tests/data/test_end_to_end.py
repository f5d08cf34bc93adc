"""End to end: ``PadCollate`` -> ``DeviceLoader`` with torchvision's random geometry, every
target and every region checked against the pixels.

Each sample is a 4-channel uint8 image whose channels draw its annotations, so that after any
transform the pixels themselves say where everything went:

* channel 0: 200-240 on every pixel of the image; the canvas around is a texture whose channel
  0 is 0 (and an affine's fill is 0): the region must hold the bright pixels and nothing else;
* channel 1: a filled rectangle (220-250) on a dark background (0-40): its ``BoundingBoxes``;
* channel 2: a second filled rectangle (235), with no part thinner than 6 pixels (a nearest
  resize drops thin parts that a bilinear one keeps): its ``tv_tensors.Mask`` is that shape;
* channel 3: a 5x5 blob (255) around each of its ``KeyPoints``.

The samples go through a DataLoader with ``PadCollate`` (texture border, random placement),
then ``DeviceLoader("cpu", v2.Compose([RandomHorizontalFlip, RandomResizedCrop, RandomAffine
(translate and scale)]))``, drawn once per batch or per sample (``PerSample``), all resampling
nearest (as torchvision resamples masks). A mask must equal its drawn shape exactly (the same
sampling made both); an edge of a box or region may lie ``EDGE`` pixels from the drawn one
(one per resampling), a keypoint as far from its blob.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from torch.nn import functional as nnF
from torch.utils.data import DataLoader
from torchvision import tv_tensors
from torchvision.transforms import v2

from tipad_transforms.data import DeviceLoader, PadCollate, PerSample, Regions
from tipad_transforms.data._device import apply_transforms  # what every device stage runs

N, BATCH, EPOCHS = 8, 4, 3
NEAREST = v2.InterpolationMode.NEAREST
TEXTURE = torch.zeros(4, 5, 7, dtype=torch.uint8)
TEXTURE[1:] = torch.randint(0, 41, (3, 5, 7), generator=torch.Generator().manual_seed(9))


def _sample(i: int) -> tuple[tv_tensors.Image, dict[str, Any]]:
    g = torch.Generator().manual_seed(i)

    def randint(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (), generator=g))

    h, w = randint(20, 30), randint(20, 30)
    image = torch.randint(0, 41, (4, h, w), generator=g, dtype=torch.uint8)
    image[0] = torch.randint(200, 241, (h, w), generator=g, dtype=torch.uint8)
    # The box: at least 7x7, inside the image.
    bw, bh = randint(7, w // 2), randint(7, h // 2)
    x1, y1 = randint(0, w - bw), randint(0, h - bh)
    image[1, y1 : y1 + bh, x1 : x1 + bw] = 235
    # The mask's shape: another rectangle, at least 6x6.
    mw, mh = randint(6, w // 2), randint(6, h // 2)
    mx, my = randint(0, w - mw), randint(0, h - mh)
    shape = torch.zeros(h, w, dtype=torch.bool)
    shape[my : my + mh, mx : mx + mw] = True
    image[2][shape] = 235
    # Two keypoints, each the centre of a 5x5 blob.
    points = []
    for _ in range(2):
        px, py = randint(2, w - 3), randint(2, h - 3)
        image[3, py - 2 : py + 3, px - 2 : px + 3] = 255
        points.append([float(px), float(py)])
    target = {
        "boxes": tv_tensors.BoundingBoxes(
            [[x1, y1, x1 + bw, y1 + bh]], format="XYXY", canvas_size=(h, w), dtype=torch.float32
        ),
        "keypoints": tv_tensors.KeyPoints(points, canvas_size=(h, w)),
        "masks": tv_tensors.Mask(shape[None].to(torch.uint8)),
        "labels": torch.tensor([i % 3]),
    }
    return tv_tensors.Image(image), target


class Drawn(torch.utils.data.Dataset[Any]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> Any:
        return _sample(i)


# How far an edge of the pixels may lie from the continuous edge of a box or region: torch's
# nearest resampling takes the source pixel under a destination pixel's corner, not its
# centre, so each resampling (the crop's resize, the affine) can move an edge by one pixel.
EDGE = 2


def _grow(mask: torch.Tensor) -> torch.Tensor:
    return nnF.max_pool2d(mask[None, None].double(), 2 * EDGE + 1, 1, EDGE)[0, 0].bool()


def _shrink(mask: torch.Tensor) -> torch.Tensor:
    # Off the canvas counts as outside: a target cut by the canvas's edge has an edge there.
    padded = nnF.pad(mask[None, None].double(), (EDGE,) * 4, value=0.0)
    return (-nnF.max_pool2d(-padded, 2 * EDGE + 1, 1))[0, 0].bool()


def _rect(size: tuple[int, int], top: int, left: int, h: int, w: int) -> torch.Tensor:
    out = torch.zeros(size, dtype=torch.bool)
    out[max(top, 0) : max(top + h, 0), max(left, 0) : max(left + w, 0)] = True
    return out


def _same_but_at_the_edges(got: torch.Tensor, drawn: torch.Tensor, what: str) -> int:
    """``got`` (where a target says) and ``drawn`` (where the pixels say) agree but for
    ``EDGE`` pixels at the edges. Returns how many pixels of ``got``'s interior were checked."""
    assert bool((drawn[_shrink(got)]).all()), f"{what}: drawn pixels missing inside it"
    assert not bool((drawn & ~_grow(got)).any()), f"{what}: drawn pixels outside it"
    return int(_shrink(got).sum())


def _check_sample(image: torch.Tensor, target: dict[str, Any], region: list[int]) -> dict[str, int]:
    size = (int(image.shape[-2]), int(image.shape[-1]))
    checked = {"region": 0, "box": 0, "mask": 0, "keypoint": 0}
    real = image[0] >= 100
    checked["region"] = _same_but_at_the_edges(_rect(size, *region), real, "the region")
    assert target["boxes"].canvas_size == size and target["keypoints"].canvas_size == size
    (x1, y1, x2, y2) = (round(v) for v in target["boxes"][0].tolist())
    if x2 - x1 >= 3 and y2 - y1 >= 3:
        box = _rect(size, y1, x1, y2 - y1, x2 - x1)
        checked["box"] = _same_but_at_the_edges(box, image[1] >= 128, "the box")
    mask = target["masks"][0].bool()
    assert mask.shape == size
    assert torch.equal(mask, image[2] >= 128), "the mask is not the drawn shape"
    checked["mask"] = int(mask.sum())
    for x, y in target["keypoints"].tolist():
        ix, iy = round(x), round(y)
        if 0 <= ix < size[1] and 0 <= iy < size[0] and real[iy, ix]:
            around = image[3, max(iy - EDGE, 0) : iy + EDGE + 1, max(ix - EDGE, 0) : ix + EDGE + 1]
            assert int(around.max()) >= 128, f"keypoint {(x, y)}: no blob there"
            checked["keypoint"] += 1
    return checked


@pytest.mark.parametrize("per_sample", [False, True], ids=["per-batch", "per-sample"])
def test_targets_and_regions_follow_the_pixels(per_sample: bool) -> None:
    # Nearest, as torchvision resamples masks: the image's channel 2 and the mask go through
    # the same sampling, so the mask must equal the drawn shape exactly.
    geometry = v2.Compose(
        [
            v2.RandomHorizontalFlip(),
            v2.RandomResizedCrop(
                (40, 40), scale=(0.5, 1.0), ratio=(0.75, 1.33), interpolation=NEAREST
            ),
            v2.RandomAffine(degrees=0, translate=(0.1, 0.1), scale=(0.8, 1.2)),  # nearest
        ]
    )
    collate = PadCollate(
        (32, 32), placement="random", texture=TEXTURE, mask_fill=0, return_regions=True
    )
    loader = DataLoader(
        Drawn(), batch_size=BATCH, collate_fn=collate, generator=torch.Generator().manual_seed(1)
    )
    transform = PerSample(geometry) if per_sample else geometry
    batches = DeviceLoader(loader, "cpu", transform)
    torch.manual_seed(5)
    totals = {"region": 0, "box": 0, "mask": 0, "keypoint": 0}
    for _ in range(EPOCHS):
        for images, targets, regions in batches:
            assert type(images) is tv_tensors.Image and images.shape == (BATCH, 4, 40, 40)
            assert type(regions) is Regions and regions.canvas_size == (40, 40)
            assert len(targets) == BATCH
            for image, target, region in zip(images, targets, regions.tolist(), strict=True):
                for key, count in _check_sample(image, target, region).items():
                    totals[key] += count
    # Enough was checked for the test to mean something.
    assert totals["region"] > 5000 and totals["box"] > 500 and totals["mask"] > 200
    assert totals["keypoint"] >= N * EPOCHS // 2


def _batch() -> Any:
    collate = PadCollate((32, 32), placement="top_left", texture=TEXTURE, return_regions=True)
    return collate([_sample(i) for i in range(4)])  # every image narrower: a flip moves it


def test_per_sample_draws_differ_within_a_batch_and_per_batch_draws_do_not() -> None:
    batch = _batch()
    torch.manual_seed(0)
    seen_batch, seen_sample = set(), set()
    for _ in range(8):
        ((_, _, once),) = DeviceLoader([batch], "cpu", v2.RandomHorizontalFlip())
        ((_, _, each),) = DeviceLoader([batch], "cpu", PerSample(v2.RandomHorizontalFlip()))
        left = batch[2][:, 1].tolist()
        flipped_once = [a != b for a, b in zip(once[:, 1].tolist(), left, strict=True)]
        flipped_each = [a != b for a, b in zip(each[:, 1].tolist(), left, strict=True)]
        seen_batch.add(tuple(flipped_once))
        seen_sample.add(tuple(flipped_each))
    # v2 draws once per call: every image flips or none does.
    assert seen_batch <= {(True,) * 4, (False,) * 4}
    assert any(len(set(f)) > 1 for f in seen_sample), "PerSample drew once per batch"


def test_rotations_are_refused_with_the_regions_named() -> None:
    loader = DataLoader(Drawn(), batch_size=BATCH, collate_fn=_collate_with_regions())
    with pytest.raises(ValueError, match=r"Regions cannot follow .*rotate"):
        next(iter(DeviceLoader(loader, "cpu", v2.RandomAffine(degrees=(10, 20)))))
    with pytest.raises(ValueError, match=r"Regions cannot follow .*rotate"):
        next(iter(DeviceLoader(loader, "cpu", PerSample(v2.RandomRotation((10, 20))))))


def _collate_with_regions() -> PadCollate:
    return PadCollate((32, 32), texture=TEXTURE, return_regions=True)


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        (
            (torch.zeros(2, 3, 4, 4), torch.zeros(3)),
            r"batch\[1\] \(shape \(3,\)\).*first size must be 2",
        ),
        (
            (
                torch.zeros(2, 3, 4, 4),
                tv_tensors.BoundingBoxes([[0, 0, 1, 1]], format="XYXY", canvas_size=(4, 4)),
            ),
            r"batch\[1\]: a BoundingBoxes tensor holds one image's objects",
        ),
        ((torch.zeros(2, 3, 4, 4), 7), r"cannot split batch\[1\] \(int\)"),
        (torch.zeros(3, 4, 4), r"needs a batch whose image is \(B, C, H, W\)"),
        (("no image", 1), r"needs a batch whose image is \(B, C, H, W\)"),
    ],
)
def test_per_sample_names_what_it_cannot_split(batch: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PerSample(v2.RandomHorizontalFlip())(batch)


def test_per_sample_refuses_transforms_that_change_the_structure() -> None:
    batch = (torch.zeros(2, 3, 8, 8), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"turned the samples' batch\[0\] into tuple"):
        PerSample(v2.FiveCrop(4))(batch)
    empty = (torch.zeros(0, 3, 8, 8), torch.zeros(0))
    assert PerSample(v2.RandomHorizontalFlip())(empty) is empty
    # On the batch itself the five crops come back, plain as the images went in.
    ((crops, labels),) = DeviceLoader([batch], "cpu", v2.FiveCrop(4))
    assert len(crops) == 5 and all(type(c) is torch.Tensor for c in crops)
    assert crops[0].shape == (2, 3, 4, 4) and torch.equal(labels, batch[1])


def test_per_sample_takes_plain_callables_and_refuses_non_callables() -> None:
    batch = (torch.arange(2 * 1 * 2 * 2.0).reshape(2, 1, 2, 2), torch.tensor([3, 4]))
    images, labels = PerSample(lambda im: im * 2)(batch)
    assert torch.equal(images, batch[0] * 2) and torch.equal(labels, batch[1])
    with pytest.raises(TypeError, match="transform must be callable, got int"):
        PerSample(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["dict", "dict-subclass", "UserDict"])
@pytest.mark.parametrize("wrapped", [True, False])
def test_mapping_batches_of_every_kind_are_transformed(kind: str, wrapped: bool) -> None:
    # torchvision's pytree walks plain dicts only: any Mapping batch is handed over as a dict,
    # so a dict subclass or a UserDict is transformed too, never passed through as one leaf
    # (DeviceLoader's device copy already makes dicts of them; the stage must not rely on it).
    class Batch(dict):  # type: ignore[type-arg]
        pass

    images = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    image = tv_tensors.Image(images) if wrapped else images
    make = {"dict": dict, "dict-subclass": Batch, "UserDict": collections.UserDict}[kind]
    batch = make(image=image, label=torch.tensor([0, 1]))
    out = apply_transforms(batch, (v2.RandomHorizontalFlip(p=1),))
    assert torch.equal(out["image"].as_subclass(torch.Tensor), images.flip(-1))
    assert type(out["image"]) is (tv_tensors.Image if wrapped else torch.Tensor)
    assert torch.equal(out["label"], torch.tensor([0, 1]))
