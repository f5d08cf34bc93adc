"""Arguments shared by ``GPUCollate`` and ``DeviceLoader``: the device, the batch transforms,
and the guard against building CUDA batches where CUDA cannot run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import get_worker_info
from torchvision import tv_tensors
from torchvision.transforms import v2

from ._regions import Regions
from ._tree import apply_to_image, image_slot, is_container, is_plain_tensor, iter_tensors, replace

__all__ = [
    "Transforms",
    "apply_transforms",
    "check_device",
    "check_transforms",
    "cuda_guard",
]

Transforms = Callable[[Any], Any] | Sequence[Callable[[Any], Any]] | None


def check_device(device: Any) -> torch.device:
    """``device`` as a ``torch.device``, or TypeError/ValueError naming ``device``."""
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise TypeError(f"device must be a torch.device or a str, got {type(device).__name__}")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device must name a torch device, got {device!r}") from exc


def check_transforms(transforms: Transforms) -> tuple[Callable[[Any], Any], ...]:
    """``None``, one callable or a sequence of callables -> a tuple applied in order."""
    if transforms is None:
        return ()
    if callable(transforms):
        return (transforms,)
    if isinstance(transforms, Sequence) and not isinstance(transforms, str):
        for i, t in enumerate(transforms):
            if not callable(t):
                raise TypeError(f"transforms[{i}] must be callable, got {type(t).__name__}")
        return tuple(transforms)
    raise TypeError(
        "transforms must be None, a callable or a sequence of callables, got "
        f"{type(transforms).__name__}"
    )


def apply_transforms(batch: Any, transforms: tuple[Callable[[Any], Any], ...]) -> Any:
    """``batch`` with ``transforms`` applied in order.

    A torchvision v2 transform (tipad's included) gets the whole batch structure, with the
    image batch (``_tree``'s rule) as a ``tv_tensors.Image``: each element then gets what the
    transform does to its type, so after a pad the ``Regions``, boxes, keypoints and masks of a
    ``PadCollate`` batch follow the grown canvas, and plain tensors (labels) pass through. The
    image comes back in its own type. Any other callable gets the image batch alone.

    Raises ValueError naming the regions where a batch that holds ``Regions`` meets a transform
    that moves pixels by its own code, past the per-type kernels (``UNFOLLOWABLE``).
    """
    for t in transforms:
        if isinstance(t, v2.Transform):
            if any(isinstance(x, Regions) for x in iter_tensors(batch)):
                check_followable(t)
            batch = _transform_structure(batch, t)
        else:
            batch = apply_to_image(batch, t)
    return batch


# torchvision transforms that move or mix pixels by their own code, image by image, instead of
# through a functional with per-type kernels: Regions (like BoundingBoxes, which these refuse)
# would pass through them untouched, describing pixels that are no longer there.
UNFOLLOWABLE: tuple[type[v2.Transform], ...] = (
    v2.AutoAugment,
    v2.RandAugment,
    v2.TrivialAugmentWide,
    v2.AugMix,
    v2.CutMix,
    v2.MixUp,
    v2.LinearTransformation,
)


def _nested(t: Any) -> list[Any]:
    """``t`` and the transforms it holds (``v2.Compose``, ``RandomApply``, ``RandomChoice``,
    ``RandomOrder`` keep theirs in a plain ``transforms`` list)."""
    found, stack = [], [t]
    while stack:
        current = stack.pop()
        found.append(current)
        inner = getattr(current, "transforms", None)
        if isinstance(inner, (Sequence, torch.nn.ModuleList)) and not isinstance(inner, str):
            stack.extend(inner)
    return found


def check_followable(t: Any) -> None:
    """ValueError naming the regions if ``t`` holds a transform they cannot follow."""
    for inner in _nested(t):
        if isinstance(inner, UNFOLLOWABLE):
            raise ValueError(
                f"the batch holds Regions, which {type(inner).__name__} cannot move: it changes "
                "the images' pixels by its own code (torchvision refuses BoundingBoxes and masks "
                "there for the same reason), so the regions would describe pixels that are no "
                f"longer where they say. Apply {type(inner).__name__} to a batch without regions "
                "(PadCollate(return_regions=False)), or use transforms that move them: flips, "
                "resizes, crops, pads, translate/scale affines"
            )


def _transform_structure(batch: Any, t: v2.Transform) -> Any:
    plain = is_plain_tensor(batch)
    if plain or not is_container(batch):
        images = tv_tensors.Image(batch) if plain else batch
        out = t(images)
        return out.as_subclass(torch.Tensor) if plain else out
    slot = image_slot(batch)
    if slot is None:
        raise TypeError(
            f"found no image in the batch ({type(batch).__name__}): give a tensor, or a "
            "tuple/list/dict holding a tv_tensors.Image, an 'image' key or a plain tensor"
        )
    image = batch[slot]
    wrapped = is_plain_tensor(image)
    out = t(replace(batch, slot, tv_tensors.Image(image) if wrapped else image))
    return replace(out, slot, out[slot].as_subclass(torch.Tensor)) if wrapped else out


def cuda_guard(device: torch.device, who: str) -> None:
    """Raise RuntimeError, naming the fix, where ``who`` must not build CUDA batches.

    Inside a DataLoader worker CUDA either cannot start at all (a forked worker: "Cannot
    re-initialize CUDA in forked subprocess") or would hand CUDA tensors across processes, which
    breaks ``pin_memory`` and leaks device memory; a process forked after CUDA started in its
    parent cannot use it either.
    """
    if device.type != "cuda":
        return
    forked = bool(getattr(torch.cuda, "_is_in_bad_fork", lambda: False)())
    if get_worker_info() is None and not forked:
        return
    where = "a DataLoader worker process" if get_worker_info() is not None else "a process"
    why = (
        "it was forked after CUDA started in its parent, so CUDA cannot be initialised here"
        if forked
        else "batches on the GPU must be built in the main process"
    )
    raise RuntimeError(
        f"{who} builds batches on {device} and was called in {where}: {why}. Fix: use "
        "tipad_transforms.data.PadCollate as collate_fn (CPU batches, fine in workers) and wrap "
        "the DataLoader in tipad_transforms.data.DeviceLoader(loader, device, transforms) to move "
        f"and augment the batches on the GPU; or keep {who} and set num_workers=0"
    )
