"""Small sample images bundled with the package, for the demo, the docs and quick experiments.

Sources and licences: ``README.md`` next to this file.
"""

from __future__ import annotations

import atexit
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

import PIL.Image

__all__ = ["SAMPLE_NAMES", "load_sample", "sample_image_paths"]

#: Bundled images, in gallery order: an RGB photo, an RGBA clip-art (transparent background) and
#: an 8-bit grayscale ("L") copy of the photo.
SAMPLE_NAMES: tuple[str, ...] = ("grace_hopper.jpg", "present.png", "grace_hopper_gray.png")

# Only needed when the package is imported from a zip file: resources are then extracted to
# temporary files that live until the interpreter exits.
_extracted = ExitStack()
atexit.register(_extracted.close)


def _path(name: str) -> Path:
    resource = resources.files(__name__) / name
    if isinstance(resource, Path):
        return resource
    return _extracted.enter_context(resources.as_file(resource))


def sample_image_paths() -> list[Path]:
    """Paths of the bundled sample images, in the order of ``SAMPLE_NAMES``."""
    return [_path(name) for name in SAMPLE_NAMES]


def load_sample(name: str) -> PIL.Image.Image:
    """Open a bundled sample image fully into memory (mode kept: ``RGB``, ``RGBA`` or ``L``).

    Args:
        name: one of ``SAMPLE_NAMES``, with or without its extension (``"present"`` works).

    Raises:
        ValueError: ``name`` is not a bundled image.
    """
    matches = [n for n in SAMPLE_NAMES if name in (n, n.rsplit(".", 1)[0])]
    if not matches:
        raise ValueError(f"name must be one of {', '.join(SAMPLE_NAMES)}; got {name!r}")
    with PIL.Image.open(_path(matches[0])) as img:
        img.load()
        return img
