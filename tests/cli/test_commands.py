"""The ``tipad`` command line, run in-process through ``main([...])``."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
from PIL import ImageOps

import tipad_transforms.functional as F
from tipad_transforms import __version__
from tipad_transforms.assets import SAMPLE_NAMES, load_sample, sample_image_paths
from tipad_transforms.cli import main


def _write(path: Path, mode: str, size: tuple[int, int] = (13, 9), seed: int = 0) -> np.ndarray:
    """A random image of ``mode`` saved at ``path``; returns its array."""
    rng = np.random.default_rng(seed)
    w, h = size
    bands = PIL.Image.getmodebands(mode)
    arr = rng.integers(0, 256, (h, w, bands), dtype=np.uint8)
    arr = arr[..., 0] if bands == 1 else arr
    PIL.Image.frombytes(mode, (w, h), arr.tobytes()).save(path)
    return arr


def _bands(img: PIL.Image.Image) -> np.ndarray:
    arr = np.array(img)
    return arr[..., None] if arr.ndim == 2 else arr


# ---------------------------------------------------------------------------------------------
# assets


def test_sample_images_are_bundled() -> None:
    paths = sample_image_paths()
    assert [p.name for p in paths] == list(SAMPLE_NAMES)
    modes = set()
    for p in paths:
        assert p.is_file() and p.stat().st_size < 60_000
        img = load_sample(p.name)
        assert max(img.size) <= 256
        modes.add(img.mode)
    assert modes == {"RGB", "RGBA", "L"}
    assert load_sample("present").mode == "RGBA"
    with pytest.raises(ValueError, match="name"):
        load_sample("lena")


# ---------------------------------------------------------------------------------------------
# --version, --help


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"tipad {__version__} (")  # + the Taichi


def test_help_and_missing_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "demo" in capsys.readouterr().out
    assert main([]) == 2
    assert "required" in capsys.readouterr().err


def test_python_dash_m_entry_point(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `python -m tipad_transforms`, in-process (a subprocess would re-import torch: seconds).
    monkeypatch.setattr(sys, "argv", ["tipad", "--version"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("tipad_transforms", run_name="__main__")
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"tipad {__version__} (")  # + the Taichi


# ---------------------------------------------------------------------------------------------
# demo


def test_demo_writes_a_gallery_and_a_timing_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    assert (
        main(["demo", "--out", str(out_dir), "--padding", "16", "--runs", "1", "--batch", "2"]) == 0
    )
    gallery = out_dir / "gallery.png"
    with PIL.Image.open(gallery) as img:
        assert img.format == "PNG"
        img.verify()
    with PIL.Image.open(gallery) as img:
        img.load()
        assert img.mode == "RGB"
        w, h = img.size
        # 7 columns of padded samples (widest 219 + 32) and 3 rows (tallest 256 + 32).
        assert 7 * 251 < w < 4000 and 2 * 288 < h < 2000
        arr = np.array(img)
        # Not a blank canvas: the pictures are there.
        assert arr.std() > 30
    printed = capsys.readouterr().out
    assert str(gallery) in printed
    for label in ("BrickPad", "TexturePad", "pad reflect", "torch F.pad constant", "ms", "GB/s"):
        assert label in printed
    # Each mode beside its peers and the same-bytes copy.
    for label in ("torch F.pad replicate", "torch F.pad reflect", "torch F.pad circular",
                  "v2 pad edge", "v2 pad reflect", "v2 pad symmetric", "same-bytes copy_",
                  "vs copy", "vs peer"):  # fmt: skip
        assert label in printed


def test_demo_table_sets_each_mode_beside_its_faster_peer_and_the_copy() -> None:
    from tipad_transforms.cli.timing import COPY, PEERS, Timing, timing_table

    tipad = [Timing(label, 2.0, 0.2, peers) for label, peers in PEERS.items()]
    peers = {p for r in tipad for p in r.peers}
    # Made-up times: each peer's batch time is its name's length / 10 ms (distinct).
    others = [Timing(p, len(p) / 10, len(p) / 100) for p in sorted(peers)]
    table = timing_table([*tipad, *others, Timing(COPY, 0.5, 0.1)], 4, 1, 2, "cpu")
    lines = {ln.split("  ")[0].strip(): ln for ln in table.splitlines()}
    for r in tipad:
        best = min(r.peers, key=len)  # the faster peer: the shortest name
        row = lines[r.label]
        assert row.endswith(best)
        assert f"{2.0 / (len(best) / 10):.2f}x" in row  # vs peer, batch
        assert "4.00x" in row and "2.00x" in row  # vs copy: batch 2.0 / 0.5, image 0.2 / 0.1
    assert lines[COPY].split()[-1] == "1.00x"
    assert set(PEERS["pad edge"]) == {"torch F.pad replicate", "v2 pad edge"}
    assert set(PEERS["pad reflect"]) == {"torch F.pad reflect", "v2 pad reflect"}


def test_demo_refuses_an_unusable_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["demo", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tipad: error:") and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# pad


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_pad_keeps_mode_and_grows_by_padding(tmp_path: Path, mode: str) -> None:
    src = tmp_path / f"img_{mode}.png"
    arr = _write(src, mode, seed=len(mode))
    out_dir = tmp_path / "padded"
    assert main(["pad", str(src), "-o", str(out_dir), "--padding", "5"]) == 0
    with PIL.Image.open(out_dir / src.name) as out:
        out.load()
    assert out.mode == mode
    assert out.size == (13 + 10, 9 + 10)
    got = _bands(out)
    np.testing.assert_array_equal(got[5:14, 5:18], arr.reshape(9, 13, -1))
    # The default border is a brick wall: neither flat nor a copy of the image.
    assert got[:5].std() > 5


def test_pad_four_sides_and_standard_mode_match_numpy(tmp_path: Path) -> None:
    src = tmp_path / "a.png"
    arr = _write(src, "RGB", seed=3)
    out_dir = tmp_path / "o"
    argv = [
        "pad",
        str(src),
        "-o",
        str(out_dir),
        "--mode",
        "reflect",
        "--padding",
        "1",
        "2",
        "3",
        "4",
    ]
    assert main(argv) == 0
    with PIL.Image.open(out_dir / "a.png") as out:
        got = np.array(out)
    expected = np.pad(arr, ((2, 4), (1, 3), (0, 0)), mode="reflect")
    np.testing.assert_array_equal(got, expected)


def test_pad_constant_fill_per_band(tmp_path: Path) -> None:
    src = tmp_path / "a.png"
    arr = _write(src, "RGB", seed=4)
    out_dir = tmp_path / "o"
    argv = ["pad", str(src), "-o", str(out_dir), "--mode", "constant", "--fill", "10", "20", "30"]
    assert main([*argv, "--padding", "2", "3"]) == 0
    with PIL.Image.open(out_dir / "a.png") as out:
        got = np.array(out)
    assert got.shape == (9 + 6, 13 + 4, 3)
    np.testing.assert_array_equal(got[3:12, 2:15], arr)
    assert (got[0] == [10, 20, 30]).all() and (got[:, -1] == [10, 20, 30]).all()


def test_pad_with_texture_file_and_stagger(tmp_path: Path) -> None:
    src = tmp_path / "img.png"
    arr = _write(src, "RGB", seed=5)
    tex_path = tmp_path / "tex.png"
    tex = _write(tex_path, "RGB", size=(5, 3), seed=6)  # (3, 5, 3): th = 3, tw = 5
    out_dir = tmp_path / "o"
    argv = ["pad", str(src), "-o", str(out_dir), "--texture", str(tex_path), "--stagger", "2"]
    assert main([*argv, "--padding", "4", "6", "1", "2"]) == 0
    with PIL.Image.open(out_dir / "img.png") as out:
        got = np.array(out)
    left, top = 4, 6
    np.testing.assert_array_equal(got[top : top + 9, left : left + 13], arr)
    # The spec: y = Y - top, x = X - left, v = floor(y / th), texture[y - v th, (x - 2 v) mod tw].
    for yy, xx in [(0, 0), (1, 3), (5, 16), (16, 2), (10, 0)]:
        y, x = yy - top, xx - left
        v = y // 3
        np.testing.assert_array_equal(got[yy, xx], tex[y - 3 * v, (x - 2 * v) % 5])


def test_pad_several_formats_keep_their_modes(tmp_path: Path) -> None:
    inputs = []
    jpg = tmp_path / "photo.jpg"
    load_sample("grace_hopper").save(jpg)
    inputs.append(jpg)
    gif = tmp_path / "palette.gif"
    load_sample("grace_hopper").convert("P", palette=PIL.Image.Palette.ADAPTIVE).save(gif)
    inputs.append(gif)
    gray = tmp_path / "gray.tiff"
    load_sample("grace_hopper_gray").save(gray)
    inputs.append(gray)
    out_dir = tmp_path / "o"
    assert (
        main(["pad", *map(str, inputs), "-o", str(out_dir), "--padding", "7", "--seed", "3"]) == 0
    )
    for src in inputs:
        with PIL.Image.open(src) as a, PIL.Image.open(out_dir / src.name) as b:
            assert b.mode == a.mode
            assert b.format == a.format
            assert b.size == (a.width + 14, a.height + 14)


# ---------------------------------------------------------------------------------------------
# pad: errors exit 2 with one line, no traceback


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_pad_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(capsys, ["pad", str(tmp_path / "nope.png"), "-o", str(tmp_path / "o")])
    assert "nope.png" in err and "does not exist" in err
    assert not (tmp_path / "o").exists()  # nothing written when an input is bad


def test_pad_unreadable_image(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.png"
    _write(good, "RGB")
    bad = tmp_path / "bad.png"
    bad.write_text("this is not a PNG")
    err = _error(capsys, ["pad", str(good), str(bad), "-o", str(tmp_path / "o")])
    assert "cannot read" in err and "bad.png" in err
    assert not (tmp_path / "o").exists()


def test_pad_unreadable_texture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.png"
    _write(good, "RGB")
    tex = tmp_path / "tex.png"
    tex.write_bytes(b"\x89PNG broken")
    err = _error(capsys, ["pad", str(good), "-o", str(tmp_path / "o"), "--texture", str(tex)])
    assert "texture" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--padding", "-3"], "non-negative"),
        (["--padding", "two"], "whole number"),
        (["--padding", "1", "2", "3"], "1, 2 or 4"),
        (["--mode", "edge", "--fill", "3"], "--fill"),
        (["--mode", "edge", "--stagger", "3"], "--stagger"),
        (["--mode", "edge", "--seed", "3"], "--seed"),
        (["--mode", "mirror"], "invalid choice"),
        (["--mode", "edge", "--texture", "t.png"], "not allowed with"),
    ],
)
def test_pad_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    src = tmp_path / "a.png"
    _write(src, "L")
    err = _error(capsys, ["pad", str(src), "-o", str(tmp_path / "o"), *extra])
    assert message in err


def test_pad_fill_past_the_mode_range_clips_as_torchvision(tmp_path: Path) -> None:
    # torchvision's PIL path converts a fill as PIL does: 300 on an "L" image is 255.
    src = tmp_path / "a.png"
    arr = _write(src, "L")
    assert main(["pad", str(src), "-o", str(tmp_path / "o"), "--padding", "2", "--mode",
                 "constant", "--fill", "300"]) == 0  # fmt: skip
    with PIL.Image.open(tmp_path / "o" / "a.png") as img:
        out = np.array(img)
    assert (out[2:-2, 2:-2] == arr).all()
    border = np.ones(out.shape, bool)
    border[2:-2, 2:-2] = False
    assert (out[border] == 255).all()


def test_pad_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.png"
    _write(src, "L")
    err = _error(capsys, ["pad", str(src), "-o", str(tmp_path)])
    assert "overwrite" in err
    (tmp_path / "sub").mkdir()
    twin = tmp_path / "sub" / "a.png"
    _write(twin, "L")
    err = _error(capsys, ["pad", str(src), str(twin), "-o", str(tmp_path / "o")])
    assert "a.png" in err and "overwrite" in err


def test_pad_turns_an_image_upright_as_its_exif_orientation_says(tmp_path: Path) -> None:
    src = tmp_path / "turned.png"
    exif = PIL.Image.Exif()
    exif[0x0112] = 6  # stored turned on its side: shown rotated by 90 degrees
    PIL.Image.fromarray(_write(tmp_path / "plain.png", "RGB", seed=7)).save(src, exif=exif)
    argv = ["pad", str(src), str(tmp_path / "plain.png"), "-o", str(tmp_path / "o")]
    assert main([*argv, "--mode", "edge", "--padding", "2", "--workers", "0"]) == 0
    for name in ("turned.png", "plain.png"):
        with PIL.Image.open(tmp_path / name) as a, PIL.Image.open(tmp_path / "o" / name) as b:
            want = F.pad(ImageOps.exif_transpose(a), 2, padding_mode="edge")
            assert b.size == want.size and b.tobytes() == want.tobytes(), name
            assert b.getexif().get(0x0112, 1) == 1  # no orientation left to apply twice
    assert want.size == (13 + 4, 9 + 4)  # the plain one; the turned one is 9 + 4 wide
