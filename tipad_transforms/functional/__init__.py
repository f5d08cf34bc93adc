"""Functional padding API: plain functions on tensors, tv_tensors and PIL images."""

from ._brick import brick_channels, make_brick_texture, running_bond_stagger
from ._pad import brick_pad, pad, texture_pad
from ._stack import pad_stack

__all__ = [
    "brick_channels",
    "brick_pad",
    "make_brick_texture",
    "pad",
    "pad_stack",
    "running_bond_stagger",
    "texture_pad",
]
