"""Draw every figure in the docs: ``python docs/make_figures.py`` (writes ``docs/figures/*.png``).

Every picture is computed by the package itself (``tipad_transforms.functional``) on the sample
images bundled in ``tipad_transforms.assets``; where those are missing (a partial checkout) it
paints a small synthetic landscape instead, so the script always runs. It needs matplotlib (the
``bench`` extra). Each PNG is kept under 300 KB.

The benchmark figures (``bench-*``) and the tables of ``docs/benchmarks.md`` (``bench-tables``)
are drawn from the recorded runs in ``docs/results``; ``--check`` only compares the tables with
them.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import re
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
import PIL.ImageDraw
import torch
from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, Rectangle

import tipad_transforms
import tipad_transforms.functional as F
from tipad_transforms.functional import pad as pad_image_in

FIGURES = Path(__file__).resolve().parent / "figures"
MAX_BYTES = 300_000

INK = "#222222"
ACCENT = "#d62728"
BLUE = "#1f5fa8"
plt.rcParams.update(
    {
        "font.family": "DejaVu Sans",
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.titleweight": "bold",
        "figure.facecolor": "white",
        "savefig.facecolor": "white",
    }
)


# ------------------------------------------------------------------------------------ inputs ---


def asset_paths() -> list[Path]:
    """The bundled sample images (``tipad_transforms.assets``), or ``[]`` if there are none."""
    try:
        from tipad_transforms import assets
    except ImportError:
        return []
    return [p for p in assets.sample_image_paths() if p.is_file()]


def synthetic_landscape(size: int = 256, seed: int = 0) -> PIL.Image.Image:
    """A painted scene (sky, sun, hills, a tree): a stand-in when no asset is bundled."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0.0, 1.0, size)[:, None, None]
    sky = (1 - y) * np.array([0.38, 0.62, 0.92]) + y * np.array([0.85, 0.92, 0.98])
    img = PIL.Image.fromarray((np.broadcast_to(sky, (size, size, 3)) * 255).astype(np.uint8))
    draw = PIL.ImageDraw.Draw(img)
    s = size / 256
    draw.ellipse([180 * s, 28 * s, 224 * s, 72 * s], fill=(255, 214, 90))
    xs = np.arange(size + 1)
    for base, amp, colour in ((150, 18, (96, 160, 84)), (185, 12, (62, 128, 60))):
        ridge = base * s + amp * s * np.sin(xs / (37 * s) + base)
        draw.polygon(
            [
                (0, size),
                *((float(x), float(r)) for x, r in zip(xs, ridge, strict=True)),
                (size, size),
            ],
            fill=colour,
        )
    draw.rectangle([58 * s, 150 * s, 68 * s, 200 * s], fill=(110, 74, 44))
    draw.ellipse([34 * s, 96 * s, 92 * s, 162 * s], fill=(44, 104, 50))
    arr = np.asarray(img).astype(np.float64)
    arr += rng.normal(0.0, 4.0, arr.shape)  # a little grain, so it reads as a photograph
    return PIL.Image.fromarray(arr.clip(0, 255).astype(np.uint8))


def load_images(count: int, size: int) -> list[torch.Tensor]:
    """``count`` square ``(3, size, size)`` uint8 images: the bundled assets, else synthetic."""
    paths = asset_paths()
    images = []
    for i in range(count):
        if paths:
            img = PIL.Image.open(paths[i % len(paths)])
            if img.mode in ("RGBA", "LA", "P"):  # clip art: lay it on a light card
                rgba = img.convert("RGBA")
                img = PIL.Image.new("RGB", rgba.size, (238, 236, 230))
                img.paste(rgba, mask=rgba.getchannel("A"))
            img = img.convert("RGB")
            side = min(img.size)
            # portraits: keep the head, crop more from the bottom
            left, top = (img.width - side) // 2, (img.height - side) // 4
            img = img.crop((left, top, left + side, top + side))
        else:
            img = synthetic_landscape(256, seed=i)
        img = img.resize((size, size), PIL.Image.Resampling.LANCZOS)
        images.append(torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous())
    return images


