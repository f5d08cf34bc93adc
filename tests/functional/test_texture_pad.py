"""texture_pad / brick_pad: the texture mapping spec, leading dims, per-sample params, out=."""

from __future__ import annotations

import numpy as np
import PIL.Image
import pytest
import torch
from reference import (
    assert_bitwise_equal,
    bits,
    random_image,
    texture_pad_ref,
)
from torchvision import tv_tensors

import tipad_transforms.functional as F

# A texture whose values name their own position: 10 * ty + tx.
TEX_2X3 = torch.tensor([[[0.0, 1, 2], [10, 11, 12]]])


def _grid(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)[None]


# ---------------------------------------------------------------------------------------------
# the spec, by hand


def test_zero_offset_puts_texture_origin_on_image_top_left() -> None:
    x = torch.tensor([[[100.0, 101], [102, 103]]])
    got = F.texture_pad(x, 2, TEX_2X3)
    # y = Y - 2, x = X - 2, ty = y mod 2, tx = x mod 3: texture (0, 0) sits under image (0, 0)
    # and the lattice continues through the image to the border.
    expected = _grid(
        [
            [1, 2, 0, 1, 2, 0],
            [11, 12, 10, 11, 12, 10],
            [1, 2, 100, 101, 2, 0],
            [11, 12, 102, 103, 12, 10],
            [1, 2, 0, 1, 2, 0],
            [11, 12, 10, 11, 12, 10],
        ]
    )
    assert_bitwise_equal(got, expected)


def test_stagger_shifts_each_tile_row_and_rows_above_use_floor() -> None:
    x = torch.tensor([[[99.0]]])
    got = F.texture_pad(x, (1, 3, 2, 1), TEX_2X3, stagger=1)
    # Rows above the image: y = -3 -> v = -2 (floor), ty = 1, tx = (x + 2) mod 3;
    # y = -2, -1 -> v = -1, tx = (x + 1) mod 3; y = 0, 1 -> v = 0, tx = x mod 3.
    expected = _grid(
        [
            [11, 12, 10, 11],
            [0, 1, 2, 0],
            [10, 11, 12, 10],
            [2, 99, 1, 2],
            [12, 10, 11, 12],
        ]
    )
    assert_bitwise_equal(got, expected)


def test_negative_offset() -> None:
    x = torch.tensor([[[99.0]]])
    got = F.texture_pad(x, 1, TEX_2X3, offset=(-1, -2))
    # y = Y - 1 + 1 = Y, x = X - 1 + 2 = X + 1.
    expected = _grid([[1, 2, 0], [11, 99, 10], [1, 2, 0]])
    assert_bitwise_equal(got, expected)


def test_positive_offset_moves_pattern_down_right() -> None:
    x = random_image((1, 3, 3), seed=1)
    tex = random_image((1, 4, 5), seed=2)
    base = F.texture_pad(x, 9, tex)
    moved = F.texture_pad(x, 9, tex, offset=(2, 3))
    # Border pixels whose shifted source is also a border pixel: moved[Y, X] == base[Y-2, X-3].
    for yy in range(2, base.shape[-2]):
        for xx in range(3, base.shape[-1]):
            inside_now = 9 <= yy < 12 and 9 <= xx < 12
            inside_src = 9 <= yy - 2 < 12 and 9 <= xx - 3 < 12
            if not inside_now and not inside_src:
                assert moved[0, yy, xx] == base[0, yy - 2, xx - 3]


@pytest.mark.parametrize("stagger", [-7, -3, -1, 4, 5, 11, 2**31 + 5])
def test_stagger_acts_modulo_tile_width(stagger: int) -> None:
    x = random_image((2, 3, 4), seed=3)
    tex = random_image((2, 3, 4), seed=4)  # tw = 4
    got = F.texture_pad(x, (5, 7, 6, 8), tex, stagger=stagger)
    assert_bitwise_equal(got, F.texture_pad(x, (5, 7, 6, 8), tex, stagger=stagger % 4))
    assert_bitwise_equal(got, texture_pad_ref(x, (5, 7, 6, 8), tex, stagger=stagger))


