"""``tipad pad`` pads with PIL's own copies where it can (``cli/borders.py``): every mode and
padding gives exactly what the functional API gives for the same image, metadata included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import PIL.Image
import pytest

import tipad_transforms.functional as F
from tipad_transforms import backends
from tipad_transforms.cli import borders
from tipad_transforms.cli.borders import mirror_pad
from tipad_transforms.cli.painter import PadSpec, Painter, brick_image
from tipad_transforms.functional._pil import pil_texture

MODES = sorted(borders.MODES)
PADDINGS = ((3, 1, 2, 4), (0, 0, 0, 0), (0, 5, 1, 0), (17, 9, 30, 11))  # the last: > the image


def image(mode: str, size: tuple[int, int], seed: int) -> PIL.Image.Image:
    """A random ``mode`` image with metadata that padding keeps (and EXIF, which it drops)."""
    rng = np.random.default_rng(seed)
    w, h = size
    if mode == "1":
        img = PIL.Image.fromarray(rng.integers(0, 2, (h, w)).astype(bool))
    elif mode in ("I", "F"):
        dtype = np.int32 if mode == "I" else np.float32
        img = PIL.Image.fromarray(rng.integers(-5000, 60000, (h, w)).astype(dtype))
    elif mode.startswith("I;16"):
        order = ">u2" if mode == "I;16B" else "=u2" if mode == "I;16N" else "<u2"
        img = PIL.Image.frombytes(
            mode, size, rng.integers(0, 65536, (h, w)).astype(order).tobytes()
        )
    else:
        bands = len(PIL.Image.getmodebands(mode) * "x")
        img = PIL.Image.frombytes(
            mode, size, rng.integers(0, 256, w * h * bands, np.uint8).tobytes()
        )
    if mode in ("P", "PA"):
        img.putpalette(rng.integers(0, 256, 768, np.uint8).tobytes())
        img.info["transparency"] = 3
    img.info.update(dpi=(72, 96), gamma=0.45, exif=b"Exif\0\0")
    return img


def reference(spec: PadSpec, img: PIL.Image.Image, tile: PIL.Image.Image | None) -> PIL.Image.Image:
    if spec.mode is not None:
        return F.pad(img, spec.padding, fill=spec.fill or (0,), padding_mode=spec.mode)
    assert tile is not None
    stagger = F.running_bond_stagger() if spec.stagger is None else spec.stagger
    out: PIL.Image.Image = F.texture_pad(img, spec.padding, pil_texture(img, tile), stagger=stagger)
    return out


def assert_same(got: PIL.Image.Image, want: PIL.Image.Image, what: str) -> None:
    assert (got.mode, got.size) == (want.mode, want.size), what
    assert got.tobytes() == want.tobytes(), what
    assert got.info == want.info, what
    assert got.getpalette() == want.getpalette(), what


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric", "circular", "constant", None])
def test_every_pil_mode_and_padding_equals_the_functional_api(
    mode: str | None, tmp_path: Path
) -> None:
    tile = None if mode is not None else brick_image(0)
    for padding in PADDINGS:
        painter = Painter(PadSpec(padding=padding, mode=mode))
        for i, pil_mode in enumerate(MODES):
            # A small image, a larger one (a wall grows) and a small one again (a crop of it),
            # 1 and 2 px sides too.
            for size in ((5, 4), (13, 9), (1, 2), (2, 1)):
                img = image(pil_mode, size, seed=i)
                before = img.tobytes()
                if mode == "reflect" and min(size) == 1:
                    assert mirror_pad(img, padding, mode) is None  # left to the functional API
                got = painter.pad(img)
                assert img.tobytes() == before  # the input is not changed
                assert_same(got, reference(painter.spec, img, tile), f"{pil_mode} {size} {padding}")


@pytest.mark.allow_fallback  # the wall's fill pixel is the torch route's by design
@pytest.mark.parametrize(
    ("pil_mode", "fill"),
    [("RGB", (10, 200, 30)), ("RGBA", (1, 2, 3, 4)), ("L", (300,)), ("P", (7,)), ("1", (1,)),
     ("I;16", (40000,)), ("F", (0.25,)), ("LAB", (50, 3, 250))],
)  # fmt: skip
def test_a_constant_fill_is_the_functional_api_s_in_every_mode(
    pil_mode: str, fill: tuple[float, ...]
) -> None:
    painter = Painter(PadSpec(padding=(2, 3, 1, 0), mode="constant", fill=fill))
    for size in ((4, 4), (9, 6), (4, 4)):
        img = image(pil_mode, size, seed=5)
        with backends.record() as ran:
            got = painter.pad(img)
        assert_same(got, reference(painter.spec, img, None), f"{pil_mode} {size}")
        # The wall's one fill pixel comes from the torch route: no worker starts Taichi for it.
        assert {backend for *_, backend in ran} <= {"torch"}, ran


def test_a_texture_file_and_stagger_equal_the_functional_api(tmp_path: Path) -> None:
    tile = image("RGB", (7, 5), seed=9)
    tile.save(tmp_path / "t.png")
    painter = Painter(PadSpec(padding=(6, 2, 9, 4), texture=tmp_path / "t.png", stagger=3))
    for i, pil_mode in enumerate(MODES):
        img = image(pil_mode, (11, 6), seed=i)
        assert_same(painter.pad(img), reference(painter.spec, img, tile), pil_mode)


def test_a_texture_suits_each_palette_image_s_own_colour_space() -> None:
    # The converted tile was cached per mode and transparency only: a palette image with an
    # RGBA palette after one with an RGB palette got the 3-band tile (ValueError).
    rng = np.random.default_rng(3)
    painter = Painter(PadSpec(padding=(2, 2, 2, 2)))
    for palette_mode in ("RGB", "RGBA", "RGB"):
        img = PIL.Image.frombytes("P", (6, 5), rng.integers(0, 16, 30, np.uint8).tobytes())
        img.putpalette(
            rng.integers(0, 256, 16 * len(palette_mode), np.uint8).tobytes(), palette_mode
        )
        assert_same(painter.pad(img), reference(painter.spec, img, brick_image(0)), palette_mode)
