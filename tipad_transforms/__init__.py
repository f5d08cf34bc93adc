"""tipad_transforms: texture padding for PyTorch data pipelines and RWKV operators, each one
fused Taichi kernel.

The names below are imported on first use (PEP 562), so a script that only pads does not pay
for the RWKV modules or the transform classes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from . import nn, transforms
    from .backends import set_backend, set_warmup
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
    "set_warmup",
    "transforms",
]

# name -> the submodule that defines it (None: the name is that submodule).
_LAZY = {
    "nn": None,
    "transforms": None,
    "set_backend": ".backends",
    "set_warmup": ".backends",
    **{name: ".nn" for name in __all__ if name.startswith("RWKV")},
    **{name: ".transforms" for name in ("BrickPad", "Pad", "TexturePad")},
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name, "")
    if where == "":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if where is None:
        value: Any = importlib.import_module(f".{name}", __name__)
    else:
        value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
