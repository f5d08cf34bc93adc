"""Arguments shared by ``GPUCollate`` and ``DeviceLoader``: the device, the batch transforms,
and the guard against building CUDA batches where CUDA cannot run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import get_worker_info
from torchvision import tv_tensors

from ..transforms import _TexturedPad
from ._samples import REGION_KEY
from ._tree import apply_to_image, image_slot, is_container, is_plain_tensor, rebuild

__all__ = [
    "Transforms",
    "apply_transforms",
    "check_device",
    "check_transforms",
    "cuda_guard",
    "follow_padding",
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
    """``batch`` with ``transforms`` applied in order to its image (``_tree``'s rule).

    A tipad padding transform (``BrickPad``, ``TexturePad``) grows the canvas, so the rest of
    a ``PadCollate`` batch follows it: the regions move by ``(top, left)``, boxes and keypoints
    are shifted and their ``canvas_size`` grown, masks get the border of ``mask_fill``. Other
    transforms see the image only.
    """
    for t in transforms:
        batch = apply_to_image(batch, t)
        if isinstance(t, _TexturedPad):
            batch = follow_padding(batch, t)
    return batch


def follow_padding(batch: Any, t: _TexturedPad) -> Any:
    """The targets of a ``PadCollate`` batch after ``t`` padded its image batch."""
    left, top = t.padding[0], t.padding[1]
    slot = image_slot(batch) if is_container(batch) else None

    def targets(value: Any) -> Any:
        if isinstance(value, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints, tv_tensors.Mask)):
            return t.transform(value, {})  # these types read no random parameters
        if isinstance(value, Mapping):
            return {k: targets(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return rebuild(value, [targets(v) for v in value])
        return value

    if slot is None:
        return batch
    items = dict(batch) if isinstance(batch, Mapping) else dict(enumerate(batch))
    for key, value in items.items():
        if key != slot:
            items[key] = targets(value)
    # Regions: under "region" in a dict batch, else the last element of a tuple/list batch,
    # an int64 (B, 4) tensor of (top, left, height, width).
    where = REGION_KEY if isinstance(batch, Mapping) else len(items) - 1
    regions = items.get(where)
    if (
        where != slot
        and isinstance(regions, torch.Tensor)
        and is_plain_tensor(regions)
        and regions.dtype == torch.int64
        and regions.dim() == 2
        and regions.shape[-1] == 4
    ):
        items[where] = regions + regions.new_tensor([top, left, 0, 0])
    if isinstance(batch, Mapping):
        return items
    return rebuild(batch, [items[i] for i in range(len(items))])


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
