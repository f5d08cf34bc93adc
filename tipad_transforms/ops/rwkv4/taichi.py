"""The RWKV-4 WKV kernels (forward and explicit backward): the Taichi backend of ``ops.wkv``.

One chain per (batch, channel), sequential in time. On the GPU a thread per chain (adjacent
channels, adjacent in memory, to adjacent threads); on the CPU a task walks ``_LANES`` adjacent
channels in lanes unrolled at compile time, which LLVM's SLP vectorizer turns into SIMD
operations, exponentials included (see ``exp_neg``, ``lanes_at``, ``put_lanes``, the one-step-late
stores in ``forward_chain`` and the same-step ones in ``backward_chain``).
"""

# No `from __future__ import annotations`: Taichi reads the kernels' annotations at runtime.
from typing import Any

import torch
from torch import Tensor

from ..._compat.taichi import Steps
from ..._value_cache import constant
from ...backends.taichi import TAICHI, serial_launch, spread

# Adjacent channels per CPU task: one SIMD register of float32 where torch reports AVX-512 (16),
# else 8, which narrower CPUs run as two registers (one of _WIDTHS). The GPU order is one chain
# per task.
_WIDTHS = (8, 16)
_LANES = 16 if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else 8
# A forward whose output is at most this large runs serially on the CPU (serial_launch):
# 16k chains of one step (one-token generation), or fewer of a few steps.
_SERIAL_BYTES = 1 << 16


