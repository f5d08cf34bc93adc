"""``tipad_transforms.data``: PadCollate, GPUCollate and DeviceLoader in this process.

Every padded canvas is checked against the numpy reference (``reference.py``) applied to its own
sample at the placement the batch reports and with the lattice offset the call drew (replayed
from a generator with the same seed); placements are checked against the rule computed here;
boxes, keypoints and masks against coordinates and borders computed here from the spec.
DataLoader workers (fork/forkserver/spawn) are in ``test_loader_safety.py``.
"""

from __future__ import annotations

import contextlib
import pickle
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import PIL.Image
import pytest
import torch
from reference import assert_bitwise_equal, pad_ref, random_image, texture_pad_ref
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as tvF

import tipad_transforms.functional as F
from tipad_transforms import BrickPad
from tipad_transforms._compat import torch as ctorch
from tipad_transforms.data import DeviceLoader, GPUCollate, PadCollate, _loader

SIZES = [(5, 7), (9, 4), (6, 11), (3, 3), (9, 11)]
BRICK_TILE = {c: F.make_brick_texture(channels=c) for c in (1, 3)}
BRICK_STAGGER = F.running_bond_stagger()


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _images(dtype: torch.dtype = torch.uint8, channels: int = 3, seed: int = 0) -> list[Any]:
    return [random_image((channels, h, w), dtype, seed=seed + i) for i, (h, w) in enumerate(SIZES)]


def _canvas_size(sizes: list[tuple[int, int]], multiple: int | None) -> tuple[int, int]:
    out_h, out_w = max(h for h, _ in sizes), max(w for _, w in sizes)
    if multiple:
        out_h = (out_h + multiple - 1) // multiple * multiple
        out_w = (out_w + multiple - 1) // multiple * multiple
    return out_h, out_w


def _padding(region: list[int], size: tuple[int, int]) -> tuple[int, int, int, int]:
    top, left, h, w = region
    return left, top, size[1] - left - w, size[0] - top - h


def _expected(
    image: torch.Tensor,
    region: list[int],
    size: tuple[int, int],
    *,
    mode: str = "texture",
    texture: torch.Tensor | None = None,
    stagger: int | None = None,
    offset: Any = (0, 0),
    fill: Any = 0,
) -> torch.Tensor:
    padding = _padding(region, size)
    if mode != "texture":
        return pad_ref(image, padding, mode, fill)
    if texture is None:
        texture = BRICK_TILE[image.shape[0] if image.shape[0] in (1, 3) else 1]
        stagger = BRICK_STAGGER if stagger is None else stagger
    return texture_pad_ref(image, padding, texture, stagger=stagger or 0, offset=offset)


def _check_placements(regions: torch.Tensor, size: tuple[int, int], placement: str) -> None:
    """Regions against the placement rule, computed here from the sizes alone."""
    for i, (top, left, h, w) in enumerate(regions.tolist()):
        assert (h, w) == SIZES[i]
        slack_h, slack_w = size[0] - h, size[1] - w
        if placement == "top_left":
            assert (top, left) == (0, 0)
        elif placement == "center":
            assert (top, left) == (slack_h // 2, slack_w // 2)
        else:
            assert 0 <= top <= slack_h and 0 <= left <= slack_w
    if placement == "random":
        assert len({tuple(r[:2]) for r in regions.tolist()}) > 1, "all placements equal"


# ---------------------------------------------------------------------------------------------
# PadCollate: the canvases against the reference


TEX = torch.rand(3, 4, 5, generator=_gen(11))
MODES: list[tuple[str, dict[str, Any]]] = [
    ("brick", {}),
    ("texture", {"texture": TEX, "stagger": 2}),
    ("reflect", {"padding_mode": "reflect"}),
    ("constant", {"padding_mode": "constant", "fill": [7, 8, 9]}),
]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=str)
@pytest.mark.parametrize("placement", ["top_left", "center", "random"])
@pytest.mark.parametrize("name,kwargs", MODES, ids=[m[0] for m in MODES])
def test_bare_images_match_reference(
    name: str, kwargs: dict[str, Any], placement: str, dtype: torch.dtype
) -> None:
    multiple = 8 if placement == "center" else None

    def make() -> PadCollate:
        return PadCollate(
            multiple=multiple, placement=placement, generator=_gen(3), **kwargs, return_regions=True
        )

    samples = _images(dtype)
    params = make().make_params(SIZES)  # the draws the call below makes (same seed)
    images, regions = make()(samples)
    size = _canvas_size(SIZES, multiple)
    assert images.shape == (5, 3, *size) and images.dtype == dtype
    assert type(images) is torch.Tensor
    assert regions.dtype == torch.int64 and regions.shape == (5, 4)
    _check_placements(regions, size, placement)
    assert torch.equal(regions[:, :2], params["placement"])
    offset = params["offset"]
    if "padding_mode" in kwargs:
        assert not offset.any()
    else:
        th, tw = (4, 5) if "texture" in kwargs else BRICK_TILE[3].shape[-2:]
        assert bool((offset >= 0).all() and (offset[:, 0] < th).all() and (offset[:, 1] < tw).all())
        assert len({tuple(o) for o in offset.tolist()}) > 1, "one lattice offset for all samples"
    for i, image in enumerate(samples):
        want = _expected(
            image,
            regions[i].tolist(),
            size,
            mode=kwargs.get("padding_mode", "texture"),
            texture=kwargs.get("texture"),
            stagger=kwargs.get("stagger"),
            offset=offset[i],
            fill=kwargs.get("fill", 0),
        )
        assert_bitwise_equal(images[i], want)


