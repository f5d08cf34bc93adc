"""Which Taichi the runtime seam runs on: upstream ``taichi`` or the ``taichi_forge`` fork.

Upstream Taichi's last release (1.7.4) has no wheels for CPython 3.14; ``taichi-forge`` (import
name ``taichi_forge``) is a maintained fork that runs the same code and has them. The seam takes
either module; which one is decided once per process, at its first use, in this order:

1. ``set_backend(name)`` (exported as ``tipad_transforms.set_backend``), called before then;
2. the ``TIPAD_TAICHI`` environment variable (``taichi`` or ``taichi_forge``);
3. a Taichi module the process already imported (the user's own: one Taichi per process);
4. the installed one, upstream first when both are.

This module never imports torch, and only ``load`` imports Taichi: ``tipad --version`` names
the backend (``describe``) without paying for either.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import threading
import warnings
from types import ModuleType

__all__ = [
    "BACKENDS",
    "ENV_VAR",
    "chosen",
    "describe",
    "imported",
    "init_options",
    "load",
    "loaded",
    "set_backend",
]

#: Import names of the Taichi modules the seam runs on, in the order of preference.
BACKENDS = ("taichi", "taichi_forge")
#: The environment variable that picks one (read at the first use, like ``set_backend``).
ENV_VAR = "TIPAD_TAICHI"
# pip's name for each, for the install hint and for the version without importing.
_DISTRIBUTIONS = {"taichi": "taichi", "taichi_forge": "taichi-forge"}

# Code run by the import machinery carries these file names (frozen modules, no source file).
FROZEN_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")

_lock = threading.Lock()
_choice: str | None = None  # set_backend's
_module: ModuleType | None = None  # the one load() imported


def _normalize(name: str, origin: str) -> str | None:
    key = name.strip().lower().replace("-", "_")
    if key in ("", "auto"):
        return None
    if key not in BACKENDS:
        raise ValueError(
            f"{origin} must be one of {', '.join(map(repr, BACKENDS))} or 'auto', got {name!r}"
        )
    return key


def set_backend(name: str | None) -> None:
    """Choose the Taichi module the kernels run on: ``"taichi"`` or ``"taichi_forge"``.

    Call it before the first kernel launch (or set ``TIPAD_TAICHI``): a process runs one Taichi.
    ``None`` or ``"auto"`` goes back to the automatic choice (``TIPAD_TAICHI``, else a Taichi
    the process already imported, else the installed one, upstream ``taichi`` first). Choosing
    the module already in use does nothing.

    Raises:
        ValueError: ``name`` is not one of the names above.
        RuntimeError: another Taichi module already runs tipad's kernels in this process.
    """
    global _choice
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    key = None if name is None else _normalize(name, "name")
    with _lock:
        if _module is not None and key is not None and key != _module.__name__:
            raise RuntimeError(
                f"tipad_transforms already runs its kernels on {_module.__name__} in this "
                f"process; choose {key} before the first kernel launch (or set {ENV_VAR})"
            )
        _choice = key


def imported() -> list[ModuleType]:
    """The Taichi modules this process has imported (ours or the user's), in ``BACKENDS`` order."""
    return [m for m in map(sys.modules.get, BACKENDS) if m is not None]


def chosen() -> str:
    """The import name of the Taichi that ``load`` imports (or imported); imports nothing.

    Raises:
        ValueError: ``TIPAD_TAICHI`` names no known backend.
        ModuleNotFoundError: neither is installed.
    """
    if _module is not None:
        return _module.__name__
    if _choice is not None:
        return _choice
    explicit = _normalize(os.environ.get(ENV_VAR, ""), ENV_VAR)
    if explicit is not None:
        return explicit
    for module in imported():
        return module.__name__
    for name in BACKENDS:
        if importlib.util.find_spec(name) is not None:
            return name
    raise ModuleNotFoundError(
        "tipad_transforms needs Taichi: pip install taichi (CPython 3.10-3.13) or taichi-forge",
        name="taichi",
    )


def describe() -> str:
    """``"<import name> <version>"`` of the chosen Taichi, e.g. ``"taichi 1.7.4"``; imports none.

    ``"no Taichi installed"`` when there is none, ``"<name> (not installed)"`` when the explicit
    choice is missing.
    """
    try:
        name = chosen()
    except (ModuleNotFoundError, ValueError) as exc:
        return f"no Taichi ({exc})" if isinstance(exc, ValueError) else "no Taichi installed"
    if _module is not None:
        return f"{name} {'.'.join(map(str, _module.__version__))}"
    try:
        return f"{name} {importlib.metadata.version(_DISTRIBUTIONS[name])}"
    except importlib.metadata.PackageNotFoundError:
        return f"{name} (not installed)"


def loaded() -> ModuleType | None:
    """The Taichi module ``load`` imported, or None before the first use."""
    return _module


def load() -> ModuleType:
    """Import the chosen Taichi quietly (once) and return it; starts no runtime.

    Quiet: no import banner, no version-check thread that phones home, no log line, and none of
    the DeprecationWarnings its import raises (``locale.getdefaultlocale`` on Python 3.11+), so
    a first kernel call works under ``-W error`` and pytest's ``filterwarnings = error``.

    Raises:
        ValueError: ``TIPAD_TAICHI`` names no known backend.
        ModuleNotFoundError: the chosen Taichi is not installed (the message says what to install).
    """
    global _module
    with _lock:
        if _module is not None:
            return _module
        name = chosen()
        seed_frozen_frames()
        os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
        os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "0")
        # Under pytest or Jupyter (a replaced sys.stdout) Taichi logs a line at import otherwise.
        os.environ.setdefault("TI_LOG_LEVEL", "warn")
        before = set(sys.modules)
        try:
            with warnings.catch_warnings():
                # Raised inside Taichi's own import, about its code: nothing a user can act on.
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", PendingDeprecationWarning)
                module = importlib.import_module(name)
        except BaseException as exc:
            _forget_partial_import(name, before)
            if not isinstance(exc, ModuleNotFoundError) or exc.name != name:
                raise
            raise ModuleNotFoundError(
                f"tipad_transforms was told to run on {name} ({_source()}), which is not "
                f"installed: pip install {_DISTRIBUTIONS[name]}",
                name=name,
            ) from exc
        _module = module
        return module


