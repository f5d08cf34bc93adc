"""make_brick_texture / running_bond_stagger: shape, range, determinism, layout, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import tipad_transforms.functional as F

# Plain colours: with no noise and no variation every face pixel away from the edges is exactly
# the brick colour, and every joint pixel is the mortar colour or a shade of it.
FLAT: dict[str, Any] = {"noise": 0.0, "shade_variation": 0.0, "hue_variation": 0.0}
BRICK = np.array([0.6, 0.2, 0.1])
MORTAR = np.array([0.9, 0.9, 0.9])


def expected_mortar(th: int, tw: int, bh: int, bw: int, m: int) -> np.ndarray:
    """The joint pattern by the documented layout, rounded face corners included."""
    ch, pitch = bh + m, bw + m
    y, x = np.mgrid[0:th, 0:tw]
    course = y // ch
    yy = y % ch
    xx = ((x - (course % 2) * (pitch // 2)) % tw) % pitch
    by, bx = yy - m, xx - m
    joint = (by < 0) | (bx < 0)
    corner = np.isin(by, (0, bh - 1)) & np.isin(bx, (0, bw - 1))
    return joint | (corner & (m > 0))


def tile_wall(tile: np.ndarray, stagger: int, height: int, width: int) -> np.ndarray:
    """Tile (C, th, tw) over (C, height, width) by the texture mapping spec (offset 0)."""
    _, th, tw = tile.shape
    y, x = np.mgrid[0:height, 0:width]
    v = y // th
    return tile[:, y - v * th, (x - v * stagger) % tw]


def classify_mortar(img: np.ndarray) -> np.ndarray:
    """True where a pixel is nearer the mortar colour than the brick colour."""
    d_m = ((img - MORTAR[:, None, None]) ** 2).sum(0)
    d_b = ((img - BRICK[:, None, None]) ** 2).sum(0)
    return d_m < d_b


# ---------------------------------------------------------------------------------------------
# shape, dtype, range


@pytest.mark.parametrize(
    ("options", "shape"),
    [
        ({}, (3, 4 * 19, 5 * 53)),
        ({"brick_size": (6, 11), "mortar": 2, "bricks_per_tile": 3, "courses": 2}, (3, 16, 39)),
        ({"mortar": 0, "courses": 1, "bricks_per_tile": 1}, (3, 16, 50)),
        ({"channels": 1}, (1, 76, 265)),
        ({"channels": 2}, (2, 76, 265)),
        ({"channels": 4}, (4, 76, 265)),
    ],
)
def test_shape_dtype_range(options: dict[str, Any], shape: tuple[int, ...]) -> None:
    tile = F.make_brick_texture(**options)
    assert tuple(tile.shape) == shape
    assert tile.dtype == torch.float32
    assert tile.device.type == "cpu"
    assert bool(torch.isfinite(tile).all())
    assert float(tile.min()) >= 0.0 and float(tile.max()) <= 1.0
    # A real texture, not a flat fill: bricks and joints differ, the grain varies.
    assert float(tile.std()) > 0.05


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtype_follows_request(dtype: torch.dtype) -> None:
    tile = F.make_brick_texture(dtype=dtype, courses=1)
    assert tile.dtype == dtype
    ref = F.make_brick_texture(dtype=torch.float64, courses=1)
    tol = 1e-12 if dtype == torch.float64 else 1e-2
    torch.testing.assert_close(tile.double(), ref, atol=tol, rtol=0)


def test_channels_are_luma_and_opaque_alpha() -> None:
    rgb = F.make_brick_texture(seed=3, dtype=torch.float64)
    luma = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    torch.testing.assert_close(
        F.make_brick_texture(seed=3, channels=1, dtype=torch.float64)[0], luma
    )
    la = F.make_brick_texture(seed=3, channels=2, dtype=torch.float64)
    torch.testing.assert_close(la[0], luma)
    assert bool((la[1] == 1).all())
    rgba = F.make_brick_texture(seed=3, channels=4, dtype=torch.float64)
    torch.testing.assert_close(rgba[:3], rgb)
    assert bool((rgba[3] == 1).all())


# ---------------------------------------------------------------------------------------------
# determinism


def test_same_seed_same_tile_and_different_seeds_differ() -> None:
    a = F.make_brick_texture(seed=7)
    b = F.make_brick_texture(seed=7)
    assert torch.equal(a, b)
    c = F.make_brick_texture(seed=8)
    assert not torch.equal(a, c)
    # Not just a little: the per-brick shades are redrawn.
    assert float((a - c).abs().mean()) > 0.02


def test_generation_does_not_touch_global_rng() -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    F.make_brick_texture(seed=99, courses=3)
    assert torch.equal(torch.rand(4), expected)


def test_returned_tile_is_a_fresh_tensor() -> None:
    # Tiles are cached internally; writing into one result must not change the next.
    first = F.make_brick_texture(seed=5)
    expected = first.clone()
    first.zero_()
    assert torch.equal(F.make_brick_texture(seed=5), expected)
    again = F.make_brick_texture(seed=5, dtype=torch.float64)
    again.fill_(0.5)
    assert torch.equal(F.make_brick_texture(seed=5), expected)


# ---------------------------------------------------------------------------------------------
# layout


@pytest.mark.parametrize(
    ("bh", "bw", "m", "per_tile", "courses"),
    [(16, 50, 3, 5, 4), (7, 12, 2, 3, 2), (5, 9, 1, 4, 3), (6, 10, 0, 2, 2)],
)
def test_mortar_pixels_where_the_layout_says(
    bh: int, bw: int, m: int, per_tile: int, courses: int
) -> None:
    tile = F.make_brick_texture(
        brick_size=(bh, bw),
        mortar=m,
        bricks_per_tile=per_tile,
        courses=courses,
        brick_color=tuple(BRICK),
        mortar_color=tuple(MORTAR),
        dtype=torch.float64,
        **FLAT,
    ).numpy()
    _, th, tw = tile.shape
    expected = expected_mortar(th, tw, bh, bw, m)
    np.testing.assert_array_equal(classify_mortar(tile), expected)
    # Face interiors (away from the bevelled edges) are exactly the brick colour.
    ch, pitch = bh + m, bw + m
    y, x = np.mgrid[0:th, 0:tw]
    by = y % ch - m
    bx = ((x - (y // ch % 2) * (pitch // 2)) % tw) % pitch - m
    interior = (by > 0) & (by < bh - 1) & (bx > 0) & (bx < bw - 1)
    np.testing.assert_allclose(tile[:, interior], np.repeat(BRICK[:, None], interior.sum(), 1))


def test_shade_variation_gives_each_brick_its_own_colour() -> None:
    bh, bw, m = 6, 10, 2
    tile = F.make_brick_texture(
        brick_size=(bh, bw), mortar=m, courses=2, bricks_per_tile=4, noise=0.0, seed=1
    ).numpy()
    # Centre pixel of each brick of course 0 (offset 0): x = j * pitch + m + bw // 2.
    centres = [tile[:, m + bh // 2, j * (bw + m) + m + bw // 2] for j in range(4)]
    assert len({tuple(np.round(c, 6)) for c in centres}) == 4


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"brick_size": (5, 12), "mortar": 2, "bricks_per_tile": 3, "courses": 1},  # even pitch
        {"brick_size": (5, 11), "mortar": 2, "bricks_per_tile": 4, "courses": 2},  # odd pitch
        {"brick_size": (4, 9), "mortar": 1, "bricks_per_tile": 7, "courses": 6},
    ],
)
def test_stagger_tiles_a_continuous_running_bond(options: dict[str, Any]) -> None:
    tile = F.make_brick_texture(
        brick_color=tuple(BRICK), mortar_color=tuple(MORTAR), dtype=torch.float64, **options, **FLAT
    ).numpy()
    stagger = F.running_bond_stagger(**options)
    _, th, tw = tile.shape
    assert 0 <= stagger < tw
    height, width = 5 * th + 3, 2 * tw + 5
    wall = tile_wall(tile, stagger, height, width)
    # The whole wall, across tile rows, is one running bond: course c is shifted by
    # (c % 2) * (pitch // 2), exactly the tile's own layout continued without seams.
    bh, bw = options.get("brick_size", (16, 50))
    m = options.get("mortar", 3)
    ch, pitch = bh + m, bw + m
    y, x = np.mgrid[0:height, 0:width]
    by = y % ch - m
    bx = (x - (y // ch % 2) * (pitch // 2)) % pitch - m
    corner = np.isin(by, (0, bh - 1)) & np.isin(bx, (0, bw - 1))
    expected = (by < 0) | (bx < 0) | (corner & (m > 0))
    np.testing.assert_array_equal(classify_mortar(wall), expected)


def test_tile_rows_do_not_repeat_in_columns() -> None:
    # The stagger moves each tile row by whole bricks, so brick shades do not stack straight up.
    tile = F.make_brick_texture(dtype=torch.float64, noise=0.0).numpy()
    stagger = F.running_bond_stagger()
    _, th, tw = tile.shape
    wall = tile_wall(tile, stagger, 2 * th, tw)
    assert not np.allclose(wall[:, :th], wall[:, th:])
    assert stagger % (tw // 5) == 0  # an even number of courses: whole bricks only


def test_brick_pad_draws_the_wall_around_the_image() -> None:
    x = torch.randint(
        0, 256, (3, 9, 13), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    out = F.brick_pad(x, (40, 30, 20, 10), noise=0.0)
    assert torch.equal(out[:, 30:39, 40:53], x)
    # The border is the tile scaled to uint8, mapped by the spec from the image's top-left.
    tile = (F.make_brick_texture(noise=0.0, dtype=torch.float64) * 255).numpy()
    _, th, tw = tile.shape
    y, xx = np.mgrid[0 : out.shape[1], 0 : out.shape[2]]
    yy = y - 30
    v = np.floor_divide(yy, th)
    ref = tile[:, yy - v * th, (xx - 40 - v * F.running_bond_stagger()) % tw]
    border = np.ones(out.shape[1:], dtype=bool)
    border[30:39, 40:53] = False
    got = out.numpy().astype(np.float64)
    # torchvision's float -> uint8 conversion truncates, so allow one level.
    assert np.abs(got[:, border] - ref[:, border]).max() <= 1.0


# ---------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"brick_size": (1, 10)}, "brick_size"),
        ({"brick_size": (10, 0)}, "brick_size"),
        ({"mortar": -1}, "mortar"),
        ({"bricks_per_tile": 0}, "bricks_per_tile"),
        ({"courses": 0}, "courses"),
        ({"brick_color": (1.2, 0.0, 0.0)}, "brick_color"),
        ({"mortar_color": (0.5, -0.1, 0.5)}, "mortar_color"),
        ({"shade_variation": 1.5}, "shade_variation"),
        ({"hue_variation": -0.01}, "hue_variation"),
        ({"noise": 2.0}, "noise"),
        ({"channels": 5}, "channels"),
        ({"channels": 0}, "channels"),
        ({"seed": 2**64}, "seed"),
        ({"dtype": torch.int32}, "dtype"),
    ],
)
def test_bad_values_raise_value_error_naming_the_argument(
    options: dict[str, Any], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        F.make_brick_texture(**options)


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"brick_size": 16}, "brick_size"),
        ({"brick_size": (16, 50, 3)}, "brick_size"),
        ({"brick_size": (16.0, 50)}, "brick_size"),
        ({"mortar": 1.5}, "mortar"),
        ({"bricks_per_tile": True}, "bricks_per_tile"),
        ({"brick_color": "red"}, "brick_color"),
        ({"brick_color": (0.5, 0.5)}, "brick_color"),
        ({"noise": "a lot"}, "noise"),
        ({"channels": 3.0}, "channels"),
        ({"seed": 1.0}, "seed"),
        ({"dtype": "float32"}, "dtype"),
    ],
)
def test_bad_types_raise_type_error_naming_the_argument(options: dict[str, Any], name: str) -> None:
    with pytest.raises(TypeError, match=name):
        F.make_brick_texture(**options)


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        F.make_brick_texture((16, 50))  # type: ignore[misc]


def test_running_bond_stagger_validates_and_ignores_other_options() -> None:
    assert F.running_bond_stagger(seed=3, noise=0.5, channels=1) == F.running_bond_stagger()
    with pytest.raises(ValueError, match="mortar"):
        F.running_bond_stagger(mortar=-2)
    with pytest.raises(ValueError, match="courses"):
        F.running_bond_stagger(courses=0)


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_brick_pad_gives_alpha_images_an_opaque_wall(channels: int) -> None:
    # 2 and 4 channels are grey/RGB + alpha (torchvision's convention): the border is opaque.
    x = torch.zeros(channels, 6, 6, dtype=torch.uint8)
    out = F.brick_pad(x, 5)
    assert F.brick_channels(channels) == channels
    if channels in (2, 4):
        assert bool((out[-1, :5] == 255).all())
    colour = out[: 3 if channels >= 3 else 1, :5]
    assert colour.float().std() > 0  # a wall, not a flat fill


def test_brick_channels_for_other_counts_is_one_broadcast_grey() -> None:
    assert F.brick_channels(5) == 1
    out = F.brick_pad(torch.zeros(5, 4, 4, dtype=torch.uint8), 3)
    assert torch.equal(out[0, :3], out[4, :3])