def dots_texture(size: int = 24, seed: int = 0) -> torch.Tensor:
    """A ``(3, size, size)`` float tile: a dot on a soft ground (an arbitrary user texture)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    c = (size - 1) / 2
    r = ((yy - c) ** 2 + (xx - c) ** 2).float().sqrt()
    ground = torch.tensor([0.93, 0.87, 0.70])[:, None, None]
    dot = torch.tensor([0.20, 0.45, 0.62])[:, None, None]
    t = torch.where(r < size * 0.3, dot, ground)
    return (t + 0.02 * torch.randn(t.shape, generator=g)).clamp(0, 1)


def stripes_texture(size: int = 24) -> torch.Tensor:
    """A ``(3, size, size)`` float tile of diagonal stripes that wraps seamlessly."""
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    band = ((xx + yy) % size) < size // 2
    a = torch.tensor([0.36, 0.58, 0.40])[:, None, None]
    b = torch.tensor([0.86, 0.91, 0.80])[:, None, None]
    return torch.where(band, a, b)


def to_hwc(t: torch.Tensor) -> np.ndarray:
    """``(C, H, W)`` tensor (uint8 or float in [0, 1]) -> ``(H, W, C)`` array for imshow."""
    arr = t.permute(1, 2, 0).numpy()
    return arr if arr.dtype == np.uint8 else arr.clip(0, 1)


# ----------------------------------------------------------------------------------- helpers ---


def save(fig: plt.Figure, name: str, dpi: int = 110) -> Path:
    """Write ``fig`` as an optimised PNG and check its size budget."""
    FIGURES.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.08)
    plt.close(fig)
    path = FIGURES / name
    PIL.Image.open(buf).convert("RGB").save(path, optimize=True)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over the {MAX_BYTES} byte budget")
    print(f"wrote {path.relative_to(FIGURES.parent.parent)} ({size // 1024} KB)")
    return path


def show(ax: Axes, t: torch.Tensor, title: str | None = None) -> None:
    """Image ``t`` with pixel ``(Y, X)`` covering ``[X, X+1] x [Y, Y+1]``, no ticks."""
    h, w = t.shape[-2:]
    ax.imshow(to_hwc(t), interpolation="nearest", extent=(0, w, h, 0))
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    if title:
        ax.set_title(title)


def outline(ax: Axes, x0: float, y0: float, w: float, h: float, **kw: object) -> None:
    """A dashed rectangle: black dashes over a white line (visible on any border, the white
    mortar of a brick wall included), or one colour when ``ec`` is given."""
    style: dict[str, object] = {"fill": False, "lw": 1.2, "ls": "--"}
    style.update(kw)
    if "ec" not in kw:
        solid = {**style, "ls": "-", "ec": "white"}
        ax.add_patch(Rectangle((x0, y0), w, h, **solid))  # type: ignore[arg-type]
        style["ec"] = "black"
    ax.add_patch(Rectangle((x0, y0), w, h, **style))  # type: ignore[arg-type]


def arrow(ax: Axes, start: Sequence[float], end: Sequence[float], **kw: object) -> None:
    style: dict[str, object] = {"arrowstyle": "-|>", "mutation_scale": 12, "lw": 1.6, "color": INK}
    style.update(kw)
    ax.add_patch(FancyArrowPatch(tuple(start), tuple(end), **style))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- figures ---


def fig_hero() -> None:
    """README: one image, then brick padding, then a texture with an offset, then reflect."""
    (img,) = load_images(1, 192)
    pad = 56
    panels = [
        ("input (192×192)", F.pad(img, pad, fill=255)),
        ("brick_pad / BrickPad", F.brick_pad(img, pad)),
        ("texture_pad, any tile", F.texture_pad(img, pad, dots_texture(), offset=(5, 9))),
        ('pad(padding_mode="reflect")', pad_image_in(img, pad, padding_mode="reflect")),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(12.4, 3.5))
    for ax, (title, t) in zip(axes, panels, strict=True):
        show(ax, t, title)
        if title.startswith("input"):
            outline(ax, pad, pad, 192, 192, ec="#555555")
        else:
            outline(ax, pad, pad, 192, 192)
    save(fig, "hero.png", dpi=100)


def fig_modes() -> None:
    """Padding guide: every mode on one small image."""
    (img,) = load_images(1, 64)
    pad = 28
    tile = dots_texture(16)
    modes: list[tuple[str, torch.Tensor]] = [
        ("input", F.pad(img, pad, fill=255)),
        ("constant (fill=(40, 40, 40))", pad_image_in(img, pad, fill=(40, 40, 40))),
        ("edge (replicate)", pad_image_in(img, pad, padding_mode="edge")),
        ("reflect", pad_image_in(img, pad, padding_mode="reflect")),
        ("symmetric", pad_image_in(img, pad, padding_mode="symmetric")),
        ("circular (wrap)", pad_image_in(img, pad, padding_mode="circular")),
        ("texture_pad (16×16 tile)", F.texture_pad(img, pad, tile)),
        ("brick_pad", F.brick_pad(img, pad, brick_size=(10, 22), mortar=2, bricks_per_tile=4)),
    ]
    fig, axes = plt.subplots(2, 4, figsize=(11.5, 6.3))
    for ax, (title, t) in zip(axes.flat, modes, strict=True):
        show(ax, t)
        ax.set_title(title, fontsize=10)
        if title == "input":
            outline(ax, pad, pad, 64, 64, ec="#555555", lw=1.0)
        else:
            outline(ax, pad, pad, 64, 64, lw=1.0)
    fig.suptitle("64×64 image, padding=28 on every side (dashed: the input)", y=0.995)
    fig.tight_layout(h_pad=1.6)
    save(fig, "modes.png")


def mapping_tile(th: int, tw: int) -> torch.Tensor:
    """A float ``(3, th, tw)`` tile whose pixels show their position; ``(0, 0)`` is red."""
    ty = torch.arange(th, dtype=torch.float32)[:, None].expand(th, tw)
    tx = torch.arange(tw, dtype=torch.float32)[None, :].expand(th, tw)
    r = 0.62 + 0.30 * tx / (tw - 1)
    g = 0.78 + 0.16 * ty / (th - 1)
    b = 0.95 - 0.25 * tx / (tw - 1)
    tile = torch.stack([r, g, b])
    tile[:, 0, 0] = torch.tensor([0.84, 0.15, 0.16])
    return tile


def draw_lattice(
    ax: Axes,
    canvas: tuple[int, int],
    padding: tuple[int, int, int, int],
    image: tuple[int, int],
    tile: tuple[int, int],
    stagger: int,
    offset: tuple[int, int],
) -> None:
    """Tile outlines of texture mode: row ``v`` spans ``Y in top + oy + v*th + [0, th)``."""
    out_h, out_w = canvas
    left, top, _, _ = padding
    h, w = image
    th, tw = tile
    oy, ox = offset
    for v in range(-4, 5):
        y0 = top + oy + v * th
        if y0 >= out_h or y0 + th <= 0:
            continue
        ya, yb = max(y0, 0), min(y0 + th, out_h)
        ax.plot([0, out_w], [y0, y0], color=INK, lw=0.9, clip_on=True)
        for u in range(-6, 8):
            x0 = left + ox + v * stagger + u * tw
            if 0 < x0 < out_w:
                ax.plot([x0, x0], [ya, yb], color=INK, lw=0.9)
    # the interior is the input, copied; the lattice carries on beneath it
    ax.add_patch(Rectangle((left, top), w, h, fc="#9a9a9a", ec="none", alpha=0.92))
    for v in range(-4, 5):
        y0 = top + oy + v * th
        if top <= y0 <= top + h:
            ax.plot([left, left + w], [y0, y0], color="white", lw=0.8, ls=(0, (2, 2)))
        ya, yb = max(y0, top), min(y0 + th, top + h)
        if ya >= yb:
            continue
        for u in range(-6, 8):
            x0 = left + ox + v * stagger + u * tw
            if left < x0 < left + w:
                ax.plot([x0, x0], [ya, yb], color="white", lw=0.8, ls=(0, (2, 2)))
    ax.text(left + w / 2, top + h - 1.6, "image (copied)", ha="center", va="bottom", color="white")
    ax.set_xlim(0, out_w)
    ax.set_ylim(out_h, 0)


def fig_mapping() -> None:
    """Padding guide: how texture mode lays its tile lattice around the image."""
    th, tw, s = 5, 8, 3
    h, w = 11, 16
    pads = (10, 8, 10, 8)
    left, top = pads[0], pads[1]
    tile = mapping_tile(th, tw)
    img = torch.full((3, h, w), 0.6)

    fig = plt.figure(figsize=(12.8, 3.75))
    grid = fig.add_gridspec(1, 3, width_ratios=[0.62, 1, 1], wspace=0.16)
    ax = fig.add_subplot(grid[0])
    show(ax, tile, f"texture (th={th}, tw={tw})")
    for y in range(th + 1):
        ax.plot([0, tw], [y, y], color="white", lw=0.6)
    for x in range(tw + 1):
        ax.plot([x, x], [0, th], color="white", lw=0.6)
    ax.set_xticks(np.arange(tw) + 0.5, [str(i) for i in range(tw)], fontsize=8)
    ax.set_yticks(np.arange(th) + 0.5, [str(i) for i in range(th)], fontsize=8)
    ax.tick_params(length=0)
    ax.set_xlabel("tx    (red: texture[:, 0, 0])")
    ax.set_ylabel("ty")
    ax.text(0.5, 0.5, "(0,0)", ha="center", va="center", color="white", fontsize=6.5)

    cases = [
        ((0, 0), "offset = (0, 0)"),
        ((2, 3), "offset = (oy, ox) = (2, 3)"),
    ]
    for i, (offset, title) in enumerate(cases):
        ax = fig.add_subplot(grid[i + 1])
        canvas = F.texture_pad(img, pads, tile, stagger=s, offset=offset)
        show(ax, canvas, title)
        out_h, out_w = canvas.shape[-2:]
        oy, ox = offset
        draw_lattice(ax, (out_h, out_w), pads, (h, w), (th, tw), s, offset)
        for v in (-1, 0, 1, 2):
            yc = top + oy + v * th + th / 2
            if 0 < yc < out_h:
                ax.text(-0.5, yc, f"v={v}", ha="right", va="center", fontsize=8, color=INK)
        # texture pixel (0, 0) of tile row v=0, tile column 0; the square marks (top, left)
        ax.plot(left + ox + 0.5, top + oy + 0.5, "o", ms=6, mfc=ACCENT, mec="white", mew=1.0)
        ax.plot(left, top, "s", ms=5, mfc="white", mec=INK, mew=0.9)
        if offset == (0, 0):
            ax.text(
                left + 1.6,
                top + 2.6,
                "texture (0, 0) lies on\nthe image's top-left pixel",
                color="white",
                fontsize=8,
                va="center",
                bbox={"fc": "#9a9a9a", "ec": "none", "pad": 1.5},
            )
            # row v=1 starts its tiles s pixels right of row v=0: show it in the right border
            x0 = left - tw
            yb = top + th
            ax.plot([x0, x0 + s], [yb, yb], color=BLUE, lw=3.5, solid_capstyle="butt")
            for xe in (x0, x0 + s):
                ax.plot([xe, xe], [yb - 1.2, yb + 1.2], color=BLUE, lw=2.0)
            ax.text(
                x0 + s / 2,
                yb + 1.6,
                f"s={s}",
                color=BLUE,
                fontsize=9,
                weight="bold",
                ha="center",
                va="top",
                bbox={"fc": "white", "ec": "none", "pad": 0.8, "alpha": 0.85},
            )
            ax.set_xlabel(
                f"stagger s={s}: each tile row is shifted s pixels right of the one above"
            )
        else:
            arrow(ax, (left, top), (left + ox + 0.2, top + oy + 0.2), color=ACCENT, lw=1.4)
            ax.text(
                left + ox + 1.4,
                top + oy + 1.0,
                "(oy, ox)",
                color="white",
                fontsize=9,
                va="top",
                weight="bold",
            )
            ax.set_xlabel("the whole lattice moves down oy and right ox")
        ax.xaxis.label.set_fontsize(9)
    fig.suptitle(
        f"texture_pad(x (3, {h}, {w}), padding={pads}, texture, stagger={s}, offset)",
        fontsize=11,
        y=1.0,
    )
    fig.text(
        0.5,
        0.03,
        "border pixel (Y, X):  y = Y - top - oy,  x = X - left - ox,  v = floor(y / th),  "
        "ty = y - v*th,  tx = (x - v*s) mod tw   ->   texture[:, ty, tx]",
        ha="center",
        va="top",
        fontsize=10,
        family="DejaVu Sans Mono",
    )
    save(fig, "texture-mapping.png")


def fig_large_padding() -> None:
    """Padding guide: ``[1, 2, 3, 4]`` padded by 6 on each side, numpy.pad semantics."""
    row = torch.tensor([[1, 2, 3, 4]], dtype=torch.int64)
    pad = 6
    modes = ["constant", "edge", "reflect", "symmetric", "circular"]
    colours = {0: "#f2f2f2", 1: "#fde0a6", 2: "#f7b267", 3: "#f4845f", 4: "#c8553d"}
    fig, ax = plt.subplots(figsize=(10.5, 3.3))
    n = 4 + 2 * pad
    for r, mode in enumerate(modes):
        values = pad_image_in(row, (pad, 0), padding_mode=mode)[0].tolist()
        for c, value in enumerate(values):
            inside = pad <= c < pad + 4
            ax.add_patch(
                Rectangle(
                    (c, r),
                    1,
                    1,
                    fc=colours[value],
                    ec=INK if inside else "white",
                    lw=1.6 if inside else 1.0,
                )
            )
            ax.text(c + 0.5, r + 0.52, str(value), ha="center", va="center", fontsize=10)
        ax.text(-0.3, r + 0.5, mode, ha="right", va="center", fontsize=10)
    ax.add_patch(Rectangle((pad, -0.02), 4, len(modes) + 0.04, fill=False, ec=INK, lw=2.2))
    ax.text(pad + 2, -0.25, "input", ha="center", va="bottom", fontsize=9)
    ax.text(pad / 2, -0.25, "← padding 6", ha="center", va="bottom", fontsize=9, color="#666666")
    ax.text(
        pad + 4 + pad / 2,
        -0.25,
        "padding 6 →",
        ha="center",
        va="bottom",
        fontsize=9,
        color="#666666",
    )
    ax.set_xlim(-2.4, n + 0.1)
    ax.set_ylim(len(modes) + 0.05, -0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    save(fig, "large-padding.png")


def fig_per_sample() -> None:
    """Padding guide: one call, a bank of textures, a texture and an offset per sample."""
    size, pad = 80, 26
    images = torch.stack(load_images(4, size))
    brick_options = {"brick_size": (10, 22), "mortar": 2, "bricks_per_tile": 4, "courses": 2}
    brick = F.make_brick_texture(**brick_options)  # (3, 24, 96): two courses of a running bond
    stagger = F.running_bond_stagger(**brick_options)  # whole bricks: the 24-px tiles ignore it
    bank = torch.stack(
        [brick, dots_texture(24).repeat(1, 1, 4), stripes_texture(24).repeat(1, 1, 4)]
    )
    th, tw = bank.shape[-2:]
    index = torch.tensor([0, 1, 2, 0])
    offset = torch.tensor([[0, 0], [5, 9], [0, 12], [6, 11]])
    out = F.texture_pad(images, pad, bank, stagger=stagger, offset=offset, texture_index=index)
    fig, axes = plt.subplots(1, 4, figsize=(11.6, 3.4))
    for b, ax in enumerate(axes):
        show(ax, out[b])
        oy, ox = offset[b].tolist()
        ax.set_title(
            f"sample {b}: texture_index={int(index[b])}\noffset=({oy}, {ox})", fontsize=9.5
        )
        outline(ax, pad, pad, size, size, lw=1.0)
    fig.suptitle(
        f"texture_pad(batch (4, 3, {size}, {size}), {pad}, bank (3, 3, {th}, {tw}), "
        f"stagger={stagger}, offset=(4, 2) tensor, texture_index=(4,) tensor): one launch",
        fontsize=10,
        y=1.02,
    )
    save(fig, "per-sample.png")


def fig_bricks() -> None:
    """API page: what ``make_brick_texture``'s options change."""
    (img,) = load_images(1, 72)
    pad = 36
    variants = [
        ("brick_pad(x, 36)\n(defaults)", {}),
        ("brick_size=(12, 30),\nmortar=2", {"brick_size": (12, 30), "mortar": 2}),
        (
            "brick_color=(.55, .55, .58),\nmortar_color=(.25, .25, .27)",
            {"brick_color": (0.55, 0.55, 0.58), "mortar_color": (0.25, 0.25, 0.27)},
        ),
        (
            "shade_variation=0, noise=0,\nhue_variation=0",
            {"shade_variation": 0.0, "noise": 0.0, "hue_variation": 0.0},
        ),
        ("courses=1, stagger=0\n(a stack bond)", {"courses": 1, "stagger": 0}),
    ]
    fig, axes = plt.subplots(1, len(variants), figsize=(13.2, 3.1))
    for ax, (title, options) in zip(axes, variants, strict=True):
        show(ax, F.brick_pad(img, pad, **options))
        ax.set_title(title, fontsize=9, family="DejaVu Sans Mono", weight="normal")
        outline(ax, pad, pad, 72, 72, lw=1.0)
    save(fig, "brick-options.png")


