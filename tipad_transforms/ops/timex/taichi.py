"""The causal depthwise time convolution's Taichi backend: one windowed-dot kernel for forward
and backward, and torch's own forms where they are faster on the CPU.

Every pass is the sum ``y[o] = sum_s a[s] * x[o - off + s]`` over the ``s`` in ``[0, len(a))``
that keep ``o - off + s`` inside ``x``'s row of ``T``:

* forward ``out[b,c,t]``: ``a = w[c]``, ``x = k[b,c]``, ``o = t``, ``off = L - 1`` (plus eps);
* ``dk[b,c,u]``: ``a = flip(w[c])``, ``x = g[b,c]``, ``o = u``, ``off = 0``;
* ``dw[c,d]``: ``a = g[b,c]``, ``x = k[b,c]``, ``o = d``, ``off = L - 1``, summed over ``b``.

``s`` walks ``a`` and ``x`` forwards, as the LLVM loop vectoriser wants (fast-math lets it
reassociate the sums). On the CPU, long kernels with finite inputs take the FFT form
(``_use_fft``: ``O((T + L) log(T + L))`` per row against ``T * min(L, T)``; an FFT spreads a
non-finite value over every output) and the rest ``F.conv1d`` over the zero-padded ``k``
(``_use_conv1d``, vectorised where Taichi's CPU code for these shifted windows is scalar);
``dk`` takes it only with a finite ``w`` (its zero padding would add ``w * 0`` terms), ``dw``
stays on the kernel.
"""

# No `from __future__ import annotations`: Taichi reads the kernels' annotations at runtime.
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from ...backends import Refused
from ...backends.taichi import MAX_ELEMENTS, TAICHI, spread
from . import reference

# The kernel's int32 `meta`: ROWS, the output's (b, c) rows (its channels for dw); LA, len(a);
# N_OUT, outputs per row; SUM_B, 1 for dw; XS, the padded x's row stride; SPREAD, see
# backends.taichi.spread; from _FINITE, a flag per channel: whether that row of `a` is finite.
_ROWS, _C, _B, _T, _LA, _N_OUT, _OFF, _SUM_B, _XS, _SPREAD, _FINITE = range(11)
# Consecutive outputs per CPU task. They share each load of `a`; each needs its own (shifted)
# load of `x`: 4 amortises the loads of `a` where more gives no more.
_TILE = 4
# Tiles per CPU task, walked in order: a task's own setup (its divisions, the loop bounds)
# costs about as much as a short tile's multiply-adds.
_TILES_PER_TASK = 16
# Zeros on both sides of every x row (a padded copy, one pass over x), so the common loop can
# run a multiple of _ROUND steps: the LLVM loop vectoriser runs 8 lanes x 4 interleaved for
# float32 and would leave up to 31 steps to a slow scalar remainder loop.
_ROUND = 32
_PAD = 32
#: Taps (``min(L, T)``) from which the CPU takes the FFT form (finite inputs); None: never.
FFT_MIN_TAPS: int | None = 128
#: The FFT form's spectra per block of rows, at most, in bytes, for batches whose spectra take
#: more than ``FFT_BLOCKS_FROM``: a block's buffers then stay near the cache. Smaller batches
#: run as one block: each block's ops are parallel regions of their own, and on a busy machine
#: every region waits for a descheduled thread, which small blocks cannot repay.
FFT_BLOCK_BYTES = 2 << 20
FFT_BLOCKS_FROM = 32 << 20
#: Whether the CPU takes ``F.conv1d`` where the FFT form does not run; False (and
#: ``FFT_MIN_TAPS = None``) leaves every size to the Taichi kernel, for comparison and tests.
TORCH_CONV = True
#: The GPU's loop order: True the tiled one (``window_tiles``), False the simple one (a thread
#: per output reading global memory). Taichi's CPU arch (tests switch ``TAICHI.gpu_order`` on)
#: runs the simple one.
GPU_TILES = True
# The tiled order's sizes: threads per block, outputs per thread (strided by the block size, so
# neighbouring threads read neighbouring shared words and write neighbouring outputs), and taps
# staged per round, with the x window they meet (_GPU_WINDOW).
_GPU_THREADS = 128
_GPU_PER_THREAD = 4
_GPU_TILE = _GPU_THREADS * _GPU_PER_THREAD
_GPU_SPAN = 128
_GPU_WINDOW = _GPU_TILE + _GPU_SPAN - 1


