"""Imported by a ``forkserver`` server (``tipad_transforms.data.worker_context``): imports torch
and Taichi (quietly, not initialised) once, so every worker forked from the server has them.

Importing without ``ti.init`` is safe to fork; each worker initialises Taichi on its first
launch, and Taichi's offline cache (on by default) spares it the compilation after the first
process on the machine compiled the kernels.
"""

from . import _import_taichi

_import_taichi()
