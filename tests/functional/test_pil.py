"""PIL images through the padding functionals: every mode comes back in its own mode.

References are numpy.pad on the image's own array (band by band), built from random images,
and torchvision.transforms.v2.functional.pad on the same PIL image for constant fills (every
mode: palette indices, bilevel white, PIL's own colour conversions); palette images are checked
on their indices, which stay exact, and on nearest-colour matching for texture colours the
palette does not hold.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch
import torch.nn.functional as nnF

import tipad_transforms.functional as F
from tipad_transforms.functional._pil import pil_apply, pil_texture

W, H = 11, 7
PADDING = (3, 2, 4, 5)  # left, top, right, bottom
NP_MODES = {"edge": "edge", "reflect": "reflect", "symmetric": "symmetric", "circular": "wrap"}


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _palette(rng: np.random.Generator, n: int = 256) -> np.ndarray:
    """``n`` distinct random RGB colours, ``(n, 3)`` uint8."""
    codes = rng.choice(2**24, size=n, replace=False)
    return np.stack([(codes >> 16) & 255, (codes >> 8) & 255, codes & 255], -1).astype(np.uint8)


def make_image(mode: str, seed: int = 0) -> PIL.Image.Image:
    """A random ``W x H`` image of ``mode``, built from raw bytes."""
    rng = _rng(seed)
    if mode == "1":
        return PIL.Image.fromarray(rng.random((H, W)) < 0.5)
    if mode in ("P", "PA"):
        idx = rng.integers(0, 256, (H, W), dtype=np.uint8)
        data = idx if mode == "P" else np.stack([idx, rng.integers(0, 256, (H, W), np.uint8)], -1)
        img = PIL.Image.frombytes(mode, (W, H), np.ascontiguousarray(data).tobytes())
        img.putpalette(_palette(rng).reshape(-1).tolist())
        return img
    if mode == "I":
        arr = rng.integers(-(2**31), 2**31 - 1, (H, W), dtype=np.int32)
        return PIL.Image.frombytes(mode, (W, H), arr.tobytes())
    if mode.startswith("I;16"):
        arr = rng.integers(0, 2**16, (H, W), dtype=np.uint16)
        order = ">" if mode == "I;16B" else "<"
        return PIL.Image.frombytes(mode, (W, H), arr.astype(order + "u2").tobytes())
    if mode == "F":
        arr = rng.normal(0, 1000, (H, W)).astype(np.float32)
        return PIL.Image.frombytes(mode, (W, H), arr.tobytes())
    bands = PIL.Image.getmodebands(mode)
    arr = rng.integers(0, 256, (H, W, bands), dtype=np.uint8)
    return PIL.Image.frombytes(mode, (W, H), arr.tobytes())


def as_bands(img: PIL.Image.Image) -> np.ndarray:
    """The image's array as ``(H, W, bands)`` in native byte order."""
    arr = np.array(img)
    arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr[..., None] if arr.ndim == 2 else arr


def np_pad(arr: np.ndarray, mode: str, fill: float = 0) -> np.ndarray:
    left, top, right, bottom = PADDING
    widths = ((top, bottom), (left, right), (0, 0))
    if mode == "constant":
        return np.pad(arr, widths, mode="constant", constant_values=fill)
    return np.pad(arr, widths, mode=NP_MODES[mode])  # type: ignore[call-overload]


def interior(arr: np.ndarray) -> np.ndarray:
    left, top, _, _ = PADDING
    return arr[top : top + H, left : left + W]


DIRECT_MODES = ["1", "L", "LA", "RGB", "RGBA", "CMYK", "YCbCr", "I", "I;16", "I;16B", "F"]
ALL_MODES = [*DIRECT_MODES, "P", "PA"]


# ---------------------------------------------------------------------------------------------
# round trips


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("pad_mode", ["edge", "reflect", "symmetric", "circular"])
def test_standard_modes_match_numpy_pad_in_every_pil_mode(mode: str, pad_mode: str) -> None:
    img = make_image(mode, seed=len(mode) + len(pad_mode))
    before = as_bands(img).copy()
    out = F.pad(img, PADDING, padding_mode=pad_mode)
    assert out.mode == mode
    assert out.size == (W + PADDING[0] + PADDING[2], H + PADDING[1] + PADDING[3])
    got = as_bands(out)
    # Copy modes move pixels only: for palette images the indices themselves are padded.
    np.testing.assert_array_equal(got, np_pad(before, pad_mode))
    np.testing.assert_array_equal(as_bands(img), before)  # input untouched
    if mode in ("P", "PA"):
        assert out.getpalette() == img.getpalette()


