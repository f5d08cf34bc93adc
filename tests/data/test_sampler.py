"""The data stage's one parameter sampler: ``PadCollate`` and ``RayPadBatch`` draw through it.

The draws are checked against references written here from the documented rule: 62-bit words,
reduced modulo each bound (``slack + 1`` for a placement, the tile for a lattice offset), from
the collate's generator in call order, or from ``blake2b(seed, key)`` for a Ray row.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest
import torch
from reference import assert_bitwise_equal, random_image

import tipad_transforms.functional as F
from tipad_transforms.data import PadCollate, RayPadBatch
from tipad_transforms.data._sampler import CanvasSampler, generator_draw

SIZES = [(5, 7), (9, 4), (6, 11), (3, 3)]
TILE = tuple(F.make_brick_texture().shape[-2:])


def _slack(size: tuple[int, int]) -> torch.Tensor:
    return torch.tensor([(size[0] - h, size[1] - w) for h, w in SIZES])


def test_collate_draws_62_bit_words_modulo_each_bound_in_order() -> None:
    got = PadCollate(multiple=4, placement="random", generator=torch.Generator().manual_seed(5))
    params = got.make_params(SIZES)
    g = torch.Generator().manual_seed(5)
    size = (12, 12)
    placement = torch.randint(0, 2**62, (4, 2), generator=g) % (_slack(size) + 1)
    offset = torch.randint(0, 2**62, (4, 2), generator=g) % torch.tensor(TILE)
    assert params["size"] == size
    assert torch.equal(params["placement"], placement) and torch.equal(params["offset"], offset)
    # Nothing random: nothing drawn, and the rule computed here.
    state = torch.get_rng_state()
    fixed = PadCollate(multiple=4, random_offset=False).make_params(SIZES)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(fixed["placement"], _slack(size) // 2) and not fixed["offset"].any()


def test_ray_draws_hash_the_seed_and_each_key() -> None:
    keys = [f"/data/{i}.png" for i in range(len(SIZES))]
    params = RayPadBatch(16, placement="random", seed=3).make_params(keys, SIZES)
    words = torch.tensor(
        [
            [
                int.from_bytes(d[i : i + 8], "little") >> 2
                for i in range(0, 32, 8)
                for d in [hashlib.blake2b(f"3\x00{k}".encode(), digest_size=32).digest()]
            ]
            for k in keys
        ]
    )
    assert torch.equal(params["placement"], words[:, :2] % (_slack((16, 16)) + 1))
    assert torch.equal(params["offset"], words[:, 2:] % torch.tensor(TILE))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"multiple": 8, "placement": "random"},
        {"size": 12, "placement": "top_left", "texture": torch.rand(3, 4, 5), "stagger": 2},
        {"multiple": (4, 8), "padding_mode": "edge", "random_offset": False},
    ],
    ids=["brick", "texture", "edge"],
)
def test_ray_pads_with_the_collate_it_holds(kwargs: dict[str, Any]) -> None:
    ray = RayPadBatch(**kwargs, seed=1)
    collate = PadCollate(**kwargs, return_regions=True)
    assert vars(ray.collate.sampler) == vars(collate.sampler)
    images = [random_image((3, h, w), torch.uint8, seed=i) for i, (h, w) in enumerate(SIZES)]
    keys = [f"k{i}" for i in range(len(SIZES))]
    params = ray.make_params(keys, SIZES)
    column = np.empty(len(images), dtype=object)
    column[:] = [im.permute(1, 2, 0).numpy() for im in images]
    out = ray({"image": column, "path": np.array(keys)})
    want_images, want_regions = collate(images, params=params)
    assert_bitwise_equal(torch.from_numpy(out["image"]), want_images)
    assert np.array_equal(out["region"], want_regions.numpy())


def test_the_sampler_draws_for_the_whole_batch_from_any_source() -> None:
    sampler = CanvasSampler(multiple=4, placement="random", tile=(3, 5))
    asked: list[tuple[int, tuple[int, ...]]] = []

    def draw(slot: int, high: torch.Tensor) -> torch.Tensor:
        asked.append((slot, tuple(high.shape)))
        return high - 1  # the largest value each bound allows

    params = sampler.sample(SIZES, draw)
    assert asked == [(0, (4, 2)), (1, (4, 2))]  # one call per parameter, for every image
    assert torch.equal(params["placement"], _slack((12, 12)))
    assert torch.equal(params["offset"], torch.tensor([[2, 4]] * 4))
    again = sampler.sample(SIZES, generator_draw(torch.Generator().manual_seed(0)))
    assert bool((again["placement"] <= _slack((12, 12))).all()) and again["offset"].max() < 5


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("generator", torch.Generator(), "each row's key"),
        ("mask_fill", 255, "images only"),
        ("return_regions", False, "always returned"),
        ("transforms", abs, "no argument"),
        ("paddding_mode", "edge", "no argument"),
    ],
)
def test_ray_refuses_what_a_ray_batch_cannot_use(name: str, value: Any, why: str) -> None:
    with pytest.raises(TypeError, match=rf"RayPadBatch\(\).*'{name}' \(.*{why}.*placement"):
        RayPadBatch(**{name: value})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_generator_gives_cpu_parameters() -> None:
    params = PadCollate(
        multiple=4, placement="random", generator=torch.Generator("cuda").manual_seed(5)
    ).make_params(SIZES)
    g = torch.Generator("cuda").manual_seed(5)
    want = torch.randint(0, 2**62, (4, 2), generator=g, device="cuda").cpu() % (
        _slack((12, 12)) + 1
    )
    assert params["placement"].device.type == "cpu" and torch.equal(params["placement"], want)
