"""RWKV-4 WKV recurrence (work in progress: the torch route; the Taichi kernels replace it)."""

from __future__ import annotations

import torch

from .. import _fallback
from ._common import check_float

__all__ = ["init_wkv_state", "wkv"]


def init_wkv_state(
    batch_size: int, channels: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """The WKV state before the first token: ``(batch_size, 3, channels)`` float32.

    Rows: numerator ``aa = 0``, denominator ``bb = 0``, running max ``pp = -1e38``.
    """
    state = torch.zeros(batch_size, 3, channels, device=device)
    state[:, 2] = -1e38
    return state


def wkv(
    time_decay: torch.Tensor,
    time_first: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RWKV-4 WKV: ``y[b,t,c]``, the softmax-like mix of past ``v`` weighted by decayed ``k``.

    ``time_decay, time_first``: ``(C,)``; ``k, v``: ``(B, T, C)`` of one float dtype and device.
    Without ``state`` returns ``y`` ``(B, T, C)`` in ``k``'s dtype; with a ``(B, 3, C)`` float32
    state returns ``(y, new_state)``.
    """
    for name, t in (("time_decay", time_decay), ("time_first", time_first), ("k", k), ("v", v)):
        check_float(name, t)
    if k.dim() != 3:
        raise ValueError(f"k must be (B, T, C), got shape {tuple(k.shape)}")
    if v.shape != k.shape:
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    c = k.shape[2]
    for name, t in (("time_decay", time_decay), ("time_first", time_first)):
        if t.shape != (c,):
            raise ValueError(f"{name} must be ({c},) for k of shape {tuple(k.shape)}")
    math = torch.float64 if k.dtype == torch.float64 else torch.float32
    s = init_wkv_state(k.shape[0], c, device=k.device) if state is None else state
    y, new_state = _fallback.wkv(
        -torch.exp(time_decay.to(math)),
        time_first.to(math),
        k.to(math),
        v.to(math),
        s.to(math),
    )
    y = y.to(k.dtype)
    return y if state is None else (y, new_state.to(s.dtype))
