"""``BrickPad``/``TexturePad`` on batches: per-sample draws in one launch, ``same_on_batch``.

Every result is checked against the numpy reference with the parameters the call drew (replayed
from a generator with the same seed), and the kernel launches are counted.
"""

from __future__ import annotations

import pytest
import torch
from reference import assert_bitwise_equal, random_image, texture_pad_ref
from torchvision import tv_tensors

import tipad_transforms.functional as F
from tipad_transforms import BrickPad, TexturePad

BRICK = {"brick_size": (4, 6), "mortar": 2, "bricks_per_tile": 2, "courses": 2}


def _brick_tile(channels: int) -> torch.Tensor:
    return F.make_brick_texture(channels=channels, **BRICK)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_brickpad_batch_draws_per_sample_in_one_launch(
    dtype: torch.dtype, launches: list[str]
) -> None:
    x = random_image((6, 3, 5, 7), dtype, seed=1)
    t = BrickPad((3, 2, 4, 1), random_offset=True, generator=_gen(3), **BRICK)
    params = BrickPad((3, 2, 4, 1), random_offset=True, generator=_gen(3), **BRICK).make_params([x])
    launches.clear()
    out = t(x)
    assert launches == ["pad"]
    offset = params["offset"]
    assert offset.shape == (6, 2)
    th, tw = t.tile_size
    assert bool((offset[:, 0] < th).all() and (offset[:, 1] < tw).all() and (offset >= 0).all())
    assert len({tuple(o) for o in offset.tolist()}) > 1, "every sample got the same draw"
    want = texture_pad_ref(x, (3, 2, 4, 1), _brick_tile(3), stagger=t.stagger, offset=offset)
    assert_bitwise_equal(out, want)
    for i in range(6):  # per sample, the same as padding that sample alone with its offset
        alone = texture_pad_ref(
            x[i], (3, 2, 4, 1), _brick_tile(3), stagger=t.stagger, offset=offset[i]
        )
        assert_bitwise_equal(out[i], alone)


def test_same_on_batch_draws_once(launches: list[str]) -> None:
    x = random_image((5, 3, 4, 6), torch.float32, seed=2)
    t = BrickPad(3, random_offset=True, same_on_batch=True, generator=_gen(4), **BRICK)
    params = BrickPad(
        3, random_offset=True, same_on_batch=True, generator=_gen(4), **BRICK
    ).make_params([x])
    assert params["offset"].shape == (2,)
    launches.clear()
    out = t(x)
    assert launches == ["pad"]
    want = texture_pad_ref(x, 3, _brick_tile(3), stagger=t.stagger, offset=params["offset"])
    assert_bitwise_equal(out, want)
    border = out.clone()
    border[:, :, 3:-3, 3:-3] = 0
    assert all(torch.equal(border[0], border[i]) for i in range(1, 5))


@pytest.mark.parametrize("same_on_batch", [False, True])
def test_texturepad_random_bank_index(same_on_batch: bool, launches: list[str]) -> None:
    x = random_image((2, 3, 3, 4, 5), torch.float64, seed=5)  # leading dims (2, 3)
    bank = random_image((4, 3, 3, 2), torch.float64, seed=6)

    def make() -> TexturePad:
        return TexturePad(
            (2, 1),
            bank,
            random_offset=True,
            texture_index="random",
            same_on_batch=same_on_batch,
            generator=_gen(7),
        )

    params = make().make_params([x])
    lead = () if same_on_batch else (2, 3)
    assert params["offset"].shape == (*lead, 2)
    assert params["texture_index"].shape == lead
    launches.clear()
    out = make()(x)
    assert launches == ["pad"]
    want = texture_pad_ref(
        x, (2, 1), bank, offset=params["offset"], texture_index=params["texture_index"]
    )
    assert_bitwise_equal(out, want)


def test_single_image_is_a_plain_v2_transform() -> None:
    x = random_image((3, 4, 5), torch.float32, seed=8)
    for flag in (False, True):
        t = BrickPad(2, random_offset=True, same_on_batch=flag, generator=_gen(9), **BRICK)
        params = BrickPad(
            2, random_offset=True, same_on_batch=flag, generator=_gen(9), **BRICK
        ).make_params([x])
        assert params["offset"].shape == (2,)
        want = texture_pad_ref(x, 2, _brick_tile(3), stagger=t.stagger, offset=params["offset"])
        assert_bitwise_equal(t(x), want)


def test_video_batch_same_on_batch_one_draw_for_all_clips() -> None:
    video = tv_tensors.Video(random_image((3, 2, 1, 4, 4), torch.float32, seed=10))
    t = TexturePad(
        1, torch.rand(1, 3, 3), random_offset=True, same_on_batch=True, generator=_gen(1)
    )
    params = t.make_params([video])
    assert params["offset"].shape == (2,)
    out = t.transform(video, params)
    assert isinstance(out, tv_tensors.Video)
    want = texture_pad_ref(video.as_subclass(torch.Tensor), 1, t.texture, offset=params["offset"])
    assert_bitwise_equal(out.as_subclass(torch.Tensor), want)


def test_same_on_batch_argument_and_repr() -> None:
    with pytest.raises(TypeError, match="same_on_batch"):
        BrickPad(1, same_on_batch=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="same_on_batch"):
        TexturePad(1, torch.rand(2, 2), same_on_batch="yes")  # type: ignore[arg-type]
    assert "same_on_batch=True" in repr(BrickPad(1, random_offset=True, same_on_batch=True))
    assert "same_on_batch" not in repr(BrickPad(1, random_offset=True))
