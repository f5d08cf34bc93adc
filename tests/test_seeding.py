"""``_seeding.uniform``: the one sampler of every random parameter, against its written rule.

A draw is a 62-bit word from the generator reduced modulo its bound, one per element of the
bounds, in one call for the whole batch; the transforms' offsets and bank indices are such
draws (checked here with a reference computed from the same seed).
"""

from __future__ import annotations

import pytest
import torch

from tipad_transforms import BrickPad, TexturePad
from tipad_transforms._seeding import uniform


def test_uniform_is_62_bit_words_modulo_the_bounds() -> None:
    high = torch.tensor([[1, 7], [3, 2**31 - 1], [5, 2]])
    got = uniform(torch.Generator().manual_seed(9), high)
    want = torch.randint(0, 2**62, (3, 2), generator=torch.Generator().manual_seed(9)) % high
    assert got.dtype == torch.int64 and torch.equal(got, want)
    assert bool(((got >= 0) & (got < high)).all()) and int(got[0, 0]) == 0


def test_uniform_spreads_over_the_whole_range() -> None:
    draws = uniform(torch.Generator().manual_seed(1), torch.full((6000,), 6))
    counts = torch.bincount(draws, minlength=6)
    assert counts.shape == (6,) and int(counts.min()) > 850  # 1000 each expected
    state = torch.get_rng_state()
    torch.manual_seed(4)
    a = uniform(None, torch.full((5,), 100))
    torch.manual_seed(4)
    assert torch.equal(uniform(None, torch.full((5,), 100)), a)  # the global RNG when None
    torch.set_rng_state(state)


@pytest.mark.parametrize("same_on_batch", [False, True])
def test_transforms_draw_through_uniform(same_on_batch: bool) -> None:
    x = torch.zeros(4, 3, 5, 5)
    bank = torch.rand(3, 3, 4, 6)
    t = TexturePad(
        2,
        bank,
        random_offset=True,
        texture_index="random",
        same_on_batch=same_on_batch,
        generator=torch.Generator().manual_seed(2),
    )
    params = t.make_params([x])
    g = torch.Generator().manual_seed(2)
    lead = () if same_on_batch else (4,)
    offset = torch.randint(0, 2**62, (*lead, 2), generator=g) % torch.tensor([4, 6])
    index = torch.randint(0, 2**62, lead, generator=g) % 3  # drawn after the offset
    assert torch.equal(params["offset"], offset) and torch.equal(params["texture_index"], index)
    brick = BrickPad(1, random_offset=True, generator=torch.Generator().manual_seed(2))
    th, tw = brick.tile_size
    want = torch.randint(0, 2**62, (4, 2), generator=torch.Generator().manual_seed(2))
    assert torch.equal(brick.make_params([x])["offset"], want % torch.tensor([th, tw]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_generator_draws_on_its_device() -> None:
    high = torch.tensor([[4, 9]]).expand(8, 2)
    got = uniform(torch.Generator("cuda").manual_seed(3), high)
    want = torch.randint(
        0, 2**62, (8, 2), generator=torch.Generator("cuda").manual_seed(3), device="cuda"
    )
    assert got.device.type == "cuda" and torch.equal(got, want % high.cuda())
    t = BrickPad(1, random_offset=True, generator=torch.Generator("cuda").manual_seed(3))
    assert t.make_params([torch.zeros(8, 3, 4, 4)])["offset"].device.type == "cuda"
