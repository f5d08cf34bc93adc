"""``PadCollate`` and ``GPUCollate``: collate samples of different sizes onto one padded canvas
(``functional.pad_stack``, one launch); targets follow their own sample's placement."""

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

    The border is a texture (``BrickPad``'s brick wall by default) or a standard mode; the whole
    batch is padded in one kernel launch. Works in DataLoader workers (CPU batches) and with
    ``pin_memory=True``; docs/data-loading.md shows it in use.

    Args:
        size: canvas ``(H, W)`` (an int is square) every sample must fit; ``None``: the batch's
            largest height and width.
        multiple: with ``size=None``, round the canvas up to a multiple of this (int or pair).
        placement: ``"top_left"``, ``"center"`` (an odd margin's extra pixel goes right/bottom)
            or ``"random"`` (uniform per sample).
        texture: the tile for ``padding_mode="texture"``: ``(th, tw)``, ``(C, th, tw)`` or
            ``(1, C, th, tw)``, converted as ``functional.texture_pad`` does; ``None``: the brick
            wall of ``functional.brick_pad`` (tile per dtype and channel count).
        padding_mode: ``"texture"`` or a standard mode of ``functional.pad``.
        stagger: the texture's row stagger (texture mode only); default the brick wall's running
            bond, or 0 for a given ``texture``.
        fill: constant mode's value (a number, or one per channel).
        mask_fill: border value of ``tv_tensors.Mask`` targets (e.g. 255 for "ignore").
        random_offset: texture mode: draw a lattice offset in ``[0, th) x [0, tw)`` per sample.
        return_regions: also return where each real image lies (a ``Regions``).
        generator: ``torch.Generator`` for the draws (default torch's global RNG). In a worker,
            a generator derived from it and the worker's seed draws, so workers and epochs
            differ and the same seeds repeat them, with every start method.

    Samples (``B`` of them) are images (tensor ``(C, h, w)`` or ``(h, w)``, ``tv_tensors.Image``,
    PIL image, numpy ``(h, w, C)`` or ``(h, w)`` read as ``v2.ToImage`` reads them) or tuples,
    lists or dicts holding one (the first ``tv_tensors.Image`` or PIL image, else a dict's
    ``"image"``, else the first plain tensor or array). The result has ``default_collate``'s
    structure, except:

    * the image: the padded batch ``(B, C, H, W)`` (``tv_tensors.Image`` if the samples held
      them), in the images' dtype and device;
    * tv_tensors with a ``canvas_size`` (``BoundingBoxes``, ``KeyPoints``, ``Regions``, any type
      with a ``functional.pad`` kernel): a list per sample, each moved by its sample's padding;
    * ``tv_tensors.Mask``: padded with ``mask_fill`` and stacked; a dict holding boxes or
      keypoints (a detection target) stays a list of per-sample dicts.

    With ``return_regions=True``, a ``Regions`` ``(B, 4)`` int64 of ``(top, left, h, w)`` on
    canvas ``(H, W)`` is appended (bare images: ``(images, regions)``; dicts: key ``"region"``).
    ``make_params(sizes)`` draws a batch's parameters; ``collate(samples, params=...)`` replays.

    Raises:
        TypeError / ValueError: at construction, naming the argument; at call time, naming the
            sample: an empty batch, samples of different structure, images unlike
            ``samples[0]``'s (rank, channels, dtype, device), larger than ``size``, or not
            images; targets not on their image's size; fields ``default_collate`` cannot stack.

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
        textured = self.padding_mode == "texture"
        for name, value in (("texture", texture), ("stagger", stagger)):
            if value is not None and not textured:
                raise ValueError(
                    f"{name} is for padding_mode='texture', got padding_mode={padding_mode!r}"
                )
        if texture is not None:
            _check_texture(texture)
            if as_bank(texture).shape[0] != 1:
                raise ValueError(
                    "texture must be one tile (th, tw), (C, th, tw) or (1, C, th, tw), got a bank "
                    f"of shape {tuple(texture.shape)}"
                )
        self.texture = texture
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

    def __call__(self, samples: Sequence[Any], *, params: dict[str, Any] | None = None) -> Any:
        """Collate ``samples`` (see the class docstring); ``params`` replays ``make_params``."""
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
        """The given texture (``pad_stack`` converts it) or the brick tile for ``image``."""
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
            shown = "brick" if t is None else f"Tensor(shape={list(t.shape)}, dtype={t.dtype})"
            parts += [f"texture={shown}", f"stagger={self.stagger}"]
            parts.append(f"random_offset={self.random_offset}")
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

    Each sample goes to ``device`` in one copy; the padding and ``transforms`` run there. In a
    DataLoader worker (CUDA cannot start there) it raises RuntimeError naming the fix. Do not
    combine with ``pin_memory=True``. ``device="cpu"`` runs the same code on the CPU.

    Args:
        device: where to build the batch (``"cuda"``: the current CUDA device).
        transforms: a callable or a sequence of callables applied in order to the padded batch,
            as ``DeviceLoader`` applies them.
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
        return apply_transforms(super().__call__(samples, params=params), self.transforms)

    def _repr_parts(self) -> list[str]:
        parts = [f"device={str(self.device)!r}", *super()._repr_parts()]
        if self.transforms:
            parts.append(f"transforms={list(self.transforms)!r}")
        return parts
