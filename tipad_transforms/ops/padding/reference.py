"""The explicit torch route, for devices and processes the Taichi runtime cannot serve.

Used when ``_runtime.refusal`` names a reason: a DataLoader worker forked after Taichi started, a
CUDA tensor on a device other than cuda:0, a CUDA tensor while Taichi runs on the CPU. It builds
the same index map as the kernel with a handful of torch ops (slower, with full-size temporaries)
so results are identical; the caller warns once that it is in use. Padding's forward also runs
here, silently, for a process's first CPU calls, before it starts Taichi (the warm-up:
``ops._route.exact_route``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.grad

from ._geometry import PadGeometry, fold_index


def _tile_index(
    g: PadGeometry,
    texture_shape: Sequence[int],
    offset: torch.Tensor,
    stagger: int,
    dev: torch.device,
) -> torch.Tensor:
    """``(N, 1, H'*W')`` flat ``ty * tw + tx`` of every canvas pixel (the texture mapping spec)."""
    th, tw = int(texture_shape[-2]), int(texture_shape[-1])
    iy = torch.arange(g.out_h, device=dev) - g.top
    ix = torch.arange(g.out_w, device=dev) - g.left
    off = offset.to(device=dev, dtype=torch.long)
    y = iy[None, :] - off[:, :1]  # (N, H')
    v = torch.div(y, th, rounding_mode="floor")
    ty = y - v * th
    tx = (ix[None, None, :] - off[:, 1, None, None] - v[:, :, None] * stagger).remainder(tw)
    return (ty[:, :, None] * tw + tx).reshape(g.n, 1, -1)


def _texture_rows(
    g: PadGeometry,
    texture: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> torch.Tensor:
    """``(N, Ct, H', W')``: every canvas pixel's texture value (the texture mapping spec),
    indexed per row instead of per pixel.

    Along a canvas row the tile column advances by one per pixel, wrapping at ``tw``: the row is
    the window ``[s, s + W')`` of its tile row repeated ``ceil((tw + W' - 1) / tw)`` times, ``s``
    being the row's first tile column. So the index math is per row (``N * Ct * H'`` values)
    and the canvas is one ``index_select`` of contiguous windows (a row copy each).
    """
    dev = texture.device
    _, ct, th, tw = texture.shape
    y = torch.arange(g.out_h, device=dev) - g.top
    off = offset.to(device=dev, dtype=torch.long)
    y = y[None, :] - off[:, :1]  # (N, H')
    v = torch.div(y, th, rounding_mode="floor")  # the lattice row: its bricks shift by stagger
    ty = y - v * th
    s = (-g.left - off[:, 1:] - v * stagger).remainder(tw)  # (N, H')
    reps = -(-(tw + g.out_w - 1) // tw)
    chosen = texture[texture_index.to(device=dev, dtype=torch.long)]  # (N, Ct, th, tw)
    wide = chosen.unsqueeze(3).expand(g.n, ct, th, reps, tw).reshape(-1)  # rows of reps * tw
    plane = torch.arange(g.n * ct, device=dev).view(g.n, ct, 1) * th  # (n, c)'s first tile row
    starts = (plane + ty[:, None, :]) * (reps * tw) + s[:, None, :]  # (N, Ct, H')
    windows = wide.unfold(0, g.out_w, 1)  # window i: wide[i : i + W'], a view
    return windows.index_select(0, starts.reshape(-1)).view(g.n, ct, g.out_h, g.out_w)


def pad(
    geometry: PadGeometry,
    mode: str,
    image: torch.Tensor,
    *,
    texture: torch.Tensor,
    fill: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> torch.Tensor:
    """``(N, C, H, W)`` image -> ``(N, C, H', W')`` canvas; differentiable through torch ops.

    Every process runs this for its first CPU calls (``ops._route.exact_route``), so it
    builds only index vectors and writes the canvas once: the border modes' row and column
    maps cover the interior too (they fold an inside index to itself); a constant or texture
    border gets the image copied over its interior.
    """
    g = geometry
    dev = image.device
    if g.n * g.c * g.out_h * g.out_w == 0:  # no index maps for a canvas that holds nothing
        return image.new_empty(g.n, g.c, g.out_h, g.out_w)
    if mode not in ("texture", "constant"):
        rows = fold_index(torch.arange(g.out_h, device=dev) - g.top, g.h, mode)
        cols = fold_index(torch.arange(g.out_w, device=dev) - g.left, g.w, mode)
        return image.index_select(2, rows).index_select(3, cols)
    if mode == "texture":
        border = _texture_rows(g, texture, offset, texture_index, stagger)
    else:
        border = fill.reshape(1, g.c, 1, 1)
    # A copy for an expanded border; a gathered one is already a fresh canvas.
    canvas = border.to(image.dtype).expand(g.n, g.c, g.out_h, g.out_w).contiguous()
    canvas[:, :, g.top : g.top + g.h, g.left : g.left + g.w] = image  # padding is >= 0 here
    return canvas


def pad_backward(
    grad: torch.Tensor,
    geometry: PadGeometry,
    mode: str,
    image_dtype: torch.dtype,
    *,
    texture: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``pad`` w.r.t. the image and the texture: the canvas gradient summed back
    along the forward index map.

    Explicit scatter-adds, not autograd through ``pad``: this runs inside a custom op's
    implementation, where autograd is off even under ``torch.enable_grad()``.
    """
    g = geometry
    dev = grad.device
    if grad.numel() == 0:  # nothing flows back; no index maps for an empty canvas
        zeros = torch.zeros(texture.shape, dtype=image_dtype, device=dev)
        return grad.new_zeros(g.n, g.c, g.h, g.w, dtype=image_dtype), zeros
    canvas = grad.to(image_dtype).reshape(g.n, g.c, g.out_h * g.out_w)
    iy = torch.arange(g.out_h, device=dev) - g.top
    ix = torch.arange(g.out_w, device=dev) - g.left
    grad_image = canvas.new_zeros(g.n, g.c, g.h * g.w)
    inside = ((iy >= 0) & (iy < g.h))[:, None] & ((ix >= 0) & (ix < g.w))[None, :]
    inside = inside.reshape(-1)
    if mode in ("constant", "texture"):
        src = (iy[:, None] * g.w + ix[None, :]).reshape(-1)
        grad_image.index_add_(2, src[inside], canvas[:, :, inside])
    else:
        src = fold_index(iy, g.h, mode)[:, None] * g.w + fold_index(ix, g.w, mode)[None, :]
        grad_image.index_add_(2, src.reshape(-1), canvas)
    grad_tex = torch.zeros(texture.shape, dtype=image_dtype, device=dev)
    if mode == "texture" and texture.numel() > 0:
        _, ct, th, tw = texture.shape
        border = ~inside
        channel = torch.arange(g.c, device=dev) * (1 if ct == g.c else 0)  # Ct = 1: all read 0
        plane = texture_index.to(device=dev, dtype=torch.long)[:, None] * ct + channel[None, :]
        flat = _tile_index(g, texture.shape, offset, stagger, dev)[:, :, border]  # (N, 1, B)
        target = plane[:, :, None] * (th * tw) + flat  # (N, C, B)
        grad_tex.view(-1).index_add_(0, target.reshape(-1), canvas[:, :, border].reshape(-1))
    return grad_image.reshape(g.n, g.c, g.h, g.w), grad_tex


