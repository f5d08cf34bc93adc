"""Functional padding API: plain functions that dispatch on the input's type (tensors,
tv_tensors, PIL images), as torchvision's; ``register_kernel`` adds an input type."""

from ._brick import brick_channels, make_brick_texture, running_bond_stagger
from ._pad import brick_pad, brick_pad_image, pad, pad_image, texture_pad, texture_pad_image
from ._registry import register_kernel
from ._stack import pad_stack

__all__ = [
    "brick_channels",
    "brick_pad",
    "brick_pad_image",
    "make_brick_texture",
    "pad",
    "pad_image",
    "pad_stack",
    "register_kernel",
    "running_bond_stagger",
    "texture_pad",
    "texture_pad_image",
]
