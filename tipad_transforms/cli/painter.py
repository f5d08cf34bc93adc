"""One image file for ``tipad pad``: :meth:`Painter.check` reads only its header and pads and
encodes a tiny stand-in of its mode, so that every option that does not suit an input fails
before any file is written; :meth:`Painter.pad_file` decodes, pads and writes it."""

from __future__ import annotations

import contextlib
import io
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import PIL.Image

from .arguments import UsageError
from .borders import MODES, mirror_pad, on_wall
from .inputs import FileJob
from .writing import OutputFolders, write_atomically

if TYPE_CHECKING:
    import torch

__all__ = ["Outcome", "PadSpec", "Painter", "is_lossy", "max_output_pixels", "read_texture"]

#: Formats whose encoder changes pixels (at any quality), and the ones --quality tunes.
_LOSSY = frozenset({"JPEG", "MPO", "WEBP"})
_QUALITY = frozenset({"JPEG", "WEBP"})
_DEFAULT_QUALITY = {"JPEG": 95}  # Pillow's own default (75) visibly blurs photos
_MAX_SIDE = {"JPEG": 65_535, "MPO": 65_535, "WEBP": 16_383, "GIF": 65_535, "ICO": 256}
_PALETTE_MODES = ("P", "L", "1")  # what a GIF stores without quantizing
#: Modes whose texture border depends on the image's pixels (``pil_texture``: the palette, or
#: the value range of I and F): padded through the functional API, not on a wall.
_PIXEL_TILES = frozenset({"P", "PA", "I", "F"})


def max_output_pixels() -> int:
    """The largest output tipad writes, in pixels: twice ``PIL.Image.MAX_IMAGE_PIXELS``, past
    which Pillow refuses to open an image as a decompression bomb, so every output reads back."""
    limit = PIL.Image.MAX_IMAGE_PIXELS
    return 2 * int(limit) if limit else 2 * 89_478_485


def is_lossy(fmt: str, mode: str) -> bool:
    """Whether writing a ``mode`` image as ``fmt`` changes its pixels (lossy compression, or a
    GIF quantizing a colour image to a palette)."""
    return fmt in _LOSSY or (fmt == "GIF" and mode not in _PALETTE_MODES)


@dataclass(frozen=True)
class PadSpec:
    """The options of one ``tipad pad`` run (see ``tipad pad --help``); picklable, for the
    worker processes."""

    padding: tuple[int, int, int, int]  # left, top, right, bottom
    mode: str | None = None  # a standard mode; None: a texture (``texture`` or the brick wall)
    fill: tuple[float, ...] | None = None
    texture: Path | None = None
    stagger: int | None = None
    seed: int = 0
    quality: int | None = None
    fsync: bool = False  # flush each output to disk before its rename (--fsync)
    verbose: bool = False  # -v: an unexpected error's reason carries its traceback


class Outcome(NamedTuple):
    """What :meth:`Painter.check` plans or :meth:`Painter.pad_file` wrote for one job."""

    fmt: str  # the format written
    mode: str
    size: tuple[int, int]  # input (w, h), after EXIF orientation
    out_size: tuple[int, int]
    lossy: bool
    note: str = ""  # e.g. "3 frames, padded the first"


