"""The explicit torch route, for devices and processes the Taichi runtime cannot serve.

Used when ``_runtime.refusal`` names a reason: a DataLoader worker forked after Taichi started, a
CUDA tensor on a device other than cuda:0, a CUDA tensor while Taichi runs on the CPU. It builds
the same index map as the kernel with a handful of torch ops (slower, with full-size temporaries)
so results are identical; the caller warns once that it is in use.
"""

from __future__ import annotations

import torch

from ._geometry import PadGeometry


def _fold(i: torch.Tensor, n: int, mode: str) -> torch.Tensor:
    if mode == "edge":
        return i.clamp(0, n - 1)
    if mode == "reflect":
        if n == 1:
            return torch.zeros_like(i)
        r = i.remainder(2 * n - 2)
        return torch.where(r >= n, 2 * n - 2 - r, r)
    if mode == "symmetric":
        r = i.remainder(2 * n)
        return torch.where(r >= n, 2 * n - 1 - r, r)
    return i.remainder(n)  # circular


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
        off = offset.to(device=dev, dtype=torch.long)
        y = iy[None, :] - off[:, :1]  # (N, H')
        v = torch.div(y, th, rounding_mode="floor")
        ty = y - v * th
        tx = (ix[None, None, :] - off[:, 1, None, None] - v[:, :, None] * stagger).remainder(tw)
        flat = (ty[:, :, None] * tw + tx).reshape(g.n, 1, -1).expand(g.n, ct, -1)
        bank = texture.reshape(k, ct, th * tw)[texture_index.to(device=dev, dtype=torch.long)]
        canvas = bank.gather(2, flat).reshape(g.n, ct, g.out_h, g.out_w)
        canvas = canvas.expand(g.n, g.c, g.out_h, g.out_w)
    elif mode == "constant":
        canvas = fill.reshape(1, g.c, 1, 1).expand(g.n, g.c, g.out_h, g.out_w)
    else:
        rows, cols = _fold(iy, g.h, mode), _fold(ix, g.w, mode)
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
    """Gradients of ``pad`` w.r.t. the image and the texture, by autograd through ``pad``."""
    g = geometry
    with torch.enable_grad():
        image = grad.new_zeros(g.n, g.c, g.h, g.w, dtype=image_dtype).requires_grad_()
        tex = texture.detach().to(image_dtype).requires_grad_()
        fill = grad.new_zeros(g.c, dtype=image_dtype)
        out = pad(
            g,
            mode,
            image,
            texture=tex,
            fill=fill,
            offset=offset,
            texture_index=texture_index,
            stagger=stagger,
        )
        grads = torch.autograd.grad(out, (image, tex), grad.to(image_dtype), allow_unused=True)
    grad_image = grads[0] if grads[0] is not None else torch.zeros_like(image)
    grad_tex = grads[1] if grads[1] is not None else torch.zeros_like(tex)
    return grad_image.detach(), grad_tex.detach()
