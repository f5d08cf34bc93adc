"""RWKV layers and language models on the package's WKV kernels, named like RWKV checkpoints:
RWKV-4 (on ``ops.wkv``) and RWKV-7 "Goose" (x070, on ``ops.wkv7``); ``Recurrent``
(``model.recurrent()``), a model's snapshot for fast one-token steps; ``generate`` /
``sample_logits``, sampling one token at a time with the state carried.

Every layer and model runs a whole sequence (``m(x)``), or continues from a state
(``m(x, state)``, ``None`` for the zero state) and returns the new one; see docs/rwkv.md.
They train as RWKV-LM's do: under ``torch.autocast`` (the recurrences stay float32),
``DistributedDataParallel`` with its default arguments, activation checkpointing
(``model.grad_checkpointing = True``) and ``torch.compile``. Every parameter is contiguous.
"""

from ._generate import generate, sample_logits
from ._models import RWKV4, RWKV7
from ._recurrent import Recurrent
from ._rwkv4 import (
    BlockState,
    ChannelMixState,
    RWKVBlock,
    RWKVChannelMix,
    RWKVTimeMix,
    TimeMixState,
)
from ._rwkv7 import (
    RWKV7Block,
    RWKV7BlockState,
    RWKV7ChannelMix,
    RWKV7TimeMix,
    RWKV7TimeMixState,
    lora_widths,
)

__all__ = [
    "RWKV4",
    "RWKV7",
    "BlockState",
    "ChannelMixState",
    "RWKV7Block",
    "RWKV7BlockState",
    "RWKV7ChannelMix",
    "RWKV7TimeMix",
    "RWKV7TimeMixState",
    "RWKVBlock",
    "RWKVChannelMix",
    "RWKVTimeMix",
    "Recurrent",
    "TimeMixState",
    "generate",
    "lora_widths",
    "sample_logits",
]
