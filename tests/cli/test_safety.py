"""``tipad pad`` never loses a user's data and never ends in a traceback: the real command, run
in a subprocess on real files (hard and symbolic links, ``..`` in patterns, link loops, a full
disk, FIFOs, decompression bombs, a closed stdout), as a user runs it."""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from tipad_transforms.cli import main
from tipad_transforms.cli.writing import write_atomically

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX links, FIFOs, rlimits")

ENV = {**os.environ, "TI_SKIP_VERSION_CHECK": "ON", "ENABLE_TAICHI_HEADER_PRINT": "0"}
TEMP_GLOB = ".*.tipad-*.tmp"


def tipad(
    *args: str | Path, cwd: Path | None = None, timeout: float = 300, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """``python -m tipad_transforms pad ARGS`` in a fresh process (as the console script)."""
    cmd = [sys.executable, "-m", "tipad_transforms", "pad", *map(str, args)]
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        cmd, text=True, timeout=timeout, env=ENV, cwd=cwd, **streams
    )


def run_here(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """``tipad pad ARGS`` in this process (fast: torch is imported already), for the checks of
    behaviour that 0.5.2 had right too."""
    status = main(["pad", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def one_line_error(done: subprocess.CompletedProcess[str], status: int = 2) -> str:
    """The stderr of a run that must fail with ``status`` and one ``tipad: error:`` line."""
    assert done.returncode == status, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tipad: error: "), done.stderr
    return lines[0]


def write_image(path: Path, size: tuple[int, int] = (13, 9), seed: int = 0) -> bytes:
    """A random RGB PNG at ``path``; returns its bytes."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path.read_bytes()


def digest(folder: Path) -> dict[str, str]:
    """Every regular file below ``folder`` (links not followed) and its SHA-256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def padded_size(path: Path) -> tuple[int, int]:
    with PIL.Image.open(path) as img:
        img.load()  # the whole file decodes: complete, not truncated
        return img.size


# ---------------------------------------------------------------------------------------------
# links: the output path is an input, or a link to a file elsewhere


def test_an_output_path_hard_linked_to_its_input_stops_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `cp -al in out` and `rsync --link-dest` make trees like this one. 0.5.2 compared resolved
    # paths, found them different, and padded in/a.png itself through the link.
    src = tmp_path / "in"
    before = write_image(src / "a.png")
    write_image(src / "b.png", seed=1)
    out = tmp_path / "out"
    out.mkdir()
    os.link(src / "a.png", out / "a.png")
    line = one_line_error(tipad(src, "-o", out))
    assert "overwrite the input" in line and "hard link" in line and "a.png" in line
    assert (src / "a.png").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["a.png"]  # nothing written, b.png neither
    # A symbolic link to the input is the input too.
    (out / "a.png").unlink()
    (out / "a.png").symlink_to(src / "a.png")
    status, _, err = run_here(capsys, src, "-o", out)
    assert status == 2 and "overwrite the input" in err and "symbolic link" in err
    assert (src / "a.png").read_bytes() == before


def test_a_symbolic_link_at_the_output_path_is_replaced_never_written_through(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("a file outside -o that must not change\n")
    src = tmp_path / "in" / "a.png"
    write_image(src)
    out = tmp_path / "o"
    out.mkdir()
    (out / "a.png").symlink_to(Path("..") / "victim.txt")
    done = tipad(src, "-o", out, "--padding", "2")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "a file outside -o that must not change\n"  # 0.5.2: a PNG
    assert not (out / "a.png").is_symlink() and padded_size(out / "a.png") == (17, 13)
    assert not list(out.glob(TEMP_GLOB))
    assert "Padded 1 image into" in done.stdout  # one image: singular


def test_a_symbolically_linked_folder_in_the_output_leads_nowhere_else(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    write_image(tree / "sub" / "a.png")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "sub").symlink_to(elsewhere)
    line = one_line_error(tipad(tree, "-r", "-o", out))
    assert "outside the output folder" in line and "symbolic link" in line
    assert list(elsewhere.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# patterns: '..' after a wildcard, symbolic link loops


def test_dot_dot_after_a_wildcard_writes_inside_the_output_folder(tmp_path: Path) -> None:
    write_image(tmp_path / "d" / "x" / "a.png")
    (tmp_path / "d" / "x" / "y").mkdir()
    done = tipad("d/x/*/../../x/a.png", "-o", "o", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # 0.5.2 wrote o/y/../../x/a.png, that is ./x/a.png, outside o/.
    assert not (tmp_path / "x").exists()
    assert [str(p.relative_to(tmp_path / "o")) for p in (tmp_path / "o").rglob("*")] == ["a.png"]
    # A match that lands outside the pattern's fixed folder has no place under -o: refused.
    write_image(tmp_path / "d" / "b.png", seed=2)
    line = one_line_error(tipad("d/x/*/../../b.png", "-o", "o2", cwd=tmp_path))
    assert "outside the pattern's fixed folder" in line and "'..'" in line
    assert not (tmp_path / "o2").exists() and not (tmp_path / "b.png").exists()


def test_recursion_ends_on_a_tree_with_symbolic_link_loops(tmp_path: Path) -> None:
    tree = tmp_path / "d"
    write_image(tree / "a.png")
    write_image(tree / "sub" / "b.png", seed=1)
    # Two loops: glob.glob's '**' followed both, 2**depth paths, never ending.
    (tree / "sub" / "up").symlink_to("..")
    (tree / "sub" / "again").symlink_to(".")
    done = tipad(f"{tree}/**/*.png", tree, "-r", "-o", tmp_path / "o", timeout=120)
    assert done.returncode == 0, done.stderr
    written = sorted(str(p.relative_to(tmp_path / "o")) for p in (tmp_path / "o").rglob("*.png"))
    assert written == ["a.png", "sub/b.png"]


# ---------------------------------------------------------------------------------------------
# a failed write: the earlier output survives, no temporary file is left


def test_a_write_that_fails_disk_full_leaves_the_earlier_output_intact(tmp_path: Path) -> None:
    src = tmp_path / "in" / "big.png"
    write_image(src, size=(700, 700), seed=3)  # ~1.5 MB of noise: over the limit below
    out = tmp_path / "out"
    out.mkdir()
    earlier = write_image(out / "big.png", seed=4)  # an earlier good output of the same name
    limit = 1 << 20  # a full disk, for this process: larger files fail with EFBIG

    def full_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = tipad(src, "-o", out, "--mode", "edge", "--padding", "1", preexec_fn=full_disk)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "cannot write" in done.stderr and "File too large" in done.stderr
    assert (out / "big.png").read_bytes() == earlier  # 0.5.2 left it truncated at 1 MiB
    assert [p.name for p in out.iterdir()] == ["big.png"]  # no temporary file


def test_a_run_removes_the_temporary_files_a_killed_run_left(tmp_path: Path) -> None:
    src = tmp_path / "in" / "a.png"
    write_image(src)
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen(["true"])  # a process id that is not running any more
    dead.wait()
    stale = out / f".a.png.tipad-{dead.pid}-0123abcd.tmp"
    stale.write_bytes(b"half a PNG")
    alive = out / f".a.png.tipad-{os.getpid()}-89abcdef.tmp"  # a run still writing: kept
    alive.write_bytes(b"being written")
    other = out / f".notes.txt.tipad-{dead.pid}-0123abcd.tmp"  # not one of this run's names
    other.write_bytes(b"not ours")
    done = tipad(src, "-o", out, "--mode", "edge", "-v")
    assert done.returncode == 0, done.stderr
    assert not stale.exists() and f"removed {stale}" in done.stderr
    assert alive.exists() and other.exists()
    assert padded_size(out / "a.png") == (13 + 64, 9 + 64)


# ---------------------------------------------------------------------------------------------
# user errors: one line, no traceback


def test_a_fifo_input_is_named_as_one_and_never_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "in" / "f.png"
    fifo.parent.mkdir()
    os.mkfifo(fifo)  # opening it for reading would block forever
    line = one_line_error(tipad(fifo, "-o", tmp_path / "o", timeout=120))
    assert "FIFO" in line and "does not exist" not in line
    # Inside a folder it is not an image file: skipped, the real image padded.
    write_image(tmp_path / "in" / "g.png")
    status, _, err = run_here(capsys, tmp_path / "in", "-o", tmp_path / "o", "--mode", "edge")
    assert status == 0, err
    assert [p.name for p in (tmp_path / "o").iterdir()] == ["g.png"]


def test_the_output_folder_as_the_input_folder_is_named_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    imgs = tmp_path / "imgs"
    write_image(imgs / "a.png")
    line = one_line_error(tipad("imgs", "-o", "imgs", cwd=tmp_path))
    assert "is the output folder" in line and "holds no image files" not in line
    (imgs / "sub").mkdir()
    status, _, err = run_here(capsys, imgs / "sub", "-o", imgs)
    assert status == 2 and "lies inside the output folder" in err


def _bomb(path: Path) -> None:
    """A PNG whose header claims 20000 x 20000 pixels (Pillow refuses it when it opens it)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 20_000, 20_000, 8, 2, 0, 0, 0)
    data = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + data)


def test_a_decompression_bomb_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bomb = tmp_path / "bomb.png"
    _bomb(bomb)
    done = tipad(bomb, "-o", tmp_path / "o")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "DecompressionBombError" in done.stderr and "bomb.png" in done.stderr
    assert not (tmp_path / "o").exists()
    # -v adds the traceback of such an unexpected error.
    assert main(["pad", str(bomb), "-o", str(tmp_path / "o"), "--workers", "0", "-v"]) == 2
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # 0.5.2 tried to allocate the canvas (480 GB) and ended in a traceback.
        (["--padding", "200000"], "over the 178,956,970 px"),
        (
            ["--seed", "99999999999999999999999"],
            "from -9223372036854775808 to 18446744073709551615",
        ),
        (["--stagger", "9" * 23], "from -9223372036854775808 to"),
    ],
)
def test_huge_numbers_are_refused_with_the_valid_range(
    tmp_path: Path, args: list[str], message: str
) -> None:
    src = tmp_path / "a.png"
    write_image(src)
    done = tipad(src, "-o", tmp_path / "o", *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "o").exists()


def test_an_output_over_the_pixel_limit_is_refused_per_image(tmp_path: Path) -> None:
    src = tmp_path / "a.png"
    write_image(src, size=(20, 20))
    # A 1x1 image padded by 6685 stays under the limit, this 20x20 one does not.
    done = tipad(src, "-o", tmp_path / "o", "--mode", "edge", "--padding", "6685")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "13390x13390 px, over the 178,956,970 px" in done.stderr
    assert not (tmp_path / "o").exists()


def test_a_closed_stdout_ends_the_run_quietly(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for i in range(3):
        write_image(tree / f"i{i}.png", seed=i)
    read, write = os.pipe()
    os.close(read)  # `| head` that has already exited: every write to stdout fails (EPIPE)
    try:
        done = tipad(tree, "-o", tmp_path / "o", "--mode", "edge", "-v", stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 128 + signal.SIGPIPE  # as a tool killed by SIGPIPE
    for noise in ("Traceback", "BrokenPipeError", "Exception ignored", "tipad: error"):
        assert noise not in done.stderr, done.stderr
    assert not list((tmp_path / "o").glob(TEMP_GLOB))


# ---------------------------------------------------------------------------------------------
# --keep-going, --skip-existing, a failure while writing, exit codes


def _mixed_inputs(folder: Path) -> tuple[list[Path], list[Path]]:
    """Good images and bad ones: (good, bad)."""
    good = [folder / "a.png", folder / "c.png"]
    for i, path in enumerate(good):
        write_image(path, seed=i)
    (folder / "b.png").write_bytes(b"not a PNG at all")  # fails the header check
    truncated = folder / "d.png"
    full = write_image(folder / "full.png", size=(64, 64), seed=9)
    truncated.write_bytes(full[: len(full) // 2])  # a good header, pixels cut: fails on decode
    (folder / "full.png").unlink()
    return good, [folder / "b.png", truncated]


def test_keep_going_pads_every_good_input_and_names_each_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = _mixed_inputs(tmp_path / "in")
    missing = tmp_path / "in" / "missing.png"
    out = tmp_path / "out"
    done = tipad(tmp_path / "in", missing, "-o", out, "--mode", "edge", "--keep-going")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    for path in [*bad, missing]:
        assert str(path) in done.stderr
    assert "3 inputs not padded" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == [p.name for p in good]
    assert "Padded 2 images" in done.stdout
    # Without --keep-going the header check stops everything (as documented): status 2.
    status, _, err = run_here(capsys, tmp_path / "in", "-o", tmp_path / "strict", "--mode", "edge")
    assert status == 2 and "--keep-going pads the others" in err
    assert not (tmp_path / "strict").exists()


def test_a_failure_while_writing_stops_the_run_without_keep_going(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _, (_, truncated) = _mixed_inputs(folder)
    (folder / "b.png").unlink()
    write_image(folder / "e.png", seed=5)  # after d.png: never started
    out = tmp_path / "out"
    done = tipad(folder, "-o", out, "--mode", "edge", "--workers", "0")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and str(truncated) in done.stderr
    assert "stopped at the first failure: 1 other input not padded" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["a.png", "c.png"]


def test_skip_existing_resumes_a_run_and_leaves_present_outputs_alone(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    for name in ("a", "b", "c"):
        write_image(folder / f"{name}.png", seed=ord(name))
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.png").write_bytes(b"left alone")  # present: skipped, whatever it holds
    (out / "b.png").symlink_to(tmp_path / "nowhere")  # a link, even a broken one, is present
    done = tipad(folder, "-o", out, "--mode", "edge", "--skip-existing")
    assert done.returncode == 0, done.stderr
    assert "Padded 1 image" in done.stdout and "Skipped 2 images already in" in done.stdout
    assert (out / "a.png").read_bytes() == b"left alone"
    assert (out / "b.png").is_symlink()
    assert padded_size(out / "c.png") == (13 + 64, 9 + 64)


def test_help_documents_the_exit_codes_and_the_new_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["pad", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in (
        "Exit status: 0 every input padded; 1 some inputs not padded",
        "2 a usage error",
        "128+N stopped by signal N",
        "--keep-going",
        "--skip-existing",
        "renamed into place",
    ):
        assert words in text


# ---------------------------------------------------------------------------------------------
# durability and the writer's folders


def test_fsync_flushes_each_output_before_its_rename_and_its_folder_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        write_image(tmp_path / "in" / f"i{i}.png", seed=i)
    synced: list[tuple[bool, list[str]]] = []  # (a folder?, the outputs in place then)
    real_fsync = os.fsync

    def record(fd: int) -> None:
        is_folder = stat.S_ISDIR(os.fstat(fd).st_mode)
        synced.append((is_folder, sorted(p.name for p in (tmp_path / "o2").glob("i*.png"))))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", record)
    args = [tmp_path / "in", "-o", tmp_path / "o", "--mode", "edge", "--workers", "0"]
    assert run_here(capsys, *args)[0] == 0
    assert synced == []  # by default the system writes the files out (docs/cli.md)
    assert run_here(capsys, *args, "--fsync", "-o", tmp_path / "o2")[0] == 0
    assert [s[0] for s in synced] == [False, True] * 3  # file, folder; for each output
    assert synced[0][1] == []  # the first file flushed before it was renamed into place


def test_a_file_that_replaces_an_earlier_output_is_on_disk_before_the_rename(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --fsync a new output is left to the system, but one renamed over an earlier
    output is flushed first: a crash before the data reached the disk would lose both."""
    for i in range(3):
        write_image(tmp_path / "in" / f"i{i}.png", seed=i)
    args = [tmp_path / "in", "-o", tmp_path / "o", "--mode", "edge", "--workers", "0"]
    assert run_here(capsys, *args)[0] == 0
    (tmp_path / "o" / "i1.png").unlink()  # i1 is new on the second run, i0 and i2 replace
    synced: list[str] = []
    real_fsync = os.fsync

    def record(fd: int) -> None:
        assert not stat.S_ISDIR(os.fstat(fd).st_mode)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", record)
    assert run_here(capsys, *args)[0] == 0
    assert [Path(s).name.split(".tipad-")[0] for s in synced] == [".i0.png", ".i2.png"]


def test_the_writer_opens_output_folders_without_following_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "out"
    (root / "real").mkdir(parents=True)
    (root / "inner").symlink_to(root / "real")  # inside -o: written through
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "outer").symlink_to(elsewhere)
    img = PIL.Image.new("RGB", (2, 2))
    write_atomically(img, root / "inner" / "a.png", "PNG", {}, root.resolve())
    assert (root / "real" / "a.png").is_file()
    with pytest.raises(OSError, match="outside the output folder"):
        write_atomically(img, root / "outer" / "b.png", "PNG", {}, root.resolve())
    # A folder swapped for a link to elsewhere after it was resolved: not followed either.
    (root / "sub").mkdir()
    resolve = Path.resolve

    def resolve_then_swap(self: Path, strict: bool = False) -> Path:
        answer = resolve(self, strict)
        if self == root / "sub":
            (root / "sub").rmdir()
            (root / "sub").symlink_to(elsewhere)
        return answer

    monkeypatch.setattr(Path, "resolve", resolve_then_swap)
    with pytest.raises(OSError):
        write_atomically(img, root / "sub" / "c.png", "PNG", {}, root.resolve())
    assert list(elsewhere.iterdir()) == []