def _forget_partial_import(name: str, before: set[str]) -> None:
    """Drop from ``sys.modules`` what an interrupted import of ``name`` left there.

    An import stopped half-way (Ctrl-C caught in a notebook, any exception) leaves the
    submodules it finished in ``sys.modules`` while the package itself is dropped: the next
    ``import taichi`` runs the package again, finds ``taichi.lang`` imported and never binds it
    as an attribute, and every later kernel call fails with "module 'taichi' has no attribute
    'lang'". Without the leftovers the next call imports Taichi afresh (its compiled extension,
    already loaded, is reused by the interpreter).
    """
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        if module not in before:
            del sys.modules[module]


def seed_frozen_frames() -> None:
    """Let ``inspect.getmodule`` answer at once for frames of the import machinery.

    Taichi's ``@ti.kernel`` and ``@ti.func`` ask ``inspect.getframeinfo`` about a frame a few
    levels up (is the function defined in a class?). At import time, and when our kernels are
    built and compiled, that frame is often ``<frozen importlib._bootstrap>``: a file name that
    ``inspect.modulesbyfile`` never holds, so every such call rescans all of ``sys.modules``
    (2,400 modules after torch; 279 scans in ``import taichi``, 87 more for our first kernel),
    and finds nothing: no module has that file. Recording the file names under a module name
    that is never in ``sys.modules`` (the file name itself) caches that same answer: getmodule
    still returns None for them, getframeinfo and findsource give what they gave, only without
    the scan. An entry someone else already made is kept.
    """
    # here: ``tipad --version`` imports this module and needs neither torch nor inspect
    from .._compat.cpython import seed_getmodule_cache

    seed_getmodule_cache(FROZEN_FILES)


def init_options(ti: ModuleType) -> dict[str, object]:
    """``ti.init`` options that make ``ti`` compile our kernels as upstream Taichi 1.7 does.

    taichi_forge compiles at ``compile_tier="fast"`` by default (no advanced IR optimisation),
    which made the RWKV kernels 3-5x slower than upstream's defaults here; ``"full"`` is
    upstream's pipeline. A ``TI_COMPILE_TIER`` set by the user is left to win.
    """
    if ti.__name__ == "taichi_forge" and not os.environ.get("TI_COMPILE_TIER"):
        return {"compile_tier": "full"}
    return {}


def _source() -> str:
    if _choice is not None:
        return "set_backend"
    if os.environ.get(ENV_VAR, "").strip():
        return f"{ENV_VAR}={os.environ[ENV_VAR]}"
    return "the automatic choice"
