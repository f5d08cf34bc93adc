"""Collating everything beside the image: targets follow their own sample's placement.

A tv_tensor with a ``canvas_size`` is moved by the ``functional.pad`` kernel registered for its
type (the registry ``Pad`` and ``BrickPad`` use) and stays a list per sample (samples hold
different numbers of objects); ``tv_tensors.Mask`` values are padded in one ``pad_stack`` launch
and stacked; a dict holding boxes or keypoints (a detection target, fields of a length per
object) stays a list of per-sample dicts; the rest goes through ``default_collate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate
from torchvision import tv_tensors

from .. import functional as F
from ._tree import check_alike, rebuild, to_device


def on_canvas(value: Any) -> bool:
    """Whether ``value`` is a tv_tensor with a ``canvas_size`` (boxes, keypoints, regions)."""
    return isinstance(value, tv_tensors.TVTensor) and hasattr(value, "canvas_size")


@dataclass(frozen=True)
class Canvas:
    """Where each sample lies: canvas ``size``, ``placement`` ``(B, 2)`` int64 ``(top, left)``,
    image ``sizes``; ``device``: where the batch is built (None: where the samples are)."""

    size: tuple[int, int]
    placement: torch.Tensor
    sizes: list[tuple[int, int]]
    mask_fill: int | float | bool
    device: torch.device | None

    def padding(self, i: int) -> list[int]:
        """``[left, top, right, bottom]`` of sample ``i``."""
        top, left = (int(v) for v in self.placement[i])
        h, w = self.sizes[i]
        return [left, top, self.size[1] - left - w, self.size[0] - top - h]

    def move(self, value: Any) -> Any:
        return value if self.device is None else to_device(value, self.device, non_blocking=True)


def collate_field(values: list[Any], canvas: Canvas, path: str, *, stack: bool = True) -> Any:
    """Collate ``values`` (one per sample) found at ``path``; ``stack=False`` keeps one value
    per sample (a per-sample target dict's fields). ValueErrors name the sample and path."""
    first = values[0]
    kind = type(first) if isinstance(first, tv_tensors.TVTensor) else None
    for cls in (kind, Mapping, tuple, list):
        if cls is not None and isinstance(first, cls):
            for i, v in enumerate(values):
                check_alike(v, first, i, path, alike=isinstance(v, cls))
            break
    if on_canvas(first):
        return [_moved(v, canvas, i, path) for i, v in enumerate(values)]
    if isinstance(first, tv_tensors.Mask):
        masks = _pad_masks(values, canvas, path)
        return tv_tensors.Mask(torch.stack(masks)) if stack else masks
    if isinstance(first, Mapping):
        return _collate_mappings(values, canvas, path, stack)
    if isinstance(first, (tuple, list)):
        fields = [
            collate_field([v[j] for v in values], canvas, f"{path}[{j}]", stack=stack)
            for j in range(len(first))
        ]
        if stack:
            return rebuild(first, fields) if hasattr(first, "_fields") else fields
        return [rebuild(first, [f[i] for f in fields]) for i in range(len(values))]
    if not stack:
        return [canvas.move(v) for v in values]
    _check_stackable(values, canvas, path)
    try:
        return canvas.move(default_collate(values))
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"cannot collate samples[*]{path}: {exc}") from exc


def _check_stackable(values: list[Any], canvas: Canvas, path: str) -> None:
    """ValueError for tensors or arrays of different shapes (before ``default_collate``'s
    cryptic one), naming ``tv_tensors.Mask`` where each has its own image's size."""
    if not all(isinstance(v, (torch.Tensor, np.ndarray)) for v in values):
        return
    shapes = [tuple(v.shape) for v in values]
    if len(set(shapes)) == 1:
        return
    first = next(i for i, s in enumerate(shapes) if s != shapes[0])
    if all(len(s) >= 2 and s[-2:] == canvas.sizes[i] for i, s in enumerate(shapes)):
        why = (
            "each its own image's size: if these are segmentation masks, wrap them as "
            "torchvision.tv_tensors.Mask (e.g. tv_tensors.Mask(torch.as_tensor(mask))) and "
            "PadCollate pads each onto the canvas with mask_fill"
        )
    else:
        why = "default_collate stacks only equal shapes (masks go as tv_tensors.Mask)"
    raise ValueError(
        f"cannot collate samples[*]{path}: samples[{first}]{path} has shape {shapes[first]}, "
        f"samples[0]{path} {shapes[0]}: {why}"
    )


