"""tipad_transforms: texture padding for PyTorch data pipelines, in one fused Taichi kernel."""

from . import nn, transforms
from ._version import __version__
from .nn import RWKVBlock, RWKVChannelMix, RWKVTimeMix
from .transforms import BrickPad, TexturePad

__all__ = [
    "BrickPad",
    "RWKVBlock",
    "RWKVChannelMix",
    "RWKVTimeMix",
    "TexturePad",
    "__version__",
    "nn",
    "transforms",
]
