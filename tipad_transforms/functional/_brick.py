"""Procedural brick texture: a few courses of running-bond brickwork that tile seamlessly with
``running_bond_stagger``'s stagger."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as nnF
from torch import Tensor

from .._checks import INT32_MAX, check_device, check_int, is_int
from .._tracing import untraced

__all__ = ["brick_channels", "brick_options", "make_brick_texture", "running_bond_stagger"]

# ITU-R BT.601 luma, as PIL's convert("L") uses.
_LUMA = (0.299, 0.587, 0.114)


def _positive_int(value: Any, what: str, minimum: int = 1) -> int:
    # Tiles are rendered in memory: sizes beyond 2**31 are refused before any allocation.
    return check_int(value, what, minimum=minimum, maximum=INT32_MAX)


def _layout(
    *, brick_size: Any = (16, 50), mortar: Any = 3, bricks_per_tile: Any = 5, courses: Any = 4,
    **_: object,
) -> tuple[int, int, int, int, int]:  # fmt: skip
    """The checked ``(brick_h, brick_w, mortar, bricks_per_tile, courses)`` of brick options
    (the others ignored), with ``make_brick_texture``'s defaults."""
    if not isinstance(brick_size, Sequence) or isinstance(brick_size, str) or len(brick_size) != 2:
        raise TypeError(f"brick_size must be a (height, width) pair of ints, got {brick_size!r}")
    return (
        _positive_int(brick_size[0], "brick_size height", 2),
        _positive_int(brick_size[1], "brick_size width", 2),
        _positive_int(mortar, "mortar", 0),
        _positive_int(bricks_per_tile, "bricks_per_tile"),
        _positive_int(courses, "courses"),
    )


def _color(value: Any, what: str) -> tuple[float, float, float]:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != 3
        or not all(is_int(v) or isinstance(v, float) for v in value)
    ):
        raise TypeError(f"{what} must be three numbers (R, G, B) in [0, 1], got {value!r}")
    if not all(0.0 <= float(v) <= 1.0 for v in value):
        raise ValueError(f"{what} must hold values in [0, 1], got {tuple(value)}")
    return float(value[0]), float(value[1]), float(value[2])


def _amount(value: Any, what: str) -> float:
    if not (is_int(value) or isinstance(value, float)):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{what} must lie in [0, 1], got {value}")
    return float(value)


def _scramble_step(bricks_per_tile: int) -> int:
    """Whole bricks to shift each tile row by: coprime with the tile width, near 2/5 of it."""
    if bricks_per_tile < 3:
        return 0
    step = max(1, round(0.4 * bricks_per_tile))
    while math.gcd(step, bricks_per_tile) != 1:
        step += 1
    return step


