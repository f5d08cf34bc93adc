"""The 0.6 import path of the Taichi runtime, kept for the modules that still import it
(``cli``, ``data/_loader.py`` and their tests): delete once they import
``tipad_transforms.backends`` (``TAICHI``, ``FORKSERVER_MAIN_ENV``)."""

from ..backends.taichi import FORKSERVER_MAIN_ENV, TAICHI

__all__ = ["FORKSERVER_MAIN_ENV", "refusal", "runtime_arch", "taichi_backend", "taichi_version"]

refusal = TAICHI.refusal
runtime_arch = TAICHI.runtime_arch
taichi_backend = TAICHI.describe
taichi_version = TAICHI.version