@pytest.mark.parametrize("mode", DIRECT_MODES)
def test_constant_fill_is_in_the_image_own_units(mode: str) -> None:
    img = make_image(mode, seed=3)
    bands = len(img.getbands())
    fill: int | float | tuple[int, ...]
    if mode == "1":
        fill, expected = 255, True  # uint8 0/255, torchvision's pil_to_tensor convention
    elif mode == "F":
        fill, expected = -2.5, -2.5
    elif mode.startswith("I;16"):
        fill, expected = 54321, 54321
    elif mode == "I":
        fill, expected = -123456789, -123456789
    else:
        fill = tuple(range(10, 10 + 17 * bands, 17))
        expected = np.array(fill, dtype=np.uint8)  # type: ignore[assignment]
    out = F.pad(img, PADDING, padding_mode="constant", fill=fill)
    assert out.mode == mode
    ref = np_pad(as_bands(img), "constant", 0)
    border = np.ones(ref.shape[:2], dtype=bool)
    interior(border)[...] = False
    ref[border] = expected
    np.testing.assert_array_equal(as_bands(out), ref)


def test_mode_1_thresholds_textures_at_half() -> None:
    img = make_image("1", seed=4)
    tex = torch.tensor([[[0, 127, 128, 255]]], dtype=torch.uint8)
    out = as_bands(F.texture_pad(img, (0, 0, 4, 0), tex))[..., 0]
    levels = np.array([0, 127, 128, 255])[(W + np.arange(4)) % 4]  # tx = X mod 4
    np.testing.assert_array_equal(out[:, W:], np.tile(levels >= 128, (H, 1)))
    np.testing.assert_array_equal(out[:, :W], as_bands(img)[..., 0])


@pytest.mark.parametrize("mode", ["I;16", "I;16B"])
def test_sixteen_bit_images_run_as_uint16(mode: str) -> None:
    img = make_image(mode, seed=5)
    seen: list[torch.dtype] = []

    def fn(t: torch.Tensor) -> torch.Tensor:
        seen.append(t.dtype)
        return nnF.pad(t.int(), (1, 1, 1, 1), value=65535).to(torch.uint16)

    out = pil_apply(img, fn)
    assert seen == [torch.uint16]
    assert out.mode == mode
    got = np.array(out).astype(np.int64)
    np.testing.assert_array_equal(got[1:-1, 1:-1], np.array(img).astype(np.int64))
    assert (got[0] == 65535).all()


def test_metadata_kept() -> None:
    img = make_image("RGB", seed=6)
    img.info.update({"dpi": (300, 300), "icc_profile": b"fake profile", "exif": b"dropped"})
    out = F.pad(img, 2, padding_mode="edge")
    assert out.info["dpi"] == (300, 300)
    assert out.info["icc_profile"] == b"fake profile"
    assert "exif" not in out.info  # sizes in EXIF would be wrong after padding


# ---------------------------------------------------------------------------------------------
# palette images


def _nearest_rgb(colour: np.ndarray, palette: np.ndarray) -> int:
    d = ((palette.astype(np.int64) - colour.astype(np.int64)) ** 2).sum(1)
    return int(np.argmin(d))


def test_palette_texture_maps_to_nearest_palette_colour() -> None:
    img = make_image("P", seed=7)
    palette = np.array(img.getpalette(), dtype=np.uint8).reshape(-1, 3)
    tex_rgb = _rng(8).integers(0, 256, (3, 4, 5), dtype=np.uint8)
    out = F.texture_pad(img, PADDING, torch.from_numpy(tex_rgb))
    assert out.mode == "P" and out.getpalette() == img.getpalette()
    got = np.array(out)
    np.testing.assert_array_equal(interior(got), np.array(img))
    left, top, _, _ = PADDING
    for yy, xx in [(0, 0), (1, 7), (H + top + 2, 3), (4, W + left + 1)]:
        colour = tex_rgb[:, (yy - top) % 4, (xx - left) % 5]
        assert got[yy, xx] == _nearest_rgb(colour, palette)


