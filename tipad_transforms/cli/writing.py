"""Atomic writes for the command line (:func:`write_atomically`): a reader or a later run sees
the old file or the complete new one, never a part, whatever stops the process; a symbolic link
at the target is replaced, never followed, and no link on the way leads outside the output
folder. :func:`discard_temporary` (a worker's signal handler) and
:func:`remove_stale_temporaries` (after SIGKILL) remove the temporary files left behind.
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

__all__ = ["OutputFolders", "discard_temporary", "remove_stale_temporaries", "write_atomically"]

#: ``.NAME.tipad-PID-TOKEN.tmp``: hidden, not an image suffix (never an input or an output
#: tipad would list), the writer's process id so that a later run can tell a stale one.
_TEMP = re.compile(r"\.(?P<name>.+)\.tipad-(?P<pid>[0-9]+)-[0-9a-f]{8}\.tmp")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_OPEN = 64  # folders kept open per process
# The temporary file this process is writing, as (its folder's fd, its name); the lock makes
# "name it, create it" one step for discard_temporary called from another thread (reentrant:
# from a signal handler in this thread it must not wait for itself).
_writing: tuple[int, str] | None = None
_writing_lock = threading.RLock()


class OutputFolders:
    """Open folders below output roots: each is created if missing, and opened from its root
    (resolved) one folder at a time with ``O_NOFOLLOW``. :meth:`close` closes them (a
    folder deleted and made again is another folder: keep one of these per run)."""

    def __init__(self) -> None:
        self._fds: dict[tuple[str, str], int] = {}

    def fd(self, folder: Path, root: Path) -> int:
        """An open descriptor of ``folder``, which must lie inside ``root`` (OSError if not)."""
        key = (str(folder), str(root))  # strings: they hash faster than paths
        fd = self._fds.get(key)
        if fd is None:
            if len(self._fds) >= _MAX_OPEN:
                self.close()
            fd = self._fds[key] = _open_inside(folder, root)
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _open_inside(folder: Path, root: Path) -> int:
    real = folder.resolve()
    if not inside(real, root):
        raise OSError(f"its folder {str(real)!r} lies outside the output folder {str(root)!r}")
    root.mkdir(parents=True, exist_ok=True)  # -o, created if missing
    fd = os.open(root, _DIR)
    try:
        for part in real.relative_to(root).parts:  # resolved: a link here appeared meanwhile
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=fd)
            parent, fd = fd, os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            os.close(parent)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_atomically(
    img: PIL.Image.Image,
    target: Path,
    fmt: str,
    options: dict[str, Any],
    root: Path,
    *,
    folders: OutputFolders | None = None,
    fsync: bool = False,
) -> None:
    """Save ``img`` as ``fmt`` at ``target``: into ``.NAME.tipad-PID-XXXXXXXX.tmp`` beside it,
    then ``os.replace`` over the directory entry (a symbolic link there is replaced, a hard link
    broken).

    ``target``'s folder (opened through ``folders``, else for this call) is created if missing
    and must lie inside ``root`` (resolved). ``fsync``: flush the file, then its folder, to
    disk (a power cut then keeps it); a file that replaces an earlier one is flushed before the
    rename in any case. Raises OSError (disk full, no permission, ...) and whatever
    ``img.save`` raises; then the temporary file is removed and ``target`` is untouched.
    """
    global _writing
    own = folders is None
    folders = OutputFolders() if folders is None else folders
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        folder = folders.fd(target.parent, root)
        temporary = None
        while temporary is None:
            with _writing_lock:  # named before it exists: an interruption finds it either way
                name = f".{target.name}.tipad-{os.getpid()}-{secrets.token_hex(4)}.tmp"
                _writing = (folder, name)
                try:  # 0o666 less the umask: the permissions a plain save would give
                    fd = os.open(name, flags, 0o666, dir_fd=folder)
                except FileExistsError:  # this process id's and 32 random bits: draw again
                    continue
                temporary = name
        with os.fdopen(fd, "w+b") as f:
            img.save(f, format=fmt, **options)
            f.flush()
            # A rename over an earlier file that a crash could undo before the new data reached
            # the disk would leave neither: the new file is on disk before it replaces one.
            if fsync or _exists(target.name, folder):
                os.fsync(f.fileno())
        os.replace(temporary, target.name, src_dir_fd=folder, dst_dir_fd=folder)
        if fsync:
            os.fsync(folder)
    except BaseException:  # an error, or a signal's exception: no temporary file is left
        discard_temporary()
        raise
    finally:
        with _writing_lock:
            _writing = None
        if own:
            folders.close()


def _exists(name: str, folder: int) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def discard_temporary() -> None:
    """Remove the temporary file this process is writing, if any (for a process about to end
    on a signal; safe from a signal handler or another thread)."""
    with _writing_lock:
        if _writing is not None:
            with contextlib.suppress(OSError):
                os.unlink(_writing[1], dir_fd=_writing[0])


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
