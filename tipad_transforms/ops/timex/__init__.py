"""The time_conv family (RWKV-2/3's "timex"): ``ops.time_conv`` (``tipad::time_conv_forward``,
``tipad::time_conv_backward``), its Taichi kernel and its torch reference."""

from .op import TIME_CONV, time_conv, time_conv_backward, time_conv_forward

__all__ = ["TIME_CONV", "time_conv", "time_conv_backward", "time_conv_forward"]
