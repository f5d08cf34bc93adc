"""torch.library custom ops (``torch.ops.tipad.*``): traceable, differentiable kernels."""

from ._pad import pad, pad_backward, pad_out, pad_stack, pad_stack_backward
from ._time_conv import time_conv
from ._wkv import init_wkv_state, wkv
from ._wkv7 import wkv7

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