def test_short_palette_only_matches_its_own_entries() -> None:
    rng = _rng(14)
    palette = _palette(rng, 16)
    img = PIL.Image.frombytes("P", (W, H), rng.integers(0, 16, (H, W), dtype=np.uint8).tobytes())
    img.putpalette(palette.reshape(-1).tolist())
    # Black is not in the palette; Pillow's padding entries (16..255) are black, so a match
    # outside the first 16 would be "exact" but invalid. (A black texture: pad's fill is an
    # index, as in torchvision.)
    out = F.texture_pad(img, PADDING, torch.zeros(3, 2, 2, dtype=torch.uint8))
    got = np.array(out)
    np.testing.assert_array_equal(interior(got), np.array(img))
    assert got.max() < 16
    assert got[0, 0] == _nearest_rgb(np.zeros(3), palette)


def test_palette_with_transparency_pads_in_rgba() -> None:
    img = make_image("P", seed=9)
    img.info["transparency"] = 17
    seen: list[int] = []

    def fn(t: torch.Tensor) -> torch.Tensor:
        seen.append(t.shape[0])
        # A fully transparent border (any colour) must land on the transparent index 17.
        return nnF.pad(t, (2, 2, 2, 2), value=0)

    out = pil_apply(img, fn)
    assert seen == [4]
    assert out.mode == "P" and out.info["transparency"] == 17
    got = np.array(out)
    np.testing.assert_array_equal(got[2:-2, 2:-2], np.array(img))
    assert (got[0] == 17).all() and (got[:, -1] == 17).all()


def test_pa_keeps_its_alpha_band() -> None:
    img = make_image("PA", seed=10)
    out = F.pad(img, PADDING, padding_mode="constant", fill=(5, 99))  # (index, alpha)
    assert out.mode == "PA" and out.getpalette() == img.getpalette()
    got = as_bands(out)
    np.testing.assert_array_equal(interior(got), as_bands(img))
    assert (got[0, :, 0] == 5).all() and (got[0, :, 1] == 99).all()
    with pytest.raises(ValueError, match="fill must have 1 or 2 values"):
        F.pad(img, PADDING, fill=(1, 2, 3, 99))  # torchvision: ValueError too


def _torchvision_pad(img: PIL.Image.Image, fill: Any, mode: str) -> PIL.Image.Image:
    from torchvision.transforms.v2 import functional as tvF

    return tvF.pad(img, list(PADDING), fill=fill, padding_mode=mode)  # type: ignore[no-any-return]


def _duplicate_palette_image() -> PIL.Image.Image:
    # Entry 7 repeats entry 2's colour: a lookup by colour finds 2 where the index is 7.
    rng = _rng(21)
    palette = _palette(rng, 256)
    palette[7] = palette[2]
    img = PIL.Image.frombytes("P", (W, H), rng.integers(0, 12, (H, W), dtype=np.uint8).tobytes())
    img.putpalette(palette.reshape(-1).tolist())
    return img


PIL_FILL_CASES = [
    ("P", 7),  # torchvision: index 7 (was the nearest palette colour to grey 7)
    ("P", 2.9),
    ("P", (7,)),
    ("P", 300),
    ("P", None),
    ("1", 1),  # torchvision: white (was black: 1 < 128 on the way back)
    ("1", 255),
    ("1", 0),
    ("LAB", 7),  # torchvision: (7, 135, 135), PIL's a/b offset (was (7, 7, 7))
    ("LAB", (10, 20, 30)),
    ("L", 300),  # PIL clips
    ("L", -2),
    ("RGB", (1.7, 300, -1)),
    ("I;16", 70000),
    ("I", -5),
    ("F", 0.25),
    ("CMYK", 9),
    ("YCbCr", (1, 2, 3)),
    ("HSV", 200),
    ("RGBA", (1, 2, 3, 4)),
]