# fmt: off
def _build_kernels(ti: Any) -> dict[str, Any]:
    """The windowed dot product of the module docstring. CPU: a task computes ``_TILE``
    consecutive outputs of one row, the ``s`` valid for all of them in one branch-free loop
    (vectorised along ``s``, one load of ``a`` shared by the tile), the few valid for only some
    in scalar edge loops. GPU: simple (``per_output``) or tiled (``window_tiles``).
    """
    nd = ti.types.ndarray

    @ti.func
    def bases(row: ti.i32, b: ti.i32, c_count: ti.i32, la: ti.i32, t_len: ti.i32,
              sum_b: ti.i32, xs: ti.i32):
        # Flat starts of the `a` and `x` rows that output row `row` reads in step b.
        a_base = (row % c_count) * la
        x_row = row
        if sum_b:
            x_row = b * c_count + row
            a_base = x_row * t_len
        return a_base, x_row * xs + _PAD

    @ti.kernel
    def window_dot(a: nd(ndim=1), x: nd(ndim=1), y: nd(ndim=1), meta: nd(dtype=ti.i32, ndim=1),
                   eps: ti.f64, dt: ti.template(), per_output: ti.template()):
        # Writes every y[row * n_out + o] = eps + sum (summed over b too when sum_b). sum_b is
        # a runtime flag, not a template: each compiled variant costs seconds of LLVM time.
        rows, c_count, t_len = meta[_ROWS], meta[_C], meta[_T]
        la, n_out, off, sum_b, xs = meta[_LA], meta[_N_OUT], meta[_OFF], meta[_SUM_B], meta[_XS]
        steps = meta[_B] if sum_b else 1
        e = ti.cast(eps, dt)
        if ti.static(per_output):
            for i in range(rows * n_out):
                row = i // n_out
                o = i - row * n_out
                lo = ti.max(0, off - o)
                hi = ti.min(la, t_len + off - o)
                total = e
                for b in range(steps):
                    a_base, x_base = bases(row, b, c_count, la, t_len, sum_b, xs)
                    xo = x_base + o - off
                    for s in range(lo, hi):
                        total += a[a_base + s] * x[xo + s]
                y[i] = total
        else:
            tiles = (n_out - 1) // _TILE + 1  # n_out >= 1; n_out + _TILE could pass 2**31
            groups = (tiles - 1) // _TILES_PER_TASK + 1
            spread_tasks = meta[_SPREAD]
            for it in range(rows * groups * spread_tasks):
                if it % spread_tasks == 0:  # see backends.taichi.spread
                    task = it // spread_tasks
                    row = task // groups
                    t0 = (task - row * groups) * _TILES_PER_TASK
                    for tt in range(t0, ti.min(tiles, t0 + _TILES_PER_TASK)):
                        o0 = tt * _TILE
                        # s valid for every output of the tile: o0 + r - off + s in [0, t_len).
                        common_lo = ti.max(0, off - o0)
                        x_end = t_len + off - o0 - _TILE + 1
                        common_hi = ti.max(common_lo, ti.min(la, x_end))
                        # Round its length up to _ROUND, into x's zero padding only: s below
                        # the bound set by x's start (and above the one set by its end) multiply
                        # a real tap of `a` by a zero of x, or are valid terms of the later
                        # outputs of the tile. Never past `a`'s ends: that would multiply later
                        # x values by zero, and 0 * inf in the future of a causal sum must not
                        # make NaN.
                        spare = (_ROUND - (common_hi - common_lo) % _ROUND) % _ROUND
                        if common_hi > common_lo:
                            if common_lo == off - o0:
                                down = ti.min(spare, common_lo)
                                common_lo -= down
                                spare -= down
                            # Past x's end only with a finite row of `a`: with off = 0 (dk) these
                            # terms are no part of the sum, and an inf tap times 0 would be NaN.
                            if common_hi == x_end and (sum_b or meta[_FINITE + row % c_count] != 0):
                                common_hi += ti.min(spare, la - common_hi)
                        acc = ti.Vector([0.0] * _TILE, dt)
                        for b in range(steps):
                            a_base, x_base = bases(row, b, c_count, la, t_len, sum_b, xs)
                            xo = x_base + o0 - off
                            for s in range(common_lo, common_hi):
                                av = a[a_base + s]
                                for r in ti.static(range(_TILE)):
                                    acc[r] += av * x[xo + r + s]
                        out = row * n_out + o0
                        for r in ti.static(range(_TILE)):
                            if r < n_out - o0:
                                y[out + r] = acc[r] + e
                        # The s valid for only some outputs of the tile: a few per output, in a loop
                        # that is not unrolled (unrolled, it doubled the compile time).
                        # (Most tiles have none: the rounding above covers them. Skip their setup.)
                        first_lo = ti.max(0, off - o0 - _TILE + 1)
                        last_hi = ti.min(la, t_len + off - o0)
                        covered = common_lo <= first_lo and common_hi >= last_hi
                        for r in range(0 if covered else ti.min(_TILE, n_out - o0)):
                            lo = ti.max(0, off - o0 - r)
                            hi = ti.min(la, t_len + off - o0 - r)
                            extra = ti.cast(0, dt)
                            for b in range(steps):
                                a_base, x_base = bases(row, b, c_count, la, t_len, sum_b, xs)
                                xo = x_base + o0 + r - off
                                for s in range(lo, ti.min(common_lo, hi)):
                                    extra += a[a_base + s] * x[xo + s]
                                for s in range(ti.max(common_hi, lo), hi):
                                    extra += a[a_base + s] * x[xo + s]
                            y[out + r] += extra

    @ti.kernel
    def window_tiles(a: nd(ndim=1), x: nd(ndim=1), y: nd(ndim=1), meta: nd(dtype=ti.i32, ndim=1),
                     eps: ti.f64, dt: ti.template()):
        # window_dot's sums, a block per _GPU_TILE outputs of one row. Per round of _GPU_SPAN
        # taps the block stages those taps and the x window they meet (zeros outside x's row,
        # never read: every product below has s inside its output's own range), then each
        # thread adds its outputs' terms from shared memory. The round count depends on the
        # tile only, so every thread of the block reaches every barrier.
        rows, c_count, t_len = meta[_ROWS], meta[_C], meta[_T]
        la, n_out, off, sum_b, xs = meta[_LA], meta[_N_OUT], meta[_OFF], meta[_SUM_B], meta[_XS]
        steps = meta[_B] if sum_b else 1
        e = ti.cast(eps, dt)
        tiles = (n_out - 1) // _GPU_TILE + 1
        ti.loop_config(block_dim=_GPU_THREADS)
        for tid in range(rows * tiles * _GPU_THREADS):
            th = tid % _GPU_THREADS
            tile = tid // _GPU_THREADS
            row = tile // tiles
            o0 = (tile - row * tiles) * _GPU_TILE
            xw = ti.simt.block.SharedArray((_GPU_WINDOW,), dt)
            aw = ti.simt.block.SharedArray((_GPU_SPAN,), dt)
            # The taps any output of the tile uses: o - off + s in [0, t_len), s in [0, la).
            s_lo = ti.max(0, off - (ti.min(o0 + _GPU_TILE, n_out) - 1))
            s_hi = ti.min(la, t_len + off - o0)
            rounds = ti.max(0, (s_hi - s_lo + _GPU_SPAN - 1) // _GPU_SPAN)
            acc = ti.Vector.zero(dt, _GPU_PER_THREAD)
            for b in range(steps):
                a_base, x_base = bases(row, b, c_count, la, t_len, sum_b, xs)
                for q in range(rounds):
                    s0 = s_lo + q * _GPU_SPAN
                    x0 = o0 - off + s0  # x position of xw[0]
                    for m in ti.static(range((_GPU_WINDOW + _GPU_THREADS - 1) // _GPU_THREADS)):
                        p = th + m * _GPU_THREADS
                        if p < _GPU_WINDOW:
                            v = ti.cast(0, dt)
                            if x0 + p >= 0 and x0 + p < t_len:
                                v = x[x_base + x0 + p]
                            xw[p] = v
                    for m in ti.static(range((_GPU_SPAN + _GPU_THREADS - 1) // _GPU_THREADS)):
                        p = th + m * _GPU_THREADS
                        if p < _GPU_SPAN:
                            v = ti.cast(0, dt)
                            if s0 + p < s_hi:
                                v = a[a_base + s0 + p]
                            aw[p] = v
                    ti.simt.block.sync()
                    for j in ti.static(range(_GPU_PER_THREAD)):
                        r = th + j * _GPU_THREADS
                        o = o0 + r
                        lo = ti.max(s0, off - o)
                        hi = ti.min(ti.min(s0 + _GPU_SPAN, la), t_len + off - o)
                        for s in range(lo, hi):
                            acc[j] += aw[s - s0] * xw[r + s - s0]
                    # The next round's staging must wait for this round's reads.
                    ti.simt.block.sync()
            for j in ti.static(range(_GPU_PER_THREAD)):
                o = o0 + th + j * _GPU_THREADS
                if o < n_out:
                    y[row * n_out + o] = acc[j] + e

    return {"window_dot": window_dot, "window_tiles": window_tiles,
            "dtypes": {torch.float32: ti.f32, torch.float64: ti.f64}}


# fmt: on
def _window_dot(
    a: Tensor, x: Tensor, y: Tensor, *, offset: int, sum_batch: bool = False, eps: float = 0.0
) -> None:
    """Write every element of ``y`` with the windowed dot of the module docstring (``off`` =
    ``offset``). Tensors contiguous, detached, of one float dtype, on one device; ``x``: ``(B,
    C, T)``; ``a`` ``(C, La)`` and ``y`` ``(B, C, T)``, or with ``sum_batch`` ``a`` of ``x``'s
    shape and ``y`` ``(C, n_out)`` summed over the batch. Non-finite values follow ``F.conv1d``
    over ``x`` zero-padded by ``off`` in front: NaN where a non-finite ``a[s]`` meets that
    padding; nothing past ``x``'s end.
    """
    batch, channels, length = x.shape
    # The padded copy of x is what the kernel indexes; T + L + padding bound its int32 sums.
    x_padded = torch.nn.functional.pad(x.reshape(-1, length), (_PAD, _PAD)) if x.numel() else x
    with TAICHI.session(y.device, "time_conv", _build_kernels, (a, x_padded, y)) as kernels:
        if y.numel() == 0:
            return
        if x.numel() == 0:  # batch == 0 with sum_batch: an empty sum
            y.fill_(eps)
            return
        if length + a.shape[-1] + 2 * _PAD > MAX_ELEMENTS:
            raise Refused(f"T + L past {MAX_ELEMENTS}: int32 index sums")
        rows = channels if sum_batch else batch * channels
        n_out = y.numel() // rows
        tiles = (n_out - 1) // _TILE + 1
        groups = (tiles - 1) // _TILES_PER_TASK + 1  # as the CPU kernel counts its tasks
        header = [rows, channels, batch, length, a.shape[-1], n_out, offset, int(sum_batch),
                  length + 2 * _PAD, spread(rows * groups)]  # fmt: skip
        # Device-side flags: no host synchronisation to learn whether `a` is finite.
        finite = a.reshape(-1, channels, a.shape[-1]).isfinite().all(-1).all(0)
        meta = torch.cat([
            torch.tensor(header, dtype=torch.int32).to(y.device, non_blocking=True),
            finite.to(torch.int32),
        ])  # fmt: skip
        flat = (a.reshape(-1), x_padded.reshape(-1), y.reshape(-1), meta, float(eps))
        dt = kernels["dtypes"][y.dtype]
        if _tiled(rows, y.numel() // rows):
            kernels["window_tiles"](*flat, dt)
        else:
            kernels["window_dot"](*flat, dt, bool(TAICHI.gpu_order))
        if offset > 0:
            _poison_padding_terms(a, y, channels, offset, sum_batch)


def _tiled(rows: int, n_out: int) -> bool:
    """Whether the tiled GPU order runs: the GPU order on a GPU arch with ``GPU_TILES``, and
    its thread count (a block of ``_GPU_THREADS`` per tile) within int32 indices."""
    if not (TAICHI.gpu_order and GPU_TILES) or TAICHI.runtime_arch() == "cpu":
        return False
    return rows * -(-n_out // _GPU_TILE) * _GPU_THREADS <= MAX_ELEMENTS


def forward(w: Tensor, k: Tensor, out: Tensor, eps: float) -> None:
    """``out[b,c,t] = eps + sum_j w[c, L-1-j] * k[b,c,t-j]``: ``w`` ``(C, L)``, ``k`` ``(B, C,
    T)``, contiguous, one float dtype. ``out`` is the op's fresh output, ``(B, C, T)`` or empty
    (then sized here, ``resize_``): where it is a whole tensor, the ``F.conv1d`` form may rebind
    it to its own result (``reference.hand_over``), so a caller must hold no other view of its
    storage."""
    _check_allowed(k)
    if _use_fft(w, k):
        _fft_forward(w, k, out.resize_(k.shape), eps)
    elif _use_conv1d(k):
        reference.forward(w, k, out, eps)  # F.conv1d: the torch backend's own forward
    else:
        _window_dot(w, k, out.resize_(k.shape), offset=w.shape[1] - 1, eps=eps)


def backward(
    grad: Tensor, w: Tensor, k: Tensor, dw: Tensor, dk: Tensor, grad_w: bool, grad_k: bool
) -> None:
    """Write ``dk`` (if ``grad_k``) and ``dw`` (if ``grad_w``), the gradients of ``forward``
    for the output gradient ``grad`` ``(B, C, T)``; tensors as ``forward``'s (``dk`` may be
    empty, and is sized or rebound as ``out`` is there)."""
    _check_allowed(k)
    if _use_fft(w, k, grad):
        _fft_backward(grad, w, k, dw, dk.resize_(k.shape), grad_w, grad_k)
        return
    if grad_k and _use_conv1d(k) and _finite(w):
        # dk[u] = sum_s w[L-1-s] grad[u+s]: a correlation of grad, zero-padded at its end.
        pad = torch.nn.functional.pad(grad, (0, w.shape[1] - 1))
        reference.hand_over(
            torch.nn.functional.conv1d(pad, w.flip(-1).unsqueeze(1), groups=w.shape[0]), dk
        )
    elif grad_k:
        _window_dot(w.flip(-1).contiguous(), grad, dk.resize_(k.shape), offset=0)
    if grad_w:
        _window_dot(grad, k, dw, offset=w.shape[1] - 1, sum_batch=True)


def _poison_padding_terms(
    a: Tensor, y: Tensor, channels: int, offset: int, sum_batch: bool
) -> None:
    """NaN into the outputs whose sums hold ``a[s] * 0`` terms of x's front padding (``s <
    offset - o``) with a non-finite ``a[s]``: the kernel leaves most of those terms out."""
    zeros = a.reshape(-1, channels, a.shape[-1]) * 0  # NaN where a is not finite, else 0
    if sum_batch:
        zeros = zeros.sum(0, keepdim=True)
    # prefix[..., m]: the sum of the first m terms, NaN once one of them is.
    prefix = torch.nn.functional.pad(zeros.cumsum(-1), (1, 0))
    n_out = y.shape[-1]
    first = (offset - torch.arange(n_out, device=y.device)).clamp(0, a.shape[-1])
    poisoned = prefix[..., first].isnan()  # (1 or B, C, n_out)
    y.view(-1, channels, n_out).masked_fill_(poisoned, float("nan"))


def _check_allowed(k: Tensor) -> None:
    """Raise ``Refused`` where the backend refuses ``k``'s device, before any form runs: the
    torch forms below answer for this backend, which the policy must be able to pass over."""
    reason = TAICHI.refusal(k.device)
    if reason is not None:
        raise Refused(reason)


def _finite(t: Tensor) -> bool:
    """Whether ``t`` (a CPU tensor) is finite, by its sum (``isfinite().all()`` costs ten times
    more); a sum that overflows answers False, which only sends the call to the exact path."""
    return math.isfinite(float(t.detach().sum()))


def _use_conv1d(k: Tensor) -> bool:
    """``F.conv1d`` for CPU tensors in the CPU loop order, with ``TORCH_CONV``."""
    return TORCH_CONV and not TAICHI.gpu_order and k.device.type == "cpu" and k.numel() > 0


def _use_fft(w: Tensor, k: Tensor, *more: Tensor) -> bool:
    """The FFT form for CPU tensors in the CPU loop order with ``min(L, T) >= FFT_MIN_TAPS``,
    when every input is finite (one read of each, on the host: the CPU backend is synchronous)."""
    if FFT_MIN_TAPS is None or TAICHI.gpu_order or k.device.type != "cpu" or k.numel() == 0:
        return False
    if min(w.shape[1], k.shape[2]) < FFT_MIN_TAPS:
        return False
    return all(_finite(t) for t in (w, k, *more))


def fast_fft_length(n: int) -> int:
    """The smallest ``m >= n`` whose prime factors are 2, 3 and 5 (pocketfft's fast sizes)."""
    best = 1 << max(0, (n - 1).bit_length())
    f5 = 1
    while f5 < best:
        f35 = f5
        while f35 < best:
            m = f35
            while m < n:
                m *= 2
            best = min(best, m)
            f35 *= 3
        f5 *= 5
    return best


def _fft_taps(w: Tensor, length: int) -> tuple[Tensor, int]:
    """``h[c, j] = w[c, L-1-j]`` for the ``j < min(L, T)`` that reach an output, and an FFT
    length with no wrap-around into the ``T`` outputs (``T + len(h) - 1`` at least)."""
    taps = min(w.shape[1], length)
    return w.flip(-1)[:, :taps], fast_fft_length(length + taps - 1)


def _fft_blocks(
    batch: int, channels: int, n: int, itemsize: int
) -> Iterator[tuple[int, int, int, int]]:
    """``(r0, r1, c0, c1)``: blocks of the ``B * C`` rows whose spectra (``n // 2 + 1`` complex
    values a row) take at most ``FFT_BLOCK_BYTES`` (one row at the least), each whole samples
    (channels ``0:C``) or channels ``c0:c1`` of one sample, so that a block's taps are one
    slice of ``h``'s; one block where the batch's spectra take ``FFT_BLOCKS_FROM`` or less."""
    row_bytes = (n // 2 + 1) * 2 * itemsize
    if batch * channels * row_bytes <= FFT_BLOCKS_FROM:
        yield 0, batch * channels, 0, channels
        return
    rows = max(1, FFT_BLOCK_BYTES // row_bytes)
    if rows >= channels:
        step = rows // channels
        for b0 in range(0, batch, step):
            yield b0 * channels, min(batch, b0 + step) * channels, 0, channels
        return
    for b in range(batch):
        for c0 in range(0, channels, rows):
            c1 = min(channels, c0 + rows)
            yield b * channels + c0, b * channels + c1, c0, c1


def _fft_forward(w: Tensor, k: Tensor, out: Tensor, eps: float) -> None:
    """``forward`` as a product of spectra, the causal convolution of each row of ``k`` with
    ``h``, block by block of rows (``_fft_blocks``), in place; tensors as ``forward``'s,
    finite, on the CPU."""
    batch, channels, length = k.shape
    h, n = _fft_taps(w, length)
    taps = torch.fft.rfft(h, n=n)
    rows, out_rows = k.reshape(-1, length), out.view(-1, length)
    for r0, r1, c0, c1 in _fft_blocks(batch, channels, n, k.element_size()):
        spectrum = torch.fft.rfft(rows[r0:r1], n=n)
        spectrum.view(-1, c1 - c0, spectrum.shape[-1]).mul_(taps[c0:c1])
        out_rows[r0:r1].copy_(torch.fft.irfft(spectrum, n=n)[:, :length])
    if eps:
        out.add_(eps)


def _fft_backward(
    grad: Tensor, w: Tensor, k: Tensor, dw: Tensor, dk: Tensor, grad_w: bool, grad_k: bool
) -> None:
    """``backward`` as correlations: ``dk`` of ``grad`` with ``h``, ``dw`` (reversed) of
    ``grad`` with ``k``, summed over the batch; taps past ``T`` meet only padding (zero).
    Blocks of rows as in ``_fft_forward``; ``dw``'s cross spectrum accumulates over them."""
    batch, channels, length = k.shape
    h, n = _fft_taps(w, length)
    # conj_physical_, not the lazy conj(): a dispatch mode (FlopCounterMode, AOTAutograd's
    # first call) reaches this with the Conjugate key excluded, where mul_ ignores the flag.
    taps = torch.fft.rfft(h, n=n).conj_physical_()
    cross = taps.new_zeros(taps.shape)  # (C, n // 2 + 1), a B-th of the batch's spectra
    g_rows, k_rows, dk_rows = grad.reshape(-1, length), k.reshape(-1, length), dk.view(-1, length)
    for r0, r1, c0, c1 in _fft_blocks(batch, channels, n, k.element_size()):
        g = torch.fft.rfft(g_rows[r0:r1], n=n)
        # dw's product first: dk's overwrites g.
        if grad_w:
            product = torch.fft.rfft(k_rows[r0:r1], n=n).conj_physical_().mul_(g)
            cross[c0:c1] += product.view(-1, c1 - c0, product.shape[-1]).sum(0)
        if grad_k:
            g.view(-1, c1 - c0, g.shape[-1]).mul_(taps[c0:c1])
            dk_rows[r0:r1].copy_(torch.fft.irfft(g, n=n)[:, :length])
    if grad_w:
        dh = torch.fft.irfft(cross, n=n)[..., : h.shape[1]]
        dw.zero_()
        dw[:, dw.shape[1] - h.shape[1] :].copy_(dh.flip(-1))
