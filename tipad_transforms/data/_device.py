"""Arguments shared by ``GPUCollate`` and ``DeviceLoader``: the device, the batch transforms,
and the guard against building CUDA batches where CUDA cannot run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import get_worker_info
from torchvision import tv_tensors
from torchvision.transforms import v2

from .._compat import torch as ctorch
from ._regions import Regions
from ._targets import on_canvas
from ._tree import (
    apply_to_image,
    find_image,
    image_slot,
    is_container,
    is_plain_tensor,
    iter_tensors,
    rebuild,
    replace,
)

Transforms = Callable[[Any], Any] | Sequence[Callable[[Any], Any]] | None


def check_device(device: Any, *, available: bool = False) -> torch.device:
    """``device`` as a ``torch.device``, or TypeError/ValueError naming ``device``; with
    ``available``, RuntimeError for a CUDA device on a machine without CUDA."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a torch.device or a str, got {type(device).__name__}")
    try:
        device = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device must name a torch device, got {device!r}") from exc
    if available and device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {device} was requested but CUDA is not available; pass device='cpu' on "
            "this machine (the same code runs on the CPU, without streams)"
        )
    return device


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
    """``batch`` with ``transforms`` applied in order, as ``DeviceLoader`` describes (a plain
    image batch is wrapped as ``tv_tensors.Image`` for a v2 transform and unwrapped after).
    ValueError naming the regions where a batch holding ``Regions`` meets ``UNFOLLOWABLE``."""
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


def check_followable(t: Any) -> None:
    """ValueError naming the regions if ``t`` is or holds (``Compose``, ``RandomApply``, ...
    keep theirs in ``transforms``, ``PerSample`` in ``inner``) a transform they cannot follow."""
    stack = [t]
    while stack:
        current = stack.pop()
        if isinstance(current, UNFOLLOWABLE):
            name = type(current).__name__
            raise ValueError(
                f"the batch holds Regions, which {name} cannot move: it changes the images' "
                "pixels by its own code (torchvision refuses BoundingBoxes and masks there for "
                "the same reason), so the regions would describe pixels that are no longer where "
                f"they say. Apply {name} to a batch without regions "
                "(PadCollate(return_regions=False)), or use transforms that move them: flips, "
                "resizes, crops, pads, translate/scale affines"
            )
        inner = getattr(current, "transforms", None)
        if isinstance(inner, (Sequence, torch.nn.ModuleList)) and not isinstance(inner, str):
            stack.extend(inner)
        if isinstance(current, PerSample):
            stack.append(current.inner)


def _transform_structure(batch: Any, t: v2.Transform) -> Any:
    plain = is_plain_tensor(batch)
    if plain or not is_container(batch):
        out = t(tv_tensors.Image(batch) if plain else batch)
        return _unwrap(out) if plain else out
    slot = find_image(batch)
    image = batch[slot]
    wrapped = is_plain_tensor(image)
    # Always through `replace`: it rebuilds a Mapping as a dict, which torchvision's pytree
    # walks (a dict subclass or a UserDict would pass through the transform as one leaf).
    out = t(replace(batch, slot, tv_tensors.Image(image) if wrapped else image))
    return replace(out, slot, _unwrap(out[slot])) if wrapped else out


def _unwrap(value: Any) -> Any:
    """The images a transform returned for a plain image, plain again (``FiveCrop`` returns a
    tuple of them)."""
    if isinstance(value, torch.Tensor):
        return value.as_subclass(torch.Tensor)
    if isinstance(value, (tuple, list)):
        return rebuild(value, [_unwrap(v) for v in value])
    return value


def cuda_guard(device: torch.device, who: str) -> None:
    """Raise RuntimeError, naming the fix, where ``who`` must not build CUDA batches: in a
    DataLoader worker (a forked one cannot start CUDA; CUDA tensors crossing processes break
    ``pin_memory`` and leak memory) or a process forked after CUDA started in its parent."""
    if device.type != "cuda":
        return
    forked = ctorch.in_bad_fork()
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


