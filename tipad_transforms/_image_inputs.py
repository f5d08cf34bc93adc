"""What ``tipad pad`` reads and where it writes: files, folders and glob patterns mapped onto a
mirrored tree under the output folder.

Explicit files are taken whatever their name; folders (``recursive``: with their subfolders)
and glob patterns (``**`` spans folders) take the files whose suffix Pillow registers for a
format it reads, so a ``README.txt`` beside the images is skipped. A file found through a folder
keeps its path relative to that folder, one found through a pattern its path relative to the
pattern's fixed leading folders, an explicit file its name.
"""

from __future__ import annotations

import glob
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import PIL.Image

__all__ = [
    "FileJob",
    "UsageError",
    "find_inputs",
    "output_format",
    "plan_jobs",
]

_GLOB_CHARS = frozenset("*?[")
# The suffix written for a format chosen with --format (others: Pillow's first registered one).
_SUFFIX = {"JPEG": ".jpg", "PNG": ".png", "TIFF": ".tif", "WEBP": ".webp", "BMP": ".bmp"}


class UsageError(Exception):
    """A user error (arguments, files): the command line prints it as one line, status 2."""


@dataclass(frozen=True)
class FileJob:
    """One image to pad: read ``source``, write ``target`` (in ``fmt``, or the input's format
    when ``fmt`` is None)."""

    source: Path
    target: Path
    fmt: str | None


def _image_suffixes() -> frozenset[str]:
    PIL.Image.init()  # loads every plugin, so the table is complete
    return frozenset(
        ext for ext, fmt in PIL.Image.registered_extensions().items() if fmt in PIL.Image.OPEN
    )


def _is_under(path: Path, folder: Path | None) -> bool:
    return folder is not None and path.resolve().is_relative_to(folder)


def _fixed_prefix(pattern: str) -> Path:
    """The leading folders of ``pattern`` that hold no wildcard (``.`` if none)."""
    parts = Path(pattern).parts
    fixed: list[str] = []
    for part in parts[:-1]:
        if _GLOB_CHARS & set(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def find_inputs(
    specs: Sequence[str], *, recursive: bool, skip: Path | None = None
) -> list[tuple[Path, Path]]:
    """``(source, relative output path)`` for every image that ``specs`` name, in order.

    ``skip`` is a folder whose files are never inputs (the output folder, so that padding ``.``
    into ``./padded`` twice does not pad the padded images). Raises UsageError for a spec that
    names nothing: a missing path, an empty folder, a pattern without matches.
    """
    suffixes = _image_suffixes()
    skip = skip.resolve() if skip is not None else None
    found: list[tuple[Path, Path]] = []

    def images(paths: Iterable[Path]) -> list[Path]:
        return sorted(
            p
            for p in paths
            if p.suffix.lower() in suffixes and p.is_file() and not _is_under(p, skip)
        )

    for spec in specs:
        path = Path(spec)
        if path.is_file():
            found.append((path, Path(path.name)))
        elif path.is_dir():
            files = images(path.rglob("*") if recursive else path.glob("*"))
            if not files:
                hint = "" if recursive else " (--recursive also searches its subfolders)"
                raise UsageError(f"folder {spec!r} holds no image files{hint}")
            found += [(f, f.relative_to(path)) for f in files]
        elif _GLOB_CHARS & set(spec):
            base = _fixed_prefix(spec)
            files = images(Path(m) for m in glob.glob(spec, recursive=True))
            if not files:
                raise UsageError(f"no image file matches {spec!r}")
            found += [(f, f.relative_to(base)) for f in files]
        else:
            raise UsageError(f"input {spec!r} does not exist")
    return found


def output_format(name: str) -> str:
    """Pillow's name of the format ``name`` (``png``, ``jpg``, ``JPEG``, ``.tif``...) if Pillow
    can write it, else UsageError listing the choices."""
    PIL.Image.init()
    key = name.upper().lstrip(".")
    fmt = PIL.Image.registered_extensions().get("." + key.lower(), key)
    if fmt not in PIL.Image.SAVE:
        choices = ", ".join(sorted(f.lower() for f in PIL.Image.SAVE))
        raise UsageError(f"--format {name!r}: Pillow cannot write it; choose from {choices}")
    return fmt


def _suffix(fmt: str) -> str:
    if fmt in _SUFFIX:
        return _SUFFIX[fmt]
    exts = [e for e, f in PIL.Image.registered_extensions().items() if f == fmt]
    return exts[0] if exts else "." + fmt.lower()


def plan_jobs(found: Sequence[tuple[Path, Path]], out_dir: Path, fmt: str | None) -> list[FileJob]:
    """One job per found image, writing under ``out_dir`` (suffix changed to ``fmt``'s).

    Raises UsageError when two inputs would write the same file or an output would overwrite
    an input.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"output {str(out_dir)!r} exists and is not a folder")
    jobs: list[FileJob] = []
    seen: dict[tuple[Path, Path], None] = {}
    writers: dict[Path, Path] = {}
    sources = {src.resolve() for src, _ in found}
    for src, rel in found:
        target = out_dir / (rel.with_suffix(_suffix(fmt)) if fmt is not None else rel)
        key = (src.resolve(), target.resolve())
        if key in seen:  # the same file named twice (a folder and a pattern): pad it once
            continue
        seen[key] = None
        if key[1] in sources:
            raise UsageError(f"writing {str(target)!r} would overwrite an input; choose another -o")
        if key[1] in writers:
            raise UsageError(
                f"{str(writers[key[1]])!r} and {str(src)!r} would both write {str(target)!r}"
            )
        writers[key[1]] = src
        jobs.append(FileJob(src, target, fmt))
    return jobs
