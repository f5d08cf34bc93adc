"""torch.library custom ops (``torch.ops.tipad.*``): traceable, differentiable kernels.

One folder per kernel family (``padding``, ``rwkv4``, ``rwkv7``, ``timex``): its custom ops,
Taichi kernels and torch reference side by side; importing this package registers them all.
"""

from .padding import pad, pad_backward, pad_out, pad_stack, pad_stack_backward
from .rwkv4 import init_wkv_state, wkv
from .rwkv7 import wkv7
from .timex import time_conv

__all__ = [
    "init_wkv_state",
    "pad",
    "pad_backward",
    "pad_out",
    "pad_stack",
    "pad_stack_backward",
    "time_conv",
    "wkv",
    "wkv7",
]