def _stack_geometries(
    sizes: torch.Tensor, channels: int, out_h: int, out_w: int
) -> list[tuple[PadGeometry, int]]:
    """Each packed image's geometry (``sizes`` rows ``(h, w, top, left)``) and flat start."""
    result = []
    start = 0
    for h, w, top, left in sizes.tolist():
        g = PadGeometry(1, channels, h, w, left, top, out_w - left - w, out_h - top - h)
        result.append((g, start))
        start += channels * h * w
    return result


def pad_stack(
    sizes: torch.Tensor,
    mode: str,
    images: torch.Tensor,
    canvas_shape: Sequence[int],
    *,
    texture: torch.Tensor,
    fill: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> torch.Tensor:
    """Packed images (``launch_pad_stack``'s layout) -> ``(N, C, H, W)``: ``pad`` per sample."""
    n, c, out_h, out_w = (int(s) for s in canvas_shape)
    canvases = []
    for i, (g, start) in enumerate(_stack_geometries(sizes, c, out_h, out_w)):
        image = images[start : start + c * g.h * g.w].reshape(1, c, g.h, g.w)
        lattice = {"offset": offset[i : i + 1], "texture_index": texture_index[i : i + 1]}
        canvases.append(pad(g, mode, image, texture=texture, fill=fill, stagger=stagger, **lattice))
    return torch.cat(canvases) if canvases else images.new_empty(n, c, out_h, out_w)


def pad_stack_backward(
    grad: torch.Tensor,
    sizes: torch.Tensor,
    mode: str,
    image_dtype: torch.dtype,
    *,
    texture: torch.Tensor,
    offset: torch.Tensor,
    texture_index: torch.Tensor,
    stagger: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``pad_stack``: the packed images' (flat) and the texture's, via
    ``pad_backward`` per sample."""
    _, c, out_h, out_w = grad.shape
    grad_images = []
    grad_tex = torch.zeros(texture.shape, dtype=image_dtype, device=grad.device)
    for i, (g, _) in enumerate(_stack_geometries(sizes, c, out_h, out_w)):
        gi, gt = pad_backward(grad[i : i + 1], g, mode, image_dtype, texture=texture,
                              offset=offset[i : i + 1], texture_index=texture_index[i : i + 1],
                              stagger=stagger)  # fmt: skip
        grad_images.append(gi.reshape(-1))
        grad_tex += gt
    flat = torch.cat(grad_images) if grad_images else grad.new_zeros(0, dtype=image_dtype)
    return flat, grad_tex


# RWKV operators: the torch route, with the same explicit backward as the Taichi kernels (this
# runs inside custom ops' implementations, where autograd is off).


def _scales(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(exp(a - m), exp(b - m))`` with ``m = max(a, b)``, as the kernels compute it: the
    other's is ``exp(-|a - b|)``, the leader's ``exp(m - m)``, which is 1 where ``m`` is finite
    and NaN where it is not (``+inf``, both ``-inf``, a NaN), as the formula gives."""
    d = a - b
    e = torch.exp(-d.abs())
    m = torch.maximum(a, b)
    lead = torch.exp(m - m)
    ahead = d >= 0
    return torch.where(ahead, lead, e), torch.where(ahead, e, lead)


def wkv(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor,
    save: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """WKV recurrence in the stable (aa, bb, pp) form, one torch step per token.

    ``w = -exp(time_decay)`` and ``u = time_first``: ``(C,)``; ``k, v``: ``(B, T, C)`` float32
    or float64; ``state``: ``(B, 3, C)`` (aa, bb, pp) of that dtype. Returns ``y`` ``(B, T, C)``
    and the states ``(3, B, S, C)`` in the kernel's layout: with ``save`` (S = T + 1) the state
    before every step and after the last, else (S = 1) the final state only.
    """
    aa, bb, pp = state.unbind(1)
    ys, kept = [], []
    for t in range(k.shape[1]):
        kt, vt = k[:, t], v[:, t]
        if save:
            kept.append(torch.stack([aa, bb, pp]))
        e1, e2 = _scales(pp, u + kt)
        ys.append((e1 * aa + e2 * vt) / (e1 * bb + e2))
        ww = w + pp
        f1, f2 = _scales(ww, kt)
        aa, bb, pp = f1 * aa + f2 * vt, f1 * bb + f2, torch.maximum(ww, kt)
    kept.append(torch.stack([aa, bb, pp]))
    y = torch.stack(ys, 1) if ys else k.new_empty(k.shape)
    return y, torch.stack(kept, 2)


def wkv_backward(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor,
    gy: torch.Tensor,
    gstate: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``wkv`` given ``gy`` ``(B, T, C)`` and ``gstate`` ``(B, 3, C)`` (of ``y``
    and of the final state): ``(gw, gu)`` per chain ``(B, C)`` (not yet summed over B),
    ``gk, gv`` ``(B, T, C)`` and the initial state's ``(B, 3, C)``.

    Reverse mode through every step from the state before it (recomputed here), as autograd
    would, except through the max of the output's pair: the output is invariant to that common
    scale, so that gradient is exactly zero. A tie of the state's max splits its gradient in half,
    like ``torch.maximum``.
    """
    states = wkv(w, u, k, v, state, save=True)[1]
    ga, gb, gp = gstate.unbind(1)
    gw, gu = torch.zeros_like(ga), torch.zeros_like(ga)
    gk, gv = torch.empty_like(k), torch.empty_like(v)
    for t in reversed(range(k.shape[1])):
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
    return gw, gu, gk, gv, torch.stack([ga, gb, gp], 1)


def time_conv(w: torch.Tensor, k: torch.Tensor, eps: float) -> torch.Tensor:
    """Causal depthwise convolution ``out[b,c,t] = eps + sum_j w[c, L-1-j] * k[b,c,t-j]``.

    ``w``: ``(C, L)``, ``k``: ``(B, C, T)``, one dtype. Returns ``(B, C, T)``.
    """
    if k.numel() == 0:  # conv1d refuses an input shorter than the kernel (T = 0)
        return k.new_full(k.shape, eps)
    length = w.shape[-1]
    out = torch.nn.functional.conv1d(
        torch.nn.functional.pad(k, (length - 1, 0)), w.unsqueeze(1), groups=w.shape[0]
    )
    return out + eps if eps else out


def time_conv_backward(
    grad: torch.Tensor, w: torch.Tensor, k: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients ``(dw, dk)`` of ``time_conv`` for the output gradient ``grad`` ``(B, C, T)``.

    conv1d's own gradient formulas, called explicitly: this runs inside a custom op's
    implementation, where autograd is off.
    """
    if k.numel() == 0:
        return w.new_zeros(w.shape), k.new_zeros(k.shape)
    length, channels = w.shape[-1], w.shape[0]
    padded = torch.nn.functional.pad(k, (length - 1, 0))
    weight = w.unsqueeze(1)
    dk = torch.nn.grad.conv1d_input(padded.shape, weight, grad, groups=channels)
    dw = torch.nn.grad.conv1d_weight(padded, weight.shape, grad, groups=channels)
    return dw.squeeze(1), dk[..., length - 1 :]


# RWKV-7 (x070) WKV: the torch route of ops.wkv7, one batched step per token; the backward walks
# the same checkpoints as the kernels (recomputing the states inside each chunk), so its memory
# is bounded the same way.


def wkv7(
    r: torch.Tensor,
    d: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    state: torch.Tensor,
    chunk: int,
    save: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
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


def _wkv7_step(
    s: torch.Tensor,
    d: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
) -> torch.Tensor:
    sa = torch.einsum("bhij,bhj->bhi", s, a)
    return s * d[:, :, None, :] + sa[..., None] * b[:, :, None, :] + v[..., None] * k[:, :, None, :]


def wkv7_backward(
    r: torch.Tensor,
    d: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    states: torch.Tensor,
    gy: torch.Tensor,
    gstate: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, ...]:
    """Gradients of ``wkv7`` w.r.t. ``(r, d, k, v, a, b, state)`` given ``gy`` ``(B, T, H, N)``
    and ``gstate`` ``(B, H, N, N)`` (of ``y`` and of the final state).

    ``states``: ``wkv7``'s saved checkpoints (``save=True``). Chunks are walked from the last:
    the states inside one are recomputed from its checkpoint, then the step gradients run back
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
