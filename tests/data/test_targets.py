"""Collate targets go through the functional registry: a new target type is one registration.

A tv_tensor with a ``canvas_size`` is moved by the ``functional.pad`` kernel registered for its
type, with its own sample's padding (here a type of the test's own, with one registration, and
``Regions``); masks are padded as ``functional.pad`` pads a mask, all of a field in one launch.
The references are computed per sample with the functional and with the spec.
"""

from __future__ import annotations

from typing import Any

import torch
from reference import assert_bitwise_equal, random_image
from torchvision import tv_tensors

import tipad_transforms.functional as F
from tipad_transforms.data import PadCollate, Regions

SIZES = [(5, 7), (9, 4), (6, 11)]


class Landmarks(tv_tensors.TVTensor):
    """``(N, 2)`` ``(x, y)`` points with the canvas they lie on: a target type of a user's."""

    canvas_size: tuple[int, int]

    @classmethod
    def of(cls, data: Any, canvas_size: tuple[int, int]) -> Landmarks:
        out = torch.as_tensor(data, dtype=torch.float32).as_subclass(cls)
        out.canvas_size = canvas_size
        return out


@F.register_kernel(F.pad, Landmarks, wrap=False)
def _pad_landmarks(points: Landmarks, padding: Any, *args: Any, **kwargs: Any) -> Landmarks:
    left, top, right, bottom = padding
    h, w = points.canvas_size
    moved = points.as_subclass(torch.Tensor) + torch.tensor([left, top])
    return Landmarks.of(moved, (h + top + bottom, w + left + right))


def _padding(region: list[int], canvas: tuple[int, int]) -> list[int]:
    top, left, h, w = region
    return [left, top, canvas[1] - left - w, canvas[0] - top - h]


def test_a_type_registered_on_pad_follows_its_sample() -> None:
    samples = [
        (
            random_image((3, h, w), torch.uint8, seed=i),
            Landmarks.of([[0, 0], [w - 1, h - 1]], (h, w)),
            Regions([[1, 1, h - 1, w - 1]], canvas_size=(h, w)),
        )
        for i, (h, w) in enumerate(SIZES)
    ]
    collate = PadCollate(placement="random", generator=torch.Generator().manual_seed(3))
    images, points, regions, where = PadCollate(
        placement="random", generator=torch.Generator().manual_seed(3), return_regions=True
    )(samples)
    assert isinstance(points, list) and isinstance(regions, list)
    assert_bitwise_equal(collate(samples)[0], images)
    for i, (top, left, h, w) in enumerate(where.tolist()):
        assert type(points[i]) is Landmarks and points[i].canvas_size == (9, 11)
        assert points[i].tolist() == [[left, top], [left + w - 1, top + h - 1]]
        assert type(regions[i]) is Regions and regions[i].canvas_size == (9, 11)
        assert regions[i].tolist() == [[top + 1, left + 1, h - 1, w - 1]]


def test_masks_are_padded_as_the_functional_pads_each_one(launches: list[str]) -> None:
    samples = [
        (
            random_image((1, h, w), torch.float32, seed=i),
            tv_tensors.Mask(random_image((2, h, w), torch.uint8, seed=10 + i)),
        )
        for i, (h, w) in enumerate(SIZES)
    ]
    collate = PadCollate(placement="random", mask_fill=7, return_regions=True)
    collate(samples)  # compiled and cached: the launches below are the steady ones
    launches.clear()
    _, masks, regions = collate(samples)
    assert launches == ["pad", "pad"], "one launch for the images, one for every mask"
    assert type(masks) is tv_tensors.Mask and masks.shape == (3, 2, 9, 11)
    for i, (_, mask) in enumerate(samples):
        want = F.pad(mask, _padding(regions[i].tolist(), (9, 11)), fill=7)
        assert type(want) is tv_tensors.Mask
        assert_bitwise_equal(masks[i], want)
