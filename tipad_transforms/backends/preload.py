"""Imported by a ``forkserver`` server (``tipad_transforms.data.worker_context``): everything a
DataLoader worker that pads needs, imported once, so every worker forked from the server
starts with it.

- The user's main module (as ``__mp_main__``, what a spawned or forkserver worker imports
  anyway). ``multiprocessing.set_forkserver_preload(["__main__", ...])`` is meant to do this,
  but CPython before the fix of gh-126631 (3.11, 3.12, early 3.13) never hands the server the
  main path (``ForkServer.ensure_running`` asks ``get_preparation_data`` for ``"main_path"``,
  which it calls ``"init_main_from_path"``), so every worker re-ran the main module: imported
  torchvision and whatever else it imports (seconds per worker). ``worker_context`` passes the
  path in ``FORKSERVER_MAIN_ENV``.
- torch, torchvision, this package's padding modules (the transform classes, the functional
  API, the custom ops they register, the runtime seam) and Taichi, not initialised: importing
  is fork safe, initialising is not (a process forked after ``ti.init`` hangs). Each worker
  initialises Taichi on its first launch, and Taichi's offline cache (on by default) spares it
  the compilation after the first process on the machine compiled the kernels.
"""

import importlib
import os
import sys

from . import FORKSERVER_MAIN_ENV, _import_taichi


def _import_main() -> None:
    path = os.environ.get(FORKSERVER_MAIN_ENV, "")
    main = sys.modules.get("__main__")
    if not path or getattr(main, "__file__", None) == path or not os.path.isfile(path):
        return  # no script (an interactive parent), or a Python that preloaded it already
    from multiprocessing import process, spawn

    # As the server itself does for "__main__": a worker's `prepare` then finds the main module
    # in place and does not run it again.
    process.current_process()._inheriting = True  # type: ignore[attr-defined]
    try:
        spawn.import_main_path(path)
    except Exception:
        # Each worker imports it again (as it did without this) and reports the error there,
        # where the user's DataLoader shows it; a dead server would only say "EOFError".
        pass
    finally:
        del process.current_process()._inheriting  # type: ignore[attr-defined]


for _name in ("torchvision", "tipad_transforms.transforms", "tipad_transforms.data"):
    importlib.import_module(_name)
_import_taichi()
_import_main()
