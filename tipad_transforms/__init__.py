"""tipad_transforms: texture padding and RWKV operators for PyTorch, each a fused Taichi kernel."""

from . import transforms
from ._version import __version__
from .transforms import BrickPad, TexturePad

__all__ = ["BrickPad", "TexturePad", "__version__", "transforms"]
