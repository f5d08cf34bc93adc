"""Imported by a ``forkserver`` server (``tipad_transforms.data.worker_context``): everything a
DataLoader worker that pads needs, imported once, so every worker forked from the server
starts with it.

- The user's main module (as ``__mp_main__``, what a spawned or forkserver worker imports
  anyway). ``multiprocessing.set_forkserver_preload(["__main__", ...])`` is meant to do this,
  but CPython before the fix of gh-126631 (3.11, 3.12, early 3.13) never hands the server the
  main path, so every worker re-ran the main module (seconds per worker). ``worker_context``
  passes the path in ``FORKSERVER_MAIN_ENV``.
- torch, torchvision, this package's padding modules and Taichi, not initialised: importing
  is fork safe, initialising is not (a process forked after ``ti.init`` hangs). Each worker
  initialises Taichi on its first launch; Taichi's offline cache spares it the compilation.
"""

import importlib
import os
import sys

from .._compat.cpython import import_main_path
from .taichi import FORKSERVER_MAIN_ENV, TAICHI


def _import_main() -> None:
    path = os.environ.get(FORKSERVER_MAIN_ENV, "")
    main = sys.modules.get("__main__")
    if not path or getattr(main, "__file__", None) == path or not os.path.isfile(path):
        return  # no script (an interactive parent), or a Python that preloaded it already
    try:
        import_main_path(path)
    except Exception:
        # Each worker imports it again (as it did without this) and reports the error there,
        # where the user's DataLoader shows it; a dead server would only say "EOFError".
        pass


for _name in ("torchvision", "tipad_transforms.transforms", "tipad_transforms.data"):
    importlib.import_module(_name)
TAICHI.load()
_import_main()