class PerSample(v2.Transform):
    """Apply ``transform`` to each sample of a batch on its own: one random draw per sample.

    A v2 transform draws once per call, so on a batch every image flips or none does; wrapped in
    ``PerSample`` it is called once per sample (Kornia's ``same_on_batch=False``), anywhere a v2
    transform goes. (``BrickPad`` and ``TexturePad`` draw per sample already, in one launch.)

    The batch (``B``: its image's first size) is split: tensors of first size ``B`` (images,
    masks, labels) and ``Regions`` into rows, lists or tuples of ``B`` per-sample values
    (``PadCollate``'s boxes and target dicts) into elements, other tuples, lists and dicts
    element by element; the transformed samples are stacked back into the batch's structure.

    Args:
        transform: a v2 transform (or any callable on an image); kept as ``inner``.

    Raises:
        TypeError: ``transform`` not callable.
        ValueError: at call time, naming the element: a batch without a ``(B, C, H, W)`` image;
            an element that does not split into ``B`` samples; samples that come back with
            different shapes or canvases.
    """

    def __init__(self, transform: Callable[..., Any]) -> None:
        super().__init__()
        if not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        # Not "transform": v2.Transform's own method of that name would shadow it.
        self.inner = transform

    def forward(self, *inputs: Any) -> Any:
        batch = inputs if len(inputs) > 1 else inputs[0]
        slot = image_slot(batch) if is_container(batch) else None
        image = batch if slot is None else batch[slot]
        if not isinstance(image, torch.Tensor) or image.dim() != 4:
            shape = tuple(image.shape) if isinstance(image, torch.Tensor) else None
            raise ValueError(
                "PerSample needs a batch whose image is (B, C, H, W) (a tensor, or a "
                f"tuple/list/dict holding one), got {type(batch).__name__} with image {shape}"
            )
        n = int(image.shape[0])
        if n == 0:
            return batch  # no sample, no draw
        outs = [apply_transforms(s, (self.inner,)) for s in _split(batch, n, "batch", top=True)]
        return _join(batch, outs, "batch", self.inner, top=True)

    def extra_repr(self) -> str:
        return "" if isinstance(self.inner, torch.nn.Module) else repr(self.inner)


def _is_per_sample_list(value: Sequence[Any], n: int, top: bool) -> bool:
    # A collated tuple field holds tensors of the whole batch; PadCollate's per-sample lists
    # hold boxes, keypoints, dicts (or strings, numbers). The batch itself never is one.
    return (
        not top
        and len(value) == n
        and not all(isinstance(v, torch.Tensor) and not on_canvas(v) for v in value)
    )


def _split(value: Any, n: int, path: str, *, top: bool = False) -> list[Any]:
    """``value`` (found at ``path``) as ``n`` per-sample values; ``_join`` puts them back."""
    if on_canvas(value) and not isinstance(value, Regions):
        raise ValueError(
            f"PerSample cannot split {path}: a {type(value).__name__} tensor holds one image's "
            "objects; give them per sample (a list of one per image, as PadCollate does)"
        )
    if isinstance(value, torch.Tensor):
        if value.dim() == 0 or value.shape[0] != n:
            raise ValueError(
                f"PerSample cannot split {path} (shape {tuple(value.shape)}) into the batch's "
                f"{n} samples: its first size must be {n}"
            )
        plain = value.as_subclass(torch.Tensor)
        if isinstance(value, Regions):
            return [Regions.wrap(plain[i : i + 1], like=value) for i in range(n)]
        if isinstance(value, tv_tensors.TVTensor):
            return [tv_tensors.wrap(plain[i], like=value) for i in range(n)]
        return list(plain.unbind(0))
    if isinstance(value, Mapping):
        parts = {k: _split(v, n, f"{path}[{k!r}]") for k, v in value.items()}
        return [{k: parts[k][i] for k in value} for i in range(n)]
    if isinstance(value, (tuple, list)):
        if _is_per_sample_list(value, n, top):
            return list(value)
        columns = [_split(v, n, f"{path}[{j}]") for j, v in enumerate(value)]
        return [rebuild(value, [c[i] for c in columns]) for i in range(n)]
    raise ValueError(
        f"PerSample cannot split {path} ({type(value).__name__}) into the batch's {n} samples: "
        "give tensors of first size B, lists of B values, or tuples/lists/dicts of those"
    )


def _join(like: Any, values: list[Any], path: str, t: Any, *, top: bool = False) -> Any:
    """The per-sample ``values`` put back into the structure of ``like`` (what ``_split``
    split)."""
    if isinstance(like, Mapping):
        return {k: _join(v, [s[k] for s in values], f"{path}[{k!r}]", t) for k, v in like.items()}
    if isinstance(like, (tuple, list)):
        if _is_per_sample_list(like, len(values), top):
            return rebuild(like, values)
        return rebuild(
            like, [_join(v, [s[j] for s in values], f"{path}[{j}]", t) for j, v in enumerate(like)]
        )
    first = values[0]
    if not all(isinstance(v, torch.Tensor) for v in values):
        raise ValueError(
            f"PerSample({t!r}) turned the samples' {path} into {type(first).__name__}: the "
            "transform must keep each sample's structure (a tensor stays a tensor)"
        )
    shapes = {tuple(v.shape) for v in values}
    canvases = {getattr(v, "canvas_size", None) for v in values}
    if len(shapes) > 1 or len(canvases) > 1:
        raise ValueError(
            f"PerSample({t!r}) gave the samples' {path} different shapes or canvases "
            f"({sorted(map(str, shapes | canvases - {None}))}), which do not stack into one "
            "batch: end the per-sample transforms with one that gives one size, e.g. "
            "v2.RandomResizedCrop(size), v2.Resize((h, w)) or v2.CenterCrop(size)"
        )
    plain = [v.as_subclass(torch.Tensor) for v in values]
    out = torch.cat(plain) if isinstance(first, Regions) else torch.stack(plain)
    return tv_tensors.wrap(out, like=first) if isinstance(first, tv_tensors.TVTensor) else out