class Painter:
    """Pads images the way ``spec`` says; one per process (it holds the tile and caches)."""

    def __init__(self, spec: PadSpec) -> None:
        from ..functional import running_bond_stagger

        self.spec = spec
        self._tile: PIL.Image.Image | None = None
        self._stagger = 0 if spec.stagger is None else spec.stagger
        if spec.mode is None and spec.texture is not None:
            self._tile = read_texture(spec.texture)
        elif spec.mode is None:
            self._tile = brick_image(spec.seed)
            if spec.stagger is None:
                self._stagger = running_bond_stagger()
        self._checked: dict[tuple[Any, ...], str | None] = {}
        self._textures: dict[tuple[str, bool, str | None], torch.Tensor] = {}
        self._walls: dict[tuple[str, tuple[int, int, int, int]], PIL.Image.Image] = {}
        self._folders = OutputFolders()

    def close(self) -> None:
        """Close the output folders this painter holds open."""
        self._folders.close()

    def pad(
        self, img: PIL.Image.Image, padding: tuple[int, int, int, int] | None = None
    ) -> PIL.Image.Image:
        """``img`` padded by ``padding`` (default the spec's), as the functional API pads it
        (from PIL's own copies where they give exactly that: :mod:`.borders`). Raises its
        TypeError/ValueError (a fill that does not suit the mode, ...)."""
        padding = self.spec.padding if padding is None else padding
        mode = self.spec.mode
        if img.mode in MODES:
            if mode is not None and mode != "constant":
                out = mirror_pad(img, padding, mode)
                if out is not None:
                    return out
            elif mode == "constant" or img.mode not in _PIXEL_TILES:
                return on_wall(img, padding, self._wall(img, padding))
        return self._pad_tensor(img, padding)

    def _wall(self, img: PIL.Image.Image, padding: tuple[int, int, int, int]) -> PIL.Image.Image:
        """The ``wall`` of :func:`~.borders.on_wall` for ``img``, grown as images need."""
        mode, (left, top, right, bottom) = img.mode, padding
        size = (img.width + left + right, img.height + top + bottom)
        wall = self._walls.get((mode, padding))
        if wall is None or wall.width < size[0] or wall.height < size[1]:
            w, h = size if wall is None else (max(size[0], wall.width), max(size[1], wall.height))
            if self.spec.mode == "constant":  # the fill's pixel, copied everywhere
                from ..backends import use  # lazily, as _pad_tensor's imports

                # One pixel: the torch route gives the kernel's value without starting Taichi
                # (seconds per worker when the warm-up is off).
                with use("torch"):
                    pixel = self._pad_tensor(PIL.Image.new(mode, (1, 1)), (1, 0, 0, 0))
                wall = pixel.crop((0, 0, 1, 1)).resize((w, h), PIL.Image.Resampling.NEAREST)
            else:
                blank = PIL.Image.new(mode, (1, 1))
                wall = self._pad_tensor(blank, (left, top, w - left - 1, h - top - 1))
            self._walls[(mode, padding)] = wall
        return wall

    def _pad_tensor(
        self, img: PIL.Image.Image, padding: tuple[int, int, int, int]
    ) -> PIL.Image.Image:
        """``img`` padded through the functional API (a round trip through a tensor)."""
        from ..functional import pad, texture_pad  # lazily: the command line starts without torch

        if self.spec.mode is not None:
            return pad(img, padding, fill=self.spec.fill or (0,), padding_mode=self.spec.mode)
        from ..functional._pil import pil_texture

        assert self._tile is not None
        # The tile in the image's colour space, converted once per kind of image, not once per
        # image (I and F scale it to each image's own value range).
        palette = img.palette.mode if img.palette is not None else None
        key = (img.mode, "transparency" in img.info, palette)
        texture = self._textures.get(key)
        if texture is None:
            texture = pil_texture(img, self._tile).contiguous()
            if img.mode not in ("I", "F"):
                self._textures[key] = texture
        out: PIL.Image.Image = texture_pad(img, padding, texture, stagger=self._stagger)
        return out

    def _save_options(self, fmt: str) -> dict[str, Any]:
        quality = self.spec.quality if self.spec.quality is not None else _DEFAULT_QUALITY.get(fmt)
        return {} if quality is None else {"quality": quality}

    def check(self, job: FileJob) -> Outcome | str:
        """The outcome ``job`` would have, or a one-line reason why it would fail."""
        try:
            with _quiet_bombs(), PIL.Image.open(job.source) as img:
                return self._check_open(job, img)
        except Exception as e:  # a malformed file makes Pillow's plugins raise anything
            return f"cannot read {str(job.source)!r}: {self._reason(e)}"

    def _reason(self, e: Exception) -> str:
        """``e`` as one line (``-v``: followed by its traceback)."""
        expected = isinstance(e, (OSError, ValueError, TypeError))
        text = " ".join(str(e).split()) or "(no message)"
        line = text if expected else f"{type(e).__name__}: {text}"
        if self.spec.verbose:
            line += "\n" + "".join(traceback.format_exception(e)).rstrip()
        return line

    def _check_open(self, job: FileJob, img: PIL.Image.Image) -> Outcome | str:
        fmt = job.fmt or img.format or ""
        if fmt not in PIL.Image.SAVE:
            return (
                f"{job.source}: Pillow cannot write {img.format or 'this'} files; "
                "choose an output with --format (e.g. --format png)"
            )
        if self.spec.quality is not None and fmt not in _QUALITY:
            return f"{job.source}: --quality applies to JPEG and WebP outputs, this is {fmt}"
        w, h = img.size
        if _orientation(img) in (5, 6, 7, 8):  # EXIF says the picture is turned on its side
            w, h = h, w
        left, top, right, bottom = self.spec.padding
        out_size = (w + left + right, h + top + bottom)
        if out_size[0] * out_size[1] > max_output_pixels():
            return (
                f"{job.source}: the output would be {out_size[0]}x{out_size[1]} px, over the "
                f"{max_output_pixels():,} px tipad writes (Pillow's decompression-bomb limit)"
            )
        limit = _MAX_SIDE.get(fmt)
        if limit is not None and max(out_size) > limit:
            return f"{job.source}: {fmt} stores at most {limit} px a side, the output is {out_size}"
        key = (img.mode, fmt, type(img.info.get("transparency")).__name__)
        if key not in self._checked:
            self._checked[key] = self._check_stand_in(img, fmt)
        reason = self._checked[key]
        if reason is not None:
            return f"{job.source} ({img.mode}, {fmt}): {reason}"
        frames = int(getattr(img, "n_frames", 1))
        note = f"{frames} frames, padded the first" if frames > 1 else ""
        lossy = is_lossy(fmt, img.mode)
        return Outcome(fmt, img.mode, (w, h), out_size, lossy, note)

    def _check_stand_in(self, img: PIL.Image.Image, fmt: str) -> str | None:
        """Pad and encode a 3x3 image of ``img``'s mode; the reason it fails, else None."""
        stand_in = PIL.Image.new(img.mode, (3, 3))
        if img.mode in ("P", "PA"):
            stand_in.putpalette(bytes(range(256)) * 3)
        if "transparency" in img.info:
            stand_in.info["transparency"] = img.info["transparency"]
        left, top, right, bottom = (min(p, 4) for p in self.spec.padding)  # same checks, small
        try:
            out = self.pad(stand_in, (left, top, right, bottom))
        except (TypeError, ValueError) as e:
            return str(e)
        try:
            out.save(io.BytesIO(), format=fmt, **self._save_options(fmt))
        except (OSError, ValueError, KeyError, TypeError) as e:
            return f"cannot write it as {fmt}: {e}"
        return None

    def pad_file(self, job: FileJob) -> Outcome | str:
        """Decode, pad and write ``job``; the outcome, or a one-line reason it failed."""
        try:
            with _quiet_bombs(), PIL.Image.open(job.source) as img:
                frames = int(getattr(img, "n_frames", 1))
                img.load()
                fmt = job.fmt or img.format or ""
                # EXIF is not kept (its sizes would be wrong): bake its orientation in instead
                # (exif_transpose copies an upright image too: not for nothing).
                upright: PIL.Image.Image = img
                if img.getexif().get(0x0112, 1) != 1:
                    from PIL import ImageOps

                    upright = ImageOps.exif_transpose(img)
        except Exception as e:  # a malformed file makes Pillow's plugins raise anything
            return f"cannot read {str(job.source)!r}: {self._reason(e)}"
        try:
            result = self.pad(upright)
        except Exception as e:  # a fill that does not suit the image, out of memory, ...
            return f"cannot pad {str(job.source)!r}: {self._reason(e)}"
        try:
            options = self._save_options(fmt)
            write_atomically(
                result,
                job.target,
                fmt,
                options,
                job.root,
                folders=self._folders,
                fsync=self.spec.fsync,
            )
        except Exception as e:  # disk full, no permission, a folder in the way, ...
            return f"cannot write {str(job.target)!r}: {self._reason(e)}"
        note = f"{frames} frames, padded the first" if frames > 1 else ""
        lossy = is_lossy(fmt, result.mode)
        return Outcome(fmt, result.mode, upright.size, result.size, lossy, note)


