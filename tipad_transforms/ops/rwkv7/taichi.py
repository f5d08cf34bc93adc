"""The RWKV-7 WKV kernels (forward and explicit, checkpointed backward): the Taichi backend of
``ops.wkv7``.

Per head the state ``S`` is ``N x N``, indexed ``[value i, key j]``, and its rows never mix:
the forward, and the backward's recurrence for the state's gradient, are one independent chain
per (batch, head, value row); only the gradients of ``r, d, k, a, b`` sum over the rows, in a
second loop per (batch, step, head). Loop orders: the GPU's block order (``GPU_BLOCK_ORDER``)
and simple order (``forward``, ``backward_chunk``; also what a GPU order on Taichi's CPU arch
runs), and the CPU's (``forward_rows``, ``backward_rows``), where long forwards take the
chunked form (``chunked.py``) instead.

Layout: ``r, d, k, v, a, b, y`` and their gradients ``(B, T, H, N)`` row-major; states ``(B,
H, S, N, N)``. The backward runs one launch per chunk of steps, from the last, recomputing that
chunk's states from its checkpoint: its memory is the checkpoints plus one chunk.
"""

# No `from __future__ import annotations`: Taichi reads the kernels' annotations at runtime.
from typing import Any

import torch
from torch import Tensor

from ..._compat.taichi import Steps
from ..._value_cache import constant
from ...backends.taichi import TAICHI, spread
from . import chunked

# Value rows per task of the CPU's kernels (their states held in a local array).
_ROWS = 16

#: The GPU's loop order: True the block order, False the simple one (a thread per value row
#: reading each step's vectors from global memory, a thread per (step, head, key) for the
#: backward's sums). Taichi's CPU arch (tests switch ``TAICHI.gpu_order`` on) runs the simple one.
GPU_BLOCK_ORDER = True


