"""What ``tipad pad`` reads and where it writes: files, folders and glob patterns mapped onto a
mirrored tree under the output folder (:func:`find_inputs`, then :func:`plan_jobs`).

Folders and patterns take only regular files with a suffix Pillow reads (so a ``README.txt``
or a FIFO named ``x.png`` is skipped); recursion never enters a symbolically linked folder, so
a tree with a link loop ends.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import PIL.Image

from .arguments import UsageError

__all__ = ["FileJob", "describe_non_regular", "find_inputs", "inside", "output_format", "plan_jobs"]

_GLOB_CHARS = frozenset("*?[")
# The suffix written for a format chosen with --format (others: Pillow's first registered one).
_SUFFIX = {"JPEG": ".jpg", "PNG": ".png", "TIFF": ".tif", "WEBP": ".webp", "BMP": ".bmp"}


@dataclass(frozen=True)
class FileJob:
    """One image to pad: read ``source``, write ``target`` in ``fmt`` (None: the input's).
    ``root`` is the output folder, resolved, which the writer checks again."""

    source: Path
    target: Path
    fmt: str | None
    root: Path
    size: int = 0  # bytes of the source, when it was planned


def _image_suffixes() -> frozenset[str]:
    PIL.Image.init()  # loads every plugin, so the table is complete
    return frozenset(
        ext for ext, fmt in PIL.Image.registered_extensions().items() if fmt in PIL.Image.OPEN
    )


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (both absolute and resolved)."""
    return path == folder or path.is_relative_to(folder)


def _resolve(path: Path) -> Path:
    """``path.resolve()``; a symbolic link loop on the way is a UsageError."""
    try:
        return path.resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a link loop, before Python 3.13
        raise UsageError(f"cannot resolve {str(path)!r}: {e}") from None


def _resolver() -> Callable[[Path], Path]:
    """``_resolve`` for many files, each folder resolved once (a symbolic link: whole)."""
    folders: dict[Path, Path] = {}

    def resolve(path: Path) -> Path:
        if path.is_symlink():
            return _resolve(path)
        if path.parent not in folders:
            folders[path.parent] = _resolve(path.parent)
        return folders[path.parent] / path.name

    return resolve


def describe_non_regular(path: Path) -> str | None:
    """What ``path`` is (``"a FIFO (named pipe)"``, ``"a broken symbolic link to 'x'"``, ...)
    when it exists but is neither a regular file nor a folder; else None."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"a broken symbolic link to {os.readlink(path)!r}"
        return None
    except OSError as e:  # a link loop, a folder on the way we may not enter, ...
        return f"unreadable ({e.strerror})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _fixed_prefix(pattern: str) -> Path:
    """The leading folders of ``pattern`` that hold no wildcard (``.`` if none)."""
    parts = Path(pattern).parts
    fixed: list[str] = []
    for part in parts[:-1]:
        if _GLOB_CHARS & set(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def _names(folder: str) -> list[str]:
    try:
        with os.scandir(folder or os.curdir) as entries:
            return sorted(e.name for e in entries)
    except OSError:  # gone, not a folder, no permission: nothing matches there
        return []


def _folders(top: str, hidden: bool) -> Iterator[str]:
    """``top`` and every folder below it (``hidden``: dot-folders too), never entering a
    symbolically linked folder nor one already seen (a bind mount of an ancestor)."""
    seen: set[tuple[int, int]] = set()
    stack = [top]
    while stack:
        current = stack.pop()
        try:
            st = os.stat(current or os.curdir)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(current or os.curdir) as entries:
                below = [
                    os.path.join(current, e.name)
                    for e in entries
                    if (hidden or e.name[:1] != ".") and e.is_dir(follow_symlinks=False)
                ]
        except OSError:
            continue
        yield current
        stack.extend(sorted(below, reverse=True))


def _expand(prefix: str, parts: Sequence[str]) -> Iterator[str]:
    """The paths below ``prefix`` matching the pattern components ``parts`` (at least one)."""
    part, rest = parts[0], parts[1:]
    if part == "**":  # zero or more folders
        for folder in _folders(prefix, hidden=False):
            if rest:
                yield from _expand(folder, rest)
            else:  # a trailing "**": every entry below
                yield from (os.path.join(folder, n) for n in _names(folder) if n[:1] != ".")
        return
    names = [part]
    if _GLOB_CHARS & set(part):  # as glob: a wildcard does not match a hidden name
        hidden = part[:1] == "."
        names = [n for n in _names(prefix) if (hidden or n[:1] != ".") and fnmatch.fnmatch(n, part)]
    for name in names:
        path = os.path.join(prefix, name)
        if not rest:
            if os.path.lexists(path):
                yield path
        elif os.path.isdir(path):
            yield from _expand(path, rest)


def _glob(pattern: str) -> Iterator[str]:
    """``glob.glob(pattern, recursive=True)``, except that ``**`` never enters a symbolically
    linked folder: on a tree with a link loop it ends (``glob.glob`` runs out of memory)."""
    parts = Path(pattern).parts
    if os.path.isabs(pattern):
        return _expand(parts[0], parts[1:])
    return _expand("", parts)


def _relative_inside(path: Path, base: Path) -> Path | None:
    """``path`` relative to ``base`` after normalising both lexically (``a/x/../b`` is
    ``a/b``), or None when it does not lie below ``base``."""
    norm, norm_base = Path(os.path.normpath(path)), Path(os.path.normpath(base))
    if norm_base == Path(os.curdir):
        return None if norm.is_absolute() or norm.parts[:1] == (os.pardir,) else norm
    try:
        return norm.relative_to(norm_base)
    except ValueError:
        return None


def find_inputs(
    specs: Sequence[str],
    *,
    recursive: bool,
    skip: Path | None = None,
    problems: list[str] | None = None,
) -> list[tuple[Path, Path]]:
    """``(source, output path relative to the output folder)`` for every image ``specs`` name,
    in order: a folder's files relative to it, a pattern's to its fixed leading folders, a file
    by its name.

    ``skip`` (the output folder) holds no inputs, so that padding ``.`` into ``./padded`` twice
    does not pad the padded images; a folder input inside it is a UsageError. A spec that names
    nothing (missing, not a regular file, an empty folder, no match) is a UsageError, or, when
    ``problems`` is a list, a line appended to it (``--keep-going``).
    """
    suffixes = _image_suffixes()
    skip = _resolve(skip) if skip is not None else None
    real = _resolver()
    found: list[tuple[Path, Path]] = []

    def problem(message: str) -> None:
        if problems is None:
            raise UsageError(message)
        problems.append(message)

    def in_skip(path: str) -> bool:
        if skip is None:
            return False
        resolved = real(Path(path))  # a file in its folder (resolved once), or a link's target
        return inside(resolved if os.path.islink(path) else resolved.parent, skip)

    def images(paths: Iterable[str]) -> tuple[list[str], int]:
        """The image files among ``paths``, and how many of them lie in ``skip``."""
        split = os.path.splitext
        files = sorted(p for p in paths if split(p)[1].lower() in suffixes and os.path.isfile(p))
        kept = [p for p in files if not in_skip(p)]
        return kept, len(files) - len(kept)

    for spec in specs:
        path = Path(spec)
        if path.is_file():
            found.append((path, Path(path.name)))
        elif path.is_dir():
            if skip is not None and inside(_resolve(path), skip):
                where = "is" if _resolve(path) == skip else "lies inside"
                raise UsageError(
                    f"the input folder {spec!r} {where} the output folder; tipad never reads "
                    "its own outputs: choose another -o"
                )
            top = str(path)
            names = _folders(top, hidden=True) if recursive else (top,)
            files, _ = images(os.path.join(f, n) for f in names for n in _names(f))
            if not files:
                hint = "" if recursive else " (--recursive also searches its subfolders)"
                problem(f"folder {spec!r} holds no image files{hint}")
            cut = len(os.path.join(top, ""))  # the files' names start with the folder's
            found += [(Path(f), Path(f[cut:])) for f in files]
        elif _GLOB_CHARS & set(spec) and describe_non_regular(path) is None:
            base = _fixed_prefix(spec)
            files, skipped = images(_glob(spec))
            if not files:
                inside_out = f" outside the output folder ({skipped} inside it)" if skipped else ""
                problem(f"no image file matches {spec!r}{inside_out}")
            for f in map(Path, files):
                rel = _relative_inside(f, base)
                if rel is None:
                    raise UsageError(
                        f"{spec!r} matches {str(f)!r}, which lies outside the pattern's fixed "
                        f"folder {str(base)!r} (a '..' after a wildcard): it has no place in "
                        "the output folder; name those files without '..'"
                    )
                found.append((f, rel))
        elif (kind := describe_non_regular(path)) is not None:
            problem(f"input {spec!r} is {kind}, not an image file or a folder")
        else:
            problem(f"input {spec!r} does not exist")
    return found


def output_format(name: str) -> str:
    """Pillow's name of the format ``name`` (``png``, ``jpg``, ``.tif``...); UsageError listing
    the choices if Pillow cannot write it."""
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


def _identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file ``path`` names (links followed), None if none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def plan_jobs(
    found: Sequence[tuple[Path, Path]],
    out_dir: Path,
    fmt: str | None,
    *,
    protect: Sequence[Path] = (),
) -> list[FileJob]:
    """One job per found image, writing under ``out_dir`` (suffix changed to ``fmt``'s).

    Raises UsageError, before anything is written, when two inputs would write one file, when
    an output path names an input or a ``protect`` file (same device and inode: a hard or
    symbolic link counts), or when an output would land outside ``out_dir`` (``..``, or a
    symbolic link on the way to a folder elsewhere).
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"output {str(out_dir)!r} exists and is not a folder")
    root = _resolve(out_dir)
    real = _resolver()
    inputs: dict[tuple[int, int], Path] = {}
    sizes: dict[Path, int] = {}
    for path in [*(src for src, _ in found), *protect]:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            inputs.setdefault((st.st_dev, st.st_ino), path)
            sizes[path] = st.st_size
    jobs: list[FileJob] = []
    seen: set[tuple[str, str]] = set()  # paths as strings: they hash faster
    writers: dict[str, Path] = {}
    folders: dict[Path, Path] = {}  # a target's folder -> where it really is (inside root)
    for src, rel in found:
        rel = rel.with_suffix(_suffix(fmt)) if fmt is not None else rel
        if rel.is_absolute() or os.pardir in rel.parts:
            rel = _relative_inside(rel, Path(os.curdir)) or Path(os.pardir)
        if rel.parts[:1] == (os.pardir,) or not rel.name:
            raise UsageError(f"{str(src)!r} would be written outside {str(out_dir)!r}")
        target = out_dir / rel
        real_folder = folders.get(target.parent)
        if real_folder is None:
            real_folder = folders[target.parent] = _resolve(target.parent)
            if not inside(real_folder, root):
                raise UsageError(
                    f"{str(target)!r} would be written in {str(real_folder)!r}, outside the "
                    f"output folder {str(root)!r} (a symbolic link on the way): tipad writes "
                    "only inside -o"
                )
        # The directory entry that is replaced: a symbolic link there is replaced, not followed.
        entry = os.path.join(real_folder, target.name)
        key = (str(real(src)), entry)
        if key in seen:  # the same file named twice (a folder and a pattern): pad it once
            continue
        seen.add(key)
        identity = _identity(target)
        if identity is not None and identity in inputs:
            if target.is_symlink():
                link = " (a symbolic link to it)"
            elif _resolve(target) != _resolve(inputs[identity]):
                link = " (a hard link to it)"
            else:
                link = ""
            raise UsageError(
                f"writing {str(target)!r} would overwrite the input {str(inputs[identity])!r}"
                f"{link}; tipad never writes onto an input: choose another -o"
            )
        if entry in writers:
            raise UsageError(
                f"{str(writers[entry])!r} and {str(src)!r} would both write {str(target)!r}"
            )
        writers[entry] = src
        jobs.append(FileJob(src, target, fmt, root, sizes.get(src, 0)))
    return jobs
