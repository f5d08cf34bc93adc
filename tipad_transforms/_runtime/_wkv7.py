"""The RWKV-7 WKV kernels (forward and explicit, checkpointed backward) and their launchers.

Per head the state ``S`` is ``N x N``, indexed ``[value i, key j]``. Its rows never mix:
``S_t[i] = S_{t-1}[i] * d_t + (S_{t-1}[i] . a_t) b_t + v_t[i] k_t`` and ``y_t[i] = S_t[i] .
r_t``, so the forward is one independent chain per (batch, head, value row), and so is the
backward's recurrence for the state's gradient. Only the gradients of ``r, d, k, a, b`` sum
over the rows: a second loop computes them per (batch, step, head) from the rows' results.

Loop orders: on CUDA (``_state["per_pixel"]``) one thread per row, and one thread per (step,
head, key) for the sums; on the CPU one task per row too, and one task per (step, head) for
the sums, walking the rows with the keys innermost (contiguous, for the vectorizer).

Tensor layout: ``r, d, k, v, a, b, y`` and their gradients ``(B, T, H, N)`` row-major; states
``(B, H, S, N, N)``. The backward runs one launch per chunk of ``chunk`` steps, from the last:
it recomputes that chunk's states from its checkpoint into a scratch ``(B, H, chunk + 1, N, N)``
and the state's gradients into ``(B, H, chunk, N, N)``, so the memory is the checkpoints plus
one chunk, never a state per step.
"""

# No `from __future__ import annotations`: Taichi reads the kernels' annotations at runtime.
from typing import Any

import torch

from .. import _runtime as rt

# meta (int32): B, T, H, N, chunk, S (the states' slot count).
_B, _T, _H, _N, _CHUNK, _SLOTS = range(6)