def test_brick_default_equals_brick_pad_per_sample() -> None:
    samples = _images(torch.uint8, channels=1)
    c = PadCollate(placement="random", generator=_gen(5), return_regions=True)
    params = PadCollate(placement="random", generator=_gen(5), return_regions=True).make_params(
        SIZES
    )
    images, regions = c(samples)
    for i, image in enumerate(samples):
        padding = _padding(regions[i].tolist(), tuple(images.shape[-2:]))
        assert_bitwise_equal(images[i], F.brick_pad(image, padding, offset=params["offset"][i]))


def test_random_offset_false_and_fixed_size() -> None:
    samples = _images(torch.float32)
    images, regions = PadCollate((12, 15), random_offset=False, return_regions=True)(samples)
    assert images.shape == (5, 3, 12, 15)
    _check_placements(regions, (12, 15), "center")
    for i, image in enumerate(samples):
        assert_bitwise_equal(images[i], _expected(image, regions[i].tolist(), (12, 15)))
    square = PadCollate(16, placement="top_left", return_regions=True)(samples)[0]
    assert square.shape == (5, 3, 16, 16)


def test_texture_changes_and_inference_textures_are_seen() -> None:
    tex = torch.rand(3, 4, 4, generator=_gen(1))
    c = PadCollate(
        (6, 7), texture=tex, random_offset=False, placement="top_left", return_regions=True
    )
    image = random_image((3, 2, 3), torch.float32, seed=2)
    before = c([image])[0]
    tex.mul_(0.5)  # in place: the converted copy must not be reused
    after = c([image])[0]
    assert_bitwise_equal(after[0], _expected(image, [0, 0, 2, 3], (6, 7), texture=tex))
    assert not torch.equal(before, after)
    with torch.inference_mode():
        frozen = torch.rand(3, 4, 4, generator=_gen(3))
    got = PadCollate(
        (6, 7), texture=frozen, random_offset=False, placement="top_left", return_regions=True
    )([image])
    assert_bitwise_equal(got[0][0], _expected(image, [0, 0, 2, 3], (6, 7), texture=frozen))


def test_two_dim_images_become_one_channel() -> None:
    samples = [random_image((h, w), torch.int16, seed=i) for i, (h, w) in enumerate(SIZES)]
    images, regions = PadCollate(placement="top_left", random_offset=False, return_regions=True)(
        samples
    )
    assert images.shape == (5, 1, 9, 11)
    for i, image in enumerate(samples):
        assert_bitwise_equal(images[i], _expected(image[None], regions[i].tolist(), (9, 11)))


def test_pil_and_tv_images() -> None:
    arrays = _images(torch.uint8)
    pil = [tvF.to_pil_image(a) for a in arrays]
    c = PadCollate(placement="top_left", random_offset=False, return_regions=True)
    from_pil, _ = c(pil)
    assert type(from_pil) is torch.Tensor and from_pil.dtype == torch.uint8
    assert_bitwise_equal(from_pil, c(arrays)[0])
    grey = c([p.convert("L") for p in pil])[0]
    assert grey.shape == (5, 1, 9, 11)
    tv, _ = c([tv_tensors.Image(a) for a in arrays])
    assert isinstance(tv, tv_tensors.Image)
    assert_bitwise_equal(tv.as_subclass(torch.Tensor), from_pil)


# ---------------------------------------------------------------------------------------------
# targets


def _boxes(i: int, h: int, w: int, n: int) -> tv_tensors.BoundingBoxes:
    g = _gen(100 + i)
    xy = torch.stack(
        [torch.randint(0, w, (n,), generator=g), torch.randint(0, h, (n,), generator=g)], 1
    )
    return tv_tensors.BoundingBoxes(torch.cat([xy, xy + 1], 1), format="XYXY", canvas_size=(h, w))