def _collate_mappings(values: list[Any], canvas: Canvas, path: str, stack: bool) -> Any:
    keys = list(values[0])
    # A dict holding boxes or keypoints is one sample's annotations: keep it per sample.
    per_sample = not stack or any(on_canvas(x) for v in values for x in v.values())
    fields = {
        k: collate_field([v[k] for v in values], canvas, f"{path}[{k!r}]", stack=not per_sample)
        for k in keys
    }
    if per_sample:
        return [{k: fields[k][i] for k in keys} for i in range(len(values))]
    return fields


def _moved(value: Any, canvas: Canvas, i: int, path: str) -> Any:
    """Sample ``i``'s ``value`` moved onto the canvas by ``functional.pad``'s kernel for it."""
    size = canvas.sizes[i]
    if value.canvas_size is not None and tuple(value.canvas_size) != size:
        raise ValueError(
            f"samples[{i}]{path}: {type(value).__name__} canvas_size {tuple(value.canvas_size)} "
            f"is not the image's size {size}"
        )
    return F.pad(canvas.move(value), canvas.padding(i), fill=canvas.mask_fill)


def _pad_masks(masks: list[Any], canvas: Canvas, path: str) -> list[tv_tensors.Mask]:
    """Each ``(..., h_i, w_i)`` mask padded to the canvas at its sample's placement, in one
    launch: as ``(P, h_i, w_i)`` images where the leading shapes agree, else plane by plane."""
    planes: list[torch.Tensor] = []
    for i, m in enumerate(masks):
        plain = canvas.move(m).as_subclass(torch.Tensor)
        if plain.dim() < 2 or tuple(plain.shape[-2:]) != canvas.sizes[i]:
            raise ValueError(
                f"samples[{i}]{path}: the mask's shape {tuple(plain.shape)} must end with the "
                f"image's size {canvas.sizes[i]}"
            )
        if planes and (plain.dtype != planes[0].dtype or plain.device != planes[0].device):
            raise ValueError(
                f"samples[{i}]{path}: the mask is {plain.dtype} on {plain.device}, samples[0]'s "
                f"{planes[0].dtype} on {planes[0].device}"
            )
        planes.append(plain)
    leads = [tuple(p.shape[:-2]) for p in planes]
    flat = [p.reshape(-1, *p.shape[-2:]) for p in planes]
    counts = [f.shape[0] for f in flat]
    if len(set(leads)) == 1 and counts[0] > 0:
        images, where = flat, canvas.placement
    else:
        images = [plane[None] for f in flat for plane in f]
        where = canvas.placement.repeat_interleave(torch.tensor(counts), dim=0)
    out_h, out_w = canvas.size
    if images:
        try:
            padded = F.pad_stack(images, canvas.size, where, fill=canvas.mask_fill)
        except ValueError as exc:
            raise ValueError(
                f"cannot pad samples[*]{path} with mask_fill={canvas.mask_fill!r}: {exc}"
            ) from exc
    else:
        padded = planes[0].new_empty((0, 1, out_h, out_w))
    if images is flat:
        result = list(padded.unbind(0))
    else:
        result = list(padded.reshape(-1, out_h, out_w).split(counts))
    return [
        tv_tensors.Mask(r.reshape(*lead, out_h, out_w))
        for r, lead in zip(result, leads, strict=True)
    ]
