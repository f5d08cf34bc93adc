"""Reading a batch of samples: which element is the image (``_tree.image_slot`` on the first
sample, the same slot in every other), and the images as ``(C, H, W)`` tensors. Every error
names the index of the sample at fault."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import PIL.Image
import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as tvF

from .._checks import unreadable
from ._tree import check_alike, image_slot, is_plain_image

REGION_KEY = "region"


@dataclass
class Samples:
    """The images of a batch, checked (plain ``(C, h_i, w_i)`` tensors alike in channels, dtype
    and device; 2-D gets ``C = 1``), and where they sat: ``kind`` ``"image"``, ``"sequence"`` or
    ``"mapping"``, ``slot`` (position or key), ``containers`` (the samples)."""

    kind: str
    slot: Any
    images: list[torch.Tensor]
    tv_image: bool
    containers: list[Any]

    @property
    def sizes(self) -> list[tuple[int, int]]:
        return [(int(im.shape[-2]), int(im.shape[-1])) for im in self.images]


def _kind(sample: Any) -> str:
    if isinstance(sample, (tv_tensors.Image, PIL.Image.Image)) or is_plain_image(sample):
        return "image"
    if isinstance(sample, Mapping):
        return "mapping"
    if isinstance(sample, (tuple, list)):
        return "sequence"
    return "other"


def check_array(image: np.ndarray, name: str) -> np.ndarray:
    """``image`` if it is 2-D or 3-D and holds real numbers, else an error naming ``name``."""
    if image.ndim not in (2, 3):
        raise ValueError(
            f"{name}: a numpy image must be (H, W, C) or (H, W), as v2.ToImage takes it (cv2, "
            f"Albumentations), got shape {image.shape}; convert other layouts to a (C, H, W) "
            "tensor in the dataset"
        )
    if image.dtype.kind not in "biuf":
        raise TypeError(
            f"{name}: a numpy image must hold real numbers (bool, int, uint, float), got "
            f"dtype {image.dtype}"
        )
    return image


def _as_tensor(image: Any, i: int, where: str) -> torch.Tensor:
    if isinstance(image, PIL.Image.Image):
        return tvF.pil_to_tensor(image)
    if isinstance(image, np.ndarray):
        # v2.ToImage's reading: (H, W, C) or (H, W) -> a (C, H, W) copy.
        image = check_array(image, f"samples[{i}]{where}")
        return torch.from_numpy(np.array(np.atleast_3d(image).transpose(2, 0, 1), order="C"))
    if not isinstance(image, torch.Tensor) or (
        isinstance(image, tv_tensors.TVTensor) and not isinstance(image, tv_tensors.Image)
    ):
        raise TypeError(
            f"samples[{i}]{where} must be an image (tensor, tv_tensors.Image, PIL image or "
            f"numpy array), got {type(image).__name__}"
        )
    return image.as_subclass(torch.Tensor) if type(image) is not torch.Tensor else image


def read_samples(samples: Any) -> Samples:
    """Find and check the images of ``samples`` (a non-empty sequence of samples).

    ValueError: an empty batch, samples of different structure, images unlike ``samples[0]``'s,
    a dict sample with a ``"region"`` key; TypeError: a sample or image of an unsupported type.
    """
    if isinstance(samples, (torch.Tensor, str)) or not isinstance(samples, Sequence):
        raise TypeError(f"samples must be a list of samples, got {type(samples).__name__}")
    if len(samples) == 0:
        raise ValueError("got an empty batch: samples must hold at least one sample")
    first = samples[0]
    kind = _kind(first)
    if kind == "other":
        raise TypeError(
            "samples[0] must be an image (tensor, tv_tensors.Image, PIL image, numpy array) or "
            f"a tuple/list/dict holding one, got {type(first).__name__}"
        )
    slot = None if kind == "image" else image_slot(first)
    if kind != "image" and slot is None:
        raise TypeError(
            f"samples[0] is a {type(first).__name__} without an image: the image is its first "
            "tv_tensors.Image or PIL image, else its 'image' key, else its first plain tensor "
            "or numpy array"
        )
    if kind == "mapping" and REGION_KEY in first:
        raise ValueError(
            f"samples[0] already has a {REGION_KEY!r} key, which the collate function adds"
        )
    where = "" if kind == "image" else f"[{slot!r}]"
    images: list[torch.Tensor] = []
    first_type, bare = type(first), kind == "image"
    for i, sample in enumerate(samples):
        # A sample's type decides its kind; a bare image has no keys or length to compare.
        check_alike(sample, first, i, alike=type(sample) is first_type or _kind(sample) == kind)
        image = sample if bare else sample[slot]
        if type(image) is not torch.Tensor:
            image = _as_tensor(image, i, where)
        _check_like(image, images[0] if images else image, i, where)
        images.append(image)
    flat = images[0].dim() == 2
    return Samples(
        kind=kind,
        slot=slot,
        images=[im.unsqueeze(0) for im in images] if flat else images,
        tv_image=isinstance(first if kind == "image" else first[slot], tv_tensors.Image),
        containers=list(samples),
    )


def _check_like(image: torch.Tensor, ref: torch.Tensor, i: int, where: str) -> None:
    """``image`` (sample ``i``) has ``ref``'s (sample 0's) rank, channels, dtype, device."""
    if (
        type(image) is torch.Tensor
        and unreadable(image) is None
        and image.dim() == ref.dim() == 3
        and image.shape[0] == ref.shape[0]
        and image.dtype == ref.dtype
        and image.device == ref.device
        and image.shape[-1] * image.shape[-2] > 0
        and not image.is_complex()
    ):
        return  # the common case, without building the name the errors use
    name = f"samples[{i}]{where}"
    kind = unreadable(image)
    if kind is not None:
        fix = ".dequantize()" if image.is_quantized else ".to_dense()"
        fix = "one image per sample" if image.is_nested else fix
        raise TypeError(
            f"{name}: the image must be a dense tensor, got {kind} (in the dataset: {fix})"
        )
    if image.dim() not in (2, 3):
        raise ValueError(f"{name}: the image must be (C, H, W) or (H, W), got {tuple(image.shape)}")
    if image.is_complex():
        raise TypeError(f"{name}: the image must be real, got dtype {image.dtype}")
    if image.shape[-1] == 0 or image.shape[-2] == 0:
        raise ValueError(f"{name}: the image is empty, {tuple(image.shape)}: it needs a pixel")
    if image.dim() != ref.dim():
        raise ValueError(
            f"{name}: the image is {image.dim()}-D {tuple(image.shape)}, samples[0]'s is "
            f"{ref.dim()}-D {tuple(ref.shape)}: every image of a batch needs the same rank"
        )
    if image.dim() == 3 and image.shape[0] != ref.shape[0]:
        raise ValueError(
            f"{name}: the image has {image.shape[0]} channels {tuple(image.shape)}, samples[0]'s "
            f"has {ref.shape[0]} {tuple(ref.shape)}: every image needs the same channel count"
        )
    if image.dtype != ref.dtype or image.device != ref.device:
        raise ValueError(
            f"{name}: the image is {image.dtype} on {image.device}, samples[0]'s is "
            f"{ref.dtype} on {ref.device}: every image needs the same dtype and device"
        )
