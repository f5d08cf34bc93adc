"""tipad_transforms: texture padding for PyTorch data pipelines, in one fused Taichi kernel."""

from . import transforms
from ._version import __version__
from .transforms import BrickPad, TexturePad

__all__ = ["BrickPad", "TexturePad", "__version__", "transforms"]