def _mask(i: int, shape: tuple[int, ...]) -> tv_tensors.Mask:
    return tv_tensors.Mask(torch.randint(1, 5, shape, generator=_gen(200 + i), dtype=torch.uint8))


def test_tuple_samples_with_every_target_type(launches: list[str]) -> None:
    samples = []
    for i, (h, w) in enumerate(SIZES):
        samples.append(
            (
                tv_tensors.Image(random_image((3, h, w), torch.uint8, seed=i)),
                i * 10,
                _boxes(i, h, w, n=i + 1),
                tv_tensors.KeyPoints(torch.tensor([[0, 0], [w - 1, h - 1]]), canvas_size=(h, w)),
                _mask(i, (h, w)),
                f"name{i}",
            )
        )
    c = PadCollate(
        multiple=4, placement="random", mask_fill=255, generator=_gen(9), return_regions=True
    )
    offsets = PadCollate(
        multiple=4, placement="random", generator=_gen(9), return_regions=True
    ).make_params(SIZES)
    launches.clear()
    out = c(samples)
    assert launches == ["pad", "pad"], "one launch for the images, one for the masks"
    assert isinstance(out, list) and len(out) == 7
    images, labels, boxes, points, masks, names, regions = out
    size = (12, 12)
    assert isinstance(images, tv_tensors.Image) and images.shape == (5, 3, *size)
    assert labels.tolist() == [0, 10, 20, 30, 40]
    assert names == [f"name{i}" for i in range(5)]
    assert isinstance(masks, tv_tensors.Mask) and masks.shape == (5, *size)
    for i, sample in enumerate(samples):
        top, left, h, w = regions[i].tolist()
        shift = torch.tensor([left, top, left, top])
        assert isinstance(boxes[i], tv_tensors.BoundingBoxes)
        assert boxes[i].canvas_size == size
        assert torch.equal(boxes[i].as_subclass(torch.Tensor), sample[2] + shift)
        assert isinstance(points[i], tv_tensors.KeyPoints) and points[i].canvas_size == size
        assert points[i].tolist() == [[left, top], [left + w - 1, top + h - 1]]
        want_mask = pad_ref(sample[4][None], _padding(regions[i].tolist(), size), "constant", 255)
        assert_bitwise_equal(masks[i].as_subclass(torch.Tensor), want_mask[0])
        want = _expected(
            sample[0].as_subclass(torch.Tensor),
            regions[i].tolist(),
            size,
            offset=offsets["offset"][i],
        )
        assert_bitwise_equal(images[i].as_subclass(torch.Tensor), want)


def test_detection_dicts_stay_per_sample(launches: list[str]) -> None:
    counts = [2, 0, 3, 1, 2]  # objects per sample, one sample without any
    samples = []
    for i, (h, w) in enumerate(SIZES):
        target = {
            "boxes": _boxes(i, h, w, counts[i]),
            "labels": torch.arange(counts[i]),
            "masks": tv_tensors.Mask(torch.rand(counts[i], h, w, generator=_gen(i)) > 0.5),
            "image_id": i,
        }
        samples.append((random_image((3, h, w), torch.float32, seed=i), target))
    launches.clear()
    images, targets, regions = PadCollate(
        placement="random", generator=_gen(1), return_regions=True
    )(samples)
    assert launches == ["pad", "pad"]
    assert images.shape == (5, 3, 9, 11)
    assert isinstance(targets, list) and len(targets) == 5
    for i, (_, target) in enumerate(samples):
        got = targets[i]
        top, left, _, _ = regions[i].tolist()
        assert set(got) == {"boxes", "labels", "masks", "image_id"}
        assert got["image_id"] == i and torch.equal(got["labels"], target["labels"])
        assert got["boxes"].canvas_size == (9, 11)
        shift = torch.tensor([left, top, left, top])
        assert torch.equal(got["boxes"].as_subclass(torch.Tensor), target["boxes"] + shift)
        assert isinstance(got["masks"], tv_tensors.Mask)
        assert got["masks"].shape == (counts[i], 9, 11) and got["masks"].dtype == torch.bool
        for k in range(counts[i]):
            want = pad_ref(target["masks"][k][None], _padding(regions[i].tolist(), (9, 11)))
            assert_bitwise_equal(got["masks"][k], want[0])


def test_dict_samples_get_a_region_key() -> None:
    samples = [
        {"label": i, "image": random_image((3, h, w), torch.uint8, seed=i), "w": torch.ones(2)}
        for i, (h, w) in enumerate(SIZES)
    ]
    out = PadCollate(placement="center", random_offset=False, return_regions=True)(samples)
    assert list(out) == ["label", "image", "w", "region"]
    assert out["image"].shape == (5, 3, 9, 11)
    assert out["label"].tolist() == [0, 1, 2, 3, 4]
    assert out["w"].shape == (5, 2)
    _check_placements(out["region"], (9, 11), "center")


