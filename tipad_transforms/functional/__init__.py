"""Functional padding API: plain functions that dispatch on input type, as torchvision's.

``texture_pad``, ``brick_pad`` and ``pad`` take plain tensors, tv_tensors (``Image``,
``Video``, ``Mask``, ``BoundingBoxes``, ``KeyPoints``; others pass through) and PIL images;
``register_kernel`` adds an input type of your own. ``pad_stack`` pads a list of images of
different sizes onto one canvas size in one launch.
"""

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
