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
import threading

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


#: The most bytes of scratch tensors a thread keeps between calls (``_Scratch``).
SCRATCH_BYTES = 256 << 20


class _Scratch:
    """The form's temporaries, kept per thread (concurrent calls never share a buffer) for the
    next call of the same shapes and dtype, up to ``SCRATCH_BYTES``: a fresh tensor of a few MB
    can page-fault on its first touch every call (docs/padding-guide.md, "Large outputs in a
    loop"), and the form's few dozen cost as much as its arithmetic."""

    _local = threading.local()

    def __init__(self, key: tuple[object, ...], like: Tensor) -> None:
        held = getattr(self._local, "held", None)
        if held is None or held[0] != key or SCRATCH_BYTES <= 0:
            held = (key, {})
            self._local.held = held  # the previous buffers are freed with it
        self._buffers: dict[str, Tensor] = held[1]
        self._like = like
        self._bytes = sum(t.numel() * t.element_size() for t in self._buffers.values())

    def get(self, name: str, *shape: int) -> Tensor:
        """An uninitialised ``shape`` tensor of ``like``'s dtype and device, named ``name``."""
        t = self._buffers.get(name)
        if t is None:
            t = self._like.new_empty(shape)
            if self._bytes + t.numel() * t.element_size() <= SCRATCH_BYTES:
                self._buffers[name] = t
                self._bytes += t.numel() * t.element_size()
        # The key fixes every shape, so a name's buffer always has its call's shape.
        assert tuple(t.shape) == shape, (name, tuple(t.shape), shape)
        return t


def _blocks(x: Tensor, chunk: int, fill: float, out: Tensor) -> Tensor:
    """``(B, T, H, N)`` -> ``out`` ``(B, H, C, L, N)``, ``T`` padded to ``C * L`` with ``fill``."""
    n_b, n_t, n_h, n_n = x.shape
    n_c = out.shape[2]
    if n_c * chunk != n_t:  # (F.pad copies even when it adds nothing)
        x = F.pad(x, (0, 0, 0, 0, 0, n_c * chunk - n_t), value=fill)
    return out.copy_(x.view(n_b, n_c, chunk, n_h, n_n).permute(0, 3, 1, 2, 4))


def _unit_lower_solve_(m: Tensor, x: Tensor) -> Tensor:
    """``x <- (I - m)^-1 x`` for strictly lower triangular ``m`` ``(..., L, L)``, in place, by
    forward substitution a row at a time, every chunk at once. (LAPACK's triangular solve goes
    one small matrix at a time and took most of the form's time; the product form
    ``(I + m)(I + m^2)(I + m^4)...`` costs ``log2 L`` times the products and its high powers
    fall into float32's subnormals, which the CPU computes slowly.)"""
    row = torch.empty_like(x[..., :1, :])
    for t in range(1, m.shape[-1]):
        x[..., t : t + 1, :] += torch.matmul(m[..., t : t + 1, :t], x[..., :t, :], out=row)
    return x