# fmt: off
def _build_kernels(ti: Any) -> dict[str, Any]:
    """Compile-on-demand kernels ``forward`` and ``backward_chunk`` (float32 or float64)."""
    nd = ti.types.ndarray

    @ti.func
    def row_of(task: ti.i32, n_h: ti.i32, n_n: ti.i32):
        # task = (b * H + h) * N + i  ->  (b, h, i, b * H + h)
        i = task % n_n
        bh = task // n_n
        return bh // n_h, bh % n_h, i, bh

    @ti.func
    def dot(x: ti.template(), xo: ti.i32, y: ti.template(), yo: ti.i32, n: ti.i32,
            dt: ti.template()):
        acc = ti.cast(0, dt)
        for j in range(n):
            acc += x[xo + j] * y[yo + j]
        return acc

    @ti.func
    def step_row(s: ti.template(), src: ti.i32, dst: ti.i32, d: ti.template(),
                 k: ti.template(), a: ti.template(), b: ti.template(), x: ti.i32, vi,
                 n: ti.i32, dt: ti.template()):
        # s[dst:] = s[src:] * d + (s[src:] . a) b + vi k; returns s[src:] . a
        sa = dot(s, src, a, x, n, dt)
        for j in range(n):
            s[dst + j] = s[src + j] * d[x + j] + sa * b[x + j] + vi * k[x + j]
        return sa

    @ti.kernel
    def forward(r: nd(ndim=1), d: nd(ndim=1), k: nd(ndim=1), v: nd(ndim=1), a: nd(ndim=1),
                b: nd(ndim=1), state: nd(ndim=1), y: nd(ndim=1), states: nd(ndim=1),
                meta: nd(dtype=ti.i32, ndim=1), save: ti.template(), dt: ti.template()):
        n_b, n_t, n_h, n_n = meta[_B], meta[_T], meta[_H], meta[_N]
        chunk, slots = meta[_CHUNK], meta[_SLOTS]
        nn = n_n * n_n
        for task in range(n_b * n_h * n_n):
            bi, h, i, bh = row_of(task, n_h, n_n)
            # The row lives in the last slot (the final state's) while the steps run.
            work = (bh * slots + slots - 1) * nn + i * n_n
            src = bh * nn + i * n_n
            for j in range(n_n):
                states[work + j] = state[src + j]
            x = (bi * n_t * n_h + h) * n_n
            for t in range(n_t):
                if ti.static(save):
                    if t % chunk == 0:
                        ck = (bh * slots + t // chunk) * nn + i * n_n
                        for j in range(n_n):
                            states[ck + j] = states[work + j]
                step_row(states, work, work, d, k, a, b, x, v[x + i], n_n, dt)
                y[x + i] = dot(states, work, r, x, n_n, dt)
                x += n_h * n_n

    @ti.kernel
    def backward_chunk(r: nd(ndim=1), d: nd(ndim=1), k: nd(ndim=1), v: nd(ndim=1),
                       a: nd(ndim=1), b: nd(ndim=1), gy: nd(ndim=1), states: nd(ndim=1),
                       carry: nd(ndim=1), ss: nd(ndim=1), gg: nd(ndim=1), sq: nd(ndim=1),
                       gr: nd(ndim=1), gd: nd(ndim=1), gk: nd(ndim=1), gv: nd(ndim=1),
                       ga: nd(ndim=1), gb: nd(ndim=1), meta: nd(dtype=ti.i32, ndim=1),
                       c: ti.i32, per_row: ti.template(), dt: ti.template()):
        # Chunk c: steps t0 .. t0 + ln - 1. carry: the gradient of the state after the chunk
        # on entry, before it on exit. Scratch: ss (B, H, L + 1, N, N) the states before each
        # step and after the last; gg (B, H, L, N, N) the gradient of the state after each
        # step; sq (2, B, H, L, N) the rows' S_{t-1} . a_t and g_t . b_t.
        n_b, n_t, n_h, n_n = meta[_B], meta[_T], meta[_H], meta[_N]
        chunk, slots = meta[_CHUNK], meta[_SLOTS]
        nn = n_n * n_n
        t0 = c * chunk
        ln = ti.min(chunk, n_t - t0)
        q_plane = n_b * n_h * chunk * n_n
        step = n_h * n_n
        for task in range(n_b * n_h * n_n):
            bi, h, i, bh = row_of(task, n_h, n_n)
            row0 = bh * (chunk + 1) * nn + i * n_n
            ck = (bh * slots + c) * nn + i * n_n
            for j in range(n_n):
                ss[row0 + j] = states[ck + j]
            x0 = ((bi * n_t + t0) * n_h + h) * n_n
            x = x0
            for s in range(ln):
                cur = row0 + s * nn
                sq[(bh * chunk + s) * n_n + i] = step_row(ss, cur, cur + nn, d, k, a, b, x,
                                                          v[x + i], n_n, dt)
                x += step
            cr = bh * nn + i * n_n
            for back in range(ln):
                s = ln - 1 - back
                x = x0 + s * step
                gyi = gy[x + i]
                g0 = (bh * chunk + s) * nn + i * n_n
                q = ti.cast(0, dt)
                gvi = ti.cast(0, dt)
                for j in range(n_n):
                    g = carry[cr + j] + gyi * r[x + j]
                    gg[g0 + j] = g
                    q += g * b[x + j]
                    gvi += g * k[x + j]
                sq[q_plane + (bh * chunk + s) * n_n + i] = q
                gv[x + i] = gvi
                for j in range(n_n):
                    carry[cr + j] = gg[g0 + j] * d[x + j] + q * a[x + j]
        # The sums over the value rows i, per step and key j.
        if ti.static(per_row):
            for task in range(n_b * n_h * ln * n_n):
                j = task % n_n
                rest = task // n_n
                s = rest % ln
                bh = rest // ln
                bi, h = bh // n_h, bh % n_h
                x = ((bi * n_t + t0 + s) * n_h + h) * n_n
                prev = (bh * (chunk + 1) + s) * nn + j
                g0 = (bh * chunk + s) * nn + j
                q0 = (bh * chunk + s) * n_n
                acc_r, acc_d, acc_k = ti.cast(0, dt), ti.cast(0, dt), ti.cast(0, dt)
                acc_a, acc_b = ti.cast(0, dt), ti.cast(0, dt)
                for i in range(n_n):
                    sp = ss[prev + i * n_n]
                    g = gg[g0 + i * n_n]
                    acc_r += gy[x + i] * ss[prev + nn + i * n_n]
                    acc_d += g * sp
                    acc_k += g * v[x + i]
                    acc_b += g * sq[q0 + i]
                    acc_a += sq[q_plane + q0 + i] * sp
                gr[x + j] = acc_r
                gd[x + j] = acc_d
                gk[x + j] = acc_k
                ga[x + j] = acc_a
                gb[x + j] = acc_b
        else:
            for task in range(n_b * n_h * ln):
                s = task % ln
                bh = task // ln
                bi, h = bh // n_h, bh % n_h
                x = ((bi * n_t + t0 + s) * n_h + h) * n_n
                prev = (bh * (chunk + 1) + s) * nn
                g0 = (bh * chunk + s) * nn
                q0 = (bh * chunk + s) * n_n
                for j in range(n_n):
                    gr[x + j] = ti.cast(0, dt)
                    gd[x + j] = ti.cast(0, dt)
                    gk[x + j] = ti.cast(0, dt)
                    ga[x + j] = ti.cast(0, dt)
                    gb[x + j] = ti.cast(0, dt)
                for i in range(n_n):
                    gyi, vi = gy[x + i], v[x + i]
                    sai, qi = sq[q0 + i], sq[q_plane + q0 + i]
                    row = i * n_n
                    for j in range(n_n):
                        sp = ss[prev + row + j]
                        g = gg[g0 + row + j]
                        gr[x + j] = gr[x + j] + gyi * ss[prev + nn + row + j]
                        gd[x + j] = gd[x + j] + g * sp
                        gk[x + j] = gk[x + j] + g * vi
                        ga[x + j] = ga[x + j] + qi * sp
                        gb[x + j] = gb[x + j] + g * sai

    return {"forward": forward, "backward_chunk": backward_chunk,
            "dtypes": {torch.float32: ti.f32, torch.float64: ti.f64}}


# fmt: on
def _meta(k: torch.Tensor, chunk: int, slots: int) -> torch.Tensor:
    header = [*k.shape, chunk, slots]
    return torch.tensor(header, dtype=torch.int32).to(k.device, non_blocking=True)


def launch_wkv7_forward(
    r: torch.Tensor,
    d: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    state: torch.Tensor,
    y: torch.Tensor,
    states: torch.Tensor,
    chunk: int,
) -> None:
    """Run the RWKV-7 forward. All tensors contiguous, detached, float32 or float64 (one
    dtype), on one device; ``T >= 1``, ``N >= 1``.

    ``r, d, k, v, a, b``: ``(B, T, H, N)``, ``d = exp(w)`` the decay; ``state``: ``(B, H, N,
    N)`` before the first token. Writes ``y`` ``(B, T, H, N)`` and ``states`` ``(B, H, S, N,
    N)``: with ``S = ceil(T / chunk) + 1`` the state before steps ``0, chunk, 2 chunk, ...``
    (the backward's checkpoints) and after the last, with ``S = 1`` the final state only.

    Raises ``RuntimeUnavailable`` when ``refusal(device)`` gives a reason.
    """
    slots = states.shape[2]
    save = slots > 1
    with rt.session(k.device, "wkv7", _build_kernels, (k, states)) as kernels:
        kernels["forward"](
            r.reshape(-1), d.reshape(-1), k.reshape(-1), v.reshape(-1), a.reshape(-1),
            b.reshape(-1), state.reshape(-1), y.reshape(-1), states.reshape(-1),
            _meta(k, chunk, slots), save, kernels["dtypes"][k.dtype],
        )  # fmt: skip


def launch_wkv7_backward(
    r: torch.Tensor,
    d: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    states: torch.Tensor,
    gy: torch.Tensor,
    gstate: torch.Tensor,
    grads: torch.Tensor,
    chunk: int,
) -> None:
    """Run the RWKV-7 backward; same conventions as ``launch_wkv7_forward``.

    Reads the checkpoints ``states`` ``(B, H, ceil(T / chunk) + 1, N, N)`` the forward saved,
    ``gy`` ``(B, T, H, N)`` and ``gstate`` ``(B, H, N, N)`` (the gradients of ``y`` and of the
    final state). Writes ``grads`` ``(6, B, T, H, N)``, the gradients of ``r, d, k, v, a, b``,
    and overwrites ``gstate`` with the gradient of the initial state.
    """
    n_b, n_t, n_h, n_n = k.shape
    slots = states.shape[2]
    ln = min(chunk, n_t)
    scratch = [k.new_empty(n_b, n_h, ln + 1, n_n, n_n), k.new_empty(n_b, n_h, ln, n_n, n_n),
               k.new_empty(2, n_b, n_h, ln, n_n)]  # fmt: skip
    with rt.session(k.device, "wkv7", _build_kernels, (k, states, *scratch)) as kernels:
        meta = _meta(k, ln, slots)
        flat = [t.reshape(-1) for t in (r, d, k, v, a, b, gy, states, gstate, *scratch)]
        outs = [g.reshape(-1) for g in grads.unbind(0)]
        dt = kernels["dtypes"][k.dtype]
        per_row = bool(rt._state["per_pixel"])
        for c in reversed(range(slots - 1)):
            kernels["backward_chunk"](*flat, *outs, meta, c, per_row, dt)
