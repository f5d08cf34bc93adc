"""Atomic writes for the command line: a temporary file beside the target, renamed into place.

:func:`write_atomically` saves into ``.NAME.tipad-PID-XXXXXXXX.tmp`` beside the target, flushes
and fsyncs it, then renames it over the target (``os.replace``), so a reader (or a later run)
sees the old file or the complete new one, never a part. The rename replaces the directory
entry: a symbolic link at the target is replaced, its target never opened; a hard link is
broken, the other name keeps its data. :func:`discard_temporary` is what a worker's signal
handler calls to remove the file being written before the process ends;
:func:`remove_stale_temporaries` removes those that a process killed outright (SIGKILL) left.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import PIL.Image

from .inputs import inside

__all__ = ["discard_temporary", "remove_stale_temporaries", "write_atomically"]

#: ``.NAME.tipad-PID-TOKEN.tmp``: hidden, not an image suffix (never an input or an output
#: tipad would list), the writer's process id so that a later run can tell a stale one.
_TEMP = re.compile(r"\.(?P<name>.+)\.tipad-(?P<pid>[0-9]+)-[0-9a-f]{8}\.tmp")
# The temporary file this process is writing (None: none); the lock makes "name it, create
# it" one step for discard_temporary called from another thread (reentrant: from a signal
# handler in this thread it must not wait for itself).
_writing: str | None = None
_writing_lock = threading.RLock()


def _temporary_name(target: Path) -> str:
    return f".{target.name}.tipad-{os.getpid()}-{secrets.token_hex(4)}.tmp"


def _check_inside(folder: Path, root: Path) -> None:
    real = folder.resolve()
    if not inside(real, root):
        raise OSError(f"its folder {str(real)!r} lies outside the output folder {str(root)!r}")


def write_atomically(
    img: PIL.Image.Image, target: Path, fmt: str, options: dict[str, Any], root: Path
) -> None:
    """Save ``img`` as ``fmt`` at ``target`` through a temporary file renamed into place.

    ``target``'s folder is created if missing, after checking that it lies inside ``root``
    (resolved: no symbolic link on the way leads elsewhere). Raises OSError (disk full, no
    permission, a folder where the file should be, ...) and whatever ``img.save`` raises; on
    any error or interruption the temporary file is removed and an earlier file at ``target``
    is untouched.
    """
    global _writing
    folder = target.parent
    _check_inside(folder, root)  # before creating folders: none is made outside root
    folder.mkdir(parents=True, exist_ok=True)
    _check_inside(folder, root)  # and after: a link put there meanwhile
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    temporary: str | None = None
    try:
        while temporary is None:
            with _writing_lock:  # named before it exists: an interruption finds it either way
                _writing = str(folder / _temporary_name(target))
                try:  # 0o666 less the umask: the permissions a plain save would give
                    fd = os.open(_writing, flags, 0o666)
                except FileExistsError:  # this process id's and 32 random bits: draw again
                    continue
                temporary = _writing
        with os.fdopen(fd, "w+b") as f:
            img.save(f, format=fmt, **options)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except BaseException:  # an error, or a signal's exception: no temporary file is left
        discard_temporary()
        raise
    finally:
        with _writing_lock:
            _writing = None


def discard_temporary() -> None:
    """Remove the temporary file this process is writing, if any (for a process about to end
    on a signal; safe from a signal handler or another thread)."""
    with _writing_lock:
        if _writing is not None:
            with contextlib.suppress(OSError):
                os.unlink(_writing)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this run has written nothing yet: a file of its pid is an old one's
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temporaries(targets: Iterable[Path]) -> list[Path]:
    """Remove the temporary files that a killed run (SIGKILL, a power cut) left beside
    ``targets``: files named like :func:`write_atomically`'s for one of these targets whose
    writing process is not running. Returns the paths removed."""
    names: dict[Path, set[str]] = {}
    for target in targets:
        names.setdefault(target.parent, set()).add(target.name)
    removed = []
    for folder, wanted in names.items():
        try:
            entries = list(os.scandir(folder))
        except OSError:  # not created yet
            continue
        for entry in entries:
            match = _TEMP.fullmatch(entry.name)
            if (
                match is not None
                and match["name"] in wanted
                and entry.is_file(follow_symlinks=False)
                and not _running(int(match["pid"]))
            ):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed
