"""RWKV-4 WKV with plain torch ops: the torch backend of ``ops.wkv``, one torch step per token,
with the same explicit backward as the kernels (this runs inside custom ops' implementations,
where autograd is off)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["backward", "forward"]


def _scales(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``(exp(a - m), exp(b - m))`` with ``m = max(a, b)``, as the kernels compute it: the
    other's is ``exp(-|a - b|)``, the leader's ``exp(m - m)``, which is 1 where ``m`` is finite
    and NaN where it is not (``+inf``, both ``-inf``, a NaN), as the formula gives."""
    d = a - b
    e = torch.exp(-d.abs())
    m = torch.maximum(a, b)
    lead = torch.exp(m - m)
    ahead = d >= 0
    return torch.where(ahead, lead, e), torch.where(ahead, e, lead)


def forward(
    time_decay: Tensor, time_first: Tensor, state: Tensor, k: Tensor, v: Tensor, y: Tensor,
    states: Tensor,
) -> None:  # fmt: skip
    """The recurrence in the stable (aa, bb, pp) form, one torch step per token, with ``w =
    -exp(time_decay)`` and ``u = time_first``: writes ``y`` and ``states`` (``(3, B, T + 1,
    C)``: every state; ``(B, 3, C)``: the final one)."""
    w, u = -torch.exp(time_decay), time_first
    aa, bb, pp = state.unbind(1)
    for t in range(k.shape[1]):
        kt, vt = k[:, t], v[:, t]
        if states.dim() == 4:
            states[:, :, t] = torch.stack([aa, bb, pp])
        e1, e2 = _scales(pp, u + kt)
        y[:, t] = (e1 * aa + e2 * vt) / (e1 * bb + e2)
        ww = w + pp
        f1, f2 = _scales(ww, kt)
        aa, bb, pp = f1 * aa + f2 * vt, f1 * bb + f2, torch.maximum(ww, kt)
    if states.dim() == 4:
        states[:, :, -1] = torch.stack([aa, bb, pp])
    else:
        states.copy_(torch.stack([aa, bb, pp], 1))


def backward(
    time_decay: Tensor, w: Tensor, u: Tensor, k: Tensor, v: Tensor, state: Tensor, saved: Tensor,
    gy: Tensor, gstate: Tensor, gk: Tensor, gv: Tensor, grads: Tensor,
) -> None:  # fmt: skip
    """Reverse mode through every step from the state before it (recomputed here whatever
    ``saved``), as autograd would, except through the max of the output's pair: the output is
    invariant to that common scale, so that gradient is exactly zero. A tie of the state's max
    splits its gradient in half, like ``torch.maximum``. Writes ``gk``, ``gv`` and ``grads``
    (``gw``, ``gu`` per chain, then the initial state's)."""
    n_b, n_t, n_c = k.shape
    states = k.new_empty(3, n_b, n_t + 1, n_c)
    forward(time_decay, u, state, k, v, torch.empty_like(k), states)
    ga, gb, gp = gstate.unbind(1)
    gw, gu = torch.zeros_like(ga), torch.zeros_like(ga)
    for t in reversed(range(n_t)):
        aa, bb, pp = states[:, :, t]
        kt, vt = k[:, t], v[:, t]
        e1, e2 = _scales(pp, u + kt)
        den = e1 * bb + e2
        g_num = gy[:, t] / den
        g_den = -g_num * (e1 * aa + e2 * vt) / den
        g_uk = e2 * (g_num * vt + g_den)
        ww = w + pp
        f1, f2 = _scales(ww, kt)
        g_f1 = (ga * aa + gb * bb) * f1
        g_f2 = (ga * vt + gb) * f2
        g_max = gp - g_f1 - g_f2
        to_ww = torch.where(ww > kt, g_max, torch.where(ww == kt, 0.5 * g_max, 0 * g_max))
        g_ww = g_f1 + to_ww
        gk[:, t] = g_uk + g_f2 + (g_max - to_ww)
        gv[:, t] = ga * f2 + g_num * e2
        gw, gu = gw + g_ww, gu + g_uk
        ga, gb, gp = ga * f1 + g_num * e1, gb * f1 + g_den * e1, g_ww - g_uk
    grads.copy_(
        torch.cat([gw.reshape(-1), gu.reshape(-1), torch.stack([ga, gb, gp], 1).reshape(-1)])
    )
