"""``Regions``: where each real image lies in its canvas, a tv_tensor that follows geometry.

Every geometric functional of torchvision's v2 and tipad's padding functionals get a kernel
here: the regions go through torchvision's box kernel as float64 ``XYXY`` boxes, each edge then
rounded to the nearest pixel boundary (halves up). Where the image stops being an axis-aligned
rectangle (rotation by other than 90 degrees, shear, perspective, elastic) the kernel raises
``ValueError`` instead of returning the enclosing box. A new input type is one file like this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as tvF

from .. import functional as F
from .._checks import INT32_MAX, is_int, parse_padding
from ._sampler import check_pair, is_int_dtype

Canvas = tuple[int, int]


class Regions(tv_tensors.TVTensor):
    """``(B, 4)`` integer rows ``(top, left, height, width)`` on a canvas ``(H, W)``:
    ``images[i, :, top:top + height, left:left + width]`` is sample ``i``'s real image
    (``PadCollate(return_regions=True)`` returns them). Every geometric v2 transform moves them
    as it moves the pixels.

    Args:
        data: anything ``torch.as_tensor`` takes, of shape ``(B, 4)``.
        canvas_size: ``(H, W)`` of the images, as ``BoundingBoxes`` has it; ``None``: unknown
            (pads still move the rows; other geometric transforms raise ``ValueError``).
        dtype: an integer dtype (default int64); float data must hold whole numbers.
        device, requires_grad: as for any tv_tensor.

    As for every tv_tensor, indexing and arithmetic return plain tensors; ``.to()``,
    ``.clone()``, ``.detach()`` and pickling keep the type and ``canvas_size``.

    Raises:
        ValueError: not ``(B, 4)``; a negative height or width, a negative top or left, or a
            row that leaves the canvas; non-integer values; ``canvas_size`` negative or over
            ``2**31 - 1``.
        TypeError: a non-integer dtype; data that is no array of numbers; a bad device;
            ``canvas_size`` not a pair of ints.
    """

    canvas_size: Canvas | None

    @classmethod
    def _wrap(cls, tensor: torch.Tensor, *, canvas_size: Canvas | None) -> Regions:
        regions = tensor.as_subclass(cls)
        regions.canvas_size = canvas_size
        return regions

    def __new__(
        cls,
        data: Any,
        *,
        canvas_size: Sequence[int] | None = None,
        dtype: torch.dtype | None = torch.int64,
        device: torch.device | str | int | None = None,
        requires_grad: bool | None = None,
    ) -> Regions:
        try:
            canvas = None if canvas_size is None else check_pair(canvas_size, "canvas_size")
        except ValueError:
            raise ValueError(
                f"canvas_size must lie in [0, {INT32_MAX}], got {canvas_size!r}"
            ) from None
        if dtype is not None and not is_int_dtype(dtype):
            raise TypeError(f"Regions must have an integer dtype, got {dtype!r}")
        try:
            raw = torch.as_tensor(data)
            if device is not None:
                torch.device(device)  # a bad name raises here, not deep in a copy
        except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
            raise TypeError(
                f"Regions: data must be (B, 4) integers (a tensor or nested lists), and device a "
                f"torch device; got data of type {type(data).__name__}: {exc}"
            ) from exc
        if raw.is_floating_point() and raw.device.type != "meta":
            # Whole pixels only: a cast would truncate 0.5 to 0 without a word.
            if not bool(torch.isfinite(raw).all() and (raw == raw.round()).all()):
                raise ValueError("Regions must hold whole pixel counts, got non-integer values")
        tensor = cls._to_tensor(raw, dtype=dtype, device=device, requires_grad=requires_grad)
        if not is_int_dtype(tensor.dtype):
            raise TypeError(f"Regions must have an integer dtype, got {tensor.dtype}")
        if tensor.dim() != 2 or tensor.shape[-1] != 4:
            raise ValueError(f"Regions must have shape (B, 4), got {tuple(tensor.shape)}")
        _check_rows(tensor, canvas)
        return cls._wrap(tensor, canvas_size=canvas)

    @classmethod
    def wrap(cls, tensor: torch.Tensor, like: Regions, **kwargs: Any) -> Regions:
        """``tensor`` as ``Regions`` with ``like``'s ``canvas_size`` (or ``kwargs``')."""
        return cls._wrap(tensor, canvas_size=kwargs.get("canvas_size", like.canvas_size))

    @classmethod
    def _wrap_output(
        cls,
        output: torch.Tensor,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> torch.Tensor:
        # The ops that keep the type (.to, .clone, .detach, ...) lost the metadata on the way:
        # take it from the first Regions among the arguments, as BoundingBoxes does.
        values = [*args, *(kwargs or {}).values()]
        flat = [v for x in values for v in (x if isinstance(x, (tuple, list)) else (x,))]
        canvas = next((x.canvas_size for x in flat if isinstance(x, Regions)), None)
        if isinstance(output, torch.Tensor) and not isinstance(output, Regions):
            return cls._wrap(output, canvas_size=canvas)
        if isinstance(output, (tuple, list)):
            return type(output)(cls._wrap(part, canvas_size=canvas) for part in output)  # type: ignore[return-value]
        return output

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return self._make_repr(canvas_size=self.canvas_size)


def _check_rows(rows: torch.Tensor, canvas: Canvas | None) -> None:
    if rows.numel() == 0 or rows.device.type == "meta":  # meta: no values to check
        return
    top, left, h, w = rows.detach().to("cpu", torch.int64).unbind(-1)
    if bool((h < 0).any() | (w < 0).any()):
        raise ValueError("Regions must have heights and widths >= 0 (rows are (top, left, h, w))")
    if bool((top < 0).any() | (left < 0).any()):
        raise ValueError("Regions must have top and left >= 0 (rows are (top, left, h, w))")
    if canvas is not None and bool(((top + h) > canvas[0]).any() | ((left + w) > canvas[1]).any()):
        raise ValueError(f"a row of Regions leaves its canvas_size {canvas}")


def _as_boxes(regions: Regions, what: str) -> tv_tensors.BoundingBoxes:
    """``regions`` as float64 ``XYXY`` boxes on their canvas."""
    if regions.canvas_size is None:
        raise ValueError(
            f"Regions without a canvas_size cannot follow {what}: give it the images' size, "
            "Regions(rows, canvas_size=(H, W)) (PadCollate's regions have it)"
        )
    top, left, h, w = regions.as_subclass(torch.Tensor).to(torch.float64).unbind(-1)
    xyxy = torch.stack([left, top, left + w, top + h], dim=-1)
    return tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=regions.canvas_size)


def _from_boxes(boxes: tv_tensors.BoundingBoxes, like: Regions) -> Regions:
    """``XYXY`` boxes back as ``like``'s rows, each edge on the nearest pixel boundary."""
    x1, y1, x2, y2 = torch.floor(boxes.as_subclass(torch.Tensor) + 0.5).unbind(-1)
    rows = torch.stack([y1, x1, (y2 - y1).clamp_min(0), (x2 - x1).clamp_min(0)], dim=-1)
    canvas = (int(boxes.canvas_size[0]), int(boxes.canvas_size[1]))
    return Regions._wrap(rows.to(like.dtype), canvas_size=canvas)