def pad_collate(**options: Any) -> Any:
    """``PadCollate(**options)`` returning ``(images, labels, regions)`` for (image, label)
    samples."""
    from tipad_transforms.data import PadCollate

    return PadCollate(**options, return_regions=True)


def fig_padded_batch() -> None:
    """Data-loading guide: four images of different sizes collated three ways."""
    from tipad_transforms import BrickPad
    from tipad_transforms.data import DeviceLoader

    sizes = [(96, 72), (60, 88), (80, 56), (48, 64)]
    images = [
        torch.nn.functional.interpolate(img[None].float(), size=hw, mode="area")[0]
        .round()
        .to(torch.uint8)
        for img, hw in zip(load_images(4, 96), sizes, strict=True)
    ]
    samples = [(img, label) for label, img in enumerate(images)]

    def seeded(seed: int) -> torch.Generator:
        return torch.Generator().manual_seed(seed)

    def collate(**options: Any) -> tuple[torch.Tensor, torch.Tensor]:
        images, _, regions = pad_collate(**options)(samples)
        return images, regions

    grey = collate(placement="top_left", padding_mode="constant", fill=200)
    walled = collate(generator=seeded(1))
    randomly = pad_collate(multiple=32, placement="random", generator=seeded(2))(samples)
    device_pad = 12
    # The public path: DeviceLoader applies BrickPad to the batch and moves the regions with it.
    on_device = DeviceLoader(
        [randomly], "cpu", BrickPad(device_pad, random_offset=True, generator=seeded(3))
    )
    augmented, _, moved = next(iter(on_device))
    rows = [
        ('PadCollate(placement="top_left", padding_mode="constant")', *grey),
        ("PadCollate()  (the default: centred on a brick wall)", *walled),
        (
            f'PadCollate(multiple=32, placement="random"), then DeviceLoader(..., '
            f"BrickPad({device_pad}, random_offset=True)): regions moved {device_pad} px",
            augmented,
            moved,
        ),
    ]
    fig, axes = plt.subplots(3, 4, figsize=(10.4, 9.0), gridspec_kw={"hspace": 0.5})
    for (title, batch, where), axrow in zip(rows, axes, strict=True):
        for b, ax in enumerate(axrow):
            show(ax, batch[b])
            top, left, h, w = where[b].tolist()
            outline(ax, left, top, w, h, lw=1.1)
            ax.set_title(f"sample {b}: {h}×{w} at ({top}, {left})", fontsize=8.5, weight="normal")
            # Same scale in every row: the canvases of the last row are larger.
            ax.set_xlim(0, 120)
            ax.set_ylim(120, 0)
        axrow[0].text(
            0,
            1.17,
            f"{title}:  batch {tuple(batch.shape)}",
            transform=axrow[0].transAxes,
            fontsize=9.5,
            weight="bold",
            va="bottom",
            ha="left",
        )
    fig.suptitle(
        "Four (image, label) samples of different sizes, one batch each way; dashed: the "
        "regions the batch carries, (top, left, h, w)",
        fontsize=10.5,
        y=0.965,
    )
    save(fig, "padded-batch.png", dpi=86)