def _block_dim(n: int) -> int:
    """Threads per block of the block order: ``N`` rounded up to a whole warp (32)."""
    return 32 * ((n + 31) // 32)


def _gpu_kernel(kernels: dict[str, Any], simple: str, block: str) -> tuple[Any, bool]:
    """The GPU order's kernel (``simple`` or ``block`` by name) and whether it is the block
    one, which takes ``nk`` and the block size as two more template arguments."""
    if not GPU_BLOCK_ORDER or TAICHI.runtime_arch() == "cpu":
        return kernels[simple], False
    return kernels[block], True


# meta (int32): B, T, H, N, chunk, S (the states' slot count), and the CPU kernels' spreads
# (backends.taichi.spread) of their row-group loops and of the backward's per-step sums.
_B, _T, _H, _N, _CHUNK, _SLOTS, _SPREAD, _SPREAD_SUMS = range(8)


# fmt: off
def _build_kernels(ti: Any) -> dict[str, Any]:
    """The kernels, float32 or float64 (``dt``), in the loop orders of the module docstring."""
    nd = ti.types.ndarray

    @ti.func
    def row_of(task: ti.i32, n_h: ti.i32, n_n: ti.i32):
        # task = (b * H + h) * N + i  ->  (b, h, i, b * H + h)
        i = task % n_n
        bh = task // n_n
        return bh // n_h, bh % n_h, i, bh

    @ti.func
    def chunk_of(meta: ti.template(), c: ti.i32, n: ti.template()):
        # The backward's sizes for chunk c, steps t0 .. t0 + ln - 1 (q_plane: sq's plane).
        n_b, n_t, n_h, chunk = meta[_B], meta[_T], meta[_H], meta[_CHUNK]
        t0 = c * chunk
        return (n_b, n_t, n_h, chunk, meta[_SLOTS], n * n, t0, ti.min(chunk, n_t - t0),
                n_b * n_h * chunk * n, n_h * n)

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
                       c: ti.i32, dt: ti.template()):
        # Chunk c: steps t0 .. t0 + ln - 1. carry: the gradient of the state after the chunk
        # on entry, before it on exit. Scratch: ss (B, H, L + 1, N, N) the states before each
        # step and after the last; gg (B, H, L, N, N) the gradient of the state after each
        # step; sq (2, B, H, L, N) the rows' S_{t-1} . a_t and g_t . b_t.
        n_n = meta[_N]
        n_b, n_t, n_h, chunk, slots, nn, t0, ln, q_plane, step = chunk_of(meta, c, n_n)
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

    # The CPU's order: a task per (batch, head, _ROWS value rows), those rows in a local array.
    # Two reasons: a step's inputs (6 N numbers) are read from memory once for _ROWS rows,
    # not once per row; and stores to a local array cannot alias the ndarrays' base pointers
    # (after a store to an ndarray LLVM reloads them), so the loops over the keys hold no
    # ndarray store and LLVM's loop vectorizer packs them into SIMD operations. nk = N is a
    # template: the local arrays need a size (one compile per head size).

    @ti.func
    def group_of(task: ti.i32, n_h: ti.i32, nk: ti.template()):
        # task = (b * H + h) * groups + g  ->  (b, h, first row, row count, b * H + h)
        groups = (nk + _ROWS - 1) // _ROWS
        i0 = (task % groups) * _ROWS
        bh = task // groups
        return bh // n_h, bh % n_h, i0, ti.min(_ROWS, nk - i0), bh

    @ti.func
    def load_rows(s: ti.template(), src: ti.template(), o: ti.i32, n: ti.i32):
        for e in range(n):
            s[e] = src[o + e]

    @ti.func
    def store_rows(dst: ti.template(), o: ti.i32, s: ti.template(), n: ti.i32):
        for e in range(n):
            dst[o + e] = s[e]

    @ti.func
    def first_sums(s: ti.template(), sa: ti.template(), a: ti.template(), x: ti.i32,
                   rows: ti.i32, nk: ti.template()):
        for ii in range(rows):
            for j in range(nk):
                sa[ii] += s[ii * nk + j] * a[x + j]

    @ti.func
    def advance(s: ti.template(), sa: ti.template(), r: ti.template(), d: ti.template(),
                k: ti.template(), v: ti.template(), a: ti.template(), b: ti.template(),
                y: ti.template(), x: ti.i32, xn: ti.i32, i0: ti.i32, rows: ti.i32,
                nk: ti.template(), with_y: ti.template(), dt: ti.template()):
        # One step of the rows: s <- s diag(d) + sa b^T + v k^T, with sa = s . a (carried
        # in from the previous step's pass, which also sums the next step's s . a).
        for ii in range(rows):
            o = ii * nk
            sai = sa[ii]
            vi = v[x + i0 + ii]
            acc = ti.cast(0, dt)
            nxt = ti.cast(0, dt)
            # The loop variable indexes the arrays itself: with x + j LLVM cannot prove the
            # 32-bit indices consecutive and gathers the keys one by one.
            so = o - x
            an = xn - x
            for xj in range(x, x + nk):
                sj = s[so + xj] * d[xj] + sai * b[xj] + vi * k[xj]
                s[so + xj] = sj
                if ti.static(with_y):
                    acc += sj * r[xj]
                nxt += sj * a[an + xj]
            sa[ii] = nxt
            if ti.static(with_y):
                y[x + i0 + ii] = acc

    @ti.kernel
    def forward_rows(r: nd(ndim=1), d: nd(ndim=1), k: nd(ndim=1), v: nd(ndim=1),
                     a: nd(ndim=1), b: nd(ndim=1), state: nd(ndim=1), y: nd(ndim=1),
                     states: nd(ndim=1), meta: nd(dtype=ti.i32, ndim=1), save: ti.template(),
                     nk: ti.template(), dt: ti.template(), serial: ti.template()):
        n_b, n_t, n_h = meta[_B], meta[_T], meta[_H]
        chunk, slots, spread_rows = meta[_CHUNK], meta[_SLOTS], meta[_SPREAD]
        nn = nk * nk
        step = n_h * nk
        # A one-token step (generation) runs on the launching thread: waking Taichi's pool
        # costs more than it takes (milliseconds on a busy machine).
        ti.loop_config(serialize=serial)
        for it in range(n_b * n_h * ((nk + _ROWS - 1) // _ROWS) * spread_rows):
            if it % spread_rows == 0:  # see backends.taichi.spread
                task = it // spread_rows
                bi, h, i0, rows, bh = group_of(task, n_h, nk)
                s = ti.Vector.zero(dt, _ROWS * nk)
                sa = ti.Vector.zero(dt, _ROWS)
                load_rows(s, state, bh * nn + i0 * nk, rows * nk)
                x = (bi * n_t * n_h + h) * nk
                first_sums(s, sa, a, x, rows, nk)
                for t in range(n_t):
                    if ti.static(save):
                        if t % chunk == 0:
                            store_rows(states, (bh * slots + t // chunk) * nn + i0 * nk, s,
                                       rows * nk)
                    xn = x + step if t + 1 < n_t else x  # the last step's next sums are unused
                    advance(s, sa, r, d, k, v, a, b, y, x, xn, i0, rows, nk, True, dt)
                    x += step
                store_rows(states, (bh * slots + slots - 1) * nn + i0 * nk, s, rows * nk)

    @ti.kernel
    def backward_rows(r: nd(ndim=1), d: nd(ndim=1), k: nd(ndim=1), v: nd(ndim=1),
                      a: nd(ndim=1), b: nd(ndim=1), gy: nd(ndim=1), states: nd(ndim=1),
                      carry: nd(ndim=1), ss: nd(ndim=1), gg: nd(ndim=1), sq: nd(ndim=1),
                      gr: nd(ndim=1), gd: nd(ndim=1), gk: nd(ndim=1), gv: nd(ndim=1),
                      ga: nd(ndim=1), gb: nd(ndim=1), meta: nd(dtype=ti.i32, ndim=1),
                      c: ti.i32, nk: ti.template(), dt: ti.template()):
        # backward_chunk's scheme and scratch layouts in the CPU's order.
        n_b, n_t, n_h, chunk, slots, nn, t0, ln, q_plane, step = chunk_of(meta, c, nk)
        spread_rows, spread_sums = meta[_SPREAD], meta[_SPREAD_SUMS]
        for it in range(n_b * n_h * ((nk + _ROWS - 1) // _ROWS) * spread_rows):
            if it % spread_rows == 0:  # see backends.taichi.spread
                task = it // spread_rows
                bi, h, i0, rows, bh = group_of(task, n_h, nk)
                s = ti.Vector.zero(dt, _ROWS * nk)
                sa = ti.Vector.zero(dt, _ROWS)
                load_rows(s, states, (bh * slots + c) * nn + i0 * nk, rows * nk)
                x0 = ((bi * n_t + t0) * n_h + h) * nk
                first_sums(s, sa, a, x0, rows, nk)
                x = x0
                for st in range(ln):
                    store_rows(ss, (bh * (chunk + 1) + st) * nn + i0 * nk, s, rows * nk)
                    store_rows(sq, (bh * chunk + st) * nk + i0, sa, rows)
                    xn = x + step if st + 1 < ln else x
                    advance(s, sa, r, d, k, v, a, b, gv, x, xn, i0, rows, nk, False, dt)
                    x += step
                store_rows(ss, (bh * (chunk + 1) + ln) * nn + i0 * nk, s, rows * nk)
                # The rows of the state's gradient, from the last step back (s reused).
                load_rows(s, carry, bh * nn + i0 * nk, rows * nk)
                for back in range(ln):
                    st = ln - 1 - back
                    x = x0 + st * step
                    for ii in range(rows):
                        o = ii * nk
                        gyi = gy[x + i0 + ii]
                        q = ti.cast(0, dt)
                        gvi = ti.cast(0, dt)
                        so = o - x  # the loop variable indexes the arrays, as in advance
                        for xj in range(x, x + nk):
                            g = s[so + xj] + gyi * r[xj]
                            s[so + xj] = g
                            q += g * b[xj]
                            gvi += g * k[xj]
                        sa[ii] = q
                        gv[x + i0 + ii] = gvi
                    store_rows(gg, (bh * chunk + st) * nn + i0 * nk, s, rows * nk)
                    store_rows(sq, q_plane + (bh * chunk + st) * nk + i0, sa, rows)
                    for ii in range(rows):
                        o = ii * nk
                        q = sa[ii]
                        so = o - x
                        for xj in range(x, x + nk):
                            s[so + xj] = s[so + xj] * d[xj] + q * a[xj]
                store_rows(carry, bh * nn + i0 * nk, s, rows * nk)
        # The sums over the value rows: a task per (batch, step, head), the keys innermost,
        # the five sums in a local array.
        for it in range(n_b * n_h * ln * spread_sums):
            if it % spread_sums == 0:  # see backends.taichi.spread
                task = it // spread_sums
                st = task % ln
                bh = task // ln
                bi, h = bh // n_h, bh % n_h
                x = ((bi * n_t + t0 + st) * n_h + h) * nk
                prev = (bh * (chunk + 1) + st) * nn
                g0 = (bh * chunk + st) * nn
                q0 = (bh * chunk + st) * nk
                # One local array per sum: LLVM's loop vectorizer cannot tell five runs of one
                # array apart (its 32-bit indices may wrap) and left the loop scalar.
                acc_r = ti.Vector.zero(dt, nk)
                acc_d = ti.Vector.zero(dt, nk)
                acc_k = ti.Vector.zero(dt, nk)
                acc_a = ti.Vector.zero(dt, nk)
                acc_b = ti.Vector.zero(dt, nk)
                for i in range(nk):
                    gyi, vi = gy[x + i], v[x + i]
                    sai, qi = sq[q0 + i], sq[q_plane + q0 + i]
                    # The loop variable indexes the arrays, as in advance.
                    row = prev + i * nk  # S_{t-1}'s row i in ss
                    to_g, to_acc = g0 - prev, -row
                    for xj in range(row, row + nk):
                        sp = ss[xj]
                        g = gg[to_g + xj]
                        acc_r[to_acc + xj] += gyi * ss[nn + xj]
                        acc_d[to_acc + xj] += g * sp
                        acc_k[to_acc + xj] += g * vi
                        acc_a[to_acc + xj] += qi * sp
                        acc_b[to_acc + xj] += g * sai
                for j in range(nk):
                    gr[x + j] = acc_r[j]
                    gd[x + j] = acc_d[j]
                    gk[x + j] = acc_k[j]
                    ga[x + j] = acc_a[j]
                    gb[x + j] = acc_b[j]

    # The GPU's block order (RWKV-CUDA's x070 kernels, without their T % 16, N = 64 limits): a
    # block of nb >= N threads per (batch, head), a thread per value row holding its state row
    # in a local array, each step's vectors staged once per block in shared memory instead of
    # read N times from global memory. Two staging buffers alternate, so one barrier per step
    # suffices: a thread overwrites a buffer only after every thread passed the barrier of the
    # step that followed its last use. Threads i >= N stage nothing and compute nothing, but
    # reach every barrier (a barrier inside a divergent branch is undefined behaviour).

    @ti.func
    def stage(pad: ti.template(), p: ti.i32, nb: ti.template(), nk: ti.template(), i: ti.i32,
              x: ti.i32, r: ti.template(), d: ti.template(), k: ti.template(), a: ti.template(),
              b: ti.template(), with_r: ti.template()):
        # Step x's r (with with_r), d, k, a, b into buffer p of pad, then the barrier.
        if i < nk:
            if ti.static(with_r):
                pad[p + i] = r[x + i]
            pad[p + nb + i] = d[x + i]
            pad[p + 2 * nb + i] = k[x + i]
            pad[p + 3 * nb + i] = a[x + i]
            pad[p + 4 * nb + i] = b[x + i]
        ti.simt.block.sync()

    @ti.func
    def block_step(row: ti.template(), pad: ti.template(), p: ti.i32, nb: ti.template(),
                   nk: ti.template(), vi, out: ti.template(), o: ti.i32, forward: ti.template(),
                   dt: ti.template()):
        # row <- row diag(d) + (row . a) b + vi k from buffer p; returns row . a. forward:
        # out[o] = the new row . r; else out[o:] = the old row.
        sa = ti.cast(0, dt)
        for j in range(nk):
            if ti.static(not forward):
                out[o + j] = row[j]
            sa += row[j] * pad[p + 3 * nb + j]
        acc = ti.cast(0, dt)
        for j in range(nk):
            sj = row[j] * pad[p + nb + j] + sa * pad[p + 4 * nb + j] + vi * pad[p + 2 * nb + j]
            row[j] = sj
            if ti.static(forward):
                acc += sj * pad[p + j]
        if ti.static(forward):
            out[o] = acc
        return sa

    @ti.kernel
    def forward_block(r: nd(ndim=1), d: nd(ndim=1), k: nd(ndim=1), v: nd(ndim=1),
                      a: nd(ndim=1), b: nd(ndim=1), state: nd(ndim=1), y: nd(ndim=1),
                      states: nd(ndim=1), meta: nd(dtype=ti.i32, ndim=1), save: ti.template(),
                      nk: ti.template(), nb: ti.template(), dt: ti.template()):
        n_b, n_t, n_h = meta[_B], meta[_T], meta[_H]
        chunk, slots = meta[_CHUNK], meta[_SLOTS]
        nn = nk * nk
        step = n_h * nk
        ti.loop_config(block_dim=nb)
        for tid in range(n_b * n_h * nb):
            i = tid % nb
            bh = tid // nb
            bi, h = bh // n_h, bh % n_h
            pad = ti.simt.block.SharedArray((10 * nb,), dt)  # 2 buffers of r, d, k, a, b
            row = ti.Vector.zero(dt, nk)
            if i < nk:
                for j in range(nk):
                    row[j] = state[bh * nn + i * nk + j]
            x = (bi * n_t * n_h + h) * nk
            for t in range(n_t):
                p = (t % 2) * 5 * nb
                stage(pad, p, nb, nk, i, x, r, d, k, a, b, True)
                if i < nk:
                    if ti.static(save):
                        if t % chunk == 0:
                            ck = (bh * slots + t // chunk) * nn + i * nk
                            for j in range(nk):
                                states[ck + j] = row[j]
                    block_step(row, pad, p, nb, nk, v[x + i], y, x + i, True, dt)
                x += step
            if i < nk:
                fin = (bh * slots + slots - 1) * nn + i * nk
                for j in range(nk):
                    states[fin + j] = row[j]
            # A grid-stride loop may hand this block another head: its first staging must
            # wait for the last reads of this one.
            ti.simt.block.sync()

    @ti.kernel
    def backward_block(r: nd(ndim=1), d: nd(ndim=1), k: nd(ndim=1), v: nd(ndim=1),
                       a: nd(ndim=1), b: nd(ndim=1), gy: nd(ndim=1), states: nd(ndim=1),
                       carry: nd(ndim=1), ss: nd(ndim=1), gg: nd(ndim=1), sq: nd(ndim=1),
                       gr: nd(ndim=1), gd: nd(ndim=1), gk: nd(ndim=1), gv: nd(ndim=1),
                       ga: nd(ndim=1), gb: nd(ndim=1), meta: nd(dtype=ti.i32, ndim=1),
                       c: ti.i32, nk: ti.template(), nb: ti.template(), dt: ti.template()):
        # backward_chunk's scheme and scratch layouts in the block order: the rows' recompute
        # and state gradients with the steps' vectors staged, then the sums over the rows with
        # a block per (batch, head, step), a thread per key, the rows' scalars staged.
        n_b, n_t, n_h, chunk, slots, nn, t0, ln, q_plane, step = chunk_of(meta, c, nk)
        ti.loop_config(block_dim=nb)
        for tid in range(n_b * n_h * nb):
            i = tid % nb
            bh = tid // nb
            bi, h = bh // n_h, bh % n_h
            pad = ti.simt.block.SharedArray((10 * nb,), dt)  # 2 buffers of 5 vectors
            row = ti.Vector.zero(dt, nk)
            if i < nk:
                ck = (bh * slots + c) * nn + i * nk
                for j in range(nk):
                    row[j] = states[ck + j]
            x0 = ((bi * n_t + t0) * n_h + h) * nk
            for st in range(ln):  # the states inside the chunk: buffers d, k, a, b
                x = x0 + st * step
                p = (st % 2) * 5 * nb
                stage(pad, p, nb, nk, i, x, r, d, k, a, b, False)
                if i < nk:
                    cur = (bh * (chunk + 1) + st) * nn + i * nk
                    sa = block_step(row, pad, p, nb, nk, v[x + i], ss, cur, False, dt)
                    sq[(bh * chunk + st) * nk + i] = sa
            if i < nk:
                last = (bh * (chunk + 1) + ln) * nn + i * nk
                cr = bh * nn + i * nk
                for j in range(nk):
                    ss[last + j] = row[j]
                    row[j] = carry[cr + j]  # from here on the row of the state's gradient
            for back in range(ln):  # buffers r, d, k, a, b; the parity runs on from above
                st = ln - 1 - back
                x = x0 + st * step
                p = ((ln + back) % 2) * 5 * nb
                stage(pad, p, nb, nk, i, x, r, d, k, a, b, True)
                if i < nk:
                    gyi = gy[x + i]
                    g0 = (bh * chunk + st) * nn + i * nk
                    q = ti.cast(0, dt)
                    gvi = ti.cast(0, dt)
                    for j in range(nk):
                        g = row[j] + gyi * pad[p + j]
                        row[j] = g
                        gg[g0 + j] = g
                        q += g * pad[p + 4 * nb + j]
                        gvi += g * pad[p + 2 * nb + j]
                    sq[q_plane + (bh * chunk + st) * nk + i] = q
                    gv[x + i] = gvi
                    for j in range(nk):
                        row[j] = row[j] * pad[p + nb + j] + q * pad[p + 3 * nb + j]
            if i < nk:
                cr = bh * nn + i * nk
                for j in range(nk):
                    carry[cr + j] = row[j]
            ti.simt.block.sync()
        ti.loop_config(block_dim=nb)
        for tid in range(n_b * n_h * ln * nb):
            j = tid % nb
            rest = tid // nb
            st = rest % ln
            bh = rest // ln
            bi, h = bh // n_h, bh % n_h
            x = ((bi * n_t + t0 + st) * n_h + h) * nk
            q0 = (bh * chunk + st) * nk
            pad = ti.simt.block.SharedArray((4 * nb,), dt)  # per row i: gy, v, S a, g b
            if j < nk:
                pad[j] = gy[x + j]
                pad[nb + j] = v[x + j]
                pad[2 * nb + j] = sq[q0 + j]
                pad[3 * nb + j] = sq[q_plane + q0 + j]
            ti.simt.block.sync()
            if j < nk:
                prev = (bh * (chunk + 1) + st) * nn + j
                g0 = (bh * chunk + st) * nn + j
                acc_r, acc_d, acc_k = ti.cast(0, dt), ti.cast(0, dt), ti.cast(0, dt)
                acc_a, acc_b = ti.cast(0, dt), ti.cast(0, dt)
                for ii in range(nk):  # neighbouring threads read neighbouring keys
                    sp = ss[prev + ii * nk]
                    g = gg[g0 + ii * nk]
                    acc_r += pad[ii] * ss[prev + nn + ii * nk]
                    acc_d += g * sp
                    acc_k += g * pad[nb + ii]
                    acc_b += g * pad[2 * nb + ii]
                    acc_a += pad[3 * nb + ii] * sp
                gr[x + j] = acc_r
                gd[x + j] = acc_d
                gk[x + j] = acc_k
                ga[x + j] = acc_a
                gb[x + j] = acc_b
            ti.simt.block.sync()

    return {"forward": forward, "backward_chunk": backward_chunk,
            "forward_block": forward_block, "backward_block": backward_block,
            "forward_rows": forward_rows, "backward_rows": backward_rows,
            "dtypes": {torch.float32: ti.f32, torch.float64: ti.f64}}


# fmt: on
def _meta(k: Tensor, chunk: int, slots: int, serial: bool = False) -> Tensor:
    """``[B, T, H, N, chunk, S, spread, spread of the sums]`` int32 on ``k``'s device (read
    only; one per shape in use: building it costs a one-token step more than the kernel's
    arguments). ``chunk``: the backward's chunk length (its sums run a task per step)."""
    n_b, _, n_h, n_n = k.shape
    spreads = (spread(n_b * n_h * -(-n_n // _ROWS), serial), spread(n_b * n_h * chunk))
    return constant(
        ("wkv7 meta", *k.shape, chunk, slots, *spreads, k.device),
        lambda: torch.tensor([*k.shape, chunk, slots, *spreads], dtype=torch.int32).to(
            k.device, non_blocking=True
        ),
    )


# Lean launchers of recent forward signatures (a model's layers share one per batch size).
_steps = Steps()


def forward(
    r: Tensor, d: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor, y: Tensor,
    states: Tensor, chunk: int,
) -> None:  # fmt: skip
    """The RWKV-7 forward. All tensors contiguous, detached, float32 or float64 (one dtype), on
    one device; ``T >= 1``, ``1 <= N <= 128``.

    ``r, d, k, v, a, b``: ``(B, T, H, N)``, ``d = exp(w)`` the decay; ``state``: ``(B, H, N,
    N)`` before the first token. Writes ``y`` ``(B, T, H, N)`` and ``states`` ``(B, H, S, N,
    N)``: with ``S = ceil(T / chunk) + 1`` the state before steps ``0, chunk, 2 chunk, ...``
    (the backward's checkpoints) and after the last, with ``S = 1`` the final state only.
    """
    slots = states.shape[2]
    tensors = (r, d, k, v, a, b, state, y, states)
    with TAICHI.session(k.device, "wkv7", _build_kernels, (k, states)) as kernels:
        gpu = TAICHI.gpu_order
        if not gpu and k.device.type == "cpu" and chunked.eligible(d, chunk):
            if chunked.forward(*tensors, chunk):  # long sequences: the chunked form's products
                return
        key = (k.shape, k.dtype, k.device, chunk, slots, gpu, GPU_BLOCK_ORDER,
               TAICHI.serial_bytes, TAICHI.cpu_iterations)  # fmt: skip
        step = _steps.get(key)
        if step is not None and step.launch(tensors):
            return
        flat = tuple(t.reshape(-1) for t in tensors)
        dt = kernels["dtypes"][k.dtype]
        if gpu:
            kernel, block = _gpu_kernel(kernels, "forward", "forward_block")
            shape = (k.shape[3], _block_dim(k.shape[3])) if block else ()
            args: tuple[Any, ...] = (*flat, _meta(k, chunk, slots), slots > 1, *shape, dt)
        else:
            # Work ~ B H N^2 T: serial up to what TAICHI.serial_bytes allows for a state's bytes.
            work = state.numel() * state.element_size() * k.shape[1]
            serial = k.device.type == "cpu" and work <= TAICHI.serial_bytes
            kernel = kernels["forward_rows"]
            meta = _meta(k, chunk, slots, serial)
            args = (*flat, meta, slots > 1, k.shape[3], dt, serial)
        kernel(*args)
        _steps.record(key, kernel, args, len(tensors))


def backward(
    r: Tensor, d: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, state: Tensor, saved: Tensor,
    gy: Tensor, gstate: Tensor, grads: Tensor, chunk: int,
) -> None:  # fmt: skip
    """The RWKV-7 backward; same conventions as ``forward``.

    ``saved``: the forward's checkpoints ``(B, H, ceil(T / chunk) + 1, N, N)``, or its final
    state alone ``(B, H, 1, N, N)`` (then recomputed from ``state``); ``gy`` ``(B, T, H, N)``
    and ``gstate`` ``(B, H, N, N)``: the gradients of ``y`` and of the final state. Writes
    ``grads`` ``(6, B, T, H, N)``, the gradients of ``r, d, k, v, a, b``, and overwrites
    ``gstate`` with the gradient of the initial state. One launch per chunk, with a scratch of
    ``B * H * (2 * chunk + 1) * N^2 + 2 * B * H * chunk * N`` numbers.
    """
    n_b, n_t, n_h, n_n = k.shape
    slots = (n_t + chunk - 1) // chunk + 1
    states = saved
    if states.shape[2] != slots:
        states = k.new_empty(n_b, n_h, slots, n_n, n_n)
        forward(r, d, k, v, a, b, state, torch.empty_like(gy), states, chunk)
    ln = min(chunk, n_t)
    scratch = [k.new_empty(n_b, n_h, ln + 1, n_n, n_n), k.new_empty(n_b, n_h, ln, n_n, n_n),
               k.new_empty(2, n_b, n_h, ln, n_n)]  # fmt: skip
    with TAICHI.session(k.device, "wkv7", _build_kernels, (k, states, *scratch)) as kernels:
        flat = [t.reshape(-1) for t in (r, d, k, v, a, b, gy, states, gstate, *scratch)]
        flat += [g.reshape(-1) for g in grads.unbind(0)]
        meta, dt = _meta(k, ln, slots), kernels["dtypes"][k.dtype]
        shape: tuple[int, ...] = (n_n,)  # the templates after c: nk (and the block size)
        if TAICHI.gpu_order:
            kernel, block = _gpu_kernel(kernels, "backward_chunk", "backward_block")
            shape = (n_n, _block_dim(n_n)) if block else ()
        else:
            kernel = kernels["backward_rows"]
        for c in reversed(range(slots - 1)):
            kernel(*flat, meta, c, *shape, dt)