@contextlib.contextmanager
def _quiet_bombs() -> Iterator[None]:
    """Pillow warns about images between its pixel limit and twice it (the error), on stderr
    with a source line; tipad's own output limit (:func:`max_output_pixels`) says it instead."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PIL.Image.DecompressionBombWarning)
        yield


def _orientation(img: PIL.Image.Image) -> int:
    """The EXIF orientation (1: upright) from the header, without decoding pixels."""
    try:
        if img.format == "PNG":
            # PngImageFile.getexif() decodes the image to find an eXIf chunk after the pixels;
            # one before them is in info already (and rare either way).
            exif = PIL.Image.Exif()
            if "exif" in img.info:
                exif.load(img.info["exif"])
        else:
            exif = img.getexif()
        return int(exif.get(0x0112, 1))
    except (OSError, ValueError, TypeError, SyntaxError):
        return 1


def read_texture(path: Path) -> PIL.Image.Image:
    """The ``--texture`` image, decoded; UsageError if it cannot be read."""
    if not path.is_file():
        raise UsageError(f"texture {str(path)!r} does not exist or is not a file")
    try:
        with PIL.Image.open(path) as img:
            img.load()
            return img
    except (PIL.UnidentifiedImageError, OSError, ValueError) as e:
        raise UsageError(f"cannot read texture {str(path)!r}: {e}") from None


def brick_image(seed: int) -> PIL.Image.Image:
    """The default brick tile (``make_brick_texture(seed=seed)``) as an 8-bit RGB PIL image."""
    import torch

    from ..functional import make_brick_texture

    tile = make_brick_texture(seed=seed)
    arr = (tile.clamp(0, 1) * 255).round().to(dtype=torch.uint8).permute(1, 2, 0)
    return PIL.Image.fromarray(arr.contiguous().numpy())
