"""The data stage's one parameter sampler (a batch's canvas, placements and lattice offsets),
shared by ``PadCollate`` (draws from its generator) and ``RayPadBatch`` (draws from a hash of
its seed and each row's key, so a row's draws do not depend on the process that pads it)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .._checks import INT32_MAX, is_int
from .._seeding import uniform

PLACEMENTS = ("top_left", "center", "random")

#: ``draw(slot, high)``: uniform int64 draws in ``[0, high)`` (one per element, ``high``'s
#: shape, on the CPU) for the sampler's ``slot``-th parameter: 0 placements, 1 lattice offsets.
Draw = Callable[[int, torch.Tensor], torch.Tensor]


def generator_draw(generator: torch.Generator | None) -> Draw:
    """Draws from ``generator`` (torch's global RNG for None; per worker: ``_seeding``)."""
    return lambda slot, high: uniform(generator, high).cpu()


def keyed_draw(seed: int, keys: Sequence[str]) -> Draw:
    """Draws from a hash of ``seed`` and each row's key: two 62-bit words per row per slot."""
    words = []
    for key in keys:
        digest = hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=32).digest()
        words.append([int.from_bytes(digest[i : i + 8], "little") >> 2 for i in range(0, 32, 8)])
    table = torch.tensor(words, dtype=torch.int64).reshape(-1, 4)
    return lambda slot, high: table[:, 2 * slot : 2 * slot + 2] % high


def is_int_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is an integer torch dtype (bool is not one)."""
    return isinstance(dtype, torch.dtype) and not (
        dtype == torch.bool or dtype.is_floating_point or dtype.is_complex
    )


def check_pair(value: Any, name: str, *, minimum: int = 0, square: bool = False) -> tuple[int, int]:
    """A pair of ints ``(h, w)`` (with ``square``, an int ``s`` is ``(s, s)``), each in
    ``[minimum, 2**31 - 1]``; TypeError / ValueError naming ``name`` otherwise."""
    if type(value) is tuple and len(value) == 2:  # the common form, checked in a few steps
        h, w = value
        if type(h) is int and type(w) is int and minimum <= min(h, w) and max(h, w) <= INT32_MAX:
            return h, w
    pair = [value, value] if square and is_int(value) else value
    if (
        isinstance(pair, (str, bytes))
        or not isinstance(pair, Sequence)
        or len(pair) != 2
        or not all(is_int(v) for v in pair)
    ):
        what = "an int or a pair of ints (H, W)" if square else "a pair of ints (h, w)"
        raise TypeError(f"{name} must be {what}, got {value!r}")
    if min(pair) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    if max(pair) > INT32_MAX:
        raise ValueError(f"{name} must be at most {INT32_MAX} pixels per side, got {value!r}")
    return int(pair[0]), int(pair[1])


def _sizes(sizes: Any) -> list[tuple[int, int]]:
    if isinstance(sizes, (str, bytes, torch.Tensor)) or not isinstance(sizes, Sequence):
        raise TypeError(f"sizes must be a sequence of (h, w) pairs, got {type(sizes).__name__}")
    if len(sizes) == 0:
        raise ValueError("got an empty batch: sizes must hold at least one (h, w)")
    return [check_pair(size, f"sizes[{i}]") for i, size in enumerate(sizes)]


class CanvasSampler:
    """Where each image of a batch goes on one canvas, drawn for the whole batch at once
    (Kornia's parameter generators).

    ``size``, ``multiple`` and ``placement`` are ``PadCollate``'s (TypeError / ValueError naming
    them); ``tile``: ``(th, tw)`` draws a lattice offset in ``[0, th) x [0, tw)`` per image,
    None gives offsets ``(0, 0)``.
    """

    def __init__(
        self,
        size: Any = None,
        multiple: Any = None,
        placement: str = "center",
        tile: tuple[int, int] | None = None,
    ) -> None:
        self.size = None if size is None else check_pair(size, "size", minimum=1, square=True)
        self.multiple = (
            None if multiple is None else check_pair(multiple, "multiple", minimum=1, square=True)
        )
        if size is not None and multiple is not None:
            raise ValueError(
                f"give size or multiple, not both: got size={size!r}, multiple={multiple!r}"
            )
        if not isinstance(placement, str) or placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        self.placement = placement
        self.tile = tile

    @property
    def random(self) -> bool:
        """Whether a batch's parameters are drawn (a random placement or lattice offset)."""
        return self.placement == "random" or self.tile is not None

    def canvas_size(self, sizes: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """The canvas ``(H, W)`` for images of ``sizes`` ``[(h, w), ...]``; ValueError naming the
        first image larger than a fixed ``size``, TypeError / ValueError naming ``sizes``."""
        sizes = _sizes(sizes)
        if self.size is not None:
            for i, (h, w) in enumerate(sizes):
                if h > self.size[0] or w > self.size[1]:
                    raise ValueError(
                        f"samples[{i}]: the image is {h}x{w}, larger than size={self.size}"
                    )
            return self.size
        out_h = max(h for h, _ in sizes)
        out_w = max(w for _, w in sizes)
        if self.multiple is not None:
            out_h = -(-out_h // self.multiple[0]) * self.multiple[0]
            out_w = -(-out_w // self.multiple[1]) * self.multiple[1]
        return out_h, out_w

    def sample(self, sizes: Sequence[tuple[int, int]], draw: Draw) -> dict[str, Any]:
        """One batch's parameters for images of ``sizes`` ``[(h, w), ...]``: ``{"size": (H, W),
        "placement": int64 (B, 2) (top, left), "offset": int64 (B, 2) (oy, ox)}`` on the CPU.
        ``draw`` is asked for the placements (``"random"``), then the lattice offsets."""
        out_h, out_w = self.canvas_size(sizes)
        slack = torch.tensor([(out_h - h, out_w - w) for h, w in sizes], dtype=torch.int64)
        if self.placement == "random":
            placement = draw(0, slack + 1)
        else:
            placement = slack // 2 if self.placement == "center" else torch.zeros_like(slack)
        if self.tile is None:
            offset = torch.zeros_like(slack)
        else:
            offset = draw(1, torch.tensor(self.tile).expand(len(slack), 2))
        return {"size": (out_h, out_w), "placement": placement, "offset": offset}


def check_params(params: Any, n: int) -> tuple[tuple[int, int], torch.Tensor, torch.Tensor]:
    """``sample``'s dict for ``n`` images (stored, or built by hand) as ``(size, placement,
    offset)``, the tensors int64 on the CPU; ValueError naming ``params`` otherwise."""
    if not isinstance(params, dict) or not {"size", "placement", "offset"} <= set(params):
        raise ValueError("params must be make_params's dict of 'size', 'placement', 'offset'")
    size = check_pair(params["size"], "params['size']", minimum=1, square=True)
    out = []
    for name in ("placement", "offset"):
        value = params[name]
        if (
            not isinstance(value, torch.Tensor)
            or value.shape != (n, 2)
            or not is_int_dtype(value.dtype)
        ):
            got = (
                f"{value.dtype} {tuple(value.shape)}"
                if isinstance(value, torch.Tensor)
                else type(value).__name__
            )
            raise ValueError(f"params[{name!r}] must be an int tensor of shape ({n}, 2), got {got}")
        out.append(value.to("cpu", torch.int64))
    return size, out[0], out[1]
