"""torchvision v2 transforms over the padding functionals: ``Pad``, ``TexturePad``, ``BrickPad``.

Thin ``v2.Transform`` subclasses, as torchvision writes its own: ``__init__`` checks the arguments,
``make_params`` draws the randomness (a plain dict that ``transform(inpt, params)`` replays
exactly, on any input) and ``transform`` is one call of the functional, which picks the kernel
for the input's type; so a transform and its functional cannot disagree.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import PIL.Image
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from . import functional as F
from ._checks import (
    Number,
    check_flag,
    check_generator,
    check_int,
    check_mode,
    check_number,
    check_offset,
    parse_padding,
)
from ._seeding import GeneratorsPickleAsBytes, uniform
from .functional._brick import brick_options, brick_tile_size
from .functional._convert import Fill, as_bank, is_numbers

__all__ = ["BrickPad", "Pad", "TexturePad"]

Padding = int | Sequence[int]
Offset = int | Sequence[int]


class _Transform(v2.Transform):
    """torchvision's ``Transform`` whose constructor errors name the class and list what it
    takes (``TexturePad(): got an unexpected keyword argument 'p'; it takes padding, ...``).
    Construction only: the calls go straight from ``transform`` to the functional."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        signature = inspect.signature(init)
        names = [
            n for n, p in signature.parameters.items() if n != "self" and p.kind != p.VAR_KEYWORD
        ]

        @functools.wraps(init)
        def checked(self: Any, *args: Any, **kw: Any) -> None:
            try:
                signature.bind(self, *args, **kw)
            except TypeError as exc:
                raise TypeError(f"{cls.__name__}(): {exc}; it takes {', '.join(names)}") from None
            init(self, *args, **kw)

        cls.__init__ = checked  # type: ignore[method-assign]


def _fill_for(fill: Any, inpt: Any) -> Any:
    """torchvision's per-type fill: a dict is looked up by the input's type, ``"others"`` as
    the default; anything else applies to every input."""
    if not isinstance(fill, Mapping):
        return fill
    for cls in type(inpt).__mro__:
        if cls in fill:
            return fill[cls]
    return fill.get("others", 0)


def _check_fill(fill: Any) -> Any:
    values = fill.values() if isinstance(fill, Mapping) else [fill]
    for value in values:
        if not (value is None or isinstance(value, (int, float, bool)) or is_numbers(value)):
            raise TypeError(
                "fill must be a number, a sequence of numbers, None or a dict of those per "
                f"input type, got {fill!r}"
            )
    return fill


class Pad(_Transform):
    """Pad images, videos and masks with a standard mode; shift boxes and keypoints.

    ``torchvision.transforms.v2.Pad`` on ``functional.pad``: the same arguments and results,
    plus what ``functional.pad`` adds to torchvision's.

    Args:
        padding: ``p``, ``(lr, tb)`` or ``(left, top, right, bottom)`` pixels (negative values
            crop).
        fill: as ``functional.pad``'s, or a dict per input type (``{tv_tensors.Image: 127,
            tv_tensors.Mask: 255}``, ``"others"`` as the default).
        padding_mode: as ``functional.pad``'s.

    Raises:
        TypeError / ValueError: naming the argument, at construction.

    Examples:
        >>> import torch
        >>> from tipad_transforms.transforms import Pad
        >>> Pad([1, 2], padding_mode="reflect")(torch.arange(4.0).reshape(1, 1, 4))
        tensor([[[1., 0., 1., 2., 3., 2.],
                 [1., 0., 1., 2., 3., 2.],
                 [1., 0., 1., 2., 3., 2.],
                 [1., 0., 1., 2., 3., 2.],
                 [1., 0., 1., 2., 3., 2.]]])
    """

    def __init__(
        self, padding: Padding, fill: Fill | dict[Any, Fill] = 0, padding_mode: str = "constant"
    ) -> None:
        super().__init__()
        self.padding: list[int] = list(parse_padding(padding))
        self.fill = _check_fill(fill)
        self.padding_mode: str = check_mode(padding_mode)

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        return F.pad(inpt, self.padding, _fill_for(self.fill, inpt), self.padding_mode)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, fill={self.fill!r}, padding_mode={self.padding_mode!r}"


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
        elif isinstance(inpt, tv_tensors.Image) or (
            isinstance(inpt, torch.Tensor) and not isinstance(inpt, tv_tensors.TVTensor)
        ):
            shapes.add(tuple(inpt.shape[:-3]))
    if len(shapes) > 1:
        raise ValueError(
            "the images and videos of one call must share their leading (batch) dims to draw "
            f"one random offset per sample, got {sorted(shapes)}"
        )
    return shapes.pop() if shapes else ()