# ---------------------------------------------------------------------------------------------
# randomness, replay, one launch, DataLoader pin_memory


def test_reproducible_with_generator_and_global_seed() -> None:
    samples = _images()
    a = PadCollate(placement="random", generator=_gen(4), return_regions=True)
    b = PadCollate(placement="random", generator=_gen(4), return_regions=True)
    first, again = a(samples), b(samples)
    assert_bitwise_equal(first[0], again[0])
    assert torch.equal(first[1], again[1])
    assert not torch.equal(a(samples)[0], first[0]), "a second call drew the same parameters"
    g = PadCollate(placement="random", return_regions=True)
    torch.manual_seed(3)
    one = g(samples)
    torch.manual_seed(3)
    assert_bitwise_equal(g(samples)[0], one[0])


def test_params_replay_and_pickle() -> None:
    samples = _images()
    c = PadCollate(placement="random", generator=_gen(2), return_regions=True)
    params = c.make_params(SIZES)
    first = c(samples, params=params)
    assert_bitwise_equal(c(samples, params=params)[0], first[0])
    clone = pickle.loads(
        pickle.dumps(PadCollate(placement="random", generator=_gen(2), return_regions=True))
    )
    assert_bitwise_equal(clone(samples)[0], first[0])
    with pytest.raises(ValueError, match="params"):
        c(samples, params={"size": (9, 11)})
    with pytest.raises(ValueError, match=r"params\['offset'\]"):
        c(samples, params={**params, "offset": torch.zeros(4, 2)})


@pytest.mark.parametrize("mode", ["texture", "edge"])
def test_one_launch_per_batch(mode: str, launches: list[str]) -> None:
    c = PadCollate(padding_mode=mode, placement="random", generator=_gen(0), return_regions=True)
    c(_images())  # warm up (tile conversion, compile)
    launches.clear()
    c(_images(seed=7))
    assert launches == ["pad"]


