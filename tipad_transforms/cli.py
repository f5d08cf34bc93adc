"""The ``tipad`` command line (also ``python -m tipad_transforms``).

``tipad demo``  pads the bundled sample images in every mode, writes one labelled gallery PNG
                and prints a timing table against ``torch.nn.functional.pad``.
``tipad pad``   pads image files (any format Pillow reads) and writes them, modes kept.
``tipad --version``

Errors in the arguments or the files exit with status 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import PIL.Image

from ._version import __version__

if TYPE_CHECKING:  # torch is imported lazily: `tipad --help` and `--version` stay instant
    import torch

__all__ = ["build_parser", "main"]

STANDARD_MODES = ("constant", "edge", "reflect", "symmetric", "circular")


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


# -- argument parsing ---------------------------------------------------------------------


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of pixels, got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"padding must be non-negative, got {value}")
    return value


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``tipad`` argument parser (subcommands ``demo`` and ``pad``)."""
    parser = argparse.ArgumentParser(
        prog="tipad",
        description="Texture padding for images and tensors, one fused Taichi kernel per call.",
    )
    from ._runtime import taichi_backend  # names the Taichi without importing it

    parser.add_argument(
        "--version", action="version", version=f"tipad {__version__} ({taichi_backend()})"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    demo = sub.add_parser(
        "demo",
        help="pad the bundled sample images every way, save a gallery, time the kernels",
        description="Pad the bundled sample images with BrickPad, a custom TexturePad and every "
        "standard mode; write one labelled gallery PNG; print median timings against "
        "torch.nn.functional.pad.",
    )
    demo.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    demo.add_argument(
        "--padding", type=_non_negative_int, default=48, help="pixels on every side (default 48)"
    )
    demo.add_argument(
        "--runs", type=_positive_int, default=5, help="least timed runs per measurement (default 5)"
    )
    demo.add_argument(
        "--batch", type=_positive_int, default=64, help="batch size of the timed batch (64)"
    )
    demo.add_argument(
        "--device", default="cpu", help="device for the timings, e.g. cpu or cuda (default cpu)"
    )

    pad = sub.add_parser(
        "pad",
        help="pad image files, keeping their mode",
        description="Pad image files (any format Pillow reads) and write them to OUTDIR under "
        "the same names, in the same mode. Without --mode the border is a brick wall (or "
        "--texture FILE).",
        epilog="Give --padding after the input files (it takes 1, 2 or 4 numbers). Fill values "
        "are in the image's own units: 0-255 for 8-bit modes (mode '1' too: 255 is white), "
        "0-65535 for 16-bit, one number or one per band.",
    )
    pad.add_argument("inputs", nargs="+", type=Path, metavar="IN", help="image files")
    pad.add_argument("-o", "--out", type=Path, required=True, metavar="OUTDIR")
    pad.add_argument(
        "--padding",
        type=_non_negative_int,
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
        type=int,
        metavar="N",
        help="shift of each row of tiles (default: half a brick for --brick, 0 for --texture)",
    )
    pad.add_argument("--seed", type=int, help="brick wall seed (default 0)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tipad`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help, --version and usage errors
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    try:
        if args.command == "demo":
            return _demo(args)
        return _pad_files(args)
    except CliError as e:
        print(f"tipad: error: {e}", file=sys.stderr)
        return 2


# -- tipad pad ----------------------------------------------------------------------------


def _padding(values: list[int]) -> tuple[int, ...]:
    if len(values) not in (1, 2, 4):
        raise CliError(f"--padding takes 1, 2 or 4 numbers (P, LR TB or L T R B), got {values}")
    return tuple(values)


def _open_image(path: Path, what: str, *, load: bool = True) -> PIL.Image.Image:
    """Open ``path`` (and decode it, with ``load``), or raise CliError saying why not."""
    if not path.is_file():
        raise CliError(f"{what} {str(path)!r} does not exist or is not a file")
    try:
        with PIL.Image.open(path) as img:
            if load:
                frames = int(getattr(img, "n_frames", 1))
                if frames > 1:
                    print(f"tipad: {path}: {frames} frames, padding the first", file=sys.stderr)
                img.load()
            return img
    except (PIL.UnidentifiedImageError, OSError, ValueError) as e:
        raise CliError(f"cannot read {what} {str(path)!r}: {e}") from None


def _pad_files(args: argparse.Namespace) -> int:
    padding = _padding(args.padding)
    if args.fill is not None and args.mode != "constant":
        raise CliError("--fill applies to --mode constant only")
    if args.stagger is not None and args.mode is not None:
        raise CliError("--stagger applies to --brick and --texture only")
    if args.seed is not None and (args.mode is not None or args.texture is not None):
        raise CliError("--seed applies to --brick only")
    out_dir: Path = args.out
    names = [p.name for p in args.inputs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CliError(f"two inputs share the file name {dupes[0]!r}; they would overwrite")
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"output {str(out_dir)!r} exists and is not a folder")
    for path in args.inputs:
        if (out_dir / path.name).resolve() == path.resolve():
            raise CliError(f"writing {str(path)!r} to {str(out_dir)!r} would overwrite the input")
    # Check every header first so that a bad file stops the run before anything is written;
    # decode one image at a time below.
    for p in args.inputs:
        _open_image(p, "input", load=False)
    texture = _open_image(args.texture, "texture") if args.texture is not None else None

    from PIL import ImageOps

    from .functional import pad, running_bond_stagger, texture_pad
    from .functional._pil import pil_texture

    brick_img, brick_stagger = None, 0
    if args.mode is None and texture is None:
        brick_img = _brick_image(0 if args.seed is None else args.seed)
        brick_stagger = running_bond_stagger()
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in args.inputs:
        img = _open_image(path, "input")
        fmt = img.format
        img = ImageOps.exif_transpose(img)  # EXIF is not kept: bake its orientation in
        try:
            if args.mode is not None:
                fill = args.fill if args.fill is None or len(args.fill) > 1 else args.fill[0]
                result = pad(img, padding, args.mode, 0 if fill is None else fill)
            elif texture is not None:
                stagger = args.stagger if args.stagger is not None else 0
                result = texture_pad(img, padding, pil_texture(img, texture), stagger=stagger)
            else:
                assert brick_img is not None
                stagger = args.stagger if args.stagger is not None else brick_stagger
                result = texture_pad(img, padding, pil_texture(img, brick_img), stagger=stagger)
        except (TypeError, ValueError) as e:
            raise CliError(f"{path}: {e}") from None
        target = out_dir / path.name
        try:
            options: dict[str, Any] = {"quality": 95} if fmt == "JPEG" else {}
            result.save(target, format=fmt, **options)
        except (OSError, ValueError, KeyError) as e:
            raise CliError(f"cannot write {str(target)!r}: {e}") from None
        w0, h0 = img.size
        w1, h1 = result.size
        print(f"{path} -> {target}  ({result.mode}, {w0}x{h0} -> {w1}x{h1})")
    return 0


def _brick_image(seed: int) -> PIL.Image.Image:
    """The default brick tile as an 8-bit RGB PIL image."""
    from .functional import make_brick_texture

    tile = make_brick_texture(seed=seed)
    return _to_pil(tile)


def _to_pil(tile: torch.Tensor) -> PIL.Image.Image:
    """A ``(C, H, W)`` float [0, 1] tensor (C in 1, 3, 4) as an 8-bit PIL image."""
    import torch

    arr = (tile.clamp(0, 1) * 255).round().to(dtype=torch.uint8)
    arr = arr[0] if arr.shape[0] == 1 else arr.permute(1, 2, 0)
    return PIL.Image.fromarray(arr.contiguous().numpy())


# -- tipad demo ---------------------------------------------------------------------------


@dataclass
class _Column:
    title: str
    subtitle: str
    fn: Callable[[PIL.Image.Image], PIL.Image.Image]


def _stripes(period: int = 16) -> PIL.Image.Image:
    """Diagonal two-colour stripes that tile seamlessly (period divides the tile size)."""
    import numpy as np

    size = 2 * period
    yy, xx = np.mgrid[0:size, 0:size]
    band = ((xx + yy) // (period // 2)) % 2 == 0
    # Navy on cream: reads as a texture at a glance, unlike any of the photos' own borders.
    a, b = np.array([38, 70, 140], np.uint8), np.array([238, 232, 214], np.uint8)
    return PIL.Image.fromarray(np.where(band[..., None], a, b).astype(np.uint8))


def _demo_columns(padding: int) -> list[_Column]:
    from .functional import brick_channels, pad
    from .functional._pil import pil_texture
    from .transforms import BrickPad, TexturePad

    stripes = _stripes()
    bricks: dict[int, BrickPad] = {}

    def brick(img: PIL.Image.Image) -> PIL.Image.Image:
        channels = brick_channels(len(img.getbands()))
        if channels not in bricks:
            bricks[channels] = BrickPad(padding, channels=channels)
        out: PIL.Image.Image = bricks[channels](img)
        return out

    def textured(img: PIL.Image.Image) -> PIL.Image.Image:
        out: PIL.Image.Image = TexturePad(padding, pil_texture(img, stripes))(img)
        return out

    def standard(mode: str) -> Callable[[PIL.Image.Image], PIL.Image.Image]:
        return lambda img: pad(img, padding, mode)

    return [
        _Column("BrickPad", "procedural running bond", brick),
        _Column("TexturePad", "any tile, here stripes", textured),
        _Column("constant", "fill=0 (clear on RGBA)", standard("constant")),
        _Column("edge", "repeat the last pixel", standard("edge")),
        _Column("reflect", "mirror, edge not repeated", standard("reflect")),
        _Column("symmetric", "mirror, edge repeated", standard("symmetric")),
        _Column("circular", "wrap around", standard("circular")),
    ]


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ValueError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


_BG = (250, 250, 248)
_INK = (28, 30, 34)
_MUTED = (110, 114, 122)
_OUTLINE = (0, 190, 255)


def _checkerboard(size: tuple[int, int], cell: int = 8) -> PIL.Image.Image:
    import numpy as np

    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    light = ((yy // cell + xx // cell) % 2 == 0)[..., None]
    return PIL.Image.fromarray(np.where(light, 236, 204).astype(np.uint8).repeat(3, axis=2))


def _displayable(img: PIL.Image.Image) -> PIL.Image.Image:
    """RGB for the gallery: transparency shown over a checkerboard, gray kept gray."""
    if "A" in img.getbands() or "transparency" in img.info:
        rgba = img.convert("RGBA")
        board = _checkerboard(rgba.size).convert("RGBA")
        return PIL.Image.alpha_composite(board, rgba).convert("RGB")
    return img.convert("RGB")


def _dashed_rect(draw: Any, box: tuple[int, int, int, int], dash: int = 4) -> None:
    """A 1-px dashed outline just outside ``box`` (x0, y0, x1, y1 exclusive)."""
    x0, y0, x1, y1 = box[0] - 1, box[1] - 1, box[2], box[3]
    for x in range(x0, x1 + 1, 2 * dash):
        draw.line([(x, y0), (min(x + dash - 1, x1), y0)], fill=_OUTLINE)
        draw.line([(x, y1), (min(x + dash - 1, x1), y1)], fill=_OUTLINE)
    for y in range(y0, y1 + 1, 2 * dash):
        draw.line([(x0, y), (x0, min(y + dash - 1, y1))], fill=_OUTLINE)
        draw.line([(x1, y), (x1, min(y + dash - 1, y1))], fill=_OUTLINE)


_KINDS = {"RGB": "RGB photo", "RGBA": "RGBA clip art", "L": "grayscale (L)"}


def _caption(name: str, img: PIL.Image.Image) -> list[str]:
    kind = _KINDS.get(img.mode, f"mode {img.mode}")
    return [kind, name, f"{img.width}x{img.height} px"]


def _gallery(
    samples: list[tuple[str, PIL.Image.Image]], columns: list[_Column], padding: int
) -> PIL.Image.Image:
    from PIL import ImageDraw

    cells = [[col.fn(img) for col in columns] for _, img in samples]
    for (name, img), row in zip(samples, cells, strict=True):
        for col, out in zip(columns, row, strict=True):
            if out.mode != img.mode:  # the demo doubles as a smoke test of mode keeping
                raise RuntimeError(f"{col.title} turned {name} from {img.mode} into {out.mode}")

    title_f, head_f, sub_f, label_f = _font(30), _font(18), _font(14), _font(16)
    gap, margin = 14, 24
    captions = [_caption(name, img) for name, img in samples]
    measure = ImageDraw.Draw(PIL.Image.new("RGB", (1, 1)))
    label_w = 24 + max(
        int(measure.textlength(text, font=label_f if i == 0 else sub_f))
        for lines in captions
        for i, text in enumerate(lines)
    )
    col_w = [max(r[c].width for r in cells) for c in range(len(columns))]
    row_h = [max(out.height for out in row) for row in cells]
    header_h, title_h, footer_h = 52, 70, 34
    width = margin * 2 + label_w + sum(col_w) + gap * (len(columns) - 1)
    height = margin + title_h + header_h + sum(row_h) + gap * (len(cells) - 1) + footer_h + margin
    canvas = PIL.Image.new("RGB", (width, height), _BG)
    draw = ImageDraw.Draw(canvas)

    draw.text((margin, margin), "tipad_transforms: padding modes", font=title_f, fill=_INK)
    draw.text(
        (margin, margin + 36),
        f"Each image padded by {padding} px on every side; the dashed line marks the original "
        "image. Output keeps the input's PIL mode (RGB, RGBA, L).",
        font=sub_f,
        fill=_MUTED,
    )
    x = margin + label_w
    y = margin + title_h
    for col, w in zip(columns, col_w, strict=True):
        draw.text((x + w // 2, y + 4), col.title, font=head_f, fill=_INK, anchor="mt")
        draw.text((x + w // 2, y + 27), col.subtitle, font=sub_f, fill=_MUTED, anchor="mt")
        x += w + gap
    y += header_h
    for (_, img), lines, row, h in zip(samples, captions, cells, row_h, strict=True):
        w0, h0 = img.size
        top = y + h // 2 - 10 * len(lines)
        for i, text in enumerate(lines):
            font, ink = (label_f, _INK) if i == 0 else (sub_f, _MUTED)
            draw.text((margin, top + 20 * i + (0 if i == 0 else 4)), text, font=font, fill=ink)
        x = margin + label_w
        for out, w in zip(row, col_w, strict=True):
            ox, oy = x + (w - out.width) // 2, y + (h - out.height) // 2
            canvas.paste(_displayable(out), (ox, oy))
            _dashed_rect(draw, (ox + padding, oy + padding, ox + padding + w0, oy + padding + h0))
            x += w + gap
        y += h + gap
    import torch

    from ._runtime import taichi_backend

    draw.text(
        (margin, height - margin - footer_h + 14),
        f"tipad_transforms {__version__} · torch {torch.__version__} · "
        f"{taichi_backend()} · made by `tipad demo`",
        font=sub_f,
        fill=_MUTED,
    )
    return canvas


@dataclass
class _Timing:
    label: str
    batch_ms: float
    image_ms: float


def _median_ms(fn: Callable[[], Any], runs: int, sync: Callable[[], None]) -> float:
    """Median wall time of ``fn`` in ms: at least ``runs`` runs, more (up to 200) for fast calls
    until 0.2 s have passed, so microsecond timings are not one scheduler hiccup."""
    fn()  # warm-up: first calls compile the kernel and fill caches
    sync()
    times: list[float] = []
    while len(times) < runs or (sum(times) < 0.2 and len(times) < 200):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _timings(padding: int, runs: int, batch_size: int, device: str) -> list[_Timing]:
    import numpy as np
    import torch
    import torch.nn.functional as nnF

    from .functional import pad
    from .transforms import BrickPad, TexturePad

    try:
        dev = torch.device(device)
        gen = torch.Generator().manual_seed(0)
        batch = torch.randint(0, 256, (batch_size, 3, 224, 224), dtype=torch.uint8, generator=gen)
        batch = batch.to(dev)
    except (RuntimeError, AssertionError) as e:
        raise CliError(f"--device {device!r} is not usable here: {e}") from None
    image = batch[0].clone()

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    stripes = torch.from_numpy(np.array(_stripes())).permute(2, 0, 1).to(dev)
    brick_t, texture_t = BrickPad(padding), TexturePad(padding, stripes.contiguous())

    def standard(mode: str) -> Callable[[torch.Tensor], Any]:
        return lambda x: pad(x, padding, mode)

    cases: list[tuple[str, Callable[[torch.Tensor], Any]]] = [
        ("BrickPad", brick_t),
        ("TexturePad (stripes)", texture_t),
        *((f"pad {m}", standard(m)) for m in STANDARD_MODES),
        ("torch F.pad constant", lambda x: nnF.pad(x, [padding] * 4)),
    ]
    rows = []
    for label, fn in cases:
        batch_ms = _median_ms(lambda: fn(batch), runs, sync)  # noqa: B023 (called right away)
        image_ms = _median_ms(lambda: fn(image), runs, sync)  # noqa: B023
        rows.append(_Timing(label, batch_ms, image_ms))
    return rows


def _timing_table(rows: list[_Timing], padding: int, runs: int, batch: int, device: str) -> str:
    import torch

    yard = rows[-1]
    out_bytes = batch * 3 * (224 + 2 * padding) ** 2
    threads = f" ({torch.get_num_threads()} threads)" if device == "cpu" else ""
    widths = (22, 10, 12, 9, 10, 10)  # label | batch: time, throughput, ratio | image: time, ratio

    def line(*cells: str) -> str:
        label, *rest = cells
        parts = [f"{label:<{widths[0]}}"] + [
            f"{c:>{w}}" for c, w in zip(rest, widths[1:], strict=True)
        ]
        return " ".join(parts[:4]) + "  " + " ".join(parts[4:])

    batch_w, image_w = sum(widths[1:4]) + 2, sum(widths[4:]) + 1
    groups = f"{'':{widths[0]}} {f'batch {batch}x3x224x224':^{batch_w}}  "
    groups += f"{'one image 3x224x224':^{image_w}}"
    header = line("mode", "time", "throughput", "vs F.pad", "time", "vs F.pad")
    rule = "-" * len(header)
    lines = [
        f"Padding uint8 images by {padding} px on {device}{threads}; median of >= {runs} runs "
        "after a warm-up.",
        "",
        groups.rstrip(),
        header,
        rule,
    ]
    for r in rows:
        if r is yard:
            lines.append(rule)
        gbs = out_bytes / (r.batch_ms * 1e-3) / 1e9
        lines.append(
            line(
                r.label,
                f"{r.batch_ms:.2f} ms",
                f"{gbs:.2f} GB/s",
                f"{r.batch_ms / yard.batch_ms:.2f}x",
                f"{r.image_ms:.3f} ms",
                f"{r.image_ms / yard.image_ms:.2f}x",
            )
        )
    lines += [
        "",
        "throughput: output bytes written per second. vs F.pad: time relative to",
        "torch.nn.functional.pad (a constant border) on the same input; below 1 is faster.",
    ]
    return "\n".join(lines)


def _demo(args: argparse.Namespace) -> int:
    from .assets import SAMPLE_NAMES, load_sample

    start = time.perf_counter()
    out_dir: Path = args.out
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"cannot create {str(out_dir)!r}: {e}") from None
    samples = [(name, load_sample(name)) for name in SAMPLE_NAMES]
    gallery = _gallery(samples, _demo_columns(args.padding), args.padding)
    target = out_dir / "gallery.png"
    try:
        gallery.save(target)
    except OSError as e:
        raise CliError(f"cannot write {str(target)!r}: {e}") from None
    gallery_s = time.perf_counter() - start
    print(
        f"Gallery: {target}  ({gallery.width}x{gallery.height} px; {len(samples)} images x 7 "
        f"paddings, made in {gallery_s:.1f} s)\n"
    )
    rows = _timings(args.padding, args.runs, args.batch, args.device)
    print(_timing_table(rows, args.padding, args.runs, args.batch, args.device))
    print(f"\nDone in {time.perf_counter() - start:.1f} s. Open {target.resolve()} to look.")
    return 0
