"""The explicit torch route, for devices and processes the Taichi runtime cannot serve.

Used when ``_runtime.refusal`` names a reason: a DataLoader worker forked after Taichi started, a
CUDA tensor on a device other than cuda:0, a CUDA tensor while Taichi runs on the CPU. It builds
the same index map as the kernel with a handful of torch ops (slower, with full-size temporaries)
so results are identical; the caller warns once that it is in use.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

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
    """``(N, C, H, W)`` image -> ``(N, C, H', W')`` canvas; differentiable through torch ops."""
    g = geometry
    dev = image.device
    iy = torch.arange(g.out_h, device=dev) - g.top
    ix = torch.arange(g.out_w, device=dev) - g.left
    if mode == "texture":
        k, ct, th, tw = texture.shape
        flat = _tile_index(g, texture.shape, offset, stagger, dev).expand(g.n, ct, -1)
        bank = texture.reshape(k, ct, th * tw)[texture_index.to(device=dev, dtype=torch.long)]
        canvas = bank.gather(2, flat).reshape(g.n, ct, g.out_h, g.out_w)
        canvas = canvas.expand(g.n, g.c, g.out_h, g.out_w)
    elif mode == "constant":
        canvas = fill.reshape(1, g.c, 1, 1).expand(g.n, g.c, g.out_h, g.out_w)
    else:
        rows, cols = fold_index(iy, g.h, mode), fold_index(ix, g.w, mode)
        canvas = image.index_select(2, rows).index_select(3, cols)
    inside = ((iy >= 0) & (iy < g.h))[:, None] & ((ix >= 0) & (ix < g.w))[None, :]
    placed = torch.nn.functional.pad(image, (g.left, g.right, g.top, g.bottom))
    return torch.where(inside, placed, canvas.to(image.dtype))


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


# RWKV operators: the torch route, differentiable by autograd (the Taichi kernels have explicit
# backward kernels; this route serves refused devices and processes).


def wkv(
    w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """WKV recurrence in the stable (aa, bb, pp) form, one torch step per token.

    ``w = -exp(time_decay)`` and ``u = time_first``: ``(C,)``; ``k, v``: ``(B, T, C)`` float32
    or float64; ``state``: ``(B, 3, C)`` (aa, bb, pp) of that dtype. Returns ``y`` ``(B, T, C)``
    and the state after the last token.
    """
    aa, bb, pp = state.unbind(1)
    ys = []
    for t in range(k.shape[1]):
        kt, vt = k[:, t], v[:, t]
        ww = u + kt
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        ys.append((e1 * aa + e2 * vt) / (e1 * bb + e2))
        ww = w + pp
        p = torch.maximum(ww, kt)
        e1, e2 = torch.exp(ww - p), torch.exp(kt - p)
        aa, bb, pp = e1 * aa + e2 * vt, e1 * bb + e2, p
    y = torch.stack(ys, 1) if ys else k.new_empty(k.shape)
    return y, torch.stack([aa, bb, pp], 1)


def time_conv(w: torch.Tensor, k: torch.Tensor, eps: float) -> torch.Tensor:
    """Causal depthwise convolution ``out[b,c,t] = eps + sum_j w[c, L-1-j] * k[b,c,t-j]``.

    ``w``: ``(C, L)``, ``k``: ``(B, C, T)``, one dtype. Returns ``(B, C, T)``.
    """
    length = w.shape[-1]
    out = torch.nn.functional.conv1d(
        torch.nn.functional.pad(k, (length - 1, 0)), w.unsqueeze(1), groups=w.shape[0]
    )
    return out + eps if eps else out
