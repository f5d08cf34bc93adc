"""Imported by a ``forkserver`` server (``data.worker_context``): what a DataLoader worker that
pads needs, imported once for every worker forked from it. That is the user's main module (as
``__mp_main__``: CPython before gh-126631 never hands the server its path, passed here in
``FORKSERVER_MAIN_ENV``, so each worker re-ran it), torch, torchvision, the padding modules and
Taichi, imported but not initialised (a process forked after ``ti.init`` hangs).
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