# ------------------------------------------------------------------------ benchmark records ---
#
# docs/results holds the newest run of each benchmark, one JSON each. Every number on
# docs/benchmarks.md (the blocks between its "generated from results/..." markers) and every
# bench-*.png figure is drawn from them. After a new run: copy its JSON over the old one, then
# `python docs/make_figures.py bench-tables bench-cpu bench-rwkv-cpu bench-percall-cpu
# bench-loader-cpu`, and read the diff.

DOCS = Path(__file__).resolve().parent
RESULTS = DOCS / "results"
BENCHMARKS_PAGE = DOCS / "benchmarks.md"
BENCHMARKS = DOCS.parent / "benchmarks"

# Records whose package metadata does not name the release their code shipped in, keyed by
# record and commit: a newer record, made at another commit, drops its note by itself.
RELEASE_NOTES = {
    ("cpu-backends.json", "62fdffb"): "0.3.0's code; its metadata still said 0.2.0",
    ("cpu-scaling.json", "7bf4f4b"): "0.3.0's code; its metadata still said 0.2.0",
    ("cpu-loader.json", "2216458"): "0.5.2's word-move kernel, committed before the version "
    "bump; its metadata said 0.5.1",
    ("cpu-percall-first.json", "f62647f"): "0.5.2's word-move kernel, uncommitted on 0.5.1",
    ("cpu-percall.json", "b87f808"): "0.5.2 before its last kernel change, the standard-mode "
    "rows of `d96d7dc`",
    ("cpu-percall.json", "b362256"): "0.7.5's code, before the version bump",
    ("cpu-fresh-memory.json", "b362256"): "0.7.5's code, before the version bump",
    ("cpu-pad.json", "e83d945"): "0.7.5's code, before the version bump",
}
GENERATED = re.compile(
    r"(<!-- generated from results/(?P<name>[\w.-]+\.json)[^\n]*-->\n)(?P<body>.*?)"
    r"(<!-- end of results/(?P=name) -->)",
    re.DOTALL,
)