@functools.lru_cache(maxsize=16)
def _render(
    bh: int, bw: int, m: int, per_tile: int, n_courses: int, base_rgb: tuple[float, float, float],
    mortar_rgb: tuple[float, float, float], shade: float, hue: float, grain: float, seed: int,
) -> Tensor:  # fmt: skip
    """The RGB float64 CPU tile; cached: a ``BrickPad`` renders it at construction (to check its
    options), ``brick_pad`` again per dtype and device."""
    f64 = torch.float64
    gen = torch.Generator().manual_seed(seed)
    course_h, pitch = bh + m, bw + m
    th, tw = n_courses * course_h, per_tile * pitch
    n_bricks = n_courses * per_tile

    # Where every tile pixel falls: its course, its brick, and its place in brick or joint.
    y = torch.arange(th)[:, None].expand(th, tw)
    x = torch.arange(tw)[None, :].expand(th, tw)
    course = y // course_h
    yy = y % course_h
    xs = (x - (course % 2) * (pitch // 2)) % tw
    brick_id = course * per_tile + xs // pitch
    xx = xs % pitch
    by, bx = yy - m, xx - m  # brick-face coordinates; negative inside the joints
    in_joint = (by < 0) | (bx < 0)
    # Rounded corners: the corner pixel of each face is joint.
    corner = ((by == 0) | (by == bh - 1)) & ((bx == 0) | (bx == bw - 1))
    is_mortar = in_joint | (corner if m > 0 else torch.zeros_like(corner))

    # Per-brick colour: brightness, a slight per-channel tint, an occasional darker brick.
    brightness = 1.0 + shade * (2.0 * torch.rand(n_bricks, generator=gen, dtype=f64) - 1.0)
    dark = torch.rand(n_bricks, generator=gen, dtype=f64) < 0.08
    brightness = torch.where(dark, brightness * max(0.5, 1.0 - 2.0 * shade), brightness)
    tint = 1.0 + hue * torch.randn(n_bricks, 3, generator=gen, dtype=f64)
    brick_rgb = (
        torch.tensor(base_rgb, dtype=f64)[None, :] * brightness[:, None] * tint
    )  # (n_bricks, 3)

    # Mottled face: a coarse random field per brick, in brick coordinates (so no tile seams).
    gh, gw = max(2, math.ceil(bh / 6) + 1), max(2, math.ceil(bw / 8) + 1)
    coarse = torch.randn(n_bricks, 1, gh, gw, generator=gen, dtype=f64)
    mottle = nnF.interpolate(coarse, size=(bh, bw), mode="bilinear", align_corners=True)[:, 0]
    face_y, face_x = by.clamp(0, bh - 1), bx.clamp(0, bw - 1)
    face = mottle[brick_id, face_y, face_x]
    # Light from the top left: lit top/left edges, shaded bottom/right edges.
    bevel = (
        0.07 * (by == 0).double()
        + 0.03 * (bx == 0).double()
        - 0.10 * (by == bh - 1).double()
        - 0.05 * (bx == bw - 1).double()
    )
    brick_px = brick_rgb[brick_id].permute(2, 0, 1) * (1.0 + 1.5 * grain * face + bevel)

    # Recessed mortar: shaded just under a brick and just right of one.
    under = (yy == 0) & (m > 1)
    right_of = (xx == 0) & (by >= 0) & (m > 1)
    shadow = 1.0 - 0.16 * under.double() - 0.10 * right_of.double()
    mortar_px = torch.tensor(mortar_rgb, dtype=f64)[:, None, None] * shadow

    tile = torch.where(is_mortar, mortar_px, brick_px)
    # Grain everywhere, coarser (sandier) in the mortar; a few dark specks on the faces. All
    # scale with `noise`: noise=0 leaves per-brick colours, bevels and joint shadows only.
    grain_px = torch.randn(1, th, tw, generator=gen, dtype=f64)
    tile = tile + grain * torch.where(is_mortar, 1.6, 1.0) * grain_px
    specks = (torch.rand(th, tw, generator=gen, dtype=f64) < 0.02) & ~is_mortar
    tile = tile * (1.0 - 6.0 * grain * specks.double())
    return tile.clamp(0.0, 1.0)


def make_brick_texture(
    *,
    brick_size: tuple[int, int] = (16, 50),
    mortar: int = 3,
    bricks_per_tile: int = 5,
    courses: int = 4,
    brick_color: Sequence[float] = (0.58, 0.26, 0.19),
    mortar_color: Sequence[float] = (0.76, 0.74, 0.69),
    shade_variation: float = 0.18,
    hue_variation: float = 0.07,
    noise: float = 0.03,
    channels: int = 3,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """A tile of running-bond brickwork, values in [0, 1].

    The tile is ``courses`` rows of bricks, ``bricks_per_tile`` bricks wide; each course is a
    joint of ``mortar`` pixels along its top, then bricks of ``brick_size`` pixels with a
    vertical joint of ``mortar`` pixels on their left. Odd courses are shifted right by half a
    brick pitch, ``(brick_w + mortar) // 2``. Tile it with ``texture_pad(..., stagger=
    running_bond_stagger(**options))`` (``brick_pad`` does both).

    Each brick gets its own brightness (``shade_variation``), a slight tint (``hue_variation``)
    and a mottled face with grain (``noise``). Everything is drawn from
    ``torch.Generator().manual_seed(seed)``: one seed gives one tile on every machine and device.

    Args:
        brick_size: ``(height, width)`` of one brick in pixels, each >= 2.
        mortar: joint width in pixels, >= 0 (0: bricks touch).
        bricks_per_tile: bricks per course in one tile, >= 1.
        courses: brick rows in one tile, >= 1.
        brick_color: mean ``(R, G, B)`` of the bricks, in [0, 1].
        mortar_color: mean ``(R, G, B)`` of the mortar, in [0, 1].
        shade_variation: amount in [0, 1].
        hue_variation: amount in [0, 1].
        noise: amount in [0, 1].
        channels: 1 (luma), 2 (luma + opaque alpha), 3 (RGB) or 4 (RGB + opaque alpha).
        seed: an int in ``[-2**63, 2**64)``.
        dtype: a floating dtype for the result.
        device: where the result is returned.

    Returns:
        ``(channels, courses * (brick_h + mortar), bricks_per_tile * (brick_w + mortar))``.

    Raises:
        TypeError: an argument of the wrong type (the message names it).
        ValueError: an argument out of range (the message names it).
    """
    bh, bw, m, per_tile, n_courses = _layout(
        brick_size=brick_size, mortar=mortar, bricks_per_tile=bricks_per_tile, courses=courses
    )
    base = _color(brick_color, "brick_color")
    mortar_base = _color(mortar_color, "mortar_color")
    shade = _amount(shade_variation, "shade_variation")
    hue = _amount(hue_variation, "hue_variation")
    grain = _amount(noise, "noise")
    check_int(channels, "channels", minimum=1, maximum=4)
    # What torch.Generator.manual_seed accepts.
    check_int(seed, "seed", minimum=-(2**63), maximum=2**64 - 1)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    device = check_device(device)

    # Rendered (and cached) where no tracer sees it: under torch.export the tile is a constant
    # of the program, not a trace of the generator's draws (and no fake tile is cached).
    tile = untraced(
        lambda: _render(bh, bw, m, per_tile, n_courses, base, mortar_base, shade, hue, grain, seed)
    )
    if channels in (1, 2):
        luma = torch.tensor(_LUMA, dtype=torch.float64)[:, None, None]
        tile = (tile * luma).sum(0, keepdim=True)
    if channels in (2, 4):
        tile = torch.cat([tile, torch.ones_like(tile[:1])])
    # A copy always: the cached tile must never reach the caller.
    return tile.clamp(0.0, 1.0).to(dtype=dtype, device=device, copy=True)


# make_brick_texture's options that a brick pad forwards (dtype/device follow the image).
BRICK_OPTIONS = (
    "brick_size", "mortar", "bricks_per_tile", "courses", "brick_color", "mortar_color",
    "shade_variation", "hue_variation", "noise", "channels", "seed",
)  # fmt: skip


def brick_options(options: dict[str, Any], who: str, takes: tuple[str, ...]) -> None:
    """TypeError naming ``who`` and listing what it takes (its own arguments ``takes``, then
    the brick options) unless each of ``options`` is a ``make_brick_texture`` option."""
    unknown = [name for name in options if name not in BRICK_OPTIONS]
    if unknown:
        raise TypeError(
            f"{who}() got an unexpected keyword argument {unknown[0]!r}; it takes "
            f"{', '.join(takes)} and the brick options {', '.join(BRICK_OPTIONS)}"
        )


def brick_tile_size(**options: Any) -> tuple[int, int]:
    """``(th, tw)`` of ``make_brick_texture(**options)``, without rendering it."""
    bh, bw, m, per_tile, n_courses = _layout(**options)
    return n_courses * (bh + m), per_tile * (bw + m)


def running_bond_stagger(
    *,
    brick_size: tuple[int, int] = (16, 50),
    mortar: int = 3,
    bricks_per_tile: int = 5,
    courses: int = 4,
    **_: object,
) -> int:
    """The ``stagger`` that tiles ``make_brick_texture(**same_options)`` as a running bond.

    Takes (and ignores the rest of) ``make_brick_texture``'s keyword arguments. The tile's odd
    courses are shifted by half a pitch, so the next tile row must start shifted by half a pitch
    after an odd number of courses and by none after an even number; on top of that it moves by
    a few whole bricks so the tile's shades do not line up in columns. Result in ``[0, tile
    width)``.
    """
    bw, m, per_tile, n_courses = _layout(
        brick_size=brick_size, mortar=mortar, bricks_per_tile=bricks_per_tile, courses=courses
    )[1:]
    pitch = bw + m
    half = (n_courses % 2) * (pitch // 2)
    return (half + _scramble_step(per_tile) * pitch) % (per_tile * pitch)


def brick_channels(image_channels: int) -> int:
    """Channels of the brick tile for an image of ``image_channels`` channels.

    1 (grey), 2 (grey + alpha), 3 (RGB) and 4 (RGB + alpha, torchvision's convention) get a
    tile of their own, the alpha band opaque; any other count gets one grey channel, broadcast.

    Raises:
        TypeError: ``image_channels`` is not an int (a bool included).
        ValueError: ``image_channels`` is negative.
    """
    check_int(image_channels, "image_channels", minimum=0)
    return image_channels if image_channels in (1, 2, 3, 4) else 1
