"""The 0.6 path of ``backends/preload.py`` (``data.worker_context`` names it): delete once
``data/_loader.py`` names ``tipad_transforms.backends.preload``."""

from ..backends import preload  # noqa: F401  (importing it is the point)