def test_large_offsets_are_exact() -> None:
    x = random_image((1, 2, 3), seed=5)
    tex = random_image((1, 3, 5), seed=6)
    for offset in [(2**31 - 1, 5), (-(2**31), -(2**31)), (2**40 + 7, -(2**35) - 1)]:
        got = F.texture_pad(x, 6, tex, stagger=2, offset=offset)
        assert_bitwise_equal(got, texture_pad_ref(x, 6, tex, stagger=2, offset=offset))


def test_one_channel_texture_broadcasts_to_every_channel() -> None:
    x = random_image((3, 4, 5), seed=7)
    tile = random_image((3, 2), seed=8)
    expanded = tile.expand(3, 3, 2)
    want = F.texture_pad(x, (4, 3, 2, 5), expanded, stagger=1)
    assert_bitwise_equal(F.texture_pad(x, (4, 3, 2, 5), tile, stagger=1), want)
    assert_bitwise_equal(F.texture_pad(x, (4, 3, 2, 5), tile[None], stagger=1), want)
    # And every channel's border is the same texture.
    border = want[:, :3]
    assert torch.equal(border[0], border[1]) and torch.equal(border[1], border[2])


def test_channel_c_reads_texture_channel_c() -> None:
    x = torch.zeros(3, 1, 1)
    tex = torch.stack([torch.full((2, 2), float(c + 1)) for c in range(3)])
    got = F.texture_pad(x, 1, tex)
    for c in range(3):
        border = torch.ones(3, 3, dtype=torch.bool)
        border[1, 1] = False
        assert bool((got[c][border] == c + 1).all())
        assert got[c, 1, 1] == 0


@pytest.mark.parametrize(
    "shape", [(5, 6), (1, 5, 6), (3, 5, 6), (2, 3, 5, 6), (2, 2, 3, 5, 6), (1, 1, 1, 2, 5, 6)]
)
def test_leading_dims(shape: tuple[int, ...]) -> None:
    x = random_image(shape, seed=9)
    c = shape[-3] if len(shape) >= 3 else 1
    tex = random_image((c, 3, 4), seed=10)
    got = F.texture_pad(x, (2, 1, 3, 4), tex, stagger=3, offset=(-1, 2))
    assert got.shape == (*shape[:-2], shape[-2] + 5, shape[-1] + 5)
    assert_bitwise_equal(got, texture_pad_ref(x, (2, 1, 3, 4), tex, stagger=3, offset=(-1, 2)))


def test_per_sample_offsets_and_bank_match_a_loop() -> None:
    b = 4
    x = random_image((b, 3, 4, 5), seed=11)
    bank = random_image((3, 3, 3, 4), seed=12)
    offset = torch.tensor([[0, 0], [1, -2], [-5, 7], [3, 3]])
    index = torch.tensor([2, 0, 1, 2])
    got = F.texture_pad(x, (3, 2, 4, 5), bank, stagger=2, offset=offset, texture_index=index)
    for i in range(b):
        one = F.texture_pad(
            x[i], (3, 2, 4, 5), bank[index[i]], stagger=2, offset=tuple(offset[i].tolist())
        )
        assert_bitwise_equal(got[i], one)
    assert_bitwise_equal(
        got,
        texture_pad_ref(x, (3, 2, 4, 5), bank, stagger=2, offset=offset, texture_index=index),
    )
    # Non-contiguous per-sample tensors read the same values.
    offset_t = offset.t().contiguous().t()
    index_s = torch.stack([index, index], dim=1)[:, 0]
    assert not offset_t.is_contiguous() and not index_s.is_contiguous()
    assert_bitwise_equal(
        F.texture_pad(x, (3, 2, 4, 5), bank, stagger=2, offset=offset_t, texture_index=index_s),
        got,
    )
    # The samples really differ (each used its own parameters).
    assert not torch.equal(got[0, :, :2], got[1, :, :2])


def test_per_sample_params_broadcast_over_video_frames() -> None:
    x = random_image((2, 3, 1, 4, 4), seed=13)  # (B, T, C, H, W)
    bank = random_image((2, 1, 2, 3), seed=14)
    offset = torch.tensor([[[1, 2]], [[-3, 0]]])  # (B, 1, 2) -> (B, T, 2)
    index = torch.tensor([[1], [0]])  # (B, 1) -> (B, T)
    got = F.texture_pad(x, 3, bank, stagger=1, offset=offset, texture_index=index)
    for bi in range(2):
        for t in range(3):
            one = F.texture_pad(
                x[bi, t], 3, bank[index[bi, 0]], stagger=1, offset=tuple(offset[bi, 0].tolist())
            )
            assert_bitwise_equal(got[bi, t], one)


