"""Walking samples and batches: where the image is, moving every tensor to a device.

One rule finds the image in a tuple, list or dict (a ``PadCollate`` sample, a ``DeviceLoader``
batch): torchvision v2's, extended to dicts and numpy arrays (cv2, Albumentations): the first
``tv_tensors.Image`` or PIL image; else a dict's ``"image"`` if it is a plain tensor or array;
else the first plain tensor or array (a tv_tensor, such as boxes or masks, never is).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import PIL.Image
import torch
from torchvision import tv_tensors

IMAGE_KEY = "image"


def is_plain_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, tv_tensors.TVTensor)


def is_plain_image(value: Any) -> bool:
    """A plain tensor or a numpy array: the image where no tv_tensors.Image or PIL image is."""
    return is_plain_tensor(value) or isinstance(value, np.ndarray)


def is_container(value: Any) -> bool:
    return isinstance(value, (Mapping, tuple, list))


def image_slot(container: Mapping[Any, Any] | Sequence[Any]) -> Any:
    """Key (dict) or position (tuple/list) of the image in ``container``, or None (see module)."""
    items = list(container.items() if isinstance(container, Mapping) else enumerate(container))
    for key, value in items:
        if isinstance(value, (tv_tensors.Image, PIL.Image.Image)):
            return key
    if isinstance(container, Mapping) and is_plain_image(container.get(IMAGE_KEY)):
        return IMAGE_KEY
    for key, value in items:
        if is_plain_image(value):
            return key
    return None


def check_alike(value: Any, first: Any, i: int, path: str = "", *, alike: bool = True) -> None:
    """ValueError naming sample ``i``'s ``value`` at ``path`` where it is not like sample 0's
    ``first``: not ``alike`` (another kind), or a dict, tuple or list of other keys or length."""
    name, first_name = f"samples[{i}]{path}", f"samples[0]{path}"
    if not alike:
        raise ValueError(
            f"{name} is a {type(value).__name__}, {first_name} a {type(first).__name__}: every "
            "sample needs the same structure"
        )
    if isinstance(first, Mapping) and set(value) != set(first):
        raise ValueError(
            f"{name} has keys {sorted(map(str, value))}, {first_name} {sorted(map(str, first))}: "
            "every sample needs the same keys"
        )
    if isinstance(first, (tuple, list)) and len(value) != len(first):
        raise ValueError(
            f"{name} has {len(value)} elements, {first_name} {len(first)}: every sample needs "
            "the same length"
        )


def rebuild(like: Any, values: list[Any]) -> Any:
    """A tuple/list/namedtuple like ``like`` holding ``values``."""
    if isinstance(like, tuple) and hasattr(like, "_fields"):  # namedtuple
        return type(like)(*values)
    if isinstance(like, tuple):
        return tuple(values)
    return values


def replace(container: Any, slot: Any, value: Any) -> Any:
    """A shallow copy of ``container`` (tuple, namedtuple, list or dict) with ``value`` at slot."""
    if isinstance(container, Mapping):
        out = dict(container)
        out[slot] = value
        return out
    values = list(container)
    values[slot] = value
    return rebuild(container, values)


def find_image(batch: Any) -> Any:
    """Key or position of the image in the container ``batch``; TypeError naming the batch's
    type when it holds none (see the module's rule)."""
    slot = image_slot(batch) if is_container(batch) else None
    if slot is None:
        raise TypeError(
            f"found no image in the batch ({type(batch).__name__}): give a tensor, or a "
            "tuple/list/dict holding a tv_tensors.Image, an 'image' key or a plain tensor"
        )
    return slot


def apply_to_image(batch: Any, fn: Callable[[Any], Any]) -> Any:
    """``batch`` with its image replaced by ``fn(image)``: a bare tensor is the image itself."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    slot = find_image(batch)
    return replace(batch, slot, fn(batch[slot]))


def to_device(obj: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """``obj`` with every tensor moved to ``device`` (through tuples, lists and dicts)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, Mapping):
        return {k: to_device(v, device, non_blocking) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return rebuild(obj, [to_device(v, device, non_blocking) for v in obj])
    return obj


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``obj`` (through tuples, lists and dicts)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from iter_tensors(v)