def bench_module(name: str) -> Any:
    """``benchmarks/<name>.py``, imported as the benchmark scripts import each other."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def record(name: str) -> dict[str, Any]:
    """The recorded run ``docs/results/<name>``."""
    data: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return data


def ms(seconds: float | None) -> str:
    """Seconds as the benchmark scripts print milliseconds (three significant digits)."""
    text: str = bench_module("_common").format_ms(seconds)
    return text


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: str = "") -> str:
    """A Markdown table; columns whose index is in ``right`` ("0123...") align right."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    align = ["---:" if str(i) in right else "---" for i in range(len(header))]
    return "\n".join([line(header), line(align), *(line(r) for r in rows)])


def blocks(*parts: str) -> str:
    """Markdown blocks (a sentence, a table, a list), one blank line apart."""
    return "\n\n".join(part for part in parts if part)


def provenance(name: str, rec: dict[str, Any]) -> str:
    """Which command made the record, when, on which code and machine, under which load."""
    m = rec["machine"]
    commit = (m.get("git_commit") or "")[:7]
    release = RELEASE_NOTES.get((name, commit), f"tipad_transforms {m['tipad_transforms']}")
    if m.get("git_dirty_files") and (name, commit) not in RELEASE_NOTES:
        release += ", with uncommitted changes to " + ", ".join(
            f"`{line.split()[-1]}`" for line in m["git_dirty_files"]
        )
    command = m["command"]
    script = command.split()[1] if len(command.split()) > 1 else ""
    if "/" not in script:  # run from inside benchmarks/, as its relative paths say
        command = f"cd benchmarks && {command}"
    start = m.get("loadavg_at_start")
    end = m.get("loadavg_at_end") or rec.get("loadavg_at_end")
    load = f"{start[0]:.1f} at the start, {end[0]:.1f} at the end" if end else f"{start[0]:.1f}"
    return (
        f"Recorded on {m['date'][:10]} by `{command}` at commit `{commit}` ({release}), on "
        f"{m['cpu_model']} with {m['cpu_count']} cores ({threads(m['torch_threads'])}), "
        f"Python {m['python']}, torch {m['torch']}, torchvision {m['torchvision']}, taichi "
        f"{m['taichi']}; load average {load}. Data: [results/{name}](results/{name})."
    )


def threads(n: int) -> str:
    return f"{n} torch thread" + ("" if n == 1 else "s")


def ratio(x: float) -> str:
    """A ratio with two decimals, or three significant digits below 0.1."""
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def first_call_table(runs: Sequence[dict[str, Any]]) -> str:
    """``percall.py``'s new processes: the torch-route warm-up by default, or Taichi at once."""
    rows = [
        [
            "default (torch-route warm-up)" if r["warmup"] == "default" else "`TIPAD_WARMUP=0`",
            f"{ms(r['first_call_s'])} ms",
            f"{ms(r['second_call_s'])} ms",
            f"{r['calls_before_taichi']:,} ({ms(r['warmup_total_s'])} ms)"
            if r["calls_before_taichi"]
            else "0",
            f"{ms(r['taichi_start_call_s'])} ms",
        ]
        for r in runs
        if "error" not in r
    ]
    header = ["start", "first call", "second call", "calls before Taichi (their total)",
              "the call that starts Taichi"]  # fmt: skip
    return md_table(header, rows, right="1234")


def worker_table(epochs: dict[str, list[float]]) -> str:
    """``percall.py``'s worker epochs: medians without the first epoch, ratios to v2.Pad."""
    rows = []
    for pipeline, times in epochs.items():
        base = statistics.median(epochs[pipeline.split(" ", 1)[0] + " v2.Pad"][1:])
        median = statistics.median(times[1:])
        rows.append([pipeline, f"{median:.3f} s", ratio(median / base)])
    return md_table(["pipeline", "median epoch", "/ v2.Pad"], rows, right="12")


def table_pad(rec: dict[str, Any]) -> str:
    """``pad.py``: every peer's median in every workload, with its ratio to the yardstick."""
    lines = []
    peers: list[tuple[str, str]] = []
    cells: dict[tuple[tuple[str, str], str], str] = {}
    for w in rec["workloads"]:
        lines.append(f"- `{w['key']}`: {w['title']}, {w['rounds']} rounds.")
        by_key = {p["key"]: p for p in w["peers"]}
        for p in w["peers"]:
            row = (p["label"], p["output"])
            if row not in peers:
                peers.append(row)
            yard = by_key[w["yardsticks"][p["output"]]]["median_s"]
            cells[row, w["key"]] = f"{ms(p['median_s'])} ({ratio(p['median_s'] / yard)})"
    keys = [w["key"] for w in rec["workloads"]]
    rows = [
        [label, out, *(cells.get(((label, out), k), "—") for k in keys)] for label, out in peers
    ]
    header = ["peer", "output", *(f"`{k}` ms" for k in keys)]
    lines += ["", md_table(header, rows, right="".join(str(i + 2) for i in range(len(keys))))]
    lines += ["", "The issue's targets, as the script evaluates them:", ""]
    for t in rec["targets"]:
        unit = " s" if t["how"].endswith("seconds") else "x"
        value = "not run" if t["measured"] is None else f"{t['measured']:.3g}{unit}"
        lines.append(f"- {t['target']}: {value}, **{t['verdict']}**")
    fc = rec["first_call"]
    seconds = {kind: [r["first_call_s"] for r in fc["runs"] if r.get("cache") == kind]
               for kind in ("cold", "warm")}  # fmt: skip
    lines += [
        "",
        f"First `{fc['image']}` in a new process with `TIPAD_WARMUP=0` (Taichi's import, "
        "init, kernel compile and the call): "
        + "; ".join(
            f"{', '.join(f'{s:.2f}' for s in v)} s with a {kind} Taichi cache"
            for kind, v in seconds.items()
            if v
        )
        + f"; `import tipad_transforms.functional` {fc['import_tipad_median_s']:.2f} s.",
    ]
    return "\n".join(lines)