def _masks(chunk: int, dtype: torch.dtype) -> Tensor:
    """``(2L, 2L)``: which entries of ``[A_g; R_g] [B_i; K_i]^T`` the form keeps: ``s < t`` in
    the rows of ``a`` (``M_b``, ``M_k``), ``s <= t`` in the rows of ``r`` (``Q_b``, ``Q_k``)."""
    ones = torch.ones(chunk, chunk, dtype=dtype)
    strict, incl = ones.tril(-1), ones.tril()
    return torch.cat([strict.repeat(1, 2), incl.repeat(1, 2)])


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
    ln = chunk
    n_c = -(-n_t // chunk)
    lead = (n_b, n_h, n_c)
    ws = _Scratch((k.shape, k.dtype, chunk), k)

    def read_once(x: Tensor, name: str, fill: float = 0.0) -> Tensor:
        # Read once, by an elementwise op: a strided view where T is whole chunks.
        if n_c * chunk == n_t:
            return x.reshape(n_b, n_c, chunk, n_h, n_n).permute(0, 3, 1, 2, 4)
        return _blocks(x, chunk, fill, ws.get(name, *lead, ln, n_n))

    rc, kc, ac, bc = (read_once(x, n) for x, n in ((r, "r"), (k, "k"), (a, "a"), (b, "b")))
    vc = _blocks(v, chunk, 0.0, ws.get("v", *lead, ln, n_n))  # the products read it: packed
    g = ws.get("g", *lead, ln, n_n)  # (B, H, C, L, N): g_t after step t
    torch.cumprod(read_once(d, "d", 1.0), dim=3, out=g)
    inv = torch.reciprocal(g, out=ws.get("inv", *lead, ln, n_n))
    # The operands of one product for M_b, M_k (rows a g_{t-1}) and Q_b, Q_k (rows r g_t),
    # each written in place: [A_g; R_g] (2L, N) and [B_i, K_i]^T (N, 2L).
    rows = ws.get("rows", *lead, 2 * ln, n_n)
    ag, rg = rows[..., :ln, :], rows[..., ln:, :]
    ag[..., :1, :].copy_(ac[..., :1, :])  # g_0 = 1
    torch.mul(ac[..., 1:, :], g[..., :-1, :], out=ag[..., 1:, :])
    torch.mul(rc, g, out=rg)
    cols = ws.get("cols", *lead, n_n, 2 * ln)
    bi, ki = cols[..., :ln].transpose(-1, -2), cols[..., ln:].transpose(-1, -2)
    torch.mul(bc, inv, out=bi)
    torch.mul(kc, inv, out=ki)
    p = torch.matmul(rows, cols, out=ws.get("p", *lead, 2 * ln, 2 * ln))
    p.mul_(_masks(ln, g.dtype))
    m_b, m_k, q_b, q_k = p[..., :ln, :ln], p[..., :ln, ln:], p[..., ln:, :ln], p[..., ln:, ln:]
    # X = (I - M_b)^-1 [M_k V, A_g]: U = X_1 + X_2 S_0^T.
    x = ws.get("x", *lead, ln, 2 * n_n)
    x[..., :n_n].copy_(torch.matmul(m_k, vc, out=ws.get("mv", *lead, ln, n_n)))
    x[..., n_n:].copy_(ag)
    _unit_lower_solve_(m_b, x)
    z = torch.matmul(q_b, x, out=ws.get("z", *lead, ln, 2 * n_n))
    qv = torch.matmul(q_k, vc, out=ws.get("mv", *lead, ln, n_n))
    y1 = torch.add(z[..., :n_n], qv, out=ws.get("y1", *lead, ln, n_n))  # Y = y1 + rw S_0^T
    rw = torch.add(rg, z[..., n_n:], out=ws.get("rw", *lead, ln, n_n))
    g_end = g[..., -1:, :]  # (B, H, C, 1, N)
    # The chain runs on transposed states, T = S^T: T_L = G^T T_0 + E^T, with
    # G^T = B_t^T X_2 + diag(g_L) and E^T = B_t^T X_1 + K_t^T V, B_t = B_i g_L, K_t = K_i g_L.
    # Every operand is then in a layout the products read as it is (cols holds B_i^T and K_i^T;
    # X_1, X_2 are column blocks of x), and Y = y1 + rw T_0 needs no transposed copy.
    bkt = torch.mul(cols, g_end.transpose(-1, -2), out=ws.get("bkt", *lead, n_n, 2 * ln))
    bt, kt = bkt[..., :ln], bkt[..., ln:]
    gm = torch.matmul(bt, x[..., n_n:], out=ws.get("gm", *lead, n_n, n_n))
    gm.diagonal(dim1=-2, dim2=-1).add_(g_end.squeeze(-2))
    e = torch.matmul(bt, x[..., :n_n], out=ws.get("e", *lead, n_n, n_n))
    e.view(-1, n_n, n_n).baddbmm_(kt.reshape(-1, n_n, ln), vc.view(-1, ln, n_n))
    starts = ws.get("starts", *lead, n_n, n_n)  # transposed: T_0 of each chunk
    gm, e = gm.view(n_b * n_h, n_c, n_n, n_n), e.view(n_b * n_h, n_c, n_n, n_n)
    flat_starts = starts.view(n_b * n_h, n_c, n_n, n_n)
    s = state.reshape(n_b * n_h, n_n, n_n).transpose(-1, -2)
    pair = [ws.get("s0", n_b * n_h, n_n, n_n), ws.get("s1", n_b * n_h, n_n, n_n)]
    for c in range(n_c):
        flat_starts[:, c] = s
        s = torch.baddbmm(e[:, c], gm[:, c], flat_starts[:, c], out=pair[c % 2])
    out = torch.baddbmm(  # Y = y1 + rw T_0, (B H C, L, N)
        y1.view(-1, ln, n_n), rw.view(-1, ln, n_n), starts.view(-1, n_n, n_n),
        out=ws.get("out", n_b * n_h * n_c, ln, n_n),
    ).view(n_b, n_h, n_c, ln, n_n)  # fmt: skip
    blocks = out.permute(0, 2, 3, 1, 4)  # (B, C, L, H, N)
    if n_c * chunk == n_t:  # one strided copy, not a reshape's copy and then a copy
        y.view(n_b, n_c, chunk, n_h, n_n).copy_(blocks)
    else:
        y.copy_(blocks.reshape(n_b, n_c * chunk, n_h, n_n)[:, :n_t])
    final = s.view(n_b, n_h, n_n, n_n).transpose(-1, -2)
    # One summing pass each (isfinite is several): a NaN or inf anywhere makes the sum
    # non-finite; a finite sum that overflows only sends the call to the recurrence.
    if not math.isfinite(float(final.sum()) + float(y.sum())):
        return False
    if states.shape[2] > 1:  # checkpoints before steps 0, chunk, 2 chunk, ...: the starts
        states[:, :, :n_c] = starts.transpose(-1, -2)
    states[:, :, -1] = final
    return True