def test_int_texture_index_picks_bank_entry() -> None:
    x = random_image((2, 3, 3, 3), seed=15)
    bank = random_image((3, 3, 2, 2), seed=16)
    assert_bitwise_equal(F.texture_pad(x, 2, bank, texture_index=1), F.texture_pad(x, 2, bank[1]))
    assert not torch.equal(F.texture_pad(x, 2, bank, texture_index=1), F.texture_pad(x, 2, bank))


# ---------------------------------------------------------------------------------------------
# out=, inputs, layouts


def _poisoned(shape: tuple[int, ...], dtype: torch.dtype, word: int) -> torch.Tensor:
    """A tensor whose every element has the bit pattern ``word`` (a NaN payload for floats)."""
    t = torch.empty(shape, dtype=dtype)
    bits(t).fill_(word)  # bits() of a contiguous tensor is a view of it
    return t


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.int64, torch.bfloat16])
def test_out_is_fully_written_and_returned(dtype: torch.dtype) -> None:
    x = random_image((2, 3, 5, 7), dtype, seed=17)
    tex = random_image((3, 3, 4), dtype, seed=18)
    want = texture_pad_ref(x, (3, 2, 4, 1), tex, stagger=2, offset=(1, -1))
    size = torch.empty(0, dtype=dtype).element_size()
    # Two different poisons: an element the kernel skipped would keep one of them.
    for word in (0x7F, 0xA5) if size == 1 else (0x7FC1 if size == 2 else 0x7FC0DEAD, -3):
        out = _poisoned(tuple(want.shape), dtype, word)
        got = F.texture_pad(x, (3, 2, 4, 1), tex, stagger=2, offset=(1, -1), out=out)
        assert got is out
        assert_bitwise_equal(out, want)


def test_out_with_storage_offset() -> None:
    x = random_image((3, 4, 13), torch.uint8, seed=19)
    tex = random_image((3, 3, 5), torch.uint8, seed=20)
    storage = torch.full((1 + 3 * 7 * 17,), 0xAB, dtype=torch.uint8)
    out = storage[1:].view(3, 7, 17)  # contiguous, but not 8-byte aligned
    F.texture_pad(x, (3, 1, 1, 2), tex, stagger=1, out=out)
    assert_bitwise_equal(out, texture_pad_ref(x, (3, 1, 1, 2), tex, stagger=1))
    assert storage[0] == 0xAB


def test_inputs_are_not_modified() -> None:
    x = random_image((2, 3, 4, 5), seed=21)
    bank = random_image((2, 3, 3, 2), seed=22)
    offset = torch.tensor([[1, 2], [-3, 4]])
    index = torch.tensor([1, 0])
    saved = [t.clone() for t in (x, bank, offset, index)]
    out = torch.full((2, 3, 8, 9), float("nan"))
    F.texture_pad(x, 2, bank, stagger=1, offset=offset, texture_index=index)
    F.texture_pad(x, 2, bank, stagger=1, offset=offset, texture_index=index, out=out)
    for before, after in zip(saved, (x, bank, offset, index), strict=True):
        assert_bitwise_equal(after, before)


def test_input_layouts_give_the_same_result() -> None:
    x = random_image((2, 3, 6, 8), seed=23)
    tex = random_image((3, 4, 5), seed=24)
    want = F.texture_pad(x, (2, 3, 4, 1), tex, stagger=2, offset=(1, 1))
    assert_bitwise_equal(want, texture_pad_ref(x, (2, 3, 4, 1), tex, stagger=2, offset=(1, 1)))
    variants = [
        x.to(memory_format=torch.channels_last),
        x.transpose(-1, -2).contiguous().transpose(-1, -2),
    ]
    for v in variants:
        assert not v.is_contiguous()
        assert_bitwise_equal(F.texture_pad(v, (2, 3, 4, 1), tex, stagger=2, offset=(1, 1)), want)
    # A genuinely strided view: every other column of a wider image.
    wide = torch.stack([x, -x], dim=-1).flatten(-2)
    strided = wide[..., ::2]
    assert not strided.is_contiguous()
    assert_bitwise_equal(F.texture_pad(strided, (2, 3, 4, 1), tex, stagger=2, offset=(1, 1)), want)
    tex_t = tex.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert not tex_t.is_contiguous()
    assert_bitwise_equal(F.texture_pad(x, (2, 3, 4, 1), tex_t, stagger=2, offset=(1, 1)), want)


