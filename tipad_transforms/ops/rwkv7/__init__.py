"""The RWKV-7 family: ``ops.wkv7`` (``tipad::wkv7_forward``, ``tipad::wkv7_backward``), its
Taichi kernels and its torch reference."""

from .op import MAX_HEAD_SIZE, WKV7, wkv7, wkv7_backward, wkv7_forward

__all__ = ["MAX_HEAD_SIZE", "WKV7", "wkv7", "wkv7_backward", "wkv7_forward"]
