"""The padding family: ``tipad::pad``, ``tipad::pad_out``, ``tipad::pad_stack`` and their
backwards (``op.py``), the record of a call and its geometry (``geometry.py``), the Taichi
kernel (``taichi.py``) and the torch reference (``reference.py``)."""

from .geometry import MODES, PadCall, PadGeometry, StackGeometry, check_bank_index, image_channels
from .op import (
    PAD,
    pad,
    pad_backward,
    pad_direct,
    pad_out,
    pad_samples_direct,
    pad_stack,
    pad_stack_backward,
    pad_stack_direct,
)

__all__ = [
    "MODES",
    "PAD",
    "PadCall",
    "PadGeometry",
    "StackGeometry",
    "check_bank_index",
    "image_channels",
    "pad",
    "pad_backward",
    "pad_direct",
    "pad_out",
    "pad_samples_direct",
    "pad_stack",
    "pad_stack_backward",
    "pad_stack_direct",
]