def table_percall(rec: dict[str, Any]) -> str:
    """``percall.py``: every workload's peers, medians, minimums and ratio to its yardstick."""
    rows = []
    for w in rec["workloads"]:
        by_key = {p["key"]: p for p in w["peers"]}
        yard = by_key[w["yardstick"]]
        for p in w["peers"]:
            rows.append(
                [
                    f"{w['title']} (yardstick: {yard['label']})" if p is w["peers"][0] else "",
                    p["label"],
                    f"{ms(p['median_s'])} ms",
                    f"{ms(p['min_s'])} ms",
                    ratio(p["median_s"] / yard["median_s"]),
                ]
            )
    lines = [md_table(["workload", "peer", "median", "min", "/ yardstick"], rows, right="234")]
    if rec["checks"]:
        lines += ["", "Checked before timing:", ""]
        lines += [f"- {what}: {result}" for what, result in rec["checks"].items()]
    if rec["first_call"]:
        lines += ["", first_call_table(rec["first_call"])]
    if rec["worker_epochs_s"]:
        lines += ["", worker_table(rec["worker_epochs_s"])]
    return "\n".join(lines)


def table_percall_first(rec: dict[str, Any]) -> str:
    return first_call_table(rec["first_call"])


def table_percall_workers(rec: dict[str, Any]) -> str:
    return worker_table(rec["epochs_s"])


def table_rwkv(rec: dict[str, Any]) -> str:
    """``rwkv_ops.py``: tipad against each torch peer, the speed-up, GFLOP/s and the target."""
    targets: dict[str, list[str]] = {}
    for t in rec["targets"]:
        key, criterion = t["target"].split(": ", 1)
        targets.setdefault(key, []).append(
            f"{criterion.removeprefix('tipad ')}: " + ("met" if t["met"] else "**missed**")
        )

    def shown(w: dict[str, Any], peer: str) -> str:
        # The bandwidth target beside the copy it is measured against, the rest beside the
        # yardstick.
        ours = targets.get(w["key"], [])
        if peer == "copy":
            return "; ".join(t for t in ours if "copy bandwidth" in t)
        if peer == w["yardstick"]:
            return "; ".join(t for t in ours if "copy bandwidth" not in t)
        return ""

    rows = []
    for w in rec["workloads"]:
        tipad = next(p for p in w["peers"] if p["key"].startswith("tipad."))
        gflops = f"{w['flops'] / tipad['median_s'] / 1e9:.1f}" if w.get("flops") else ""
        for p in w["peers"]:
            if p is not tipad:
                rows.append(
                    [
                        w["title"],
                        f"{ms(tipad['median_s'])} ms",
                        f"{p['label']} {ms(p['median_s'])} ms",
                        ratio(p["median_s"] / tipad["median_s"]),
                        gflops,
                        shown(w, p["key"]),
                    ]
                )
    header = ["workload", "tipad", "torch peer", "speed-up", "tipad GFLOP/s", "target"]
    matmul = rec["matmul"]
    return blocks(
        md_table(header, rows, right="134"),
        f"A float32 matmul ({matmul['n']}²) ran at {matmul['gflops_median']:.0f} GFLOP/s in "
        "the same process.",
    )


def table_loader(rec: dict[str, Any]) -> str:
    """``loader.py``: images per second per pipeline, the ratio to ``a``, the targets."""
    s = rec["settings"]
    rows = [
        [
            p["label"],
            f"{p['images_per_s_median']:,.0f}",
            f"{p['images_per_s_q1']:,.0f}-{p['images_per_s_q3']:,.0f}",
            ratio(p["ratio_to_first"]),
            f"{p['warmup_epoch_s']:.1f} s",
        ]
        for p in rec["pipelines"]
    ]
    header = ["pipeline", "images/s", "quartiles", "/ a", "first epoch (starts the workers)"]
    lines = [
        f"{s['images']:,} uint8 images of {s['sides'][0]}-{s['sides'][1]} px sides onto a "
        f"{s['canvas'][0]} x {s['canvas'][1]} canvas, batch {s['batch_size']}, {s['workers']} "
        f"persistent `{s['multiprocessing_context']}` workers, device `{s['device']}`, "
        f"{s['repeats']} epochs per pipeline, medians:",
        "",
        md_table(header, rows, right="1234"),
        "",
    ]
    lines += [
        f"- {t['target']}: {t['measured']}, **{'met' if t['met'] else 'missed'}**"
        for t in rec["targets"]
    ]
    return "\n".join(lines)


