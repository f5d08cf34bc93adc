"""The chunked (WY) form of the RWKV-7 forward: the CPU's path for long sequences, where
small matrix products replace the step-by-step recurrence.

Per (batch, head) and chunk of ``L`` steps from the state ``S_0``, with ``g_t = d_1 ... d_t``
(the decay products inside the chunk, ``g_0 = 1``) and ``u_t = S_{t-1} a_t``:
``S_t = S_0 diag(g_t) + sum_{s <= t} (u_s b_s^T + v_s k_s^T) diag(g_t / g_s)``. So the ``u``
solve one unit lower-triangular ``L x L`` system, ``(I - M_b) U = A_g S_0^T + M_k V``, with
``(M_x)_{ts} = sum_j a_t[j] g_{t-1}[j] x_s[j] / g_s[j]`` for ``s < t``; ``y`` and the state
after the chunk are then products with ``S_0``: ``Y = Y_1 + R_w S_0^T`` and
``S_L = S_0 G + E``. Everything but the ``N x N`` products of the chain ``S_0 -> S_L`` runs for
all chunks at once, as batched matrix products.

Numerics: the ratios ``g_t / g_s`` are formed as ``(x g_t) (y / g_s)``, so ``1 / g_s`` must stay
far inside the dtype's range: the form runs only when every chunk's log-decay sum is above
``-LOG_RANGE`` (bounded by ``L * log(min d)``); x070's decays (``d >= exp(-exp(-0.5))``) give
``-0.61 L``. Floating-point products keep their relative precision, so within that range the
result is the recurrence's to rounding (checked against a float64 recurrence). NaN or inf in
an input would spread over a whole chunk through the products: the caller then runs the
recurrence, which keeps them where they arise.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["LOG_RANGE", "MAX_CHUNK", "MIN_STEPS", "eligible", "forward"]

#: The most negative log-decay sum over one chunk the form accepts, per math dtype: ``1 / g``
#: up to ``e^40`` (about 2e17) keeps float32's products and sums far from overflow and
#: underflow; float64 has the room for ``e^300``.
LOG_RANGE = {torch.float32: 40.0, torch.float64: 300.0}

#: The largest chunk the form takes: the products grow as ``L^2`` per step and the decay range
#: as ``L``; the op's checkpoint spacing (32) sits well inside.
MAX_CHUNK = 64

#: Sequences shorter than this run the recurrence: the form's fixed cost (a layout copy of
#: the inputs, a dozen launches) is more than a short recurrence takes.
MIN_STEPS = 64


def eligible(d: Tensor, chunk: int) -> bool:
    """Whether the chunked form may run on ``d`` (the decays, ``(B, T, H, N)``) with chunks of
    ``chunk`` steps: long enough, a bounded chunk, the decay products inside the dtype's range
    (NaN in ``d`` fails this too)."""
    n_t = d.shape[1]
    if n_t < MIN_STEPS or not 1 <= chunk <= MAX_CHUNK or d.numel() == 0:
        return False
    low = float(d.min())
    return low > 0 and math.log(low) * chunk > -LOG_RANGE[d.dtype]


def _blocks(x: Tensor, chunk: int, fill: float) -> Tensor:
    """``(B, T, H, N)`` -> ``(B, H, C, L, N)``, ``T`` padded to ``C * L`` with ``fill``."""
    n_b, n_t, n_h, n_n = x.shape
    n_c = -(-n_t // chunk)
    x = F.pad(x, (0, 0, 0, 0, 0, n_c * chunk - n_t), value=fill)
    return x.view(n_b, n_c, chunk, n_h, n_n).permute(0, 3, 1, 2, 4).contiguous()


def _t(x: Tensor) -> Tensor:
    """The last two dimensions swapped, contiguous."""
    return x.transpose(-1, -2).contiguous()


def _unit_lower_solve(m: Tensor, rhs: Tensor) -> Tensor:
    """``(I - m)^-1 rhs`` for strictly lower triangular ``m`` ``(..., L, L)``, by forward
    substitution a row at a time, every chunk at once. (LAPACK's triangular solve goes one
    small matrix at a time and took most of the form's time; the product form
    ``(I + m)(I + m^2)(I + m^4)...`` costs ``log2 L`` times the products and its high powers
    fall into float32's subnormals, which the CPU computes slowly.)"""
    x = rhs.clone()
    for t in range(1, m.shape[-1]):
        x[..., t : t + 1, :] += m[..., t : t + 1, :t] @ x[..., :t, :]
    return x


def forward(
    r: Tensor, d: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor, y: Tensor,
    states: Tensor, chunk: int,
) -> bool:  # fmt: skip
    """``taichi.forward``'s contract (CPU tensors, one float dtype, ``eligible(d, chunk)``).

    Padding the last chunk with steps that leave the state alone (``d = 1``, the rest 0) makes
    every chunk whole. Returns False, with ``y`` and ``states`` unspecified, when ``y`` or the
    final state is not finite: the caller runs the recurrence instead (see the module's note).
    """
    n_b, n_t, n_h, n_n = k.shape
    rc, kc, vc, ac, bc = (_blocks(x, chunk, 0.0) for x in (r, k, v, a, b))
    g = torch.cumprod(_blocks(d, chunk, 1.0), dim=3)  # (B, H, C, L, N): g_t after step t
    before = torch.cat([torch.ones_like(g[..., :1, :]), g[..., :-1, :]], dim=3)
    inv = g.reciprocal()
    ag = ac * before
    rg = rc * g
    bi, ki = bc * inv, kc * inv
    # One product for M_b, M_k (rows a g_{t-1}) and Q_b, Q_k (rows r g_t).
    p = torch.cat([ag, rg], 3) @ _t(torch.cat([bi, ki], 3))
    ln = chunk
    strict = torch.ones(ln, ln, dtype=torch.bool).tril(-1)
    incl = torch.ones(ln, ln, dtype=torch.bool).tril()
    m_b = p[..., :ln, :ln] * strict
    m_k = p[..., :ln, ln:] * strict
    q_b = p[..., ln:, :ln] * incl
    q_k = p[..., ln:, ln:] * incl
    # X = (I - M_b)^-1 [M_k V, A_g]: U = X_1 + X_2 S_0^T.
    x = _unit_lower_solve(m_b, torch.cat([m_k @ vc, ag], -1))
    z = q_b @ x
    y1 = z[..., :n_n] + q_k @ vc  # Y = y1 + rw S_0^T
    rw = rg + z[..., n_n:]
    g_end = g[..., -1:, :]  # (B, H, C, 1, N)
    bt, kt = bi * g_end, ki * g_end
    # S_L = S_0 G + E, G = diag(g_L) + X_2^T B_t, E = [X_1; V]^T [B_t; K_t].
    # Transposed operands are copied first: batched products of transposed views ran at a
    # third of the rate.
    gm = _t(x[..., n_n:]) @ bt
    gm.diagonal(dim1=-2, dim2=-1).add_(g_end.squeeze(-2))
    e = _t(torch.cat([x[..., :n_n], vc], 3)) @ torch.cat([bt, kt], 3)
    n_c = g.shape[2]
    starts = state.new_empty(n_b, n_h, n_c, n_n, n_n)
    s = state.reshape(n_b * n_h, n_n, n_n)
    gm, e = gm.view(n_b * n_h, n_c, n_n, n_n), e.view(n_b * n_h, n_c, n_n, n_n)
    flat_starts = starts.view(n_b * n_h, n_c, n_n, n_n)
    for c in range(n_c):
        flat_starts[:, c] = s
        s = torch.baddbmm(e[:, c], s, gm[:, c])
    out = torch.baddbmm(  # Y = y1 + rw S_0^T, (B H C, L, N)
        y1.view(-1, ln, n_n), rw.view(-1, ln, n_n), _t(starts).view(-1, n_n, n_n)
    ).view(n_b, n_h, n_c, ln, n_n)
    y.copy_(out.permute(0, 2, 3, 1, 4).reshape(n_b, n_c * chunk, n_h, n_n)[:, :n_t])
    final = s.view(n_b, n_h, n_n, n_n)
    if not (bool(torch.isfinite(final).all()) and bool(torch.isfinite(y).all())):
        return False
    if states.shape[2] > 1:  # checkpoints before steps 0, chunk, 2 chunk, ...: the starts
        states[:, :, :n_c] = starts
    states[:, :, -1] = final
    return True
