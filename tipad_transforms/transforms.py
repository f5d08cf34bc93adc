"""torchvision v2 transforms over the padding functionals: ``TexturePad`` and ``BrickPad``.

Both are thin ``torchvision.transforms.v2.Transform`` subclasses in torchvision's own style
(``__init__`` validates and stores, ``make_params`` draws the randomness, ``transform`` calls the
functional), with Kornia-style explicit parameters: ``make_params`` returns a plain dict that
``transform(inpt, params)`` replays exactly, so one draw can be applied again to other inputs.

What each input type gets, with padding ``(left, top, right, bottom)``:

* PIL images, plain tensors, ``tv_tensors.Image`` and ``tv_tensors.Video``: the texture border
  (``tipad_transforms.functional.texture_pad``). PIL images come back as PIL in their own mode,
  tv_tensors as the same type. Plain tensors follow torchvision's rule: with an explicit image
  or video in the sample they pass through untouched, otherwise the first one is the image.
* ``tv_tensors.Mask``: a constant border of ``mask_fill`` (``tipad_transforms.functional.pad``).
* ``tv_tensors.BoundingBoxes`` (every format, rotated ones included) and
  ``tv_tensors.KeyPoints``: shifted by ``(left, top)``, ``canvas_size`` grown by the padding
  (``torchvision.transforms.v2.functional.pad``, constant mode).
* Anything else (other tv_tensors, numbers, strings, ...): passed through, as torchvision does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import PIL.Image
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as tvF

from . import functional as F
from ._checks import (
    Number,
    check_flag,
    check_generator,
    check_mask_fill,
    check_offset,
    check_stagger,
)
from ._geometry import image_channels, parse_padding
from ._seeding import worker_generator
from .functional._brick import brick_channels
from .functional._pad import Padding, _texture_bank, as_bank
from .functional._pil import pil_apply

__all__ = ["BrickPad", "TexturePad"]

Offset = int | Sequence[int]


def _is_pure_tensor(inpt: Any) -> bool:
    return isinstance(inpt, torch.Tensor) and not isinstance(inpt, tv_tensors.TVTensor)


def _sample_shape(flat_inputs: list[Any]) -> tuple[int, ...]:
    """Leading (batch) dims shared by the images and videos of one call.

    An image ``(..., C, H, W)`` has one sample per leading index; a video ``(..., T, C, H, W)``
    one per clip, so that its frames share one draw and the border does not flicker.
    """
    shapes: set[tuple[int, ...]] = set()
    for inpt in flat_inputs:
        if isinstance(inpt, PIL.Image.Image):
            shapes.add(())
        elif isinstance(inpt, tv_tensors.Video):
            shapes.add(tuple(inpt.shape[:-4]))
        elif isinstance(inpt, tv_tensors.Image) or _is_pure_tensor(inpt):
            shapes.add(tuple(inpt.shape[:-3]))
    if len(shapes) > 1:
        raise ValueError(
            "the images and videos of one call must share their leading (batch) dims to draw "
            f"one random offset per sample, got {sorted(shapes)}"
        )
    return shapes.pop() if shapes else ()


def _per_clip(value: Any, video: bool, trailing: int) -> Any:
    """Per-clip params ``(*S, *trailing dims)`` of a video -> ``(*S, 1, ...)``, one per frame.

    Inserting the time dim lets the functional broadcast one draw over the clip's frames; params
    without sample dims (a fixed ``(2,)`` offset, an int index) broadcast as they are.
    """
    if video and isinstance(value, torch.Tensor) and value.dim() > trailing:
        return value.unsqueeze(value.dim() - trailing)
    return value


class _TexturedPad(v2.Transform):
    """Shared machinery: argument checks, parameter draws, per-type dispatch."""

    def __init__(
        self,
        padding: Padding,
        *,
        stagger: int,
        offset: Offset,
        random_offset: bool,
        same_on_batch: bool,
        mask_fill: Number,
        generator: torch.Generator | None,
    ) -> None:
        super().__init__()
        self.padding: list[int] = list(parse_padding(padding))
        self.stagger: int = check_stagger(stagger)
        self.offset: tuple[int, int] = check_offset(offset)
        self.random_offset: bool = check_flag(random_offset, "random_offset")
        if self.random_offset and self.offset != (0, 0):
            raise ValueError(
                f"offset must be (0, 0) when random_offset=True (the offset is drawn), "
                f"got {self.offset}"
            )
        self.same_on_batch: bool = check_flag(same_on_batch, "same_on_batch")
        self.mask_fill: Number = check_mask_fill(mask_fill)
        self.generator: torch.Generator | None = check_generator(generator)
        # Converted copies of the texture, by (dtype, device) of the images seen.
        self._texture_cache: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    # -- subclass hooks -------------------------------------------------------------------

    @property
    def tile_size(self) -> tuple[int, int]:
        """``(th, tw)`` of the texture tile: random offsets are drawn in ``[0, th) x [0, tw)``."""
        raise NotImplementedError

    def _pad_image(self, image: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError

    # -- torchvision hooks ----------------------------------------------------------------

    def _randint(self, high: int, shape: tuple[int, ...]) -> torch.Tensor:
        generator = worker_generator(self.generator)
        device = generator.device if generator is not None else None
        return torch.randint(high, shape, generator=generator, device=device)

    def _draw_shape(self, flat_inputs: list[Any]) -> tuple[int, ...]:
        """One draw per sample, or a single draw for the whole call with ``same_on_batch``."""
        return () if self.same_on_batch else _sample_shape(flat_inputs)

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        """Draw this call's parameters: ``{"offset": int64 tensor (*S, 2) or (2,)}``.

        ``S`` is the leading (batch) shape of the call's images (``()`` for one image); with
        ``random_offset`` each sample gets its own ``(oy, ox)`` in ``[0, th) x [0, tw)``, drawn
        from ``generator`` or torch's global RNG (``transform`` pads them all in one launch);
        with ``same_on_batch`` one ``(2,)`` draw serves every sample. Nothing is drawn otherwise.
        """
        if not self.random_offset:
            return {"offset": torch.tensor(self.offset, dtype=torch.int64)}
        shape = self._draw_shape(flat_inputs)
        th, tw = self.tile_size
        offset = torch.stack([self._randint(th, shape), self._randint(tw, shape)], dim=-1)
        return {"offset": offset}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        """Pad one input with ``params`` (from ``make_params`` or stored from an earlier call)."""
        if isinstance(inpt, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
            return tvF.pad(inpt, padding=self.padding, padding_mode="constant")
        if isinstance(inpt, tv_tensors.Mask):
            padded = F.pad(inpt, self.padding, "constant", self.mask_fill)
            return tv_tensors.wrap(padded, like=inpt)
        if isinstance(inpt, PIL.Image.Image):
            return pil_apply(inpt, lambda t: self._pad_image(t, params))
        if isinstance(inpt, tv_tensors.TVTensor) and not isinstance(
            inpt, (tv_tensors.Image, tv_tensors.Video)
        ):
            return inpt
        return self._pad_image(inpt, params)

    # -- texture conversion cache ---------------------------------------------------------

    def _converted(self, texture: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        """``texture`` in ``image``'s dtype and device, converted once per (dtype, device).

        Conversion (and its range check, a host sync on CUDA) is the functional's own; the
        cache is skipped for textures that need gradients, and invalidated when the texture is
        modified in place (its version counter moves).
        """
        if texture.requires_grad or (
            texture.dtype == image.dtype and texture.device == image.device
        ):
            return texture
        try:
            version = texture._version
        except RuntimeError:  # inference tensors have no version counter: do not cache
            return texture
        # id: a reassigned `texture` attribute (or BrickPad's other tile) is another entry. The
        # entry keeps the texture alive, so its id cannot be reused by a new tensor meanwhile.
        cache_key = (id(texture), version, image.dtype, image.device)
        entry = self._texture_cache.get(cache_key)
        if entry is None:
            channels = image_channels(texture.shape)
            converted = _texture_bank(texture, image, channels).reshape(texture.shape)
            if len(self._texture_cache) >= 8:
                self._texture_cache.clear()
            entry = self._texture_cache[cache_key] = (texture, converted)
        return entry[1]

    def __getstate__(self) -> dict[str, Any]:
        # Do not ship cached device copies (possibly CUDA) to DataLoader workers.
        state = self.__dict__.copy()
        state["_texture_cache"] = {}
        return state

    # -- repr -----------------------------------------------------------------------------

    def _repr_tail(self, *extra: str) -> list[str]:
        parts = []
        if self.offset != (0, 0):
            parts.append(f"offset={self.offset}")
        parts.append(f"random_offset={self.random_offset}")
        if self.same_on_batch:
            parts.append("same_on_batch=True")
        parts.extend(extra)
        if self.mask_fill != 0:
            parts.append(f"mask_fill={self.mask_fill}")
        if self.generator is not None:
            parts.append(f"generator=torch.Generator(device={self.generator.device})")
        return parts


class TexturePad(_TexturedPad):
    """Pad images with a tiled texture; shift boxes and keypoints; pad masks with ``mask_fill``.

    Args:
        padding: ``p``, ``(lr, tb)`` or ``(left, top, right, bottom)`` pixels, non-negative.
        texture: a tile ``(th, tw)`` (broadcast to every channel) or ``(C, th, tw)``, or a bank
            ``(K, C, th, tw)`` of same-size tiles; any real dtype, any device. Stored by
            reference (like a module stores its tensors, so a learned texture keeps its
            gradient); converted per call to the image's dtype and device, with torchvision's
            scaling: a float texture for an integer image holds values in ``[0, 1]``.
            Conversions are cached per (dtype, device) while the texture is not modified.
        stagger: horizontal shift, in pixels, of each successive row of tiles.
        offset: fixed ``(oy, ox)`` shift of the tile lattice (an int shifts both).
        random_offset: draw an ``(oy, ox)`` in ``[0, th) x [0, tw)`` for every sample (every
            index of the image's leading dims; every clip of a video): a batch ``(B, C, H, W)``
            gets ``B`` draws, applied in one launch. ``offset`` must then be left at ``(0, 0)``.
        texture_index: for a bank, which texture to use: ``None`` (texture 0), an int in
            ``[0, K)``, or ``"random"`` (one drawn per sample, uniformly).
        same_on_batch: one draw (offset, random texture index) for the whole call instead of
            one per sample, as Kornia's flag.
        mask_fill: value of the border of ``tv_tensors.Mask`` inputs (e.g. 255 for an "ignore"
            label); must be representable in the mask's dtype.
        generator: ``torch.Generator`` for the draws (default: torch's global RNG, so
            ``torch.manual_seed`` makes them reproducible). Inside a DataLoader worker the draws
            come from a generator derived from this one and the worker's seed, so workers and
            epochs differ and the same seeds repeat them (the global RNG behaves the same way:
            the DataLoader seeds it per worker).

    Shapes: images ``(..., C, H, W)`` or ``(H, W)`` become ``(..., C, H + top + bottom, W +
    left + right)``, same dtype and device, the image bit-exact in the middle; the texture
    mapping is ``tipad_transforms.functional.texture_pad``'s.

    Params (``make_params``): ``{"offset": int64 tensor, "texture_index": int64 tensor, int or
    None}``. ``offset`` is ``(2,)`` (fixed) or ``(*S, 2)`` with ``S`` the leading shape of the
    call's images (``random_offset``; ``S = ()`` with ``same_on_batch``); ``texture_index`` is
    ``(*S,)`` when ``"random"``. All inputs of one call share one draw; ``transform(inpt,
    params)`` with stored params replays it exactly, on any input.

    Raises:
        TypeError / ValueError: at construction, naming the argument: bad ``padding``,
            ``texture`` (not a tensor, complex, wrong rank, empty), ``stagger``, ``offset``,
            ``random_offset`` with a non-zero ``offset``, ``texture_index`` (not None/int/
            "random", outside the bank, "random" without a bank), ``mask_fill``, ``generator``.
            At call time, the functional's errors (channel mismatch, values that the image's
            dtype cannot hold, images of different batch shapes under ``random_offset``).

    Examples:
        >>> import torch
        >>> from torchvision import tv_tensors
        >>> from torchvision.transforms import v2
        >>> from tipad_transforms import TexturePad
        >>> t = v2.Compose([TexturePad(4, torch.rand(3, 8, 8), random_offset=True),
        ...                 v2.RandomHorizontalFlip()])
        >>> img = tv_tensors.Image(torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8))
        >>> boxes = tv_tensors.BoundingBoxes([[1, 2, 10, 12]], format="XYXY",
        ...                                  canvas_size=(32, 32))
        >>> out_img, out_boxes = t(img, boxes)
        >>> tuple(out_img.shape), out_boxes.canvas_size
        ((3, 40, 40), (40, 40))
    """

    def __init__(
        self,
        padding: Padding,
        texture: torch.Tensor,
        *,
        stagger: int = 0,
        offset: Offset = (0, 0),
        random_offset: bool = False,
        texture_index: int | str | None = None,
        same_on_batch: bool = False,
        mask_fill: Number = 0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            padding,
            stagger=stagger,
            offset=offset,
            random_offset=random_offset,
            same_on_batch=same_on_batch,
            mask_fill=mask_fill,
            generator=generator,
        )
        as_bank(texture)  # validates now, so a bad texture fails at construction
        self.texture = texture
        bank = int(texture.shape[0]) if texture.dim() == 4 else 1
        if isinstance(texture_index, str):
            if texture_index != "random":
                raise ValueError(
                    f'texture_index must be None, an int or "random", got {texture_index!r}'
                )
            if texture.dim() != 4:
                raise ValueError(
                    'texture_index="random" needs a bank texture of shape (K, C, th, tw), '
                    f"got {tuple(texture.shape)}"
                )
        elif isinstance(texture_index, int) and not isinstance(texture_index, bool):
            if not 0 <= texture_index < bank:
                raise ValueError(f"texture_index must be in [0, {bank}), got {texture_index}")
        elif texture_index is not None:
            raise TypeError(
                f'texture_index must be None, an int or "random", got {type(texture_index)}'
            )
        self.texture_index = texture_index

    @property
    def tile_size(self) -> tuple[int, int]:
        return int(self.texture.shape[-2]), int(self.texture.shape[-1])

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        """As ``_TexturedPad.make_params``, plus ``"texture_index"`` (drawn after the offset)."""
        params = super().make_params(flat_inputs)
        if self.texture_index == "random":
            k = int(self.texture.shape[0])
            params["texture_index"] = self._randint(k, self._draw_shape(flat_inputs))
        else:
            params["texture_index"] = self.texture_index
        return params

    def _pad_image(self, image: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        video = isinstance(image, tv_tensors.Video) and image.dim() >= 4
        return F.texture_pad(
            image,
            self.padding,
            self._converted(self.texture, image),
            stagger=self.stagger,
            offset=_per_clip(params["offset"], video, 1),
            texture_index=_per_clip(params.get("texture_index"), video, 0),
        )

    def extra_repr(self) -> str:
        t = self.texture
        parts = [
            f"padding={self.padding}",
            f"texture=Tensor(shape={list(t.shape)}, dtype={t.dtype}, device={t.device})",
            f"stagger={self.stagger}",
            *self._repr_tail(
                *([] if self.texture_index is None else [f"texture_index={self.texture_index!r}"])
            ),
        ]
        return ", ".join(parts)


class BrickPad(_TexturedPad):
    """Pad images with a procedural brick wall; shift boxes and keypoints; pad masks.

    ``TexturePad`` with the tile of ``tipad_transforms.functional.make_brick_texture(**brick)``;
    the output equals ``tipad_transforms.functional.brick_pad(x, padding, **brick)``. Like
    ``brick_pad``, the tile's channels follow ``functional.brick_channels`` (grey, grey + alpha,
    RGB, RGB + alpha for 1-4 channel images; grey broadcast otherwise) unless ``brick`` sets
    ``channels``. Tiles are built once (the RGB one at construction, others on first use) and their
    dtype/device conversions cached, so a call costs one kernel launch.

    Args:
        padding: ``p``, ``(lr, tb)`` or ``(left, top, right, bottom)`` pixels, non-negative.
        stagger: horizontal shift of each successive row of tiles; default
            ``running_bond_stagger(**brick)``, which continues the tile's running bond.
        offset: as in ``TexturePad``.
        random_offset: as in ``TexturePad`` (random offsets lie in ``[0, th) x [0, tw)`` of the
            brick tile, see ``tile_size``).
        same_on_batch: as in ``TexturePad``.
        mask_fill: as in ``TexturePad``.
        generator: as in ``TexturePad``.
        **brick: keyword arguments of ``make_brick_texture`` (``brick_size``, ``mortar``,
            ``bricks_per_tile``, ``courses``, colours, ``seed``, ...); their errors (TypeError /
            ValueError naming the option) are raised at construction.

    Params: ``{"offset": int64 tensor (2,) or (*S, 2)}``, replayable as in ``TexturePad``.

    Examples:
        >>> import PIL.Image
        >>> from torchvision import transforms
        >>> from tipad_transforms import BrickPad
        >>> BrickPad(4, stagger=23)
        BrickPad(padding=[4, 4, 4, 4], stagger=23, random_offset=False)
        >>> t = transforms.Compose([BrickPad((8, 4), random_offset=True), transforms.ToTensor()])
        >>> tuple(t(PIL.Image.new("RGB", (32, 24))).shape)
        (3, 32, 48)
    """

    def __init__(
        self,
        padding: Padding,
        *,
        stagger: int | None = None,
        offset: Offset = (0, 0),
        random_offset: bool = False,
        same_on_batch: bool = False,
        mask_fill: Number = 0,
        generator: torch.Generator | None = None,
        **brick: Any,
    ) -> None:
        if stagger is None:
            stagger = F.running_bond_stagger(**brick)
        super().__init__(
            padding,
            stagger=stagger,
            offset=offset,
            random_offset=random_offset,
            same_on_batch=same_on_batch,
            mask_fill=mask_fill,
            generator=generator,
        )
        self.brick_options: dict[str, Any] = dict(brick)
        # Tiles by the channel count they serve (None: the one tile of an explicit `channels`).
        # The 3-channel one is built now so that bad brick options fail at construction.
        self._tiles: dict[int | None, torch.Tensor] = {}
        self._tile_for(3)

    @property
    def tile_size(self) -> tuple[int, int]:
        tile = next(iter(self._tiles.values()))
        return int(tile.shape[-2]), int(tile.shape[-1])

    def _tile_for(self, channels: int) -> torch.Tensor:
        """The tile for an image of ``channels`` channels."""
        # brick_pad's rule: explicit `channels` wins, else F.brick_channels(channels).
        key = None if "channels" in self.brick_options else brick_channels(channels)
        tile = self._tiles.get(key)
        if tile is None:
            options = dict(self.brick_options)
            if key is not None:
                options["channels"] = key
            tile = self._tiles[key] = F.make_brick_texture(**options)
        return tile

    def _pad_image(self, image: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
        video = isinstance(image, tv_tensors.Video) and image.dim() >= 4
        tile = self._tile_for(image_channels(image.shape))
        return F.texture_pad(
            image,
            self.padding,
            self._converted(tile, image),
            stagger=self.stagger,
            offset=_per_clip(params["offset"], video, 1),
        )

    def extra_repr(self) -> str:
        parts = [f"padding={self.padding}", f"stagger={self.stagger}", *self._repr_tail()]
        parts += [f"{name}={value!r}" for name, value in self.brick_options.items()]
        return ", ".join(parts)
