"""Causal depthwise time convolution (work in progress: the torch route; Taichi replaces it)."""

from __future__ import annotations

import torch

from .. import _fallback
from ._common import check_float

__all__ = ["time_conv"]


def time_conv(w: torch.Tensor, k: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Causal depthwise time convolution: ``out[b,c,t] = eps + sum_j w[c,L-1-j] k[b,c,t-j]``.

    ``w``: ``(C, L)`` or ``(C, 1, L)``; ``k``: ``(B, C, T)``. Returns ``(B, C, T)``.
    """
    check_float("w", w)
    check_float("k", k)
    if w.dim() == 3 and w.shape[1] == 1:
        w = w[:, 0]
    return _fallback.time_conv(w, k, eps)