def test_storage_offset_input() -> None:
    storage = random_image((1 + 3 * 5 * 11,), torch.uint8, seed=25)
    x = storage[1:].view(3, 5, 11)
    tex = random_image((3, 2, 7), torch.uint8, seed=26)
    got = F.texture_pad(x, (5, 2, 3, 1), tex, stagger=3)
    assert_bitwise_equal(got, texture_pad_ref(x, (5, 2, 3, 1), tex, stagger=3))


# ---------------------------------------------------------------------------------------------
# types in, types out; brick_pad


def test_tv_tensors_are_rewrapped() -> None:
    img = tv_tensors.Image(random_image((3, 4, 5), seed=27))
    tex = random_image((3, 2, 2), seed=28)
    got = F.texture_pad(img, 1, tex)
    assert type(got) is tv_tensors.Image
    assert_bitwise_equal(got.as_subclass(torch.Tensor), texture_pad_ref(img, 1, tex))
    video = tv_tensors.Video(random_image((2, 3, 4, 5), seed=29))
    assert type(F.texture_pad(video, 1, tex)) is tv_tensors.Video


def test_pil_image_round_trip() -> None:
    arr = random_image((6, 5, 3), torch.uint8, seed=30)
    img = PIL.Image.fromarray(arr.numpy(), mode="RGB")
    tex = random_image((3, 2, 3), torch.uint8, seed=31)
    got = F.texture_pad(img, (1, 2, 3, 4), tex, stagger=1)
    assert isinstance(got, PIL.Image.Image) and got.mode == "RGB"
    want = texture_pad_ref(arr.permute(2, 0, 1), (1, 2, 3, 4), tex, stagger=1)
    assert torch.equal(torch.from_numpy(np.array(got)).permute(2, 0, 1), want)


def test_brick_pad_is_texture_pad_with_the_brick_tile() -> None:
    x = random_image((2, 3, 9, 7), torch.uint8, seed=32)
    opts = {"brick_size": (4, 6), "mortar": 1, "bricks_per_tile": 3, "seed": 5}
    tile = F.make_brick_texture(channels=3, **opts)
    stagger = F.running_bond_stagger(**opts)
    got = F.brick_pad(x, (5, 6, 7, 8), offset=(2, -3), **opts)
    assert_bitwise_equal(
        got, texture_pad_ref(x, (5, 6, 7, 8), tile, stagger=stagger, offset=(2, -3))
    )
    got = F.brick_pad(x, 4, stagger=3, **opts)
    assert_bitwise_equal(got, texture_pad_ref(x, 4, tile, stagger=3))


def test_out_with_grad_inputs_is_fine_under_no_grad() -> None:
    x = random_image((3, 4, 5), seed=33).requires_grad_()
    tex = random_image((3, 2, 2), seed=34).requires_grad_()
    out = torch.full((3, 6, 7), float("nan"))
    with torch.no_grad():
        assert F.texture_pad(x, 1, tex, out=out) is out
    assert_bitwise_equal(out, texture_pad_ref(x, 1, tex))
    assert not out.requires_grad


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float32])
def test_texture_changed_in_place_between_calls_is_seen(dtype: torch.dtype) -> None:
    # Large border relative to the texture, so the runtime builds (and caches) its word table:
    # an in-place edit of the texture must invalidate it.
    x = random_image((4, 3, 16, 16), dtype, seed=31)
    tex = random_image((3, 3, 5), dtype, seed=32)
    first = F.texture_pad(x, 20, tex, stagger=2)
    assert_bitwise_equal(first, texture_pad_ref(x, 20, tex, stagger=2))
    tex[0, 1, 2] = tex[0, 1, 2] + 1 if dtype.is_floating_point else (tex[0, 1, 2] + 1) % 100
    second = F.texture_pad(x, 20, tex, stagger=2)
    assert_bitwise_equal(second, texture_pad_ref(x, 20, tex, stagger=2))
    assert not torch.equal(first, second)
