"""RWKV-7 (x070) WKV with plain torch ops: the torch backend of ``ops.wkv7``, one batched step
per token; the backward walks the same checkpoints as the kernels (recomputing the states
inside each chunk), so its memory is bounded the same way."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["backward", "forward"]


def _recurrence(
    r: Tensor,
    d: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    state: Tensor,
    chunk: int,
    save: bool,
) -> tuple[Tensor, Tensor]:
    """``S_t = S_{t-1} diag(d_t) + (S_{t-1} a_t) b_t^T + v_t k_t^T``, ``y_t = S_t r_t``.

    ``r, d, k, v, a, b``: ``(B, T, H, N)`` (``d = exp(w)``, the decay itself), ``state``:
    ``(B, H, N, N)`` indexed ``[value, key]``, one float dtype. Returns ``y`` ``(B, T, H, N)``
    and the states ``(B, H, S, N, N)`` in the kernel's layout: with ``save`` (S = ceil(T /
    chunk) + 1) the state before steps 0, chunk, 2 chunk, ... and after the last, else (S = 1)
    the final state only.
    """
    s = state
    ys, kept = [], []
    for t in range(k.shape[1]):
        if save and t % chunk == 0:
            kept.append(s)
        s = _wkv7_step(s, d[:, t], k[:, t], v[:, t], a[:, t], b[:, t])
        ys.append(torch.einsum("bhij,bhj->bhi", s, r[:, t]))
    kept.append(s)
    y = torch.stack(ys, 1) if ys else k.new_empty(k.shape)
    return y, torch.stack(kept, 2)


def _wkv7_step(s: Tensor, d: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor) -> Tensor:
    sa = torch.einsum("bhij,bhj->bhi", s, a)
    return s * d[:, :, None, :] + sa[..., None] * b[:, :, None, :] + v[..., None] * k[:, :, None, :]


def _gradients(
    r: Tensor,
    d: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    states: Tensor,
    gy: Tensor,
    gstate: Tensor,
    chunk: int,
) -> tuple[Tensor, ...]:
    """Gradients of ``_recurrence`` w.r.t. ``(r, d, k, v, a, b, state)`` given ``gy``
    ``(B, T, H, N)`` and ``gstate`` ``(B, H, N, N)`` (of ``y`` and of the final state).

    ``states``: ``_recurrence``'s saved checkpoints (``save=True``). Chunks are walked from the
    last: the states inside one are recomputed from its checkpoint, then the step gradients run back
    through them (the kernels' scheme, so the memory is the checkpoints plus one chunk).
    """
    n_t = k.shape[1]
    grads = [torch.empty_like(x) for x in (r, d, k, v, a, b)]
    gr, gd, gk, gv, ga, gb = grads
    g = gstate
    for c in reversed(range(states.shape[2] - 1)):
        lo, hi = c * chunk, min(n_t, (c + 1) * chunk)
        inside = [states[:, :, c]]
        for t in range(lo, hi):
            inside.append(_wkv7_step(inside[-1], d[:, t], k[:, t], v[:, t], a[:, t], b[:, t]))
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
    return (*grads, g)


def forward(
    r: Tensor,
    d: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    state: Tensor,
    y: Tensor,
    states: Tensor,
    chunk: int,
) -> None:
    """``taichi.forward``'s contract: writes ``y`` and ``states`` (checkpoints, or the final)."""
    out, kept = _recurrence(r, d, k, v, a, b, state, chunk, states.shape[2] > 1)
    y.copy_(out)
    states.copy_(kept)


def backward(
    r: Tensor,
    d: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    state: Tensor,
    saved: Tensor,
    gy: Tensor,
    gstate: Tensor,
    grads: Tensor,
    chunk: int,
) -> None:
    """``taichi.backward``'s contract: writes ``grads``, overwrites ``gstate``."""
    states = saved
    if states.shape[2] != (k.shape[1] + chunk - 1) // chunk + 1:
        states = _recurrence(r, d, k, v, a, b, state, chunk, True)[1]
    *each, g = _gradients(r, d, k, v, a, b, states, gy, gstate, chunk)
    grads.copy_(torch.stack(each))
    gstate.copy_(g)