def table_cli_pad(rec: dict[str, Any]) -> str:
    """``cli_pad.py``: ``tipad pad`` on folder trees against a PIL loop: images per second
    (wall) and CPU time per image (every process of a peer)."""
    s = rec["settings"]
    trees = {
        "small": f"{s['count']:,} small images (8-40 px, mixed formats)",
        "photos": f"{s['photos']} photos ({s['photo_size']}, JPEG)",
    }
    rows = []
    for tree, rates in rec["images_per_s"].items():
        n = s["count"] if tree == "small" else s["photos"]
        for peer, rate in rates.items():
            cpu = sorted(rec["cpu_seconds"][tree][peer])[len(rec["cpu_seconds"][tree][peer]) // 2]
            rows.append([
                trees.get(tree, tree), peer, f"{rate:,.1f}",
                f"**{rec['ratio_to_pil_loop'][tree][peer]:.2f}x**", f"{1e3 * cpu / n:.2f}",
            ])  # fmt: skip
    return blocks(
        f"Padded by {s['padding']} px, `tipad pad` with {s['workers']} workers, the PIL loop in "
        f"one process, {s['repeats']} rounds (medians):",
        md_table(
            ["tree", "peer", "images/s", "vs PIL loop", "CPU ms per image"], rows, right="234"
        ),
    )


def table_backends(rec: dict[str, Any]) -> str:
    """``backends.py``: the same workloads on upstream taichi and on taichi_forge."""
    up, fo = (rec["children"][n] for n in ("taichi", "taichi_forge"))
    rows = [
        [
            r["workload"],
            f"{ms(r['median_s']['taichi'])} ms",
            f"{ms(r['median_s']['taichi_forge'])} ms",
            ratio(r["forge_over_upstream"]),
            r["check"],
        ]
        for r in rec["results"]
    ]
    first = [up["first_call"]["first_call_s"], fo["first_call"]["first_call_s"]]
    rows.append(
        [
            "first call, fresh process, empty cache",
            f"{first[0]:.1f} s",
            f"{first[1]:.1f} s",
            ratio(first[1] / first[0]),
            "",
        ]
    )
    header = ["workload (median)", up["backend"], fo["backend"], "forge / upstream", "outputs"]
    return blocks(
        f"{rec['args']['repeats']} rounds.",
        md_table(header, rows, right="123"),
        f"Geometric mean over the {len(rec['results'])} workloads: forge takes "
        f"**{rec['geomean_forge_over_upstream']:.2f}x** upstream's time.",
    )


def table_rwkv7_generate(rec: dict[str, Any]) -> str:
    """``rwkv7_generate.py``: one token through RWKV-7, tipad against the ``rwkv`` package."""
    m = rec["model"]
    rows = [[p["label"], f"{ms(p['median_s'])} ms", f"{ms(p['min_s'])} ms"] for p in rec["peers"]]
    tipad, package = (p["median_s"] for p in rec["peers"])
    return blocks(
        f"{m['n_layer']} layers x {m['n_embd']}, vocabulary {m['vocab']:,}, "
        f"{threads(rec['threads'])}, per token:",
        md_table(["peer", "median", "min"], rows, right="12"),
        f"tipad / package: **{tipad / package:.2f}x** the time per token; {rec['check']}.",
    )


def table_scaling(rec: dict[str, Any]) -> str:
    """``scaling.py``: one pass per engine and process count, start-up included."""
    s = rec["settings"]
    rows = [
        [
            r["engine"],
            str(r["procs"]),
            f"{r['total_s']:.1f} s",
            f"{r['first_batch_s']:.1f} s",
            f"{r['end_to_end_ips']:.1f}",
            f"{r['steady_ips']:,.0f}",
        ]
        for r in rec["rows"]
    ]
    header = ["engine", "workers / actors", "pass", "first batch", "img/s end to end",
              "steady img/s (2nd half)"]  # fmt: skip
    return blocks(
        f"{s['images']} generated PNGs of sides {s['sides'][0]}-{s['sides'][1]}, batches of "
        f"{s['batch']}, one pass per row:",
        md_table(header, rows, right="12345"),
    )


def table_roofline(rec: dict[str, Any]) -> str:
    """``roofline.py``: bytes and FLOPs per launch, the H200's floor, this machine's floor and
    tipad's time on it."""
    lim, gpu = rec["limits"], rec["h200"]

    def size(n: float, unit: str) -> str:
        return (
            "0" if n == 0 else f"{n / 1e6:,.1f} M{unit}" if n < 1e9 else f"{n / 1e9:,.2f} G{unit}"
        )

    header = ["workload", "bytes", "FLOPs", "H200 floor", "CPU floor", "tipad on this CPU",
              "tipad / CPU floor"]  # fmt: skip
    rows = []
    for r in rec["rows"]:
        t = r["cpu_tipad_s"]
        rows.append([
            r["workload"], size(r["bytes"], "B"), size(r["flops"], "FLOP"),
            f"{r['h200_floor_s'] * 1e6:,.1f} us ({r['h200_bound']})",
            f"{r['cpu_floor_s'] * 1e3:,.2f} ms",
            "GPU only" if t is None else f"{t * 1e3:,.2f} ms",
            "" if t is None else f"**{t / r['cpu_floor_s']:.1f}x**",
        ])  # fmt: skip
    return blocks(
        f"H200 floor: the larger of bytes / {gpu['bytes_per_s'] / 1e12:.1f} TB/s and FLOPs / "
        f"{gpu['flops'] / 1e12:.0f} TFLOP/s (float32, no tensor cores). This CPU's floor uses "
        f"the same run's copy bandwidth ({lim['copy_bytes_per_s'] / 1e9:.1f} GB/s, read + write) "
        f"and float32 matmul rate ({lim['matmul_flops'] / 1e9:.0f} GFLOP/s):",
        md_table(header, rows, right="123456"),
    )


def table_fresh_memory(rec: dict[str, Any]) -> str:
    """``fresh_memory.py``: first-touch cost per page, and fresh 44 MB outputs per call."""
    m, touch, summary = rec["machine"], rec["first_touch"], rec["summary"]
    gib = rec["settings"]["gib"]
    rows = [
        [f"first write of {gib:g} GiB, the process's first",
         f"{touch[0]['first_us_per_page']:.2f}"],
        ["first write again, at once", f"{touch[1]['first_us_per_page']:.2f}"],
        *[
            [f"first write after a {r['pause_s']:g} s pause", f"{r['first_us_per_page']:.2f}"]
            for r in touch[2:]
        ],
        ["second write of the same memory (median of the rounds)",
         f"{statistics.median(r['again_us_per_page'] for r in touch):.2f}"],
    ]  # fmt: skip
    calls = len(rec["per_call_s"]["plain"])
    head, tail = max(1, calls // 4), calls - calls // 2
    per_call = [
        [name, ms(summary[name]["first_calls_median_ms"] / 1e3) + " ms",
         ms(summary[name]["last_half_median_ms"] / 1e3) + " ms"]
        for name in ("plain", "advised")
    ]  # fmt: skip
    reporting = m.get("page_reporting_order")
    vm = (
        f"free page reporting at order {reporting}"
        + (" (virtio-balloon)" if m.get("balloon_device") else "")
        if reporting
        else "no free page reporting"
    )
    return blocks(
        f"THP `{m.get('thp_enabled')}`; {vm}. Microseconds per 4 KiB page:",
        md_table(["write", "us per page"], rows, right="1"),
        f"A fresh float32 (64, 3, 288, 288) tensor (44 MB) and `fill_`, {calls} calls in a new "
        "process each, medians:",
        md_table(["output", f"first {head} calls", f"last {tail} calls"], per_call, right="12"),
    )


RENDERERS = {
    "roofline.json": table_roofline,
    "cpu-pad.json": table_pad,
    "cpu-percall.json": table_percall,
    "cpu-percall-first.json": table_percall_first,
    "cpu-percall-workers.json": table_percall_workers,
    "cpu-rwkv7-generate.json": table_rwkv7_generate,
    "cpu-rwkv.json": table_rwkv,
    "cpu-loader.json": table_loader,
    "cpu-cli-pad.json": table_cli_pad,
    "cpu-backends.json": table_backends,
    "cpu-scaling.json": table_scaling,
    "cpu-fresh-memory.json": table_fresh_memory,
}


def generated_block(name: str) -> str:
    """What benchmarks.md shows of ``results/<name>``: where it came from, then its table."""
    if name not in RENDERERS:
        raise SystemExit(f"benchmarks.md has a block for results/{name}, which nothing renders")
    rec = record(name)
    # Blank lines around the block: Markdown reads a line glued to an HTML comment as raw HTML.
    return f"\n{provenance(name, rec)}\n\n{RENDERERS[name](rec)}\n\n"


def bench_tables(check: bool = False) -> None:
    """Fill benchmarks.md's generated blocks from docs/results; ``check``: only compare."""
    text = BENCHMARKS_PAGE.read_text()
    names = [m["name"] for m in GENERATED.finditer(text)]
    missing = sorted({p.name for p in RESULTS.glob("*.json")} - set(names))
    if missing:
        raise SystemExit(f"benchmarks.md shows no block for {missing}")
    new = GENERATED.sub(lambda m: m[1] + generated_block(m["name"]) + m[4], text)
    if check:
        if new != text:
            raise SystemExit("benchmarks.md differs from docs/results: run "
                             "`python docs/make_figures.py bench-tables`")  # fmt: skip
        print(f"benchmarks.md matches docs/results ({len(names)} blocks)")
        return
    BENCHMARKS_PAGE.write_text(new)
    print(f"wrote {BENCHMARKS_PAGE.relative_to(DOCS.parent)} ({len(names)} blocks)")


def figure_title(what: str, rec: dict[str, Any]) -> str:
    m = rec["machine"]
    return (
        f"{what} on CPU ({m['cpu_count']} cores, torch {m['torch']}, taichi {m['taichi']}) - "
        f"tipad_transforms {m['tipad_transforms']} at {m['git_commit'][:7]}, {m['date'][:10]}"
    )


def save_bench_figure(drawn: Path | None, figure: str) -> None:
    if drawn is None:
        raise SystemExit(f"matplotlib is needed to draw {figure}")
    path = FIGURES / figure
    # A plot has few colours: a 256-colour palette keeps it sharp and within the size budget.
    PIL.Image.open(drawn).convert("RGB").quantize(colors=256).save(path, optimize=True)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over the {MAX_BYTES} byte budget")
    print(f"wrote {path.relative_to(DOCS.parent)} ({size // 1024} KB)")


def redraw_benchmark(record_name: str, figure: str, what: str, yardstick: str) -> None:
    """``figures/<figure>`` redrawn from ``results/<record_name>`` with the benchmarks' own plot
    (``benchmarks/_common.plot_workloads``); ``yardstick`` is the key in each workload record
    that names the peer the ratios divide by."""
    common = bench_module("_common")
    rec = record(record_name)
    plots = []
    for w in rec["workloads"]:
        yard = w[yardstick]
        fresh = yard["fresh"] if isinstance(yard, dict) else yard
        plots.append((w["title"], common.measurements_from_json(w), fresh))
    with tempfile.TemporaryDirectory() as tmp:
        drawn = common.plot_workloads(plots, Path(tmp) / "plot.png", figure_title(what, rec))
        save_bench_figure(drawn, figure)


def fig_bench_pad() -> None:
    """Benchmarks page: the recorded padding run (``results/cpu-pad.json``), redrawn."""
    redraw_benchmark("cpu-pad.json", "bench-cpu.png", "tipad padding", "yardsticks")


def fig_bench_rwkv() -> None:
    """Benchmarks page: the recorded RWKV run (``results/cpu-rwkv.json``), redrawn."""
    redraw_benchmark("cpu-rwkv.json", "bench-rwkv-cpu.png", "tipad RWKV operators", "yardstick")


def fig_bench_percall() -> None:
    """Benchmarks page: the recorded per-call run (``results/cpu-percall.json``), redrawn."""
    redraw_benchmark("cpu-percall.json", "bench-percall-cpu.png", "tipad per call", "yardstick")


def fig_bench_loader() -> None:
    """Benchmarks page: the recorded loader run (``results/cpu-loader.json``), redrawn with
    ``benchmarks/loader.py``'s own plot."""
    loader = bench_module("loader")
    rec = record("cpu-loader.json")
    s, m = rec["settings"], rec["machine"]
    pipes = [
        loader.Pipeline(p["key"], p["label"], [], epochs_s=p["epochs_s"]) for p in rec["pipelines"]
    ]
    title = (
        f"DataLoader epoch of {s['images']} images ({s['sides'][0]}-{s['sides'][1]} px, uint8 "
        f"RGB), batch {s['batch_size']}, {s['workers']} {s['multiprocessing_context']} workers, "
        f"device {s['device']}\n{m['cpu_model']}, {m['cpu_count']} CPUs, torch {m['torch']} - "
        f"tipad_transforms {m['tipad_transforms']} at {m['git_commit'][:7]}, {m['date'][:10]}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        drawn = loader.plot(pipes, s["images"], Path(tmp) / "plot.png", title)
        save_bench_figure(drawn, "bench-loader-cpu.png")


FIGURE_MAKERS = {
    "hero": fig_hero,
    "modes": fig_modes,
    "texture-mapping": fig_mapping,
    "large-padding": fig_large_padding,
    "per-sample": fig_per_sample,
    "brick-options": fig_bricks,
    "padded-batch": fig_padded_batch,
    "bench-tables": bench_tables,
    "bench-cpu": fig_bench_pad,
    "bench-rwkv-cpu": fig_bench_rwkv,
    "bench-percall-cpu": fig_bench_percall,
    "bench-loader-cpu": fig_bench_loader,
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names", nargs="*", help=f"figures to draw (default all): {list(FIGURE_MAKERS)}"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check that benchmarks.md's tables match docs/results (writes nothing)",
    )
    args = parser.parse_args(argv)
    if args.check:
        bench_tables(check=True)
        return
    unknown = [n for n in args.names if n not in FIGURE_MAKERS]
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; choose from {list(FIGURE_MAKERS)}")
    source = "bundled assets" if asset_paths() else "a synthetic image (no assets bundled)"
    print(f"tipad_transforms {tipad_transforms.__version__}; images from {source}")
    for name in args.names or FIGURE_MAKERS:
        FIGURE_MAKERS[name]()


if __name__ == "__main__":
    main()
