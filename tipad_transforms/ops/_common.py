"""Argument checks shared by the RWKV ops."""

from __future__ import annotations

import torch

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_float(name: str, t: object) -> torch.Tensor:
    """``t`` if it is a float16/bfloat16/float32/float64 tensor, else a TypeError naming it."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOATS:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    return t
