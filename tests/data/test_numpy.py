"""``PadCollate`` with the samples of cv2/Albumentations pipelines: numpy images, plain masks.

A numpy image is read as ``v2.ToImage`` reads it (``(H, W, C)`` -> ``(C, H, W)``, ``(H, W)`` ->
``(1, H, W)``, dtype kept): the batch must equal ``PadCollate`` of ``v2.ToImage``'s tensors, bit
for bit. A segmentation mask given as a plain tensor or array (so ``default_collate`` would try
to stack masks of different sizes) gets an error that names ``tv_tensors.Mask``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from reference import assert_bitwise_equal
from torchvision import tv_tensors
from torchvision.transforms import v2

from tipad_transforms.data import PadCollate

SIZES = [(5, 7), (9, 4), (6, 11)]


def _arrays(dtype: Any = np.uint8, channels: int | None = 3, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (lambda h, w: (h, w)) if channels is None else (lambda h, w: (h, w, channels))
    return [rng.integers(0, 200, shape(h, w)).astype(dtype) for h, w in SIZES]


def _collate(**kwargs: Any) -> PadCollate:
    return PadCollate(placement="random", generator=torch.Generator().manual_seed(2), **kwargs)


@pytest.mark.parametrize("channels", [3, 1, 4, None], ids=["HWC3", "HWC1", "HWC4", "HW"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int16, np.bool_], ids=str)
def test_numpy_images_are_read_as_to_image_reads_them(dtype: Any, channels: int | None) -> None:
    # 0.5.2: "samples[0] is a tuple without an image".
    arrays = _arrays(dtype, channels)
    originals = [a.copy() for a in arrays]
    samples = [(a, i) for i, a in enumerate(arrays)]
    images, labels, regions = _collate(return_regions=True)(samples)
    want_samples = [(v2.ToImage()(a).as_subclass(torch.Tensor), i) for i, a in enumerate(arrays)]
    want_images, want_labels, want_regions = _collate(return_regions=True)(want_samples)
    assert_bitwise_equal(images, want_images)
    assert torch.equal(labels, want_labels) and torch.equal(regions, want_regions)
    assert type(images) is torch.Tensor and images.shape[1] == (channels or 1)
    for i, (top, left, h, w) in enumerate(regions.tolist()):  # the pixels, read here
        chw = np.atleast_3d(arrays[i]).transpose(2, 0, 1)
        assert np.array_equal(images[i, :, top : top + h, left : left + w].numpy(), chw)
    for a, b in zip(arrays, originals, strict=True):
        assert np.array_equal(a, b), "an input array was modified"


def test_albumentations_style_dicts_and_strided_arrays() -> None:
    arrays = _arrays()
    # cv2's BGR -> RGB view (negative strides) and a read-only array: both read, never shared.
    bgr = arrays[0][..., ::-1]
    frozen = arrays[1].copy()
    frozen.setflags(write=False)
    masks = [tv_tensors.Mask(torch.ones(h, w, dtype=torch.uint8)) for h, w in SIZES]
    samples = [
        {"image": im, "mask": m, "label": i}
        for i, (im, m) in enumerate(zip([bgr, frozen, arrays[2]], masks, strict=True))
    ]
    batch = _collate(mask_fill=255, return_regions=True)(samples)
    assert set(batch) == {"image", "mask", "label", "region"}
    for i, (top, left, h, w) in enumerate(batch["region"].tolist()):
        chw = np.ascontiguousarray(samples[i]["image"].transpose(2, 0, 1))
        assert np.array_equal(batch["image"][i, :, top : top + h, left : left + w].numpy(), chw)
        assert (batch["mask"][i, top : top + h, left : left + w] == 1).all()
        assert int((batch["mask"][i] == 255).sum()) == batch["mask"][i].numel() - h * w
    batch["image"].fill_(0)
    assert bgr.any(), "the batch shares memory with an input array"


@pytest.mark.parametrize(
    ("sample", "error", "match"),
    [
        (np.zeros((2, 3, 4, 5)), ValueError, r"samples\[0\]: a numpy image must be \(H, W, C\)"),
        (np.zeros(5), ValueError, r"got shape \(5,\)"),
        (np.array([["a", "b"]]), TypeError, "must hold real numbers"),
        (np.zeros((3, 3, 3), np.complex64), TypeError, "must hold real numbers"),
        ((np.zeros((3, 3, 3), object), 1), TypeError, r"samples\[0\]\[0\]: .* dtype object"),
    ],
)
def test_bad_numpy_images_say_what_is_wrong(sample: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PadCollate()([sample, sample])


@pytest.mark.parametrize(
    "mask", [lambda h, w: torch.zeros(h, w), lambda h, w: np.zeros((2, h, w), np.uint8)]
)
def test_plain_masks_of_other_sizes_name_tv_tensors_mask(mask: Any) -> None:
    # 0.5.2: torch's "stack expects each tensor to be equal size" and nothing else.
    samples = [(torch.zeros(3, h, w), mask(h, w)) for h, w in SIZES]
    with pytest.raises(ValueError, match=r"samples\[\*\]\[1\].*wrap them as .*tv_tensors\.Mask"):
        PadCollate()(samples)
    # As masks they are padded and stacked.
    as_masks = [(im, tv_tensors.Mask(torch.as_tensor(m))) for im, m in samples]
    _, masks = PadCollate()(as_masks)
    assert type(masks) is tv_tensors.Mask and masks.shape[-2:] == (9, 11)


def test_other_shapes_that_cannot_stack_are_named() -> None:
    samples = [(torch.zeros(3, h, w), torch.zeros(i + 1)) for i, (h, w) in enumerate(SIZES)]
    with pytest.raises(ValueError, match=r"samples\[1\]\[1\] has shape \(2,\), samples\[0\]"):
        PadCollate()(samples)
    same = [(torch.zeros(3, h, w), torch.zeros(3)) for h, w in SIZES]
    assert PadCollate()(same)[1].shape == (3, 3)  # equal shapes stack as before
