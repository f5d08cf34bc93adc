"""torch.library custom ops (``torch.ops.tipad.*``): traceable, differentiable kernels."""

from ._pad import pad, pad_backward, pad_out

__all__ = ["pad", "pad_backward", "pad_out"]
