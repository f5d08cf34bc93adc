"""Every dtype: bit-exact copies, special float bit patterns, texture conversion, batches."""

from __future__ import annotations

import pytest
import torch
from reference import (
    ALL_DTYPES,
    STANDARD_MODES,
    assert_bitwise_equal,
    bits,
    convert_texture,
    pad_ref,
    random_image,
    texture_pad_ref,
)

import tipad_transforms.functional as F

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Wide rows (W >= 16) with odd paddings exercise word-sized copies and unaligned edges.
PADS = [(1, 2, 0, 3), (3, 1, 9, 2), (13, 6, 11, 17)]


def _special_floats(dtype: torch.dtype, n: int, seed: int) -> torch.Tensor:
    """Random finite values mixed with NaNs carrying payloads (quiet and signalling, both
    signs), +-0.0, +-inf and subnormals, as raw bit patterns of ``dtype``."""
    size = torch.empty(0, dtype=dtype).element_size()
    int_t = bits(torch.empty(0, dtype=dtype)).dtype
    patterns = {
        2: [0x7E01, 0x7C01, 0xFE55, 0x8000, 0x0000, 0x7C00, 0xFC00, 0x0001, 0x7FFF]
        if dtype == torch.float16
        else [0x7FC1, 0x7F81, 0xFFAB, 0x8000, 0x0000, 0x7F80, 0xFF80, 0x0001, 0x7FFF],
        4: [0x7FC0DEAD, 0x7F800001, -0x3E5432, -(2**31), 0, 0x7F800000, -8388608, 1],
        8: [0x7FF8DEADBEEF0001, 0x7FF0000000000001, -0x7FFFFFFFF, -(2**63), 0, 1],
    }[size]
    values = bits(random_image((n,), dtype, seed=seed)).clone()
    special = torch.tensor(patterns, dtype=torch.int64).to(int_t)
    values[: special.numel()] = special
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return values[perm].view(dtype)


