"""RWKV layers on the package's WKV kernels, named like RWKV checkpoints.

RWKV-4: ``RWKVTimeMix``, ``RWKVChannelMix``, ``RWKVBlock`` (on ``ops.wkv``). Every layer runs a
whole sequence (``m(x)``), or continues from a state (``m(x, state)``, ``None`` for the zero
state) and returns the new one; see docs/rwkv.md.
"""

from ._rwkv4 import (
    BlockState,
    ChannelMixState,
    RWKVBlock,
    RWKVChannelMix,
    RWKVTimeMix,
    TimeMixState,
)

__all__ = [
    "BlockState",
    "ChannelMixState",
    "RWKVBlock",
    "RWKVChannelMix",
    "RWKVTimeMix",
    "TimeMixState",
]
