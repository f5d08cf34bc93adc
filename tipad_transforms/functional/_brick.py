"""Procedural brick texture: one row of bricks with mortar, a shade per brick."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["make_brick_texture", "running_bond_stagger"]


def make_brick_texture(
    *,
    brick_size: tuple[int, int] = (20, 44),
    mortar: int = 3,
    bricks_per_tile: int = 5,
    brick_color: Sequence[float] = (0.60, 0.24, 0.16),
    mortar_color: Sequence[float] = (0.80, 0.78, 0.74),
    shade_variation: float = 0.12,
    noise: float = 0.03,
    channels: int = 3,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """A ``(channels, brick_h + mortar, bricks_per_tile * (brick_w + mortar))`` brick-row tile.

    Mortar runs along the top and left of each brick. Tiled by ``texture_pad`` with a stagger of
    ``running_bond_stagger(...)`` (half a brick) it draws a running-bond wall. Values in [0, 1].
    """
    bh, bw = brick_size
    th, pitch = bh + mortar, bw + mortar
    gen = torch.Generator().manual_seed(seed)
    shade = 1.0 + shade_variation * (2 * torch.rand(bricks_per_tile, generator=gen) - 1)
    brick = torch.tensor(list(brick_color), dtype=torch.float64)[:, None, None]
    mortar_c = torch.tensor(list(mortar_color), dtype=torch.float64)[:, None, None]
    tile = brick.repeat(1, th, pitch * bricks_per_tile)
    tile = tile * shade.double().repeat_interleave(pitch)[None, None, :]
    is_mortar = torch.zeros(th, pitch * bricks_per_tile, dtype=torch.bool)
    is_mortar[:mortar, :] = True
    for i in range(bricks_per_tile):
        is_mortar[:, i * pitch : i * pitch + mortar] = True
    tile = torch.where(is_mortar, mortar_c, tile)
    tile = tile + noise * torch.randn(tile.shape, generator=gen, dtype=torch.float64)
    tile = tile.clamp(0, 1)
    if channels == 1:
        tile = (0.299 * tile[0] + 0.587 * tile[1] + 0.114 * tile[2])[None]
    return tile.to(dtype=dtype, device=device)


def running_bond_stagger(
    *, brick_size: tuple[int, int] = (20, 44), mortar: int = 3, **_: object
) -> int:
    """Half a brick pitch: the stagger that makes ``make_brick_texture``'s tile a running bond."""
    return (brick_size[1] + mortar) // 2
