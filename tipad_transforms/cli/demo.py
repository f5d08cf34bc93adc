"""``tipad demo``: the bundled samples padded every way in one labelled gallery PNG, then the
timing table (:mod:`.timing`)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import PIL.Image

from .._version import __version__
from .arguments import UsageError

__all__ = ["Column", "demo_columns", "render_gallery", "run", "stripes"]


def run(args: argparse.Namespace) -> int:
    """Write ``args.out/gallery.png`` and print the timing table; the exit status."""
    from ..assets import SAMPLE_NAMES, load_sample
    from .timing import time_paddings, timing_table
    from .writing import write_atomically

    start = time.perf_counter()
    out_dir: Path = args.out
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {str(out_dir)!r}: {e}") from None
    samples = [(name, load_sample(name)) for name in SAMPLE_NAMES]
    gallery = render_gallery(samples, demo_columns(args.padding), args.padding)
    target = out_dir / "gallery.png"
    try:
        write_atomically(gallery, target, "PNG", {}, out_dir.resolve())
    except OSError as e:
        raise UsageError(f"cannot write {str(target)!r}: {e}") from None
    print(
        f"Gallery: {target}  ({gallery.width}x{gallery.height} px; {len(samples)} images x 7 "
        f"paddings, made in {time.perf_counter() - start:.1f} s)\n"
    )
    try:
        rows = time_paddings(args.padding, args.runs, args.batch, args.device)
    except ValueError as e:
        raise UsageError(f"--device: {e}") from None
    print(timing_table(rows, args.padding, args.runs, args.batch, args.device))
    print(f"\nDone in {time.perf_counter() - start:.1f} s. Open {target.resolve()} to look.")
    return 0


@dataclass
class Column:
    title: str
    subtitle: str
    fn: Callable[[PIL.Image.Image], PIL.Image.Image]


def stripes(period: int = 16) -> PIL.Image.Image:
    """Diagonal two-colour stripes that tile seamlessly (period divides the tile size)."""
    import numpy as np

    size = 2 * period
    yy, xx = np.mgrid[0:size, 0:size]
    band = ((xx + yy) // (period // 2)) % 2 == 0
    # Navy on cream: reads as a texture at a glance, unlike any of the photos' own borders.
    a, b = np.array([38, 70, 140], np.uint8), np.array([238, 232, 214], np.uint8)
    return PIL.Image.fromarray(np.where(band[..., None], a, b).astype(np.uint8))


def demo_columns(padding: int) -> list[Column]:
    from ..functional import brick_channels, pad
    from ..functional._pil import pil_texture
    from ..transforms import BrickPad, TexturePad

    tile = stripes()
    bricks: dict[int, BrickPad] = {}

    def brick(img: PIL.Image.Image) -> PIL.Image.Image:
        channels = brick_channels(len(img.getbands()))
        if channels not in bricks:
            bricks[channels] = BrickPad(padding, channels=channels)
        out: PIL.Image.Image = bricks[channels](img)
        return out

    def textured(img: PIL.Image.Image) -> PIL.Image.Image:
        out: PIL.Image.Image = TexturePad(padding, pil_texture(img, tile))(img)
        return out

    def standard(mode: str) -> Callable[[PIL.Image.Image], PIL.Image.Image]:
        return lambda img: pad(img, padding, padding_mode=mode)

    return [
        Column("BrickPad", "procedural running bond", brick),
        Column("TexturePad", "any tile, here stripes", textured),
        Column("constant", "fill=0 (clear on RGBA)", standard("constant")),
        Column("edge", "repeat the last pixel", standard("edge")),
        Column("reflect", "mirror, edge not repeated", standard("reflect")),
        Column("symmetric", "mirror, edge repeated", standard("symmetric")),
        Column("circular", "wrap around", standard("circular")),
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
_KINDS = {"RGB": "RGB photo", "RGBA": "RGBA clip art", "L": "grayscale (L)"}


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


def _dashed_rect(draw: Any, box: tuple[int, int, int, int], dash: int = 5) -> None:
    """A 2-px outline just outside ``box`` (x0, y0, x1, y1 exclusive): black dashes on white,
    since one colour alone vanishes somewhere (white on mortar, black on a navy stripe)."""
    x0, y0, x1, y1 = box[0] - 2, box[1] - 2, box[2] + 1, box[3] + 1  # inclusive outer corners
    draw.rectangle([x0, y0, x1, y1], outline=(255, 255, 255), width=2)
    for x in range(x0, x1 + 1, 2 * dash):
        xe = min(x + dash - 1, x1)
        draw.rectangle([x, y0, xe, y0 + 1], fill=(0, 0, 0))
        draw.rectangle([x, y1 - 1, xe, y1], fill=(0, 0, 0))
    for y in range(y0, y1 + 1, 2 * dash):
        ye = min(y + dash - 1, y1)
        draw.rectangle([x0, y, x0 + 1, ye], fill=(0, 0, 0))
        draw.rectangle([x1 - 1, y, x1, ye], fill=(0, 0, 0))


def render_gallery(
    samples: list[tuple[str, PIL.Image.Image]], columns: list[Column], padding: int
) -> PIL.Image.Image:
    """One RGB image: a row per ``(name, image)`` sample, a column per padding, labelled.

    ``padding`` is the pixels every column added on each side (it places the dashed outline of
    the original image). Raises RuntimeError when a column changed a sample's PIL mode.
    """
    from PIL import ImageDraw

    cells = [[col.fn(img) for col in columns] for _, img in samples]
    for (name, img), row in zip(samples, cells, strict=True):
        for col, out in zip(columns, row, strict=True):
            if out.mode != img.mode:  # the demo doubles as a smoke test of mode keeping
                raise RuntimeError(f"{col.title} turned {name} from {img.mode} into {out.mode}")

    title_f, head_f, sub_f, label_f = _font(30), _font(18), _font(14), _font(16)
    gap, margin = 14, 24
    captions = [
        [_KINDS.get(img.mode, f"mode {img.mode}"), name, f"{img.width}x{img.height} px"]
        for name, img in samples
    ]
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
        f"Each image padded by {padding} px on every side; the black-and-white dashes mark the "
        "original image. Output keeps the input's PIL mode (RGB, RGBA, L).",
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

    from ..backends.taichi import TAICHI

    draw.text(
        (margin, height - margin - footer_h + 14),
        f"tipad_transforms {__version__} · torch {torch.__version__} · "
        f"{TAICHI.describe()} · made by `tipad demo`",
        font=sub_f,
        fill=_MUTED,
    )
    return canvas
