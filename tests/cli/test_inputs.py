"""``tipad pad`` on folders, trees and glob patterns: every output checked, nothing written when
one input cannot be padded as asked, progress when asked for, honest about lossy formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import PIL.Image
import pytest

from tipad_transforms.cli import main
from tipad_transforms.cli.arguments import DEFAULT_BRICK_STAGGER
from tipad_transforms.functional import running_bond_stagger

ROOT = Path(__file__).resolve().parents[2]


def _pixels(img: PIL.Image.Image) -> np.ndarray:
    """Comparable pixels: palette images as their colours (a GIF writer may renumber them)."""
    if img.mode == "P":
        img = img.convert("RGBA")
    arr = np.array(img)
    return arr[..., None] if arr.ndim == 2 else arr


def _check_output(src: Path, out: Path, pad: tuple[int, int, int, int], exact: bool) -> None:
    left, top, right, bottom = pad
    with PIL.Image.open(src) as a, PIL.Image.open(out) as b:
        assert b.format == a.format, out
        assert b.mode == a.mode, out
        assert b.size == (a.width + left + right, a.height + top + bottom), out
        got = _pixels(b)[top : top + a.height, left : left + a.width]
        want = _pixels(a)
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=str(out))
    else:  # JPEG re-encoded at quality 95: close, not equal (random noise is its worst case)
        diff = np.abs(got.astype(int) - want.astype(int))
        assert 0 < diff.mean() < 25, out


@pytest.mark.slow  # ~15 s: a fresh process, two workers, 1,000 files written and read back
def test_a_tree_of_1000_mixed_images_in_worker_processes(
    tmp_path: Path, make_image_tree: Callable[..., list[Path]]
) -> None:
    tree = tmp_path / "tree"
    sources = make_image_tree(tree, 1000, seed=1)
    out = tmp_path / "out"
    # A fresh process, as a user runs it: its workers are forked before Taichi starts.
    cmd = [sys.executable, "-m", "tipad_transforms", "pad", str(tree), "-o", str(out)]
    cmd += ["--recursive", "--workers", "2", "--progress", "--mode", "reflect"]
    cmd += ["--padding", "3", "1", "2", "4"]
    env = {**os.environ, "TI_SKIP_VERSION_CHECK": "ON", "ENABLE_TAICHI_HEADER_PRINT": "0"}
    done = subprocess.run(cmd, capture_output=True, timeout=600, env=env, cwd=ROOT)
    stdout, stderr = done.stdout.decode(), done.stderr.decode()  # bytes: keep the \r
    assert done.returncode == 0, stderr[-3000:]
    # The progress line: count, rate and ETA, redrawn in place, then the final count.
    assert "\rpadding: 1000/1000 images" in stderr
    assert "img/s  ETA " in stderr and stderr.endswith("\n")
    assert "Padded 1000 images" in stdout
    assert "250 re-encoded with loss (JPEG quality 95)" in stdout
    assert "750 written losslessly (GIF, PNG)" in stdout
    written = sorted(p for p in out.rglob("*") if p.is_file())
    assert len(written) == 1000  # notes.txt is not an image: skipped
    for src in sources:
        target = out / src.relative_to(tree)
        _check_output(src, target, (3, 1, 2, 4), exact=src.suffix != ".jpg")
    # Reflect, checked on one RGB PNG against numpy.
    src = next(p for p in sources if p.suffix == ".png")
    with PIL.Image.open(src) as a, PIL.Image.open(out / src.relative_to(tree)) as b:
        want = np.pad(np.array(a), ((1, 4), (3, 2), (0, 0)), mode="reflect")
        np.testing.assert_array_equal(np.array(b), want)


@pytest.fixture(scope="module")
def small_tree(
    tmp_path_factory: pytest.TempPathFactory, make_image_tree: Callable[..., list[Path]]
) -> tuple[Path, list[Path]]:
    tree = tmp_path_factory.mktemp("small") / "tree"
    return tree, make_image_tree(tree, 40, seed=2)


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    status = main(["pad", *argv, "--workers", "0"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_one_input_that_cannot_take_an_option_stops_the_run_before_any_write(
    tmp_path: Path, small_tree: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, _ = small_tree
    out = tmp_path / "out"
    # Three fill values suit RGB, grey takes one, RGBA needs four and a palette image one (its
    # index, as torchvision): all but the RGB inputs fail the check, so nothing at all is written
    # (not even the RGB files checked first).
    argv = [str(tree), "-o", str(out), "-r", "--mode", "constant", "--fill", "255", "0", "0"]
    status, _, err = _run(capsys, argv)
    assert status == 2 and "nothing was written" in err and "Traceback" not in err
    # 5 each of RGBA, grey PNG, grey JPEG and palette-with-transparency (RGBA) PNG, plus the
    # 5 palette PNGs and 5 palette GIFs.
    assert "30 of 40 inputs cannot be padded" in err and "got 3" in err
    assert not out.exists()
    # --quality on a PNG output, a JPEG-only option: refused the same way.
    status, _, err = _run(capsys, [str(tree), "-o", str(out), "-r", "--quality", "80"])
    assert status == 2 and "--quality" in err and not out.exists()
    # An RGBA image cannot be stored as JPEG.
    status, _, err = _run(capsys, [str(tree), "-o", str(out), "-r", "--format", "jpg"])
    assert status == 2 and "JPEG" in err and not out.exists()


def test_globs_mirror_the_tree_below_their_fixed_part(
    tmp_path: Path, small_tree: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, sources = small_tree
    out = tmp_path / "out"
    status, stdout, _ = _run(capsys, [f"{tree}/**/*.png", "-o", str(out), "--padding", "2"])
    assert status == 0, stdout
    pngs = [p for p in sources if p.suffix == ".png"]
    assert sorted(p for p in out.rglob("*") if p.is_file()) == sorted(
        out / p.relative_to(tree) for p in pngs
    )
    for src in pngs:
        _check_output(src, out / src.relative_to(tree), (2, 2, 2, 2), exact=True)
    assert "re-encoded" not in stdout  # all lossless
    status, _, err = _run(capsys, [f"{tree}/*/nothing*.png", "-o", str(out)])
    assert status == 2 and "no image file matches" in err


def test_a_folder_without_recursive_takes_its_own_files_only(
    tmp_path: Path, small_tree: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, sources = small_tree
    out = tmp_path / "out"
    folder = tree / "set0"
    status, _, _ = _run(capsys, [str(folder), "-o", str(out), "--padding", "1"])
    assert status == 0
    top_level = sorted(p.name for p in sources if p.parent == folder)
    assert sorted(p.name for p in out.iterdir()) == top_level
    status, _, err = _run(capsys, [str(tree), "-o", str(out)])
    assert status == 2 and "--recursive" in err  # the tree's root holds folders only


def test_dry_run_lists_every_output_and_writes_nothing(
    tmp_path: Path, small_tree: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, sources = small_tree
    out = tmp_path / "out"
    status, stdout, _ = _run(capsys, [str(tree), "-o", str(out), "-r", "--dry-run"])
    assert status == 0 and not out.exists()
    lines = [line for line in stdout.splitlines() if " would write " in line]
    assert len(lines) == len(sources)
    for src in sources:
        (line,) = [x for x in lines if x.startswith(f"{src} would write ")]
        assert str(out / src.relative_to(tree)) in line
        assert ("re-encoded with loss" in line) == (src.suffix == ".jpg")
    assert "Dry run: 40 images checked, nothing written." in stdout


def test_format_png_keeps_the_decoded_jpeg_exactly(
    tmp_path: Path, small_tree: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, sources = small_tree
    out = tmp_path / "out"
    argv = [f"{tree}/**/*.jpg", "-o", str(out), "--format", "png", "--padding", "2"]
    status, stdout, _ = _run(capsys, [*argv, "--mode", "edge"])
    assert status == 0
    assert "written losslessly (PNG)" in stdout and "re-encoded" not in stdout
    for src in (p for p in sources if p.suffix == ".jpg"):
        target = out / src.relative_to(tree).with_suffix(".png")
        with PIL.Image.open(src) as a, PIL.Image.open(target) as b:
            assert b.format == "PNG" and b.mode == a.mode
            np.testing.assert_array_equal(_pixels(b)[2:-2, 2:-2], _pixels(a))


def test_progress_is_quiet_when_stderr_is_not_a_terminal(
    tmp_path: Path, small_tree: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, _ = small_tree
    status, _, err = _run(capsys, [str(tree / "set1"), "-o", str(tmp_path / "a"), "-r"])
    assert status == 0 and err == ""  # captured stderr is no terminal
    argv = [str(tree / "set1"), "-o", str(tmp_path / "b"), "-r", "--progress"]
    status, _, err = _run(capsys, argv)
    assert status == 0 and "padding: 10/10 images" in err and "img/s" in err


def test_stagger_help_states_the_default_running_bond(capsys: pytest.CaptureFixture[str]) -> None:
    assert running_bond_stagger() == DEFAULT_BRICK_STAGGER
    assert main(["pad", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert f"running_bond_stagger() = {DEFAULT_BRICK_STAGGER} px" in " ".join(help_text.split())
    assert "half a brick" not in help_text


def test_an_output_folder_inside_the_input_tree_is_not_read_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_image_tree: Callable[..., list[Path]]
) -> None:
    tree = tmp_path / "tree"
    sources = make_image_tree(tree, 8, seed=3)
    out = tree / "padded"
    for _ in range(2):  # the second run must not pad the first run's outputs
        status, stdout, _ = _run(capsys, [str(tree), "-o", str(out), "-r", "--mode", "edge"])
        assert status == 0 and "Padded 8 images" in stdout
    assert sorted(p for p in out.rglob("*") if p.is_file()) == sorted(
        out / p.relative_to(tree) for p in sources
    )


def test_an_unknown_output_format_is_refused_with_the_choices(
    tmp_path: Path, small_tree: tuple[Path, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, _ = small_tree
    status, _, err = _run(capsys, [str(tree), "-r", "-o", str(tmp_path / "o"), "--format", "xyz"])
    assert status == 2 and "Pillow cannot write it" in err and "png" in err
    assert not (tmp_path / "o").exists()


def test_the_benchmark_times_every_peer_on_both_trees(
    tmp_path: Path, cli_pad_benchmark: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["cli_pad.py", "--count", "16", "--photos", "2", "--photo-size", "64x48"]
    argv += ["--repeats", "1", "--workers", "0", "--dir", str(tmp_path), "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    cli_pad_benchmark.main()  # raises SystemExit if a peer writes the wrong number of files
    report = json.loads((tmp_path / "cli-pad.json").read_text())
    for tree in ("small", "photos"):
        assert set(report["images_per_s"][tree]) == {"PIL loop", "tipad constant", "tipad reflect"}
        assert report["ratio_to_pil_loop"][tree]["PIL loop"] == 1.0
