"""RWKV-7 (x070) WKV with plain torch ops: the torch backend of ``ops.wkv7``, one batched step
per token; the backward walks the same checkpoints as the kernels (recomputing the states
inside each chunk), so its memory is bounded the same way. The contract of each function is
``taichi.py``'s."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["backward", "forward"]


def _step(s: Tensor, d: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``S diag(d) + (S a) b^T + v k^T`` for a batch of states ``(B, H, N, N)``."""
    sa = torch.einsum("bhij,bhj->bhi", s, a)
    return s * d[:, :, None, :] + sa[..., None] * b[:, :, None, :] + v[..., None] * k[:, :, None, :]


def forward(
    r: Tensor, d: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor, y: Tensor,
    states: Tensor, chunk: int,
) -> None:  # fmt: skip
    """``S_t = S_{t-1} diag(d_t) + (S_{t-1} a_t) b_t^T + v_t k_t^T``, ``y_t = S_t r_t``: writes
    ``y`` and ``states`` (the state before steps 0, chunk, 2 chunk, ... and after the last, or
    the final state alone)."""
    s = state
    for t in range(k.shape[1]):
        if states.shape[2] > 1 and t % chunk == 0:
            states[:, :, t // chunk] = s
        s = _step(s, d[:, t], k[:, t], v[:, t], a[:, t], b[:, t])
        y[:, t] = torch.einsum("bhij,bhj->bhi", s, r[:, t])
    states[:, :, -1] = s


def backward(
    r: Tensor, d: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor,
    saved: Tensor, gy: Tensor, gstate: Tensor, grads: Tensor, chunk: int,
) -> None:  # fmt: skip
    """Chunks are walked from the last: the states inside one are recomputed from its
    checkpoint, then the step gradients run back through them. Writes ``grads`` (of ``r, d, k,
    v, a, b``) and overwrites ``gstate`` with the initial state's gradient."""
    n_t = k.shape[1]
    states = saved
    if states.shape[2] != (n_t + chunk - 1) // chunk + 1:
        states = state.new_empty(*state.shape[:2], (n_t + chunk - 1) // chunk + 1, *state.shape[2:])
        forward(r, d, k, v, a, b, state, torch.empty_like(gy), states, chunk)
    gr, gd, gk, gv, ga, gb = grads.unbind(0)
    g = gstate.clone()
    for c in reversed(range(states.shape[2] - 1)):
        lo, hi = c * chunk, min(n_t, (c + 1) * chunk)
        inside = [states[:, :, c]]
        for t in range(lo, hi):
            inside.append(_step(inside[-1], d[:, t], k[:, t], v[:, t], a[:, t], b[:, t]))
        for t in reversed(range(lo, hi)):
            prev, after = inside[t - lo], inside[t - lo + 1]
            g = g + gy[:, t, :, :, None] * r[:, t, :, None, :]
            gr[:, t] = torch.einsum("bhi,bhij->bhj", gy[:, t], after)
            sa = torch.einsum("bhij,bhj->bhi", prev, a[:, t])
            q = torch.einsum("bhij,bhj->bhi", g, b[:, t])
            gd[:, t] = (g * prev).sum(2)
            gb[:, t] = torch.einsum("bhij,bhi->bhj", g, sa)
            ga[:, t] = torch.einsum("bhi,bhij->bhj", q, prev)
            gk[:, t] = torch.einsum("bhij,bhi->bhj", g, v[:, t])
            gv[:, t] = torch.einsum("bhij,bhj->bhi", g, k[:, t])
            g = g * d[:, t, :, None, :] + q[..., None] * a[:, t, :, None, :]
    gstate.copy_(g)
