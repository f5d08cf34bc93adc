"""The RWKV-4 family: ``ops.wkv`` and ``init_wkv_state`` (``tipad::wkv_forward``,
``tipad::wkv_backward``), its Taichi kernels and its torch reference."""

from .op import WKV, init_wkv_state, wkv, wkv_backward, wkv_forward

__all__ = ["WKV", "init_wkv_state", "wkv", "wkv_backward", "wkv_forward"]