class _TexturedPad(GeneratorsPickleAsBytes, _Transform):
    """Shared arguments and parameter draws of ``TexturePad`` and ``BrickPad``."""

    def __init__(
        self,
        padding: Padding,
        stagger: int,
        offset: Offset,
        random_offset: bool,
        same_on_batch: bool,
        fill: Fill | dict[Any, Fill],
        mask_fill: Number | None,
        generator: torch.Generator | None,
    ) -> None:
        super().__init__()
        self.padding: list[int] = list(parse_padding(padding))
        self.stagger: int = check_int(stagger, "stagger")
        self.offset: tuple[int, int] = check_offset(offset)
        self.random_offset: bool = check_flag(random_offset, "random_offset")
        if self.random_offset and self.offset != (0, 0):
            raise ValueError(
                f"offset must be (0, 0) when random_offset=True (the offset is drawn), "
                f"got {self.offset}"
            )
        self.same_on_batch: bool = check_flag(same_on_batch, "same_on_batch")
        self.fill = _check_fill(fill)
        self.mask_fill: Number | None = (
            None if mask_fill is None else check_number(mask_fill, "mask_fill")
        )
        self.generator: torch.Generator | None = check_generator(generator)

    @property
    def tile_size(self) -> tuple[int, int]:
        """``(th, tw)`` of the texture tile: random offsets are drawn in ``[0, th) x [0, tw)``."""
        raise NotImplementedError

    def _draw(self, flat_inputs: list[Any], high: int | tuple[int, int]) -> torch.Tensor:
        """``uniform`` draws in ``[0, high)``: one per sample of the call (``_sample_shape``),
        or one for the whole call with ``same_on_batch``."""
        shape = () if self.same_on_batch else _sample_shape(flat_inputs)
        bound = torch.tensor(high)
        return uniform(self.generator, bound.expand((*shape, *bound.shape)))

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        """Draw this call's parameters: ``{"offset": (oy, ox) tuple or int64 tensor (*S, 2)}``.

        ``S`` is the leading (batch) shape of the call's images (``()`` for one image; clips for
        a video; ``()`` with ``same_on_batch``); with ``random_offset`` each sample gets its own
        ``(oy, ox)`` in ``[0, th) x [0, tw)``, from ``generator`` or torch's global RNG; nothing
        is drawn otherwise.
        """
        offset = self._draw(flat_inputs, self.tile_size) if self.random_offset else self.offset
        return {"offset": offset}

    def _repr_tail(self, *extra: str) -> list[str]:
        parts = []
        if self.offset != (0, 0):
            parts.append(f"offset={self.offset}")
        parts.append(f"random_offset={self.random_offset}")
        if self.same_on_batch:
            parts.append("same_on_batch=True")
        parts.extend(extra)
        if not (isinstance(self.fill, (int, float)) and self.fill == 0):
            parts.append(f"fill={self.fill!r}")
        if self.mask_fill is not None:
            parts.append(f"mask_fill={self.mask_fill}")
        if self.generator is not None:
            parts.append(f"generator=torch.Generator(device={self.generator.device})")
        return parts


