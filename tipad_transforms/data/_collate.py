"""``PadCollate`` and ``GPUCollate``: collate samples of different sizes onto one padded canvas.

The images of a batch are padded to one canvas size at a per-sample placement, with a texture
(the brick wall by default) or a standard mode, by ``functional.pad_stack`` (one kernel launch
for the whole batch); targets follow their own sample's placement (``_targets``).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import torch
from torchvision import tv_tensors

from .. import functional as F
from .._checks import (
    Number,
    check_flag,
    check_generator,
    check_int,
    check_mode,
    check_number,
    unreadable,
)
from .._seeding import GeneratorsPickleAsBytes
from ..functional._brick import brick_tile_size
from ..functional._convert import Fill, as_bank
from ..functional._pad import brick_tile
from ._device import Transforms, apply_transforms, check_device, check_transforms, cuda_guard
from ._regions import Regions
from ._sampler import CanvasSampler, check_params, generator_draw
from ._samples import REGION_KEY, read_samples
from ._targets import Canvas, collate_field

__all__ = ["GPUCollate", "PadCollate"]


def _check_fill(fill: Any) -> Fill:
    numbers = (int, float, bool)
    if isinstance(fill, numbers):
        return fill
    # bytes and str are sequences too (b"12" would read as the fill [49, 50]).
    if isinstance(fill, Sequence) and not isinstance(fill, (str, bytes, bytearray)):
        if all(isinstance(f, numbers) for f in fill):
            return list(fill)
    raise TypeError(f"fill must be a number or a sequence of numbers, got {fill!r}")


def _check_texture(texture: Any) -> None:
    """A dense tensor with data (the tile is read on every call); ``as_bank`` checks the rest."""
    if not isinstance(texture, torch.Tensor):
        return
    kind = unreadable(texture) or ("a meta tensor" if texture.is_meta else None)
    if kind is not None:
        raise TypeError(f"texture must be a dense tensor with data, got {kind}")


class PadCollate(GeneratorsPickleAsBytes):
    """``collate_fn`` for images of different sizes: pad each onto one canvas size, then stack.

    The border is a texture (the brick wall of ``BrickPad`` by default) or a standard mode, never
    bare zeros; all the batch's images are padded in one kernel launch. Use it as
    ``DataLoader(dataset, batch_size, collate_fn=PadCollate(...))``; it runs in worker processes
    (CPU batches; fork workers after the parent used Taichi pad with the torch route and warn
    once) and works with ``pin_memory=True``.

    Args:
        size: canvas ``(H, W)`` (an int is square), every sample must fit (ValueError naming the
            sample's index otherwise); ``None``: the batch's largest height and width.
        multiple: with ``size=None``, round the canvas up to a multiple of this (an int or
            ``(mh, mw)``), e.g. 32 for detectors.
        placement: where each image lies in its canvas: ``"top_left"``, ``"center"`` (the extra
            pixel of an odd margin goes right/bottom) or ``"random"`` (uniform per sample).
        texture: the tile for ``padding_mode="texture"``: ``(th, tw)``, ``(C, th, tw)`` or a
            one-texture bank ``(1, C, th, tw)``, converted to the images' dtype as
            ``functional.texture_pad`` does. ``None``: ``functional.brick_pad``'s brick wall
            (tile chosen per dtype and channel count, running-bond stagger).
        padding_mode: ``"texture"`` or a standard mode of ``functional.pad`` (``"constant"``
            with ``fill``, ``"edge"``, ``"reflect"``, ``"symmetric"``, ``"circular"``).
        stagger: the texture's row stagger; default the brick wall's running bond, or 0 for a
            given ``texture``. Texture mode only.
        fill: constant mode's value (a number, or one per channel).
        mask_fill: border value of ``tv_tensors.Mask`` targets (e.g. 255 for "ignore").
        random_offset: texture mode: draw a lattice offset ``(oy, ox)`` in ``[0, th) x [0, tw)``
            per sample, as ``BrickPad(random_offset=True)`` does. Ignored by standard modes.
        return_regions: also return where each real image lies (see below).
        generator: ``torch.Generator`` for the draws (placement, offsets); default torch's
            global RNG. In a DataLoader worker they come from a generator derived from it and
            the worker's seed: workers and epochs differ, the same seeds repeat them, with every
            start method (the generator reaches ``spawn`` workers as its state's bytes).

    Samples and what comes back (``B`` samples, canvas ``(H, W)``): each sample is an image
    (tensor ``(C, h, w)``, or ``(h, w)`` for all samples, becoming ``C = 1``; ``tv_tensors.Image``;
    PIL image, converted to a uint8 ``(C, h, w)`` tensor as ``v2.PILToTensor``; numpy array
    ``(h, w, C)`` or ``(h, w)`` as cv2 and Albumentations give them, read as ``v2.ToImage``
    reads them: ``(C, h, w)``, dtype kept, copied) or a tuple, list or dict holding one (the
    image is the first ``tv_tensors.Image`` or PIL image, else the ``"image"`` key of a dict,
    else the first plain tensor or numpy array). The result has
    ``torch.utils.data.default_collate``'s structure with:

    * the image replaced by the padded batch ``(B, C, H, W)`` (a ``tv_tensors.Image`` if the
      samples held ``tv_tensors.Image``), same dtype and device as the images;
    * tv_tensors with a ``canvas_size`` (``BoundingBoxes``, ``KeyPoints``, ``Regions``, any
      type with a ``functional.pad`` kernel): a list per sample, each moved by its kernel by
      its own sample's ``(left, top)`` onto ``canvas_size`` ``(H, W)``;
    * ``tv_tensors.Mask``: padded with ``mask_fill`` at its sample's placement and stacked; a
      dict holding boxes or keypoints (torchvision's detection target) stays a list of
      per-sample dicts, its masks padded but not stacked;
    * anything else: ``default_collate`` (a plain tensor or array of another size per sample
      is refused with a ``ValueError``; where it has its image's size, the message says to
      give masks as ``tv_tensors.Mask``).

    With ``return_regions=True`` the batch also says where each real image lies in its canvas:
    a ``Regions`` ``(B, 4)`` int64 tensor of ``(top, left, h, w)`` with ``canvas_size`` ``(H,
    W)`` (``images[i, :, top:top+h, left:left+w]`` is image ``i``), so a loss can mask the
    padding. Bare images give ``(images, regions)``; tuples/lists get it appended; dicts get it
    under the key ``"region"``. ``Regions`` follow every geometric transform applied later
    (``DeviceLoader``, ``GPUCollate`` transforms, ``v2.Compose``) as boxes do.

    ``make_params(sizes)`` draws a batch's parameters (``sampler``, shared with
    ``RayPadBatch``); ``collate(samples, params=...)`` replays them exactly.

    Raises:
        TypeError / ValueError: at construction, naming the argument; at call time, naming the
            sample: an empty batch, samples of different structure, images of another rank,
            channel count, dtype or device than ``samples[0]``'s, larger than a fixed
            ``size``, or not images; targets whose ``canvas_size`` or size is not their
            image's; fields that ``default_collate`` cannot stack.

    Examples:
        >>> import torch
        >>> from tipad_transforms.data import PadCollate
        >>> collate = PadCollate(multiple=8, placement="center")
        >>> samples = [(torch.zeros(3, 20, 30, dtype=torch.uint8), 0),
        ...            (torch.zeros(3, 25, 10, dtype=torch.uint8), 1)]
        >>> images, labels = collate(samples)
        >>> tuple(images.shape), labels.tolist()
        ((2, 3, 32, 32), [0, 1])
        >>> images, labels, regions = PadCollate(multiple=8, return_regions=True)(samples)
        >>> regions.tolist()
        [[6, 1, 20, 30], [3, 11, 25, 10]]
    """

    def __init__(
        self,
        size: int | tuple[int, int] | None = None,
        *,
        multiple: int | tuple[int, int] | None = None,
        placement: str = "center",
        texture: torch.Tensor | None = None,
        padding_mode: str = "texture",
        stagger: int | None = None,
        fill: Fill = 0,
        mask_fill: Number = 0,
        random_offset: bool = True,
        return_regions: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        self.padding_mode = "texture" if padding_mode == "texture" else check_mode(padding_mode)
        if texture is not None:
            if self.padding_mode != "texture":
                raise ValueError(
                    f"texture is for padding_mode='texture', got padding_mode={padding_mode!r}"
                )
            _check_texture(texture)
            bank = as_bank(texture)
            if bank.shape[0] != 1:
                raise ValueError(
                    "texture must be one tile (th, tw), (C, th, tw) or (1, C, th, tw), got a bank "
                    f"of shape {tuple(texture.shape)}"
                )
        self.texture = texture
        textured = self.padding_mode == "texture"
        if stagger is not None and not textured:
            raise ValueError(
                f"stagger is for padding_mode='texture', got padding_mode={padding_mode!r}"
            )
        if stagger is None:
            stagger = F.running_bond_stagger() if texture is None and textured else 0
        self.stagger = check_int(stagger, "stagger")
        self.fill = _check_fill(fill)
        self.mask_fill: Number = check_number(mask_fill, "mask_fill")
        self.random_offset = check_flag(random_offset, "random_offset")
        self.return_regions = check_flag(return_regions, "return_regions")
        self.generator = check_generator(generator)
        self.tile_size: tuple[int, int] = (
            brick_tile_size()
            if texture is None
            else (int(texture.shape[-2]), int(texture.shape[-1]))
        )
        drawn = self.tile_size if textured and self.random_offset else None
        #: The batch's parameter sampler (canvas, placements, lattice offsets).
        self.sampler = CanvasSampler(size, multiple, placement, drawn)
        # Where the batch is built: None keeps the samples' device (GPUCollate sets its own).
        self._device: torch.device | None = None

    size = property(attrgetter("sampler.size"))
    multiple = property(attrgetter("sampler.multiple"))
    placement = property(attrgetter("sampler.placement"))

    def canvas_size(self, sizes: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """The canvas ``(H, W)`` for images of ``sizes`` ``[(h, w), ...]``.

        Raises ValueError naming the first sample larger than a fixed ``size``; TypeError /
        ValueError naming ``sizes`` when it is not a non-empty list of ``(h, w)`` int pairs.
        """
        return self.sampler.canvas_size(sizes)

    def make_params(self, sizes: Sequence[tuple[int, int]]) -> dict[str, Any]:
        """Draw one batch's parameters for images of ``sizes`` ``[(h, w), ...]``.

        Returns ``{"size": (H, W), "placement": int64 (B, 2) (top, left), "offset": int64
        (B, 2) (oy, ox)}``, on the CPU. Draws, in this order: the placements (``"random"``),
        then the lattice offsets (texture mode with ``random_offset``).
        """
        return self.sampler.sample(sizes, generator_draw(self.generator))

    # -- collation ------------------------------------------------------------------------

    def __call__(self, samples: Sequence[Any], *, params: dict[str, Any] | None = None) -> Any:
        """Collate ``samples`` (see the class docstring); ``params`` replays ``make_params``."""
        return self._collate(samples, params)

    def _collate(self, samples: Sequence[Any], params: dict[str, Any] | None) -> Any:
        """The batch in ``default_collate``'s structure, the regions added (last, or under
        ``"region"``) when they were asked for."""
        read = read_samples(samples)
        sizes = read.sizes
        if params is None:
            params = self.make_params(sizes)
        size, placement, offset = check_params(params, len(sizes))
        images = read.images
        if self._device is not None:
            # One host-to-device copy per sample; everything after runs on the device.
            images = [im.to(self._device, non_blocking=True) for im in images]
        textured = self.padding_mode == "texture"
        padded = F.pad_stack(
            images, size, placement, self.fill, self.padding_mode, stagger=self.stagger,
            texture=self._texture_for(images[0]) if textured else None, offset=offset,
        )  # fmt: skip
        if read.tv_image:
            padded = tv_tensors.Image(padded)
        extra = []  # the regions, where asked for
        if self.return_regions:
            table = torch.cat([placement, torch.tensor(sizes, dtype=torch.int64)], dim=1)
            # Built (and checked) on the CPU, then one copy to the batch's device.
            extra.append(Regions(table, canvas_size=size).to(padded.device))
        if read.kind == "image":
            return (padded, *extra) if extra else padded
        canvas = Canvas(size, placement, sizes, self.mask_fill, self._device)
        like = read.containers[0]
        keys = list(like) if read.kind == "mapping" else range(len(like))
        fields = {
            k: padded
            if k == read.slot
            else collate_field([c[k] for c in read.containers], canvas, f"[{k!r}]")
            for k in keys
        }
        if read.kind == "mapping":
            return {**fields, REGION_KEY: extra[0]} if extra else fields
        return [*fields.values(), *extra]

    def _texture_for(self, image: torch.Tensor) -> torch.Tensor:
        """The texture for ``image``'s batch: the given one (``pad_stack`` converts it, cached)
        or ``brick_pad``'s brick tile for the image's dtype, device and channels."""
        if self.texture is not None:
            return self.texture.detach()
        channels = F.brick_channels(int(image.shape[0]))
        return brick_tile(image.dtype, image.device, channels=channels)

    def _repr_parts(self) -> list[str]:
        parts = [
            f"size={self.size}" if self.multiple is None else f"multiple={self.multiple}",
            f"placement={self.placement!r}",
            f"padding_mode={self.padding_mode!r}",
        ]
        if self.padding_mode == "texture":
            t = self.texture
            parts.append(
                "texture=brick"
                if t is None
                else f"texture=Tensor(shape={list(t.shape)}, dtype={t.dtype})"
            )
            parts += [f"stagger={self.stagger}", f"random_offset={self.random_offset}"]
        elif self.padding_mode == "constant":
            parts.append(f"fill={self.fill!r}")
        if self.mask_fill != 0:
            parts.append(f"mask_fill={self.mask_fill!r}")
        if self.return_regions:
            parts.append("return_regions=True")
        if self.generator is not None:
            parts.append(f"generator=torch.Generator(device={self.generator.device})")
        return parts

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self._repr_parts())})"


class GPUCollate(PadCollate):
    """``PadCollate`` that builds the batch on a CUDA device, for ``num_workers=0`` loaders.

    Each sample's image goes to ``device`` in one host-to-device copy (targets too); the padding
    (one launch) and ``transforms`` then run there. Called in a DataLoader worker (where a
    forked process cannot start CUDA), it raises RuntimeError naming the fix: ``PadCollate`` in
    the workers plus ``DeviceLoader``, or ``num_workers=0``. Do not combine with
    ``pin_memory=True`` (the batch is already on the device). ``device="cpu"`` runs the same
    code on the CPU (and then also in workers), so one script serves both.

    Args:
        device: where to build the batch (``"cuda"``: the current CUDA device).
        transforms: a callable or a sequence of callables applied in order to the padded
            batch on the device, e.g. ``BrickPad(8, random_offset=True)`` (one draw per sample,
            one launch), ``v2.RandomResizedCrop`` (targets and regions follow) or
            ``v2.Normalize``; see ``DeviceLoader`` for how a transform sees the batch.
        **kwargs: ``PadCollate``'s arguments.

    Returns: as ``PadCollate``, every tensor on ``device``.
    """

    def __init__(
        self,
        device: torch.device | str = "cuda",
        transforms: Transforms = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.device = check_device(device, available=True)
        self.transforms = check_transforms(transforms)
        self._device = self.device

    def __call__(self, samples: Sequence[Any], *, params: dict[str, Any] | None = None) -> Any:
        cuda_guard(self.device, type(self).__name__)
        # Transforms run on the assembled batch, so a padding transform's targets follow it.
        return apply_transforms(self._collate(samples, params), self.transforms)

    def _repr_parts(self) -> list[str]:
        parts = [f"device={str(self.device)!r}", *super()._repr_parts()]
        if self.transforms:
            parts.append(f"transforms={list(self.transforms)!r}")
        return parts
