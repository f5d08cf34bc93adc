"""Arguments shared by ``GPUCollate`` and ``DeviceLoader``: the device, the batch transforms,
and the guard against building CUDA batches where CUDA cannot run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import get_worker_info

from ._tree import apply_to_image

__all__ = ["Transforms", "apply_transforms", "check_device", "check_transforms", "cuda_guard"]

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
    """``batch`` with ``transforms`` applied in order to its image (``_tree``'s rule)."""
    for t in transforms:
        batch = apply_to_image(batch, t)
    return batch


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
