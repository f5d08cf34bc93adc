"""Independent reference for the padding engine, written from the spec (not from the package).

Every reference builds an *index map* with numpy: for each output element, the flat index of
the element it copies in ``concat(x.flatten(), extra.flatten())`` where ``extra`` is the texture
bank (texture mode) or the per-channel fill (constant mode). Gathering through that map gives

* bit-exact values for every dtype when gathered on integer bit views (``gather_bits``), and
* a differentiable float result when gathered with plain indexing (``gather_float``), which
  serves as the autograd reference.

Standard modes take their index maps from ``numpy.pad`` applied to an ``arange`` plane, so
``numpy.pad``'s semantics (repeated reflections and wraps for padding larger than the image)
are the definition. Texture mode follows the spec:

    y = Y - top - oy, x = X - left - ox, v = floor(y / th), ty = y - v * th,
    tx = (x - v * stagger) mod tw  ->  texture[k][:, ty, tx]
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as tvF

ALL_DTYPES = (
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
)
STANDARD_MODES = ("constant", "edge", "reflect", "symmetric", "circular")
NUMPY_MODES = {"edge": "edge", "reflect": "reflect", "symmetric": "symmetric", "circular": "wrap"}
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# --------------------------------------------------------------------------------------------
# small helpers


def sides(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """torchvision's padding forms -> (left, top, right, bottom)."""
    if isinstance(padding, int):
        return (padding,) * 4
    p = [int(v) for v in padding]
    if len(p) == 1:
        return (p[0],) * 4
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    assert len(p) == 4
    return (p[0], p[1], p[2], p[3])


def split_shape(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """(..., C, H, W) or (H, W) -> (N, C, H, W) with N the product of the leading dims."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 2:
        return 1, 1, shape[0], shape[1]
    return math.prod(shape[:-3]), shape[-3], shape[-2], shape[-1]


def out_shape(shape: Sequence[int], padding: int | Sequence[int]) -> tuple[int, ...]:
    left, top, right, bottom = sides(padding)
    return (*shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right)


def bits(t: torch.Tensor) -> torch.Tensor:
    """Same-size integer view of ``t`` (bool as uint8): equality of these is bit equality."""
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(_BITS[t.element_size()])


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert isinstance(actual, torch.Tensor)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    a, e = bits(actual.detach().cpu()), bits(expected.detach().cpu())
    if not torch.equal(a, e):
        bad = (a != e).nonzero()
        raise AssertionError(
            f"{bad.shape[0]} of {a.numel()} elements differ; first at {bad[0].tolist()}: "
            f"got {actual.detach().cpu()[tuple(bad[0])]!r}, "
            f"expected {expected.detach().cpu()[tuple(bad[0])]!r}"
        )


def random_image(
    shape: Sequence[int], dtype: torch.dtype = torch.float32, *, seed: int = 0
) -> torch.Tensor:
    """Fresh random values spanning the dtype (never constant), deterministic in ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape), generator=gen).bool()
    if dtype.is_floating_point:
        return (torch.randn(tuple(shape), generator=gen, dtype=torch.float64) * 3).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
    return torch.randint(lo, hi, tuple(shape), generator=gen, dtype=torch.int64).to(dtype)


def per_sample(value: Any, n: int, last: tuple[int, ...], lead: tuple[int, ...]) -> np.ndarray:
    """Offset / texture index argument -> numpy int64 array of shape (n, *last)."""
    if value is None:
        value = 0
    arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    arr = np.broadcast_to(arr.astype(np.int64), (*lead, *last))
    return arr.reshape(n, *last)


# --------------------------------------------------------------------------------------------
# index maps


def texture_bank(texture: torch.Tensor) -> torch.Tensor:
    """(th, tw) -> (1, 1, th, tw); (C, th, tw) -> (1, C, th, tw); (K, C, th, tw) unchanged."""
    while texture.dim() < 4:
        texture = texture.unsqueeze(0)
    return texture