@pytest.mark.parametrize("padding", PADS)
@pytest.mark.parametrize("mode", [*STANDARD_MODES, "texture"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_bit_exact_for_every_dtype(dtype: torch.dtype, mode: str, padding: object) -> None:
    x = random_image((2, 3, 5, 19), dtype, seed=1)
    if mode == "texture":
        tex = random_image((3, 3, 7), dtype, seed=2)
        got = F.texture_pad(x, padding, tex, stagger=4, offset=(1, -2))
        want = texture_pad_ref(x, padding, tex, stagger=4, offset=(1, -2))
    else:
        fill = [True, False, True] if dtype == torch.bool else [1, 2, 3]
        got = F.pad(x, padding, padding_mode=mode, fill=fill)
        want = pad_ref(x, padding, mode, fill)
    assert got.dtype == dtype and got.device == x.device
    assert_bitwise_equal(got, want)


@pytest.mark.parametrize("mode", [*STANDARD_MODES, "texture"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_nan_payloads_and_negative_zero_survive(dtype: torch.dtype, mode: str) -> None:
    x = _special_floats(dtype, 3 * 4 * 9, seed=3).reshape(3, 4, 9)
    if mode == "texture":
        tex = _special_floats(dtype, 3 * 2 * 5, seed=4).reshape(3, 2, 5)
        got = F.texture_pad(x, (4, 3, 10, 2), tex, stagger=2)
        want = texture_pad_ref(x, (4, 3, 10, 2), tex, stagger=2)
    else:
        fill = -0.0
        got = F.pad(x, (4, 3, 10, 2), padding_mode=mode, fill=fill)
        want = pad_ref(x, (4, 3, 10, 2), mode, fill)
    assert_bitwise_equal(got, want)
    # The interior is the input itself, bit for bit.
    assert_bitwise_equal(got[:, 3:7, 4:13], x)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_storage_offsets_and_odd_sizes(dtype: torch.dtype) -> None:
    # Contiguous inputs and outputs that start 1 element into their storage: no 8-byte
    # alignment, so a word-wise copy must fall back to elements.
    base = random_image((1 + 2 * 3 * 7,), dtype, seed=5)
    x = base[1:].view(2, 3, 7)
    tex = random_image((2, 3, 5), dtype, seed=6)
    out_store = random_image((1 + 2 * 7 * 17,), dtype, seed=7)
    first = out_store[0].clone()
    out = out_store[1:].view(2, 7, 17)
    F.texture_pad(x, (3, 4, 7, 0), tex, stagger=1, out=out)
    assert_bitwise_equal(out, texture_pad_ref(x, (3, 4, 7, 0), tex, stagger=1))
    assert_bitwise_equal(out_store[0], first)
    assert_bitwise_equal(
        F.pad(x, (3, 4, 7, 0), padding_mode="symmetric"), pad_ref(x, (3, 4, 7, 0), "symmetric")
    )


# ---------------------------------------------------------------------------------------------
# texture conversion


@pytest.mark.parametrize(
    ("image_dtype", "texture", "expected"),
    [
        (torch.uint8, [0.0, 0.5, 1.0], [0, 127, 255]),
        (torch.int8, [0.0, 0.5, 1.0], [0, 63, 127]),
        (torch.int16, [0.0, 1.0, 1.0], [0, 32767, 32767]),
        (torch.int32, [0.0, 0.5, 1.0], [0, 2**30 - 1, 2**31 - 1]),
        (torch.int64, [0.0, 0.25, 1.0], [0, 2**61, 2**63 - 1]),
        (torch.float32, torch.tensor([0, 51, 255], dtype=torch.uint8), [0.0, 0.2, 1.0]),
        (
            torch.float64,
            torch.tensor([0, 1, 2], dtype=torch.int64),
            [0.0, 1 / (2**63 - 1), 2 / (2**63 - 1)],
        ),
        (torch.float16, torch.tensor([0, 2**31 - 1, 0], dtype=torch.int32), [0.0, 1.0, 0.0]),
        (torch.bool, [0.0, 1.0, 1.0], [False, True, True]),
        (torch.float32, torch.tensor([True, False, True]), [1.0, 0.0, 1.0]),
        (torch.uint8, torch.tensor([True, False, True]), [1, 0, 1]),
        (torch.int16, torch.tensor([0, 1, 255], dtype=torch.uint8), [0, 128, 32640]),
    ],
)
def test_texture_conversion_by_hand(
    image_dtype: torch.dtype, texture: object, expected: list[object]
) -> None:
    tex = torch.as_tensor(texture)
    x = torch.zeros(1, 1, 1, dtype=image_dtype)
    # Padding (0, 0, 3, 0): canvas columns 1..3 read tile columns 1, 2, 0.
    got = F.texture_pad(x, (0, 0, 3, 0), tex[None])[0, 0, 1:]
    want = torch.tensor(expected).to(image_dtype)[[1, 2, 0]]
    if image_dtype.is_floating_point:
        torch.testing.assert_close(got, want, rtol=1e-3, atol=0)
    else:
        assert_bitwise_equal(got, want)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("image_dtype", [torch.uint8, torch.int8, torch.int16])
def test_half_float_texture_white_stays_white(half: torch.dtype, image_dtype: torch.dtype) -> None:
    tex = torch.tensor([[0.0, 1.0]], dtype=half)
    got = F.texture_pad(torch.zeros(1, 1, 1, dtype=image_dtype), (0, 0, 1, 0), tex)
    assert got[0, 0, 1].item() == torch.iinfo(image_dtype).max


@pytest.mark.parametrize(
    ("image_dtype", "texture_dtype"),
    [
        (torch.uint8, torch.float32),
        (torch.uint8, torch.float64),
        (torch.uint8, torch.float16),
        (torch.int16, torch.bfloat16),
        (torch.int32, torch.float32),
        (torch.int64, torch.float64),
        (torch.float32, torch.uint8),
        (torch.float64, torch.int16),
        (torch.float16, torch.int32),
        (torch.bfloat16, torch.int64),
        (torch.float16, torch.float64),
        (torch.float64, torch.bfloat16),
        (torch.int16, torch.uint8),
        (torch.uint8, torch.int16),
    ],
    ids=str,
)
def test_texture_conversion_matches_documented_rule(
    image_dtype: torch.dtype, texture_dtype: torch.dtype
) -> None:
    x = random_image((2, 3, 4, 5), image_dtype, seed=8)
    if texture_dtype.is_floating_point and not image_dtype.is_floating_point:
        gen = torch.Generator().manual_seed(9)
        tex = torch.rand(3, 3, 4, generator=gen, dtype=torch.float64)
        tex[0, 0, :2] = torch.tensor([0.0, 1.0])
        tex = tex.to(texture_dtype)
    else:
        tex = random_image((3, 3, 4), texture_dtype, seed=9)
        if not texture_dtype.is_floating_point:
            tex = tex.abs() if texture_dtype != torch.uint8 else tex
    before = tex.clone()
    got = F.texture_pad(x, (2, 3, 4, 5), tex, stagger=1)
    assert_bitwise_equal(tex, before)
    converted = convert_texture(tex, image_dtype)
    assert converted.dtype == image_dtype
    assert_bitwise_equal(got, texture_pad_ref(x, (2, 3, 4, 5), converted, stagger=1))


def test_float_texture_for_float_image_is_a_cast() -> None:
    x = random_image((3, 4, 4), torch.float16, seed=10)
    tex = torch.tensor([[[-2.5, 7.25], [1e-3, 70000.0]]], dtype=torch.float64)  # no [0,1] rule
    got = F.texture_pad(x, 2, tex)
    assert_bitwise_equal(got, texture_pad_ref(x, 2, tex.to(torch.float16)))


# ---------------------------------------------------------------------------------------------
# batches


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_batched_equals_per_sample_loop(dtype: torch.dtype) -> None:
    x = random_image((3, 2, 2, 4, 6), dtype, seed=11)  # (B, T, C, H, W)
    bank = random_image((2, 2, 3, 5), dtype, seed=12)
    offset = torch.tensor([[[0, 0], [1, 2]], [[-3, 4], [5, -6]], [[7, 0], [0, -7]]])
    index = torch.tensor([[0, 1], [1, 1], [1, 0]])
    got = F.texture_pad(x, (4, 2, 3, 5), bank, stagger=2, offset=offset, texture_index=index)
    for b in range(3):
        for t in range(2):
            one = F.texture_pad(
                x[b, t],
                (4, 2, 3, 5),
                bank[int(index[b, t])],
                stagger=2,
                offset=tuple(offset[b, t].tolist()),
            )
            assert_bitwise_equal(got[b, t], one)
    for mode in STANDARD_MODES:
        batched = F.pad(x, (5, 1, 7, 2), padding_mode=mode)
        for b in range(3):
            assert_bitwise_equal(batched[b], F.pad(x[b], (5, 1, 7, 2), padding_mode=mode))
