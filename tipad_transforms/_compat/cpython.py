"""CPython's private APIs, each behind a function with a safe default (see ``_compat``)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = [
    "MISSING",
    "import_main_path",
    "main_path",
    "seed_getmodule_cache",
    "warn_at_caller",
]

#: The private names this Python lacks (``tests/test_compat.py`` requires it to be empty).
MISSING: list[str] = []

_getframe = getattr(sys, "_getframe", None)
if _getframe is None:
    MISSING.append("sys._getframe")


def warn_at_caller(
    message: str, category: type[Warning], internal: tuple[str, ...], runners: tuple[str, ...]
) -> None:
    """``warnings.warn`` pointing at the first frame, going out, whose file starts with none of
    ``internal + runners`` (the user's line); where every frame does (a DataLoader worker's
    stack, started by ``runners``), at the first one outside ``internal[0]`` (this package).

    Walks the frames with ``sys._getframe`` (default: the caller's own line). Python 3.12's
    public ``skip_file_prefixes`` cannot say the second rule: where it skips every frame it
    blames ``<sys>``.
    """
    import warnings

    frame: Any = None
    if _getframe is not None:
        try:
            frame = _getframe(1)  # the caller's: where the walk starts (stacklevel 2)
        except ValueError:  # not that deep
            pass
    level, fallback = 2, None
    while frame is not None:
        name = frame.f_code.co_filename
        if fallback is None and not name.startswith(internal[0]):
            fallback = level
        if not name.startswith(internal + runners):
            break
        frame, level = frame.f_back, level + 1
    else:
        level = fallback if fallback is not None else 2
    warnings.warn(message, category, stacklevel=level)


def seed_getmodule_cache(filenames: tuple[str, ...]) -> None:
    """Record ``filenames`` in ``inspect.modulesbyfile`` (inspect's private file -> module
    cache) under a module name no module has, so ``inspect.getmodule`` answers None for them
    at once instead of rescanning ``sys.modules`` on every call (default: nothing; those calls
    stay slow). An entry someone else already made is kept."""
    import inspect  # here: most processes never need it

    cache: Any = getattr(inspect, "modulesbyfile", None)
    if not isinstance(cache, dict):
        if "inspect.modulesbyfile" not in MISSING:
            MISSING.append("inspect.modulesbyfile")
        return
    for filename in filenames:
        cache.setdefault(filename, filename)


def import_main_path(path: str) -> None:
    """Import the script at ``path`` as ``__mp_main__``, as a forkserver server imports
    ``"__main__"`` for its workers: with ``multiprocessing``'s private ``_inheriting`` flag set
    meanwhile, so that a worker's ``prepare`` does not run it again (default, where the flag is
    read no more: each worker imports it again, slower, same result)."""
    from multiprocessing import process, spawn

    current: Any = process.current_process()
    current._inheriting = True
    try:
        spawn.import_main_path(path)
    finally:
        del current._inheriting


def main_path() -> str | None:
    """The main module's path exactly as a spawned or forkserver worker's ``prepare`` compares
    it (``multiprocessing.spawn.get_preparation_data``, undocumented), or None for an
    interactive parent (default: None, and each worker imports the main module itself)."""
    from multiprocessing import spawn

    prepare = getattr(spawn, "get_preparation_data", None)
    if prepare is None:
        return None
    path = prepare("ignore").get("init_main_from_path")
    return str(path) if path else None