# fmt: off
def _build_kernels(ti: Any) -> dict[str, Any]:
    """Kernels ``forward`` and ``backward`` (float32 or float64), and their twins
    ``forward_<n>`` and ``backward_<n>`` for each width n of ``_WIDTHS`` (float32,
    the arrays of ``(B, T, C)`` elements viewed as ``(N / n, n)``). Layouts as ``forward``'s
    and ``backward``'s below, flat; ``forward`` computes ``w = -exp(time_decay)`` per chain (a
    one-token step spends no torch call on it). ``meta``: int32 ``[B, T, C, spread]``, the
    scalars in one argument: each costs tens of microseconds of Python per launch.
    """
    nd = ti.types.ndarray

    @ti.func
    def is_nan(x):
        # From the bits: Taichi compiles with fast-math, under which LLVM may fold `x != x` to
        # False and pick either operand of a max or a compare with NaN. Rounded to float32 first
        # (NaN stays NaN, every other float64 stays non-NaN), so one test serves both dtypes.
        return (ti.bit_cast(ti.cast(x, ti.f32), ti.i32) & 0x7FFFFFFF) > 0x7F800000

    @ti.func
    def nan_max(a, b):
        # max(a, b), NaN if either is (torch.maximum): the running max carries a NaN onwards.
        return ti.select(is_nan(a), a, ti.select(is_nan(b), b, ti.max(a, b)))

    @ti.func
    def exp_neg(x, single: ti.template()):
        # e**x for x <= 0. The float32 version is a Cephes-style expf: x = n ln2 + r with
        # |r| <= ln2/2, a degree-6 polynomial for e**r and 2**n made from its exponent bits.
        # Unlike a libm call, LLVM can vectorize it across the lanes. Below about -87.7 the
        # result flushes to 0 (n = -127 gives the bits of 0.0); e**x would be subnormal there.
        # NaN propagates (as torch's exp does): the clamp below would turn it into -88.
        out = x
        if ti.static(single):
            z = ti.max(x, -88.0)
            n = ti.floor(z * 1.44269504088896341 + 0.5)
            r = z - n * 0.693359375 + n * 2.12194440e-4  # ln2 split in two: r stays exact
            p = 1.9875691500e-4
            p = p * r + 1.3981999507e-3
            p = p * r + 8.3334519073e-3
            p = p * r + 4.1665795894e-2
            p = p * r + 1.6666665459e-1
            p = p * r + 5.0000001201e-1
            p = p * r * r + r + 1.0
            out = ti.select(is_nan(x), x, p * ti.bit_cast((ti.cast(n, ti.i32) + 127) << 23, ti.f32))
        else:
            out = ti.exp(x)
        return out

    @ti.func
    def lanes_at(a: ti.template(), i: ti.i32, n: ti.template(), packed: ti.template()):
        # Elements i .. i+n-1 of a flat array. Packed: the array is viewed as vectors of n
        # (i a multiple of n), so LLVM sees n consecutive addresses and loads them as one
        # SIMD word; from a flat array it sees n separately sign-extended 32-bit indices.
        if ti.static(packed):
            return a[i // n]
        else:
            return ti.Vector([a[i + j] for j in ti.static(range(n))])

    @ti.func
    def put_lanes(a: ti.template(), i: ti.i32, x, n: ti.template(), packed: ti.template()):
        # Stores x into elements i .. i+n-1, as lanes_at loads them. Either way Taichi emits n
        # scalar stores, each reloading a's base pointer (so LLVM cannot merge them); packed,
        # they share one index instead of n sign-extended ones.
        if ti.static(packed):
            a[i // n] = x
        else:
            for j in ti.static(range(n)):
                a[i + j] = x[j]

    @ti.func
    def is_pos_inf(x, single: ti.template()):
        # From the bits of x in its own width (single: float32). Only for loaded values:
        # fast-math marks arithmetic results, a float32 -> float64 widening included, as never
        # infinite, and newer LLVM (taichi-forge's) folds this test on them to False.
        out = False
        if ti.static(single):
            out = ti.bit_cast(x, ti.i32) == 0x7F800000
        else:
            bits = ti.bit_cast(x, ti.i64)
            out = (ti.cast(bits >> 32, ti.i32) == 0x7FF00000) & (ti.cast(bits, ti.i32) == 0)
        return out

    @ti.func
    def scales(a, b, pos_inf, single: ti.template()):
        # (e**(a - m), e**(b - m)) with m = max(a, b), one exp: the other's is e**-|a - b|,
        # the leader's e**(m - m), which is 1 unless m is not finite. There the formula gives
        # NaN (m = +inf, both -inf, or a NaN in either), as torch does: a +inf in k or u must
        # not be taken as a weight of 1 (a frozen channel with finite outputs). pos_inf: a or
        # b is +inf, known from the loaded inputs (see is_pos_inf), not tested on a and b.
        d = a - b
        e = exp_neg(-ti.abs(d), single)
        lead = ti.select(is_nan(d) | pos_inf, ti.bit_cast(0x7FC00000, ti.f32), 1.0)
        return ti.select(d >= 0, lead, e), ti.select(d >= 0, e, lead)

    @ti.func
    def forward_chain(decay: ti.template(), first: ti.template(), state: ti.template(),
                      k: ti.template(), v: ti.template(), y: ti.template(),
                      states: ti.template(), b: ti.i32, c: ti.i32,
                      n_b: ti.i32, n_t: ti.i32, n_c: ti.i32, n: ti.template(),
                      save: ti.template(), single: ti.template(), packed: ti.template()):
        # Channels c .. c+n-1 of batch row b, the recurrence of rwkv.md:
        #   y = (e1 aa + e2 v) / (e1 bb + e2), scales of (pp, u + k);
        #   aa, bb, pp = f1 aa + f2 v, f1 bb + f2, max(w + pp, k), scales of (w + pp, k).
        st = b * 3 * n_c + c
        w = ti.Vector([-ti.exp(decay[c + j]) for j in ti.static(range(n))])
        u = ti.Vector([first[c + j] for j in ti.static(range(n))])
        aa = ti.Vector([state[st + j] for j in ti.static(range(n))])
        bb = ti.Vector([state[st + n_c + j] for j in ti.static(range(n))])
        pp = ti.Vector([state[st + 2 * n_c + j] for j in ti.static(range(n))])
        # Which of u and pp are +inf. pp turns +inf only when a k does (w + pp <= pp) and then
        # stays so (or NaN, which is_nan sees), so a flag carried beside it knows without a test
        # on the running value.
        u_inf = ti.Vector([is_pos_inf(u[j], single) for j in ti.static(range(n))])
        p_inf = ti.Vector([is_pos_inf(pp[j], single) for j in ti.static(range(n))])
        # Without save the final state goes straight into the (B, 3, C) tensor the op returns.
        plane = n_c
        so = st
        if ti.static(save):
            plane = n_b * (n_t + 1) * n_c
            so = b * (n_t + 1) * n_c + c
        off = b * n_t * n_c + c
        # Each step stores the previous step's outputs: a loop-carried vector of lanes is
        # what LLVM's SLP vectorizer starts from (stores cannot start it: each reloads the
        # arrays' base pointers). Step 0 stores a placeholder where step 1 stores y_0.
        y_prev = aa * 0
        dst = off
        for _t in range(n_t):
            # Loads first: a store between them would split the lanes the same way.
            kt = lanes_at(k, off, n, packed)
            vt = lanes_at(v, off, n, packed)
            yt = kt * 0
            if ti.static(save):
                put_lanes(states, so, aa, n, packed)
                put_lanes(states, so + plane, bb, n, packed)
                put_lanes(states, so + 2 * plane, pp, n, packed)
            for j in ti.static(range(n)):
                k_inf = is_pos_inf(kt[j], single)
                e1, e2 = scales(pp[j], u[j] + kt[j], p_inf[j] | u_inf[j] | k_inf, single)
                yt[j] = (e1 * aa[j] + e2 * vt[j]) / (e1 * bb[j] + e2)
                ww = w[j] + pp[j]
                f1, f2 = scales(ww, kt[j], p_inf[j] | k_inf, single)
                aa[j] = f1 * aa[j] + f2 * vt[j]
                bb[j] = f1 * bb[j] + f2
                pp[j] = nan_max(ww, kt[j])
                p_inf[j] |= k_inf
            put_lanes(y, dst, y_prev, n, packed)
            y_prev = yt
            dst = off
            off += n_c
            if ti.static(save):
                so += n_c
        put_lanes(y, dst, y_prev, n, packed)
        put_lanes(states, so, aa, n, packed)
        put_lanes(states, so + plane, bb, n, packed)
        put_lanes(states, so + 2 * plane, pp, n, packed)

    @ti.func
    def backward_chain(params: ti.template(), k: ti.template(), v: ti.template(),
                       gy: ti.template(), states: ti.template(), gk: ti.template(),
                       gv: ti.template(), grads: ti.template(), b: ti.i32, c: ti.i32,
                       n_b: ti.i32, n_t: ti.i32, n_c: ti.i32, n: ti.template(),
                       single: ti.template(), packed: ti.template()):
        # Reverse-mode through each step, from the saved state before it, exactly as autograd
        # would go through the forward ops, except for the max m of the output's pair: the
        # output is invariant to that common scale, so its gradient is exactly zero. Carried:
        # ga, gb, gp, the gradients of the state after the step (at the end: the final state's).
        st = 2 * n_c + b * 3 * n_c + c
        w = ti.Vector([params[c + j] for j in ti.static(range(n))])
        u = ti.Vector([params[n_c + c + j] for j in ti.static(range(n))])
        ga = ti.Vector([params[st + j] for j in ti.static(range(n))])
        gb = ti.Vector([params[st + n_c + j] for j in ti.static(range(n))])
        gp = ti.Vector([params[st + 2 * n_c + j] for j in ti.static(range(n))])
        gw = ga * 0
        gu = ga * 0
        slots = n_t + 1
        plane = n_b * slots * n_c
        so = (b * slots + n_t - 1) * n_c + c
        off = (b * n_t + n_t - 1) * n_c + c
        for _t in range(n_t):
            aa = lanes_at(states, so, n, packed)
            bb = lanes_at(states, so + plane, n, packed)
            pp = lanes_at(states, so + 2 * plane, n, packed)
            kt = lanes_at(k, off, n, packed)
            vt = lanes_at(v, off, n, packed)
            gyt = lanes_at(gy, off, n, packed)
            gkt = kt * 0
            gvt = kt * 0
            for j in ti.static(range(n)):
                # Output: y = num / den.
                k_inf = is_pos_inf(kt[j], single)
                p_inf = is_pos_inf(pp[j], single)
                u_inf = is_pos_inf(u[j], single)
                e1, e2 = scales(pp[j], u[j] + kt[j], p_inf | u_inf | k_inf, single)
                inv = 1.0 / (e1 * bb[j] + e2)
                g_num = gyt[j] * inv
                g_den = -g_num * (e1 * aa[j] + e2 * vt[j]) * inv
                # gv's two terms are products the carried gradients use too (gv_y, gv_s): what
                # only the stores use stays scalar (see the stores below), so gv costs one add.
                gv_y = g_num * e2
                g_uk = gv_y * vt[j] + g_den * e2  # through e2 to u + k; to pp: its negative
                # State update: aa' = f1 aa + f2 v, bb' = f1 bb + f2, pp' = max(w + pp, k).
                ww = w[j] + pp[j]
                f1, f2 = scales(ww, kt[j], p_inf | k_inf, single)
                g_f1 = (ga[j] * aa[j] + gb[j] * bb[j]) * f1
                gv_s = ga[j] * f2
                g_f2 = gv_s * vt[j] + gb[j] * f2
                g_max = gp[j] - g_f1 - g_f2  # through m = max(ww, k), shared by f1 and f2
                # A tie splits the max's gradient in half, like torch.maximum.
                to_ww = g_max * ti.select(ww > kt[j], 1.0, ti.select(ww == kt[j], 0.5, 0.0))
                g_ww = g_f1 + to_ww
                gkt[j] = g_uk + g_f2 + (g_max - to_ww)
                gvt[j] = gv_s + gv_y
                gw[j] += g_ww
                gu[j] += g_uk
                ga[j] = ga[j] * f1 + g_num * e1
                gb[j] = gb[j] * f1 + g_den * e1
                gp[j] = g_ww - g_uk
            # Stored in the step that makes them, unlike forward_chain's y: carried to the next
            # step, these two vectors made LLVM's SLP vectorizer split the whole step into
            # 2-, 4- and 8-wide pieces; stored at once, only their last few operations stay
            # scalar (the stores themselves are scalar either way).
            put_lanes(gk, off, gkt, n, packed)
            put_lanes(gv, off, gvt, n, packed)
            off -= n_c
            so -= n_c
        pc = b * n_c + c
        sc = 2 * n_b * n_c + b * 3 * n_c + c
        for j in ti.static(range(n)):
            grads[pc + j] = gw[j]
            grads[n_b * n_c + pc + j] = gu[j]
            grads[sc + j] = ga[j]
            grads[sc + n_c + j] = gb[j]
            grads[sc + 2 * n_c + j] = gp[j]

    @ti.func
    def each_block(chain: ti.template(), arrays: ti.template(), flags: ti.template(), b: ti.i32,
                   c0: ti.i32, n_b: ti.i32, n_t: ti.i32, n_c: ti.i32, lanes: ti.template(),
                   packed: ti.template()):
        # chain(*arrays, b, c, n_b, n_t, n_c, n, *flags, packed) on channels c0 .. c0+lanes-1.
        if ti.static(lanes == 1 or packed):
            chain(*arrays, b, c0, n_b, n_t, n_c, lanes, *flags, packed)
        else:
            if c0 <= n_c - lanes:
                chain(*arrays, b, c0, n_b, n_t, n_c, lanes, *flags, False)
            else:  # the last, partial block: one channel at a time
                for c in range(c0, n_c):
                    chain(*arrays, b, c, n_b, n_t, n_c, 1, *flags, False)

    def make(width):
        # width > 0: the arrays read or written every step arrive as vectors of width float32
        # (C a multiple of width, lanes == width): the CPU's fast path. width 0: flat arrays of
        # any float dtype.
        packed = width > 0
        loads = nd(dtype=ti.types.vector(width, ti.f32), ndim=1) if packed else nd(ndim=1)

        @ti.kernel
        def wkv_forward(decay: nd(ndim=1), first: nd(ndim=1), state: nd(ndim=1), k: loads,
                        v: loads, y: loads, states: loads,
                        meta: nd(dtype=ti.i32, ndim=1), lanes: ti.template(),
                        save: ti.template(), single: ti.template(), serial: ti.template()):
            n_b, n_t, n_c, sp = meta[0], meta[1], meta[2], meta[3]
            blocks = (n_c - 1) // lanes + 1  # n_c >= 1; n_c + lanes could pass 2**31
            # A few steps of a few chains (one-token generation) run on the launching thread:
            # waking Taichi's pool would cost more than they take.
            ti.loop_config(serialize=serial)
            # With lanes == 1, task = b * C + c: adjacent CUDA threads take adjacent channels.
            for it in range(n_b * blocks * sp):
                if it % sp == 0:  # sp iterations per task: see backends.taichi.spread
                    task = it // sp
                    b = task // blocks
                    each_block(forward_chain, (decay, first, state, k, v, y, states),
                               (save, single), b, (task - b * blocks) * lanes, n_b, n_t, n_c,
                               lanes, packed)

        @ti.kernel
        def wkv_backward(params: nd(ndim=1), k: loads, v: loads, gy: loads, states: loads,
                         gk: loads, gv: loads, grads: nd(ndim=1),
                         meta: nd(dtype=ti.i32, ndim=1), lanes: ti.template(),
                         single: ti.template()):
            n_b, n_t, n_c, sp = meta[0], meta[1], meta[2], meta[3]
            blocks = (n_c - 1) // lanes + 1
            for it in range(n_b * blocks * sp):
                if it % sp == 0:
                    task = it // sp
                    b = task // blocks
                    each_block(backward_chain, (params, k, v, gy, states, gk, gv, grads),
                               (single,), b, (task - b * blocks) * lanes, n_b, n_t, n_c, lanes,
                               packed)

        return wkv_forward, wkv_backward

    kernels = {}
    for width in (0, *_WIDTHS):
        fwd, bwd = make(width)
        kernels[_name("forward", width)] = fwd
        kernels[_name("backward", width)] = bwd
    return kernels


# fmt: on
def _switches(k: Tensor, cpu_lanes: int) -> tuple[int, bool, int]:
    """(lanes, single, width) for a launch on ``k`` ``(B, T, C)``. single: float32 data (the
    polynomial exp, 32-bit tests of the bits); width: on the CPU, float32 arrays go as vectors of
    ``cpu_lanes`` where C is a multiple of it, else flat (0)."""
    lanes = 1 if TAICHI.gpu_order else cpu_lanes
    single = k.dtype == torch.float32
    return lanes, single, lanes if single and lanes > 1 and k.shape[2] % lanes == 0 else 0


def _loads(t: Tensor, width: int) -> Tensor:
    return t.reshape(-1, width) if width else t.reshape(-1)


def _name(kernel: str, width: int) -> str:
    return f"{kernel}_{width}" if width else kernel


def _meta(k: Tensor, lanes: int, serial: bool = False) -> Tensor:
    """``[B, T, C, spread]`` int32 on ``k``'s device (read only; one per shape in use)."""
    n_b, _, n_c = k.shape
    sp = spread(n_b * -(-n_c // lanes), serial)
    return constant(
        ("wkv meta", *k.shape, sp, k.device),
        lambda: torch.tensor([*k.shape, sp], dtype=torch.int32).to(k.device, non_blocking=True),
    )


# Lean launchers of recent forward signatures (a model's layers share one per batch size).
_steps = Steps()


def forward(
    time_decay: Tensor, time_first: Tensor, state: Tensor, k: Tensor, v: Tensor, y: Tensor,
    states: Tensor,
) -> None:  # fmt: skip
    """The WKV forward. All tensors contiguous, detached, float32 or float64 (one dtype), on
    one device, none empty.

    ``time_decay``, ``time_first``: ``(C,)`` (the kernel takes ``w = -exp(time_decay)`` and
    ``u = time_first``); ``k, v``: ``(B, T, C)``; ``state``: ``(B, 3, C)`` (aa, bb, pp) before
    the first token. Writes ``y`` ``(B, T, C)`` and ``states``: given ``(3, B, T + 1, C)``, the
    state before every step and after the last (what the backward reads); given ``(B, 3, C)``,
    the final state only.
    """
    save = states.dim() == 4
    tensors = (time_decay, time_first, state, k, v, y, states)
    with TAICHI.session(k.device, "wkv", _build_kernels, (k, states)) as kernels:
        lanes, single, width = _switches(k, _LANES)
        key = (k.shape, k.dtype, k.device, save, lanes, TAICHI.cpu_iterations, _SERIAL_BYTES)
        step = _steps.get(key)
        if step is not None and step.launch(tensors):
            return
        kernel = kernels[_name("forward", width)]
        serial = serial_launch(y, _SERIAL_BYTES)
        args = (
            time_decay, time_first, state.reshape(-1), _loads(k, width), _loads(v, width),
            _loads(y, width), _loads(states, width), _meta(k, lanes, serial), lanes, save, single,
            serial,
        )  # fmt: skip
        kernel(*args)
        _steps.record(key, kernel, args, len(tensors))


def backward(
    time_decay: Tensor, w: Tensor, u: Tensor, k: Tensor, v: Tensor, state: Tensor, saved: Tensor,
    gy: Tensor, gstate: Tensor, gk: Tensor, gv: Tensor, grads: Tensor,
) -> None:  # fmt: skip
    """The WKV backward; same conventions as ``forward``, ``w = -exp(time_decay)``.

    ``saved``: the forward's states ``(3, B, T + 1, C)``, or an empty ``(3, B, 0, C)`` to
    recompute them from ``state``; ``gy`` ``(B, T, C)`` and ``gstate`` ``(B, 3, C)``: the
    gradients of ``y`` and of the final state. Writes ``gk``, ``gv`` ``(B, T, C)`` and ``grads``
    ``(2 + 3, B, C)`` flat: the per-chain gradients of ``w`` and ``u`` ``(B, C)`` each (the
    caller sums them over B), then the gradient of the initial state ``(B, 3, C)``.
    """
    n_b, n_t, n_c = k.shape
    states = saved
    if states.shape[2] != n_t + 1:
        states = k.new_empty(3, n_b, n_t + 1, n_c)
        forward(time_decay, u, state, k, v, torch.empty_like(k), states)
    params = torch.cat([w, u, gstate.reshape(-1)])
    with TAICHI.session(k.device, "wkv", _build_kernels, (k, states, params, grads)) as kernels:
        lanes, single, width = _switches(k, _LANES)
        kernels[_name("backward", width)](
            params, _loads(k, width), _loads(v, width), _loads(gy, width), _loads(states, width),
            _loads(gk, width), _loads(gv, width), grads.reshape(-1), _meta(k, lanes), lanes,
            single,
        )  # fmt: skip