class TexturePad(_TexturedPad):
    """Pad images with a tiled texture; shift boxes and keypoints; pad masks with ``fill``.

    Args:
        padding: ``p``, ``(lr, tb)`` or ``(left, top, right, bottom)`` pixels (negative
            values crop).
        texture: a tile ``(th, tw)`` or ``(C, th, tw)``, or a bank ``(K, C, th, tw)``, as
            ``functional.texture_pad`` takes it. Stored by reference (a learned texture keeps
            its gradient); its conversion to the image's dtype is cached while it is unchanged.
        stagger: horizontal shift, in pixels, of each successive row of tiles.
        offset: fixed ``(oy, ox)`` shift of the tile lattice (an int shifts both).
        random_offset: draw an ``(oy, ox)`` in ``[0, th) x [0, tw)`` for every sample (every
            index of the image's leading dims; every clip of a video): a batch ``(B, C, H, W)``
            gets ``B`` draws, applied in one launch. ``offset`` must then be left at ``(0, 0)``.
        texture_index: for a bank, which texture to use: ``None`` (texture 0), an int in
            ``[0, K)``, or ``"random"`` (one drawn per sample, uniformly).
        same_on_batch: one draw (offset, random texture index) for the whole call instead of
            one per sample, as Kornia's flag.
        fill: the border of what the texture does not pad (masks, and types whose kernel reads
            it), as ``Pad`` takes it (e.g. ``{tv_tensors.Mask: 255}``).
        mask_fill: the older spelling of ``fill={tv_tensors.Mask: value}``, kept as an alias
            (no warning): where given, masks get it whatever ``fill`` says.
        generator: ``torch.Generator`` for the draws (default: torch's global RNG). In a
            DataLoader worker they come from a generator derived from it and the worker's seed:
            workers and epochs differ, the same seeds repeat them.

    Shapes, dtypes and the texture mapping: as ``functional.texture_pad``. Params
    (``make_params``): ``{"offset", "texture_index"}``, shared by all inputs of one call;
    ``transform(inpt, params)`` with stored params replays them exactly, on any input.

    Raises:
        TypeError / ValueError: at construction, naming the argument (``random_offset`` with
            a non-zero ``offset`` included); at call time the functional's, and images of
            different batch shapes under ``random_offset``.

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
        fill: Fill | dict[Any, Fill] = 0,
        mask_fill: Number | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            padding, stagger, offset, random_offset, same_on_batch, fill, mask_fill, generator
        )
        bank = as_bank(texture).shape[0]  # validates now, so a bad texture fails here
        self.texture = texture
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
        elif texture_index is not None:
            check_int(texture_index, "texture_index", minimum=0, maximum=bank - 1)
        self.texture_index = texture_index

    @property
    def tile_size(self) -> tuple[int, int]:
        return int(self.texture.shape[-2]), int(self.texture.shape[-1])

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        """As ``_TexturedPad.make_params``, plus ``"texture_index"`` (``(*S,)`` when drawn,
        after the offset)."""
        params = super().make_params(flat_inputs)
        index = self.texture_index
        params["texture_index"] = (
            self._draw(flat_inputs, int(self.texture.shape[0])) if index == "random" else index
        )
        return params

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        """Pad one input with ``params`` (from ``make_params`` or stored from an earlier call)."""
        return F.texture_pad(
            inpt, self.padding, self.texture, stagger=self.stagger, offset=params["offset"],
            texture_index=params.get("texture_index"), fill=_fill_for(self.fill, inpt),
            mask_fill=self.mask_fill,
        )  # fmt: skip

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


_BRICK_PAD_ARGS = ("padding", "stagger", "offset", "random_offset", "same_on_batch", "fill",
                   "mask_fill", "generator")  # fmt: skip


class BrickPad(_TexturedPad):
    """Pad images with a procedural brick wall; shift boxes and keypoints; pad masks.

    ``TexturePad`` with the tile of ``functional.make_brick_texture(**brick)``: the transform
    calls ``functional.brick_pad(x, padding, **brick)``. The tile's channels follow
    ``functional.brick_channels`` unless ``brick`` sets ``channels``. ``offset``,
    ``random_offset`` (offsets drawn in the brick tile, ``tile_size``), ``same_on_batch``,
    ``fill``, ``mask_fill`` and ``generator`` are as in ``TexturePad``.

    Args:
        padding: ``p``, ``(lr, tb)`` or ``(left, top, right, bottom)`` pixels (negative values
            crop).
        stagger: horizontal shift of each successive row of tiles; default
            ``running_bond_stagger(**brick)``, which continues the tile's running bond.
        **brick: ``make_brick_texture``'s options (``brick_size``, ``mortar``,
            ``bricks_per_tile``, ``courses``, colours, ``seed``, ...), checked at construction
            (an unknown one: TypeError listing them).

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
        fill: Fill | dict[Any, Fill] = 0,
        mask_fill: Number | None = None,
        generator: torch.Generator | None = None,
        **brick: Any,
    ) -> None:
        brick_options(brick, "BrickPad", _BRICK_PAD_ARGS)
        F.make_brick_texture(**brick)  # bad options fail now
        if stagger is None:
            stagger = F.running_bond_stagger(**brick)
        super().__init__(
            padding, stagger, offset, random_offset, same_on_batch, fill, mask_fill, generator
        )
        self.brick_options: dict[str, Any] = dict(brick)

    @property
    def tile_size(self) -> tuple[int, int]:
        return brick_tile_size(**self.brick_options)  # arithmetic: no tile rendered

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        """Pad one input with ``params`` (from ``make_params`` or stored from an earlier call)."""
        return F.brick_pad(
            inpt, self.padding, stagger=self.stagger, offset=params["offset"],
            fill=_fill_for(self.fill, inpt), mask_fill=self.mask_fill, **self.brick_options,
        )  # fmt: skip

    def extra_repr(self) -> str:
        parts = [f"padding={self.padding}", f"stagger={self.stagger}", *self._repr_tail()]
        parts += [f"{name}={value!r}" for name, value in self.brick_options.items()]
        return ", ".join(parts)
