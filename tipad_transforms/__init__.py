"""tipad_transforms: texture padding and RWKV operators for PyTorch, each a fused Taichi kernel."""

from ._version import __version__

__all__ = ["__version__"]
