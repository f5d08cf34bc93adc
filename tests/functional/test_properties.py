"""Hypothesis: random shapes, paddings, staggers, offsets and textures against the reference."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import (
    STANDARD_MODES,
    assert_bitwise_equal,
    pad_ref,
    random_image,
    texture_pad_ref,
)

import tipad_transforms.functional as F

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DTYPES = st.sampled_from([torch.uint8, torch.int16, torch.float32, torch.float64, torch.bool])
side = st.integers(0, 13)
paddings = st.one_of(
    st.integers(0, 13),
    st.tuples(side, side),
    st.tuples(side, side, side, side),
)


@st.composite
def images(draw: Any) -> tuple[tuple[int, ...], torch.dtype]:
    lead = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    h, w = draw(st.integers(1, 7)), draw(st.integers(1, 20))
    if draw(st.booleans()) and not lead:
        return (h, w), draw(DTYPES)  # (H, W)
    c = draw(st.integers(1, 3))
    return (*lead, c, h, w), draw(DTYPES)


@SETTINGS
@given(
    image=images(),
    padding=paddings,
    th=st.integers(1, 6),
    tw=st.integers(1, 9),
    banks=st.integers(1, 3),
    one_channel=st.booleans(),
    stagger=st.integers(-25, 25),
    per_sample=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_texture_pad_matches_reference(
    image: tuple[tuple[int, ...], torch.dtype],
    padding: Any,
    th: int,
    tw: int,
    banks: int,
    one_channel: bool,
    stagger: int,
    per_sample: bool,
    seed: int,
) -> None:
    shape, dtype = image
    c = shape[-3] if len(shape) >= 3 else 1
    lead = shape[:-3]
    ct = 1 if one_channel else c
    gen = torch.Generator().manual_seed(seed)
    x = random_image(shape, dtype, seed=seed)
    bank = random_image((banks, ct, th, tw), dtype, seed=seed + 1)
    if per_sample:
        offset: Any = torch.randint(-30, 31, (*lead, 2), generator=gen)
        index: Any = torch.randint(0, banks, lead, generator=gen)
    else:
        offset = tuple(torch.randint(-30, 31, (2,), generator=gen).tolist())
        index = int(torch.randint(0, banks, (), generator=gen))
    texture = bank if banks > 1 or seed % 2 else bank[0] if not one_channel else bank[0, 0]
    before = [x.clone(), bank.clone()]
    got = F.texture_pad(x, padding, texture, stagger=stagger, offset=offset, texture_index=index)
    want = texture_pad_ref(x, padding, texture, stagger=stagger, offset=offset, texture_index=index)
    assert_bitwise_equal(got, want)
    assert_bitwise_equal(x, before[0])
    assert_bitwise_equal(bank, before[1])


@SETTINGS
@given(
    image=images(),
    padding=paddings,
    mode=st.sampled_from([*STANDARD_MODES, "replicate", "wrap"]),
    seed=st.integers(0, 2**16),
    use_out=st.booleans(),
)
def test_pad_matches_numpy_pad(
    image: tuple[tuple[int, ...], torch.dtype], padding: Any, mode: str, seed: int, use_out: bool
) -> None:
    shape, dtype = image
    c = shape[-3] if len(shape) >= 3 else 1
    x = random_image(shape, dtype, seed=seed)
    fill = random_image((c,), dtype, seed=seed + 1).tolist()
    want = pad_ref(x, padding, mode, fill)
    if use_out:
        out = torch.empty_like(want)
        if dtype.is_floating_point:
            out.fill_(float("nan"))
        got = F.pad(x, padding, out=out, padding_mode=mode, fill=fill)
        assert got is out
    else:
        got = F.pad(x, padding, padding_mode=mode, fill=fill)
    assert_bitwise_equal(got, want)


@SETTINGS
@given(
    h=st.integers(1, 5),
    w=st.integers(1, 5),
    padding=st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9), st.integers(0, 9)),
    mode=st.sampled_from([*STANDARD_MODES, "texture"]),
    seed=st.integers(0, 2**16),
)
def test_float64_gradients_match_reference(
    h: int, w: int, padding: tuple[int, int, int, int], mode: str, seed: int
) -> None:
    x = random_image((2, 2, h, w), torch.float64, seed=seed).requires_grad_()
    tex = random_image((2, 3, 4), torch.float64, seed=seed + 1).requires_grad_()
    if mode == "texture":
        got_out = F.texture_pad(x, padding, tex, stagger=seed % 7 - 3, offset=(seed % 5, -1))
        ref_out = texture_pad_ref(
            x, padding, tex, stagger=seed % 7 - 3, offset=(seed % 5, -1), differentiable=True
        )
        inputs: tuple[torch.Tensor, ...] = (x, tex)
    else:
        got_out = F.pad(x, padding, padding_mode=mode, fill=0.25)
        ref_out = pad_ref(x, padding, mode, 0.25, differentiable=True)
        inputs = (x,)
    upstream = random_image(tuple(ref_out.shape), torch.float64, seed=seed + 2)
    got = torch.autograd.grad(got_out, inputs, upstream)
    want = torch.autograd.grad(ref_out, inputs, upstream)
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)