def _name(functional: Callable[..., Any]) -> str:
    return f"torchvision.transforms.v2.functional.{functional.__name__}"


def _via_boxes(functional: Callable[..., Any]) -> None:
    """Register for ``functional`` the kernel that runs it on the regions as boxes."""

    @tvF.register_kernel(functional, Regions)
    def kernel(regions: Regions, *args: Any, **kwargs: Any) -> Regions:
        return _from_boxes(
            functional(_as_boxes(regions, _name(functional)), *args, **kwargs), regions
        )


for _functional in (
    tvF.horizontal_flip,
    tvF.vertical_flip,
    tvF.resize,
    tvF.crop,
    tvF.center_crop,
    tvF.resized_crop,
):
    _via_boxes(_functional)


def _refuse(what: str, why: str) -> ValueError:
    return ValueError(
        f"Regions cannot follow {what}: {why}, so the image's pixels no longer fill an "
        "axis-aligned rectangle that a (top, left, height, width) row could describe. Leave the "
        "regions out of the batch for this transform (PadCollate(return_regions=False), or take "
        "them out before it), or keep to transforms that keep rectangles: flips, resizes, crops, "
        "pads, affine with translate/scale only, rotations by multiples of 90 degrees"
    )


def _rectangles_only(functional: Callable[..., Any], why: str) -> None:
    """Register for ``functional`` (affine, rotate, perspective: lines to lines) the kernel that
    moves the corners as ``KeyPoints`` first: only if each lands on a corner of their enclosing
    box is the image still an axis-aligned rectangle, which the boxes' kernel then gives."""

    @tvF.register_kernel(functional, Regions)
    def kernel(regions: Regions, *args: Any, **kwargs: Any) -> Regions:
        boxes = _as_boxes(regions, _name(functional))
        x1, y1, x2, y2 = boxes.as_subclass(torch.Tensor).unbind(-1)
        corners = torch.stack([x1, y1, x2, y1, x2, y2, x1, y2], dim=-1).reshape(-1, 2)
        points = tv_tensors.KeyPoints(corners, canvas_size=boxes.canvas_size)
        moved = functional(points, *args, **kwargs).as_subclass(torch.Tensor).reshape(-1, 4, 2)
        low, high = moved.amin(dim=1, keepdim=True), moved.amax(dim=1, keepdim=True)
        # float64 corners: exact maps (90-degree turns, scales) are off by ~1e-13 pixels.
        tol = 1e-6 * max(1, *boxes.canvas_size)
        on_box = ((moved - low).abs() <= tol) | ((moved - high).abs() <= tol)
        if not bool(on_box.all()):
            raise _refuse(_name(functional), why)
        return _from_boxes(functional(boxes, *args, **kwargs), regions)