def test_dataloader_with_pin_memory() -> None:
    data = [(image, i) for i, image in enumerate(_images())]
    collate = PadCollate(placement="random", generator=_gen(8), return_regions=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "pin_memory ... no accelerator" on CPU-only machines
        batches = list(DataLoader(data, batch_size=2, pin_memory=True, collate_fn=collate))
    replay = PadCollate(placement="random", generator=_gen(8), return_regions=True)
    assert len(batches) == 3
    for k, (images, labels, regions) in enumerate(batches):
        want = replay(data[2 * k : 2 * k + 2])
        assert_bitwise_equal(images, want[0])
        assert torch.equal(labels, want[1]) and torch.equal(regions, want[2])
        if torch.cuda.is_available():
            assert images.is_pinned()


# ---------------------------------------------------------------------------------------------
# bad samples and arguments


def _img(*shape: int, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


BAD_SAMPLES: list[tuple[str, list[Any], type[Exception], str]] = [
    ("empty", [], ValueError, "empty batch"),
    (
        "channels",
        [_img(3, 4, 4), _img(3, 5, 5), _img(1, 4, 4)],
        ValueError,
        r"samples\[2\].*channels",
    ),
    ("2d among 3d", [_img(3, 4, 4), _img(4, 4), _img(3, 2, 2)], ValueError, r"samples\[1\].*2-D"),
    ("4d", [_img(3, 4, 4), _img(1, 3, 4, 4)], ValueError, r"samples\[1\].*\(C, H, W\)"),
    (
        "dtype",
        [_img(3, 4, 4), _img(3, 4, 4, dtype=torch.float32)],
        ValueError,
        r"samples\[1\].*dtype",
    ),
    ("not an image", [_img(3, 4, 4), "x"], ValueError, r"samples\[1\]"),
    ("first not an image", [3, 4], TypeError, r"samples\[0\]"),
    ("mask as image", [tv_tensors.Mask(_img(3, 4))], TypeError, r"samples\[0\]"),
    ("tuple image", [(_img(3, 4, 4), 1), (_img(3, 4, 4), "a")], ValueError, r"samples\[\*\]\[1\]"),
    ("tuple lengths", [(_img(3, 4, 4), 1), (_img(3, 4, 4),)], ValueError, r"samples\[1\]"),
    ("tuple no image", [(1, 2)], TypeError, r"samples\[0\].*without an image"),
    (
        "tuple bad image",
        [(_img(3, 4, 4), 1), (PIL.Image.new("L", (2, 2)), 1)],
        ValueError,
        r"samples\[1\]",
    ),
    (
        "dict keys",
        [{"image": _img(3, 2, 2)}, {"image": _img(3, 2, 2), "y": 1}],
        ValueError,
        r"samples\[1\].*keys",
    ),
    ("dict no image", [{"label": 1}], TypeError, r"samples\[0\].*without an image"),
    ("dict region", [{"image": _img(3, 2, 2), "region": 1}], ValueError, "region"),
    (
        "mask size",
        [
            (_img(3, 4, 4), tv_tensors.Mask(_img(4, 4))),
            (_img(3, 4, 5), tv_tensors.Mask(_img(4, 4))),
        ],
        ValueError,
        r"samples\[1\]\[1\].*mask",
    ),
    (
        "boxes canvas",
        [
            (
                _img(3, 4, 4),
                tv_tensors.BoundingBoxes([[0, 0, 1, 1]], format="XYXY", canvas_size=(5, 4)),
            )
        ],
        ValueError,
        r"samples\[0\]\[1\].*canvas_size",
    ),
    (
        "labels",
        [(_img(3, 4, 4), torch.ones(2)), (_img(3, 4, 4), torch.ones(3))],
        ValueError,
        r"samples\[\*\]\[1\]",
    ),
]


@pytest.mark.parametrize(
    "samples,exc,match", [b[1:] for b in BAD_SAMPLES], ids=[b[0] for b in BAD_SAMPLES]
)
def test_bad_samples_name_the_index(samples: list[Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        PadCollate()(samples)


def test_sample_larger_than_fixed_size() -> None:
    with pytest.raises(ValueError, match=r"samples\[1\].*larger than size=\(8, 8\)"):
        PadCollate((8, 8))([_img(3, 4, 4), _img(3, 9, 4)])


BAD_ARGS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (lambda: PadCollate((0, 3)), ValueError, "size"),
    (lambda: PadCollate("big"), TypeError, "size"),  # type: ignore[arg-type]
    (lambda: PadCollate(multiple=(8, 8, 8)), TypeError, "multiple"),  # type: ignore[arg-type]
    (lambda: PadCollate((8, 8), multiple=4), ValueError, "size or multiple"),
    (lambda: PadCollate(placement="middle"), ValueError, "placement"),
    (lambda: PadCollate(padding_mode="mirror"), ValueError, "mode"),
    (lambda: PadCollate(padding_mode=3), TypeError, "mode"),  # type: ignore[arg-type]
    (lambda: PadCollate(padding_mode="edge", texture=TEX), ValueError, "texture"),
    (lambda: PadCollate(padding_mode="edge", stagger=2), ValueError, "stagger"),
    (lambda: PadCollate(texture=torch.rand(2, 3, 4, 4)), ValueError, "texture"),
    (lambda: PadCollate(texture=[1, 2]), TypeError, "texture"),  # type: ignore[arg-type]
    (lambda: PadCollate(stagger=1.5), TypeError, "stagger"),  # type: ignore[arg-type]
    (lambda: PadCollate(fill="red"), TypeError, "fill"),  # type: ignore[arg-type]
    (lambda: PadCollate(mask_fill=None), TypeError, "mask_fill"),  # type: ignore[arg-type]
    (lambda: PadCollate(random_offset=1), TypeError, "random_offset"),  # type: ignore[arg-type]
    (lambda: PadCollate(generator=0), TypeError, "generator"),  # type: ignore[arg-type]
    (lambda: GPUCollate(device=3), TypeError, "device"),  # type: ignore[arg-type]
    (lambda: GPUCollate(device="gpu"), ValueError, "device"),
    (lambda: GPUCollate("cpu", transforms=[1]), TypeError, r"transforms\[0\]"),  # type: ignore[list-item]
    (lambda: DeviceLoader(3, "cpu"), TypeError, "loader"),  # type: ignore[arg-type]
    (lambda: DeviceLoader([], "cpu", prefetch=None), TypeError, "prefetch"),  # type: ignore[arg-type]
    (lambda: DeviceLoader([], "cpu", transforms=5), TypeError, "transforms"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("make,exc,match", BAD_ARGS)
def test_bad_arguments(make: Callable[[], Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        make()


def test_bad_fill_and_mask_fill_at_call_time() -> None:
    with pytest.raises(ValueError, match="fill"):
        PadCollate(padding_mode="constant", fill=300)([_img(3, 2, 2)])
    samples = [(_img(3, 2, 2), tv_tensors.Mask(_img(2, 2)))]
    with pytest.raises(ValueError, match="mask_fill"):
        PadCollate(mask_fill=-1)(samples)


def test_repr() -> None:
    r = repr(PadCollate(multiple=32, placement="random", mask_fill=255))
    assert r.startswith("PadCollate(multiple=(32, 32), placement='random', padding_mode='texture'")
    assert "texture=brick" in r and "mask_fill=255" in r
    assert "fill=0" in repr(PadCollate((8, 8), padding_mode="constant"))
    assert repr(GPUCollate("cpu")).startswith("GPUCollate(device='cpu', size=None")


# ---------------------------------------------------------------------------------------------
# GPUCollate


def test_targets_follow_a_device_side_pad() -> None:
    # PadCollate's regions, boxes, keypoints and masks, then BrickPad on the device batch:
    # every target must still describe the real image in the grown canvas.
    samples = [
        {
            "image": tv_tensors.Image(random_image((3, h, w), torch.uint8, seed=i)),
            "boxes": _boxes(i, h, w, n=2),
            "points": tv_tensors.KeyPoints([[0, 0], [w - 1, h - 1]], canvas_size=(h, w)),
            "mask": _mask(i, (h, w)),
            "label": i,
        }
        for i, (h, w) in enumerate(SIZES[:3])
    ]  # fmt: skip
    as_tuples = [tuple(s.values()) for s in samples]
    pad = BrickPad((3, 5, 1, 2), mask_fill=7)  # left 3, top 5, right 1, bottom 2
    for batch_samples in (as_tuples, samples):
        base = PadCollate(placement="random", generator=_gen(4), return_regions=True)(batch_samples)
        (got,) = DeviceLoader([base], "cpu", pad)
        get = (lambda b, k, i: b[k]) if isinstance(got, dict) else (lambda b, k, i: b[i])
        regions = get(got, "region", -1)
        assert torch.equal(regions, get(base, "region", -1) + torch.tensor([5, 3, 0, 0]))
        images, masks = get(got, "image", 0), get(got, "mask", 3)
        assert images.shape[-2:] == masks.shape[-2:] == (base_size := images.shape[-2:])
        for i, sample in enumerate(samples):
            top, left, h, w = regions[i].tolist()
            real = images[i, :, top : top + h, left : left + w].as_subclass(torch.Tensor)
            assert_bitwise_equal(real, sample["image"].as_subclass(torch.Tensor))
            assert_bitwise_equal(masks[i, top : top + h, left : left + w], sample["mask"])
            assert int(masks[i, 0, 0]) == 7 and int(masks[i, -1, -1]) == 7
            box = get(got, "boxes", 1)[i]
            shift = torch.tensor([left, top, left, top])
            assert box.canvas_size == tuple(base_size)
            assert torch.equal(box.as_subclass(torch.Tensor), sample["boxes"] + shift)
            points = get(got, "points", 2)[i]
            assert points.tolist() == [[left, top], [left + w - 1, top + h - 1]]
    # Other transforms see the image only: nothing else moves.
    plain = PadCollate(return_regions=True)(as_tuples)
    (same,) = DeviceLoader([plain], "cpu", lambda x: x + 1)
    assert torch.equal(same[-1], plain[-1]) and same[1][0] is plain[1][0]


def test_gpu_collate_on_cpu_equals_pad_collate_then_transforms() -> None:
    samples = [(image, i) for i, image in enumerate(_images())]
    pad = BrickPad(2, random_offset=True, generator=_gen(6))
    gpu = GPUCollate(
        "cpu", transforms=pad, placement="random", generator=_gen(1), return_regions=True
    )
    images, labels, regions = gpu(samples)
    base = PadCollate(placement="random", generator=_gen(1), return_regions=True)(samples)
    want = BrickPad(2, random_offset=True, generator=_gen(6))(base[0])
    assert_bitwise_equal(images, want)
    assert torch.equal(labels, base[1])
    assert torch.equal(regions, base[2] + torch.tensor([2, 2, 0, 0]))  # the pad moved them


def test_gpu_collate_for_cuda_fails_at_construction_without_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        GPUCollate("cuda")
    GPUCollate("cpu")


def _cuda_collate(monkeypatch: pytest.MonkeyPatch) -> GPUCollate:
    # Built as on a CUDA machine; the guards under test refuse before any CUDA call.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return GPUCollate("cuda", return_regions=True)


def test_gpu_collate_in_forked_worker_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    loader = DataLoader(
        _images(),
        batch_size=2,
        num_workers=1,
        multiprocessing_context="fork",
        collate_fn=_cuda_collate(monkeypatch),
        timeout=120,
    )
    with pytest.raises(RuntimeError, match="DeviceLoader") as info:
        next(iter(loader))
    assert "num_workers=0" in str(info.value) and "PadCollate" in str(info.value)


def test_gpu_collate_after_cuda_fork_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctorch, "in_bad_fork", lambda: True)
    with pytest.raises(RuntimeError, match=r"forked after CUDA started.*DeviceLoader"):
        _cuda_collate(monkeypatch)(_images())
    # A CPU device never needs CUDA: no error.
    GPUCollate("cpu", return_regions=True)(_images())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_collate_on_cuda_equals_cpu() -> None:
    samples = [(image, _mask(i, image.shape[-2:])) for i, image in enumerate(_images())]
    got = GPUCollate("cuda", placement="random", generator=_gen(1), return_regions=True)(samples)
    want = PadCollate(placement="random", generator=_gen(1), return_regions=True)(samples)
    for g, w in zip(got, want, strict=True):
        assert g.device.type == "cuda"
        assert_bitwise_equal(g, w)


# ---------------------------------------------------------------------------------------------
# DeviceLoader on the CPU, and its stream order with stand-in streams


def _dataloader(seed: int = 0, **kwargs: Any) -> DataLoader[Any]:
    data = [(image, i) for i, image in enumerate(_images(seed=seed))]
    return DataLoader(
        data,
        batch_size=2,
        collate_fn=PadCollate(placement="top_left", random_offset=False, return_regions=True),
        **kwargs,
    )


def test_device_loader_cpu_applies_transforms_to_the_image_batch() -> None:
    loader = _dataloader()
    dl = DeviceLoader(loader, "cpu", [BrickPad(2, random_offset=True, generator=_gen(3))])
    assert len(dl) == 3 and dl.dataset is loader.dataset and dl.batch_size == 2
    replay = BrickPad(2, random_offset=True, generator=_gen(3))
    for epoch in range(2):  # re-iteration: a new pass each time
        count = 0
        for (images, labels, regions), raw in zip(dl, loader, strict=True):
            assert_bitwise_equal(images, replay(raw[0]))
            assert torch.equal(labels, raw[1])
            assert torch.equal(regions, raw[2] + torch.tensor([2, 2, 0, 0]))
            count += 1
        assert count == 3, epoch


def test_device_loader_finds_the_image_by_the_rule() -> None:
    seen: list[tuple[int, ...]] = []

    def spy(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return x + 1

    batches = [
        torch.zeros(2, 3),
        (torch.zeros(4), torch.zeros(2, 5)),
        {"label": torch.zeros(1), "image": torch.zeros(2, 6)},
        {"x": 1, "img": tv_tensors.Image(torch.zeros(1, 7, 7)), "mask": torch.zeros(3)},
    ]
    out = list(DeviceLoader(batches, "cpu", spy, prefetch=False))
    assert seen == [(2, 3), (4,), (2, 6), (1, 7, 7)]
    assert torch.equal(out[1][1], torch.zeros(2, 5)) and isinstance(out[1], tuple)
    assert torch.equal(out[2]["label"], torch.zeros(1))
    with pytest.raises(TypeError, match="no image"):
        list(DeviceLoader([{"a": 1}], "cpu", spy))


def test_device_loader_set_epoch_reaches_the_sampler() -> None:
    data = list(range(10))
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=0)
    dl = DeviceLoader(DataLoader(data, batch_size=5, sampler=sampler), "cpu")
    dl.set_epoch(3)
    assert sampler.epoch == 3
    first = [b.tolist() for b in dl]
    dl.set_epoch(4)
    assert [b.tolist() for b in dl] != first
    DeviceLoader([torch.zeros(1)], "cpu").set_epoch(1)  # nothing to pass it to: no error


def test_device_loader_early_break_releases_the_loader() -> None:
    state = {"closed": False}

    def source() -> Iterator[torch.Tensor]:
        try:
            for i in range(100):
                yield torch.full((2,), i)
        finally:
            state["closed"] = True

    class Source:
        def __iter__(self) -> Iterator[torch.Tensor]:
            return source()

    for batch in DeviceLoader(Source(), "cpu"):
        assert batch.tolist() == [0, 0]
        break
    assert state["closed"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_device_loader_cuda_on_cpu_machine() -> None:
    with pytest.raises(RuntimeError, match="device='cpu'"):
        DeviceLoader([], "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("prefetch", [True, False])
def test_device_loader_cuda_equals_cpu(prefetch: bool) -> None:
    # pin_memory makes the side-stream copies truly asynchronous; the consumer runs on a
    # non-default stream too, which the Taichi launch must order with.
    loader = _dataloader(pin_memory=True)
    on_gpu = DeviceLoader(
        loader, "cuda", BrickPad(2, random_offset=True, generator=_gen(4)), prefetch
    )
    on_cpu = DeviceLoader(loader, "cpu", BrickPad(2, random_offset=True, generator=_gen(4)))
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        got = [[t.cpu() for t in batch] for batch in on_gpu]
    want = list(on_cpu)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            assert_bitwise_equal(a, b)


def test_device_loader_stream_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefetch path's order of copies, waits and stream records, with stand-in streams.

    For batch k: copied on the side stream (non_blocking); the consumer's stream waits for the
    side stream; every tensor of batch k is recorded on the consumer's stream; batch k + 1's copy
    is issued; then batch k is handed out (transformed on the consumer's stream).
    """
    log: list[tuple[Any, ...]] = []

    class Stream:
        def __init__(self, name: str) -> None:
            self.name = name

        def wait_stream(self, other: Stream) -> None:
            log.append(("wait", self.name, other.name))

    side, current = Stream("side"), Stream("current")
    active = [current]

    @contextlib.contextmanager
    def use(stream: Stream) -> Iterator[None]:
        active.append(stream)
        yield
        active.pop()

    def copy(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
        log.append(("copy", int(batch[0][0]), active[-1].name, non_blocking))
        return batch

    def transform(x: torch.Tensor) -> torch.Tensor:
        log.append(("transform", int(x[0]), active[-1].name))
        return x

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: side)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: active[-1])
    monkeypatch.setattr(torch.cuda, "stream", use)
    monkeypatch.setattr(_loader, "to_device", copy)
    monkeypatch.setattr(_loader, "_record", lambda t, s: log.append(("record", int(t[0]), s.name)))
    batches = [(torch.full((2,), k), torch.full((1,), k)) for k in range(3)]
    for images, _ in DeviceLoader(batches, "cuda", transform):
        log.append(("use", int(images[0])))
    want: list[tuple[Any, ...]] = [("copy", 0, "side", True)]
    for k in range(3):
        want += [("wait", "current", "side"), ("record", k, "current"), ("record", k, "current")]
        if k < 2:
            want.append(("copy", k + 1, "side", True))
        want += [("transform", k, "current"), ("use", k)]
    assert log == want


@pytest.mark.parametrize("mode", ["texture", "constant", "drawn"])
def test_equal_images_with_targets_through_the_device_loader(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Equal images at one placement with one border take pad_stack's list form (the first
    # canvas copied, each image into its window); with an offset drawn per sample (the
    # collate's default, "drawn") every canvas is its crop of the brick wall. The batch, its
    # boxes, masks and regions, and then a device-side BrickPad must be what the per-sample
    # references say.
    from tipad_transforms.functional import _stack

    served: list[bool] = []
    real = _stack.pad_samples_direct

    def spy(images: Any, call: Any) -> Any:
        got = real(images, call)
        served.append(got is not None)
        return got

    monkeypatch.setattr(_stack, "pad_samples_direct", spy)
    samples = [
        (random_image((3, 6, 7), torch.uint8, seed=30 + i), _boxes(i, 6, 7, n=2), _mask(i, (6, 7)))
        for i in range(4)
    ]
    drawn = mode == "drawn"
    mode = "texture" if drawn else mode
    # The walls serve a brick tile no larger than the batch's canvases together.
    size = (76, 80) if drawn else (11, 13)
    collate = PadCollate(
        size, padding_mode=mode, fill=9, random_offset=drawn, mask_fill=3,
        return_regions=True, generator=torch.Generator().manual_seed(7),
    )  # fmt: skip
    params = collate.make_params([(6, 7)] * 4)
    offsets = params["offset"].tolist()
    assert drawn == (len(set(map(tuple, offsets))) > 1)  # the drawn offsets differ
    base = collate(samples, params=params)
    pad = BrickPad((2, 1, 0, 3), mask_fill=5)  # left 2, top 1, right 0, bottom 3
    (got,) = DeviceLoader([base], "cpu", pad)
    assert served[0] is True  # the images (the masks' constant pad may take it too)
    images, boxes, masks, regions = base
    for i, (image, box, mask) in enumerate(samples):
        region = regions[i].tolist()
        want = _expected(image, region, size, mode=mode, fill=9, offset=tuple(offsets[i]))
        assert_bitwise_equal(images[i], want)
        top, left = region[:2]
        assert torch.equal(boxes[i].as_subclass(torch.Tensor), box + torch.tensor([left, top] * 2))
        want_mask = pad_ref(mask[None], _padding(region, size), "constant", 3)[0]
        assert_bitwise_equal(masks[i].as_subclass(torch.Tensor), want_mask)
        assert_bitwise_equal(got[0][i], F.brick_pad(images[i], [2, 1, 0, 3]))
        assert torch.equal(got[3][i], regions[i] + torch.tensor([1, 2, 0, 0]))
        shifted = boxes[i].as_subclass(torch.Tensor) + torch.tensor([2, 1, 2, 1])
        assert torch.equal(got[1][i].as_subclass(torch.Tensor), shifted)