@pytest.mark.parametrize(("mode", "fill"), PIL_FILL_CASES, ids=str)
def test_constant_fill_of_every_pil_mode_is_torchvisions(mode: str, fill: Any) -> None:
    # The reference is torchvision.transforms.v2.functional.pad on the same PIL image.
    img = _duplicate_palette_image() if mode == "P" else make_image(mode, seed=22)
    want = _torchvision_pad(img, fill, "constant")
    got = F.pad(img, PADDING, fill=fill)
    assert got.mode == want.mode and got.size == want.size
    np.testing.assert_array_equal(np.array(got), np.array(want))
    assert got.getpalette() == want.getpalette()


@pytest.mark.parametrize(("mode", "fill"), [("RGBA", (1, 2, 3)), ("P", (1, 2)), ("L", (1, 2))])
def test_a_fill_of_another_band_count_is_refused_as_torchvision_does(mode: str, fill: Any) -> None:
    img = make_image(mode, seed=23)
    with pytest.raises(ValueError):
        _torchvision_pad(img, fill, "constant")
    with pytest.raises(ValueError, match=r"^fill must have 1 (value|or \d values)"):
        F.pad(img, PADDING, fill=fill)


@pytest.mark.parametrize("padding_mode", ["edge", "reflect", "symmetric"])
def test_palette_images_pad_their_indices(padding_mode: str) -> None:
    # torchvision pads a palette image's indices (numpy.pad): exact even with duplicate colours.
    img = _duplicate_palette_image()
    want = _torchvision_pad(img, 0, padding_mode)
    got = F.pad(img, PADDING, padding_mode=padding_mode)
    assert got.mode == "P"
    np.testing.assert_array_equal(np.array(got), np.array(want))
    assert got.getpalette() == img.getpalette()


# ---------------------------------------------------------------------------------------------
# textures from PIL images


@pytest.mark.parametrize("mode", ["L", "LA", "RGB", "RGBA", "CMYK", "YCbCr", "P", "1"])
def test_pil_texture_draws_the_texture_as_it_looks(mode: str) -> None:
    img = make_image(mode, seed=11)
    tex = PIL.Image.fromarray(_rng(12).integers(0, 256, (4, 6, 3), dtype=np.uint8))
    t = pil_texture(img, tex)
    out = F.texture_pad(img, PADDING, t)
    assert out.mode == mode
    np.testing.assert_array_equal(interior(as_bands(out)), as_bands(img))
    left, top, _, _ = PADDING
    if mode in ("P", "1"):
        return  # nearest palette colour / threshold: covered above
    expected = as_bands(tex.convert(mode))
    got = as_bands(out)
    for yy, xx in [(0, 0), (1, 2), (H + top + 1, W + left + 2)]:
        np.testing.assert_array_equal(got[yy, xx], expected[(yy - top) % 4, (xx - left) % 6])


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_pil_texture_for_wide_modes(mode: str) -> None:
    img = make_image(mode, seed=13)
    tex = PIL.Image.fromarray(np.array([[0, 255]], dtype=np.uint8))
    t = pil_texture(img, tex)
    out = as_bands(F.texture_pad(img, (0, 0, 2, 0), t))[..., 0]
    np.testing.assert_array_equal(out[:, :W], as_bands(img)[..., 0])
    values = as_bands(img)[..., 0]
    lo, hi = (0, 65535) if mode == "I;16" else (values.min(), values.max())
    expected = np.array([lo, hi], dtype=np.float64)[(W + np.arange(2)) % 2]  # tx = X mod 2
    np.testing.assert_allclose(out[:, W:].astype(np.float64), np.tile(expected, (H, 1)), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# errors


def test_pil_apply_rejects_bad_function_results() -> None:
    img = make_image("RGB")
    with pytest.raises(ValueError, match="fn must map"):
        pil_apply(img, lambda t: t.float())
    with pytest.raises(ValueError, match="fn must map"):
        pil_apply(img, lambda t: t[:1])

    def not_a_tensor(t: torch.Tensor) -> Any:
        return t.numpy()

    with pytest.raises(TypeError, match="fn must return"):
        pil_apply(img, not_a_tensor)


def test_pil_apply_and_pil_texture_need_pil_images() -> None:
    with pytest.raises(TypeError, match="x"):
        pil_apply(np.zeros((2, 2)), lambda t: t)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="texture"):
        pil_texture(make_image("L"), torch.zeros(2, 2))  # type: ignore[arg-type]