_rectangles_only(tvF.affine, "this affine map rotates or shears the canvas")
_rectangles_only(tvF.rotate, "this rotation is not a multiple of 90 degrees")
_rectangles_only(tvF.perspective, "this perspective map bends the canvas's rectangles")


@tvF.register_kernel(tvF.elastic, Regions)
def _elastic_regions(regions: Regions, displacement: torch.Tensor, *args: Any, **kw: Any) -> Any:
    # Only a zero displacement (the identity) keeps the region a rectangle.
    if bool(displacement.ne(0).any()):
        raise _refuse(_name(tvF.elastic), "an elastic displacement bends every straight edge")
    return regions.clone()


@F.register_kernel(F.texture_pad, Regions, wrap=False)
@F.register_kernel(F.brick_pad, Regions, wrap=False)
@F.register_kernel(F.pad, Regions, wrap=False)
@tvF.register_kernel(tvF.pad, Regions)
def _pad_regions(regions: Regions, padding: Any, *args: Any, **kw: Any) -> Regions:
    # Every padding mode puts the image at the same place; only the border differs.
    padding = parse_padding(padding)
    if regions.canvas_size is None:  # the rows move; the canvas stays unknown
        left, top, _, _ = padding
        shifted = regions.as_subclass(torch.Tensor) + regions.new_tensor([top, left, 0, 0])
        return Regions._wrap(shifted, canvas_size=None)
    boxes = tvF.pad(_as_boxes(regions, "pad"), list(padding), padding_mode="constant")
    return _from_boxes(boxes, regions)


def _crop_size(size: Any) -> tuple[int, int]:
    """torchvision's five/ten-crop ``size``: an int, ``[s]`` or ``[h, w]``."""
    size = [size] if is_int(size) else size
    if isinstance(size, (tuple, list)) and len(size) in (1, 2) and all(is_int(s) for s in size):
        return int(size[0]), int(size[-1])
    raise ValueError(f"Please provide only two dimensions (h, w) for size, got {size!r}")


def _five(regions: Regions, size: Any) -> tuple[Regions, ...]:
    """The regions in ``five_crop``'s five crops (corners, then centre)."""
    ch, cw = _crop_size(size)
    boxes = _as_boxes(regions, _name(tvF.five_crop))
    height, width = boxes.canvas_size
    if ch > height or cw > width:
        raise ValueError(f"Requested crop size {size} is bigger than input size {(height, width)}")
    corners = [(0, 0), (0, width - cw), (height - ch, 0), (height - ch, width - cw)]
    crops = [tvF.crop(boxes, top, left, ch, cw) for top, left in corners]
    crops.append(tvF.center_crop(boxes, [ch, cw]))
    return tuple(_from_boxes(c, regions) for c in crops)


tvF.register_kernel(tvF.five_crop, Regions)(_five)


@tvF.register_kernel(tvF.ten_crop, Regions)
def _ten_crop_regions(regions: Regions, size: Any, vertical_flip: bool = False) -> Any:
    flip = tvF.vertical_flip if vertical_flip else tvF.horizontal_flip
    return _five(regions, size) + _five(flip(regions), size)
