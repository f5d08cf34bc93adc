"""``Regions``: where each real image lies in its padded canvas, a tv_tensor that follows pads.

``PadCollate(return_regions=True)`` returns one ``(B, 4)`` int64 row ``(top, left, height,
width)`` per sample. As a tv_tensor type of its own, registered with the padding functionals
(tipad's ``texture_pad``, ``brick_pad``, ``pad`` and torchvision's ``v2.functional.pad``), it
moves by ``(top, left)`` whenever a transform pads the batch it travels with: ``BrickPad``,
``TexturePad``, ``Pad`` or ``torchvision.transforms.v2.Pad`` in a ``DeviceLoader`` or
``GPUCollate``. Other transforms pass it through unchanged (a crop or flip leaves it stale).
This file is the whole of the type: a new input type is one file of registrations like it.
"""

from __future__ import annotations

from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as tvF

from .. import functional as F
from .._geometry import parse_padding

__all__ = ["Regions"]


class Regions(tv_tensors.TVTensor):
    """``(B, 4)`` int64 rows ``(top, left, height, width)``: ``images[i, :, top:top + height,
    left:left + width]`` is sample ``i``'s real image. A plain tensor otherwise (indexing and
    arithmetic return plain tensors, as for every tv_tensor)."""

    @classmethod
    def _wrap(cls, tensor: torch.Tensor) -> Regions:
        return tensor.as_subclass(cls)

    def __new__(
        cls,
        data: Any,
        *,
        dtype: torch.dtype | None = torch.int64,
        device: torch.device | str | int | None = None,
        requires_grad: bool | None = None,
    ) -> Regions:
        tensor = cls._to_tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
        if tensor.dim() != 2 or tensor.shape[-1] != 4:
            raise ValueError(f"Regions must have shape (B, 4), got {tuple(tensor.shape)}")
        return cls._wrap(tensor)


def _shifted(regions: torch.Tensor, padding: Any) -> torch.Tensor:
    left, top, _, _ = parse_padding(padding)
    return regions + regions.new_tensor([top, left, 0, 0])


@F.register_kernel(F.texture_pad, Regions)
def _texture_pad_regions(regions: torch.Tensor, padding: Any, *args: Any, **kw: Any) -> Any:
    return _shifted(regions, padding)


@F.register_kernel(F.brick_pad, Regions)
@F.register_kernel(F.pad, Regions)
def _pad_regions(regions: torch.Tensor, padding: Any, *args: Any, **kw: Any) -> Any:
    return _shifted(regions, padding)


@tvF.register_kernel(tvF.pad, Regions)
def _torchvision_pad_regions(regions: Regions, padding: Any, *args: Any, **kw: Any) -> Regions:
    # torchvision's own v2.Pad moves them too (its public registry for user tv_tensor types,
    # which hands the kernel the tv_tensor itself).
    return tv_tensors.wrap(_shifted(regions.as_subclass(torch.Tensor), padding), like=regions)
