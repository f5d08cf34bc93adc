"""The ``tipad`` argument parser and the user error it reports as one line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from .._version import __version__

__all__ = ["DEFAULT_BRICK_STAGGER", "EXIT_CODES", "STANDARD_MODES", "UsageError", "build_parser"]

STANDARD_MODES = ("constant", "edge", "reflect", "symmetric", "circular")
#: ``running_bond_stagger()`` of the default brick, quoted in ``--stagger``'s help (a test keeps
#: the two equal; computing it would import torch for ``--help``).
DEFAULT_BRICK_STAGGER = 106
_DEMO_MAX_PADDING = 1024  # the demo's gallery is 7 x 3 padded samples
_INT64 = (-(2**63), 2**63 - 1)

EXIT_CODES = (
    "Exit status: 0 every input padded; 1 some inputs not padded (each named on stderr) or a "
    "worker process died; 2 a usage error, or inputs that cannot be padded as asked (nothing "
    "is written); 128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM; 141 stdout was a closed "
    "pipe, as with | head)."
)


class UsageError(Exception):
    """A user error (arguments, files): the command line prints it as one line, status 2."""


def _integer(low: int, high: int | None = None, what: str = "") -> Callable[[str], int]:
    """An argparse type: an int from ``low`` to ``high``; the error says ``what`` is expected
    (default: the range)."""
    what = what or (
        f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    )

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


def _number(text: str) -> int | float:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    """The ``tipad`` argument parser (subcommands ``demo`` and ``pad``)."""
    from ..backends.taichi import TAICHI  # names the Taichi without importing it

    parser = argparse.ArgumentParser(
        prog="tipad",
        description="Texture padding for images and tensors, one fused Taichi kernel per call.",
    )
    parser.add_argument(
        "--version", action="version", version=f"tipad {__version__} ({TAICHI.describe()})"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = sub.add_parser(
        "demo",
        help="pad the bundled sample images every way, save a gallery, time the kernels",
        description="Pad the bundled sample images with BrickPad, a custom TexturePad and every "
        "standard mode; write one labelled gallery PNG; print median timings against "
        "torch.nn.functional.pad.",
    )
    demo.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    demo.add_argument(
        "--padding",
        type=_integer(0, _DEMO_MAX_PADDING),
        default=48,
        help=f"pixels on every side, 0 to {_DEMO_MAX_PADDING} (default 48)",
    )
    demo.add_argument(
        "--runs", type=_integer(1), default=5, help="least timed runs per measurement (default 5)"
    )
    demo.add_argument(
        "--batch", type=_integer(1), default=64, help="batch size of the timed batch (64)"
    )
    demo.add_argument(
        "--device", default="cpu", help="device for the timings, e.g. cpu or cuda (default cpu)"
    )
    pad = sub.add_parser(
        "pad",
        help="pad image files, folders and glob patterns, keeping their mode",
        description="Pad images (any format Pillow reads) and write them under OUTDIR: a file "
        "under its name, a folder's images (--recursive: its whole tree) and a pattern's "
        "matches under their paths relative to the folder or the pattern's fixed part. Every "
        "input is checked against every option (headers only) before anything is written. "
        "Without --mode the border is a brick wall (or --texture FILE).",
        epilog="Give --padding after the inputs (it takes 1, 2 or 4 numbers). Quote patterns "
        "('imgs/**/*.png') so that tipad expands them, recursively. Fill values are in the "
        "image's own units: 0-255 for 8-bit modes (mode '1' too: 255 is white), 0-65535 for "
        "16-bit, one number or one per band. Outputs keep each input's format unless --format "
        "says otherwise; JPEG and WebP outputs are re-encoded with loss (the interior is not the "
        "input's pixels any more): --format png keeps every pixel. "
        "Each output is written to a temporary file beside it and renamed into place: an "
        "interrupted or failed run leaves every earlier output whole and no partial file. "
        "A symbolic link at an output path is replaced (its target is never written); an output "
        "path that is an input (the same file, by a hard or symbolic link) stops the run. "
        "Without --keep-going, an input that cannot be padded stops the run before anything is "
        "written, and a failure while writing stops it after the files in progress. " + EXIT_CODES,
    )
    pad.add_argument(
        "inputs", nargs="+", metavar="IN", help="image files, folders or glob patterns"
    )
    pad.add_argument(
        "-o",
        "--out",
        type=Path,
        required=True,
        metavar="OUTDIR",
        help="output folder, created if missing (files of the same name are replaced, atomically)",
    )
    pad.add_argument(
        "-r", "--recursive", action="store_true", help="take the subfolders of folder inputs too"
    )
    pad.add_argument(
        "--padding",
        type=_integer(0, what="a non-negative whole number of pixels"),
        nargs="+",
        default=[32],
        metavar="P",
        help="P (all sides), LR TB, or L T R B pixels (default 32)",
    )
    kind = pad.add_mutually_exclusive_group()
    kind.add_argument("--mode", choices=STANDARD_MODES, help="a standard padding mode")
    kind.add_argument("--brick", action="store_true", help="a procedural brick wall (the default)")
    kind.add_argument("--texture", type=Path, metavar="FILE", help="tile this image instead")
    pad.add_argument(
        "--fill", type=_number, nargs="+", metavar="V", help="--mode constant's value(s), default 0"
    )
    pad.add_argument(
        "--stagger",
        type=_integer(*_INT64),
        metavar="N",
        help="shift in px of each row of tiles against the row above (default: the brick "
        f"wall's running bond, running_bond_stagger() = {DEFAULT_BRICK_STAGGER} px for the "
        "default brick; 0 for --texture)",
    )
    pad.add_argument(
        "--seed",
        type=_integer(_INT64[0], 2**64 - 1),
        help="brick wall seed, from -2**63 to 2**64-1 (default 0)",
    )
    pad.add_argument(
        "--format",
        metavar="FMT",
        help="write every output in this format (png, jpeg, webp, tiff, ...), suffix changed; "
        "default: each input's own format",
    )
    pad.add_argument(
        "--quality",
        type=_integer(1, 100),
        metavar="Q",
        help="JPEG/WebP quality 1-100 (default 95 for JPEG, Pillow's 80 for WebP)",
    )
    pad.add_argument(
        "--workers",
        type=_integer(0),
        metavar="N",
        help="processes that decode, pad and encode (default: every core, fewer for a few "
        "files; 0: this process only)",
    )
    pad.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help="show count, images/s and ETA on stderr (default: when stderr is a terminal)",
    )
    pad.add_argument(
        "--keep-going",
        action="store_true",
        help="pad every input that can be padded; name each one that cannot on stderr, and "
        "exit with status 1",
    )
    pad.add_argument(
        "--skip-existing",
        action="store_true",
        help="leave an output that already exists alone (resumes an interrupted run)",
    )
    pad.add_argument(
        "--fsync",
        action="store_true",
        help="flush every output to disk before it is renamed into place, so that it survives "
        "a power cut or a crash of the system too (slower: one disk flush per file)",
    )
    pad.add_argument(
        "--dry-run", action="store_true", help="check everything, list what would be written"
    )
    pad.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="one line per file written (and the traceback of an unexpected error)",
    )
    return parser
