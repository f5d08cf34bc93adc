"""tipad_transforms: texture padding for PyTorch data pipelines, in one fused Taichi kernel."""

from . import nn, transforms
from ._runtime import set_backend
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
    "set_backend",
    "transforms",
]
