"""tipad_transforms: texture padding for PyTorch data pipelines and RWKV operators, each one
fused Taichi kernel."""

from . import nn, transforms
from ._runtime import set_backend
from ._version import __version__
from .nn import (
    RWKV4,
    RWKV7,
    RWKV7Block,
    RWKV7ChannelMix,
    RWKV7TimeMix,
    RWKVBlock,
    RWKVChannelMix,
    RWKVTimeMix,
)
from .transforms import BrickPad, Pad, TexturePad

__all__ = [
    "RWKV4",
    "RWKV7",
    "BrickPad",
    "Pad",
    "RWKV7Block",
    "RWKV7ChannelMix",
    "RWKV7TimeMix",
    "RWKVBlock",
    "RWKVChannelMix",
    "RWKVTimeMix",
    "TexturePad",
    "__version__",
    "nn",
    "set_backend",
    "transforms",
]
