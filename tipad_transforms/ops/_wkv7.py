"""The 0.6 import path of ``MAX_HEAD_SIZE``, kept for ``nn/_rwkv7.py`` until it imports it from
``tipad_transforms.ops.rwkv7``: delete then."""

from .rwkv7 import MAX_HEAD_SIZE

__all__ = ["MAX_HEAD_SIZE"]