def texture_map(
    x_shape: Sequence[int],
    padding: int | Sequence[int],
    bank_shape: Sequence[int],
    *,
    stagger: int = 0,
    offset: Any = (0, 0),
    texture_index: Any = None,
) -> np.ndarray:
    """Index map of texture mode into ``concat(x.flatten(), bank.flatten())``, (N, C, H', W')."""
    n, c, h, w = split_shape(x_shape)
    lead = tuple(int(s) for s in x_shape[:-3])
    left, top, right, bottom = sides(padding)
    _, ct, th, tw = (int(s) for s in bank_shape)
    offsets = per_sample(offset, n, (2,), lead)
    indices = per_sample(texture_index, n, (), lead)
    x_size = n * c * h * w
    big_y = np.arange(h + top + bottom, dtype=np.int64)[:, None]
    big_x = np.arange(w + left + right, dtype=np.int64)[None, :]
    iy, ix = big_y - top, big_x - left
    inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
    result = np.empty((n, c, h + top + bottom, w + left + right), dtype=np.int64)
    for b in range(n):
        oy, ox = int(offsets[b, 0]), int(offsets[b, 1])
        k = int(indices[b])
        y = big_y - top - oy
        x = big_x - left - ox
        v = np.floor_divide(y, th)
        ty = y - v * th
        tx = np.mod(x - v * stagger, tw)  # numpy's mod of an int follows the divisor's sign
        for ch in range(c):
            tch = ch if ct == c else 0  # a one-channel texture serves every channel
            from_tex = x_size + ((k * ct + tch) * th + ty) * tw + tx
            from_img = ((b * c + ch) * h + np.clip(iy, 0, max(h - 1, 0))) * w + np.clip(
                ix, 0, max(w - 1, 0)
            )
            result[b, ch] = np.where(inside, from_img, from_tex)
    return result


def mode_map(x_shape: Sequence[int], padding: int | Sequence[int], mode: str) -> np.ndarray:
    """Index map of a standard mode into ``concat(x.flatten(), fill)`` via ``numpy.pad``."""
    mode = {"replicate": "edge", "wrap": "circular"}.get(mode, mode)
    n, c, h, w = split_shape(x_shape)
    left, top, right, bottom = sides(padding)
    plane = np.arange(h * w, dtype=np.int64).reshape(h, w)
    widths = ((top, bottom), (left, right))
    if mode == "constant":
        padded = np.pad(plane, widths, mode="constant", constant_values=-1)
    else:
        padded = np.pad(plane, widths, mode=NUMPY_MODES[mode])
    result = np.empty((n, c, *padded.shape), dtype=np.int64)
    for b in range(n):
        for ch in range(c):
            base = (b * c + ch) * h * w
            result[b, ch] = np.where(padded < 0, n * c * h * w + ch, base + padded)
    return result


# --------------------------------------------------------------------------------------------
# gathers


def gather_bits(
    x: torch.Tensor, extra: torch.Tensor, index: np.ndarray, shape: Sequence[int]
) -> torch.Tensor:
    """Bit-exact gather (NaN payloads and -0.0 survive) for every dtype."""
    src = torch.cat([bits(x.detach().cpu()).reshape(-1), bits(extra.detach().cpu()).reshape(-1)])
    out = src[torch.from_numpy(index.reshape(-1))].reshape(tuple(shape))
    return out.view(torch.bool) if x.dtype == torch.bool else out.view(x.dtype)


def gather_float(
    x: torch.Tensor, extra: torch.Tensor, index: np.ndarray, shape: Sequence[int]
) -> torch.Tensor:
    """Differentiable gather (float dtypes): the autograd reference."""
    src = torch.cat([x.reshape(-1), extra.reshape(-1).to(x.dtype)])
    return src[torch.from_numpy(index.reshape(-1)).to(x.device)].reshape(tuple(shape))


# --------------------------------------------------------------------------------------------
# public references


def convert_texture(texture: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The documented conversion of a texture to the image's dtype.

    bool <-> anything: exact 0/1. float -> float: a cast. float [0, 1] -> integer: torchvision's
    ``v * (max + 1 - 1e-3)`` truncated, computed in float32 for half textures and in float64
    for int32/int64 images (with 1.0 -> max). integer -> float: ``v * (1 / max)`` (in float32 for a
    half-precision image, then rounded). integer -> integer: torchvision's bit shifts.
    """
    if texture.dtype == dtype:
        return texture
    if dtype == torch.bool or texture.dtype == torch.bool:
        return texture.to(dtype)
    if texture.is_floating_point() and dtype.is_floating_point:
        return texture.to(dtype)
    if texture.is_floating_point():
        top = torch.iinfo(dtype).max
        if dtype in (torch.int32, torch.int64):
            scaled = (texture.double() * (top + 1.0 - 1e-3)).floor()
            wide = scaled >= float(top)
            return scaled.masked_fill(wide, 0).to(dtype).masked_fill(wide, top)
        work = texture.float() if texture.dtype in (torch.float16, torch.bfloat16) else texture
        return (work * (top + 1.0 - 1e-3)).to(dtype)
    if dtype.is_floating_point:
        work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        return (texture.to(work) * (1.0 / torch.iinfo(texture.dtype).max)).to(dtype)
    return tvF.to_dtype(texture, dtype, scale=True)


def texture_pad_ref(
    x: torch.Tensor,
    padding: int | Sequence[int],
    texture: torch.Tensor,
    *,
    stagger: int = 0,
    offset: Any = (0, 0),
    texture_index: Any = None,
    differentiable: bool = False,
) -> torch.Tensor:
    bank = convert_texture(texture_bank(texture), x.dtype)
    index = texture_map(
        x.shape, padding, bank.shape, stagger=stagger, offset=offset, texture_index=texture_index
    )
    shape = out_shape(x.shape, padding)
    if differentiable:
        return gather_float(x, bank, index, shape)
    return gather_bits(x, bank, index, shape)


def fill_values(fill: Any, channels: int, dtype: torch.dtype) -> torch.Tensor:
    """Per-channel fill in ``dtype``, converted as torchvision converts it: one number once
    (an int into an integer dtype exactly, else through a Python float), a sequence through
    ``torch.tensor(fill).to(dtype)`` (its default dtype first), a tensor by ``.to(dtype)``."""
    if isinstance(fill, torch.Tensor):
        values = fill.reshape(-1).to(dtype)
    elif isinstance(fill, Sequence) and len(fill) > 1:
        values = torch.tensor(list(fill)).to(dtype)
    else:
        v = fill[0] if isinstance(fill, Sequence) else fill
        exact = isinstance(v, int) and not isinstance(v, bool) and not dtype.is_floating_point
        exact = exact and dtype != torch.bool
        values = torch.tensor(
            [v] if exact else [float(v)], dtype=torch.float64 if not exact else None
        )
        values = values.to(dtype)
    return values.expand(channels) if values.numel() == 1 else values


def pad_ref(
    x: torch.Tensor,
    padding: int | Sequence[int],
    mode: str = "constant",
    fill: Any = 0,
    *,
    differentiable: bool = False,
) -> torch.Tensor:
    _, c, _, _ = split_shape(x.shape)
    extra = fill_values(fill, c, x.dtype)
    index = mode_map(x.shape, padding, mode)
    shape = out_shape(x.shape, padding)
    if differentiable:
        return gather_float(x, extra, index, shape)
    return gather_bits(x, extra, index, shape)


def numpy_pad(
    x: torch.Tensor, padding: int | Sequence[int], mode: str, fill: Any = 0
) -> torch.Tensor:
    """``numpy.pad`` on the values themselves (a second, map-free check for numeric dtypes)."""
    mode = {"replicate": "edge", "wrap": "circular"}.get(mode, mode)
    left, top, right, bottom = sides(padding)
    arr = x.detach().cpu().numpy()
    widths = [(0, 0)] * (arr.ndim - 2) + [(top, bottom), (left, right)]
    if mode != "constant":
        return torch.from_numpy(np.pad(arr, widths, mode=NUMPY_MODES[mode]).copy())
    fills = np.broadcast_to(np.asarray(fill, dtype=arr.dtype), (arr.shape[-3],))
    planes = [
        np.pad(arr[..., ch, :, :], widths[:-3] + widths[-2:], constant_values=fills[ch])
        for ch in range(arr.shape[-3])
    ]
    return torch.from_numpy(np.stack(planes, axis=-3).copy())


def run_child(script: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (dedented) in a fresh interpreter; fail the test if it hangs."""
    try:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"child process hung (killed after {timeout} s): {exc.stderr!r}")
