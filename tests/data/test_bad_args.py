"""An adversarial sweep of the public arguments of ``tipad_transforms.data`` and
``tipad_transforms.distributed``: every bad value is a ``TypeError``/``ValueError`` whose message
names the argument (or the sample, column or key at fault), never another exception, and the odd
but valid values give the result their meaning says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from tipad_transforms.data import (
    DeviceLoader,
    GPUCollate,
    PadCollate,
    PerSample,
    RayPadBatch,
    Regions,
    worker_context,
)
from tipad_transforms.distributed import local_rank, rank_generator, visible_devices

IMAGES = [torch.zeros(3, 4, 5, dtype=torch.uint8), torch.zeros(3, 6, 3, dtype=torch.uint8)]
META = torch.zeros(2, 2, device="meta")
ROWS = {"image": [np.zeros((4, 5, 3), np.uint8)], "path": np.array(["a.png"])}


def _params(**kwargs: Any) -> dict[str, Any]:
    zeros = torch.zeros(1, 2, dtype=torch.int64)
    return {"size": (4, 5), "placement": zeros, "offset": zeros, **kwargs}


def _collate(**kwargs: Any) -> Callable[[], Any]:
    return lambda: PadCollate(**kwargs)(IMAGES)


# (what is called, the exception, a pattern that names the culprit)
CASES: dict[str, tuple[Callable[[], Any], type[Exception], str]] = {
    # PadCollate's constructor
    "size-bool": (_collate(size=True), TypeError, "size must be"),
    "size-float": (_collate(size=(4.0, 5)), TypeError, "size must be"),
    "size-zero": (_collate(size=0), ValueError, "size must be >= 1"),
    "size-huge": (_collate(size=2**40), ValueError, "size must be at most"),
    "size-int64-overflow": (_collate(size=2**70), ValueError, "size must be at most"),
    "multiple-negative": (_collate(multiple=-8), ValueError, "multiple must be >= 1"),
    "multiple-huge": (_collate(multiple=(2**31, 1)), ValueError, "multiple must be at most"),
    "size-and-multiple": (_collate(size=8, multiple=8), ValueError, "give size or multiple"),
    "placement-other": (_collate(placement="left"), ValueError, "placement must be one of"),
    "placement-list": (_collate(placement=["center"]), ValueError, "placement must be one of"),
    "padding_mode-int": (_collate(padding_mode=3), TypeError, "padding_mode"),
    "padding_mode-other": (_collate(padding_mode="mirror"), ValueError, "padding_mode"),
    "texture-list": (_collate(texture=[[1, 2]]), TypeError, "texture"),
    "texture-1d": (_collate(texture=torch.zeros(3)), ValueError, "texture"),
    "texture-bank": (_collate(texture=torch.zeros(2, 3, 2, 2)), ValueError, "texture"),
    "texture-meta": (_collate(texture=META), TypeError, "texture must be a dense tensor"),
    "texture-sparse": (_collate(texture=torch.eye(2).to_sparse()), TypeError, "texture"),
    "texture-with-reflect": (
        _collate(texture=torch.zeros(2, 2), padding_mode="reflect"),
        ValueError,
        "texture is for padding_mode='texture'",
    ),
    "stagger-float": (_collate(stagger=1.5), TypeError, "stagger must be an int"),
    "stagger-huge": (_collate(stagger=2**70), ValueError, "stagger"),
    "stagger-with-edge": (_collate(stagger=1, padding_mode="edge"), ValueError, "stagger is for"),
    "fill-bytes": (_collate(padding_mode="constant", fill=b"12"), TypeError, "fill must be"),
    "fill-str": (_collate(padding_mode="constant", fill="1"), TypeError, "fill must be"),
    "fill-none": (_collate(padding_mode="constant", fill=None), TypeError, "fill must be"),
    "fill-out-of-range": (_collate(padding_mode="constant", fill=300), ValueError, "fill"),
    "fill-channels": (_collate(padding_mode="constant", fill=[1, 2]), ValueError, "fill"),
    "mask_fill-str": (_collate(mask_fill="255"), TypeError, "mask_fill must be a number"),
    "random_offset-int": (_collate(random_offset=1), TypeError, "random_offset must be a bool"),
    "return_regions-str": (_collate(return_regions="yes"), TypeError, "return_regions must be"),
    "generator-int": (_collate(generator=1), TypeError, "generator must be a torch.Generator"),
    # PadCollate at call time
    "samples-tensor": (lambda: PadCollate()(torch.zeros(2, 3, 4, 4)), TypeError, "samples must"),
    "samples-empty": (lambda: PadCollate()([]), ValueError, "empty batch"),
    "samples-sparse": (
        lambda: PadCollate()([torch.zeros(3, 4, 4).to_sparse()]),
        TypeError,
        r"samples\[0\]: the image must be a dense tensor.*to_dense",
    ),
    "samples-quantized": (
        lambda: PadCollate()(
            [torch.quantize_per_tensor(torch.rand(3, 2, 2), 0.1, 0, torch.quint8)]
        ),
        TypeError,
        r"samples\[0\].*quantized.*dequantize",
    ),
    "samples-nested": (
        lambda: PadCollate()([torch.nested.nested_tensor([torch.zeros(2, 2), torch.zeros(3, 2)])]),
        TypeError,
        r"samples\[0\].*nested",
    ),
    "samples-empty-image": (
        lambda: PadCollate()([torch.zeros(3, 0, 4)]),
        ValueError,
        r"samples\[0\]: the image is empty",
    ),
    "samples-mixed-dtype": (
        lambda: PadCollate()([IMAGES[0], IMAGES[1].float()]),
        ValueError,
        r"samples\[1\].*same dtype",
    ),
    "samples-too-large": (
        lambda: PadCollate(size=5)(IMAGES),
        ValueError,
        r"samples\[1\]: the image is 6x3, larger than size",
    ),
    "params-not-dict": (lambda: PadCollate()(IMAGES[:1], params=[1]), ValueError, "params must"),
    "params-float-placement": (
        lambda: PadCollate()(IMAGES[:1], params=_params(placement=torch.zeros(1, 2))),
        ValueError,
        r"params\['placement'\] must be an int tensor of shape \(1, 2\), got torch.float32",
    ),
    "params-shape": (
        lambda: PadCollate()(
            IMAGES[:1], params=_params(offset=torch.zeros(2, 2, dtype=torch.int64))
        ),
        ValueError,
        r"params\['offset'\] must be an int tensor of shape \(1, 2\)",
    ),
    "params-size": (lambda: PadCollate()(IMAGES[:1], params=_params(size=0)), ValueError, "size"),
    "make_params-str": (lambda: PadCollate().make_params("ab"), TypeError, "sizes must be"),
    "make_params-float": (
        lambda: PadCollate().make_params([(1.5, 2)]),
        TypeError,
        r"sizes\[0\] must be a pair of ints",
    ),
    "make_params-negative": (
        lambda: PadCollate().make_params([(3, 3), (0, -1)]),
        ValueError,
        r"sizes\[1\] must be >= 0",
    ),
    "canvas_size-triple": (
        lambda: PadCollate().canvas_size([(1, 2, 3)]),
        TypeError,
        r"sizes\[0\] must be a pair",
    ),
    "make_params-empty": (lambda: PadCollate().make_params([]), ValueError, "empty batch"),
    # GPUCollate
    "gpu-device-int": (lambda: GPUCollate(device=0), TypeError, "device must be"),
    "gpu-device-name": (lambda: GPUCollate(device="gpu"), ValueError, "device must name"),
    "gpu-transforms-int": (lambda: GPUCollate("cpu", 3), TypeError, "transforms must be"),
    "gpu-transforms-item": (
        lambda: GPUCollate("cpu", [abs, 3]),
        TypeError,
        r"transforms\[1\] must be callable",
    ),
    "gpu-unknown-kwarg": (lambda: GPUCollate("cpu", padding=2), TypeError, "padding"),
    # DeviceLoader
    "loader-int": (lambda: DeviceLoader(3, "cpu"), TypeError, "loader must be iterable"),
    "device-none": (lambda: DeviceLoader([], None), TypeError, "device must be"),
    "prefetch-int": (lambda: DeviceLoader([], "cpu", prefetch=1), TypeError, "prefetch must"),
    "transforms-str": (lambda: DeviceLoader([], "cpu", "flip"), TypeError, "transforms must"),
    "len-of-iterator": (lambda: len(DeviceLoader(iter([]), "cpu")), TypeError, "has no length"),
    "epoch-str": (lambda: DeviceLoader([], "cpu").set_epoch("1"), TypeError, "epoch must be an"),
    "epoch-negative": (lambda: DeviceLoader([], "cpu").set_epoch(-1), ValueError, "epoch must"),
    "batch-without-image": (
        lambda: list(DeviceLoader([("a", 1)], "cpu", abs)),
        TypeError,
        r"found no image in the batch \(tuple\)",
    ),
    "worker_context-fork": (lambda: worker_context("fork"), ValueError, "method must be"),
    "worker_context-int": (lambda: worker_context(3), ValueError, "method must be"),  # type: ignore[arg-type]
    "per_sample-none": (lambda: PerSample(None), TypeError, "transform must be callable"),  # type: ignore[arg-type]
    # Regions
    "regions-str": (lambda: Regions("abc"), TypeError, "Regions: data must be"),
    "regions-none": (lambda: Regions(None), TypeError, "Regions: data must be"),
    "regions-ragged": (lambda: Regions([[1, 2], [3]]), TypeError, "Regions: data must be"),
    "regions-device": (lambda: Regions([[0, 0, 1, 1]], device="gpu"), TypeError, "device"),
    "regions-dtype-str": (
        lambda: Regions([[0, 0, 1, 1]], dtype="int64"),  # type: ignore[arg-type]
        TypeError,
        "integer dtype, got 'int64'",
    ),
    "regions-float-values": (lambda: Regions([[0.5, 0, 1, 1]]), ValueError, "whole pixel"),
    "regions-nan": (lambda: Regions([[float("nan"), 0, 1, 1]]), ValueError, "whole pixel"),
    "regions-canvas-huge": (
        lambda: Regions([[0, 0, 1, 1]], canvas_size=(2**70, 3)),
        ValueError,
        "canvas_size must lie in",
    ),
    "regions-canvas-bool": (
        lambda: Regions([[0, 0, 1, 1]], canvas_size=(True, 3)),
        TypeError,
        "canvas_size must be",
    ),
    # RayPadBatch
    "ray-device-meta": (lambda: RayPadBatch(device="meta"), ValueError, "device must be 'cpu'"),
    "ray-region-is-image": (
        lambda: RayPadBatch(region_column="image"),
        ValueError,
        "region_column and image_column must differ",
    ),
    "ray-key-is-image": (lambda: RayPadBatch(key_column="image"), ValueError, "key_column must"),
    "ray-seed-none": (lambda: RayPadBatch(seed=None), TypeError, "seed must be an int"),  # type: ignore[arg-type]
    "ray-channels_last-str": (lambda: RayPadBatch(channels_last="yes"), TypeError, "channels_last"),  # type: ignore[arg-type]
    "ray-column-int": (
        lambda: RayPadBatch()({"image": 3, "path": ["a"]}),
        TypeError,
        "column 'image' must hold one image per row",
    ),
    "ray-empty-batch": (
        lambda: RayPadBatch()({"image": [], "path": []}),
        ValueError,
        "empty batch: column 'image'",
    ),
    "ray-empty-image": (
        lambda: RayPadBatch()({"image": [np.zeros((0, 3, 3), np.uint8)], "path": ["a.png"]}),
        ValueError,
        "image 'a.png': the image is empty",
    ),
    "ray-complex": (
        lambda: RayPadBatch()({"image": [np.zeros((3, 3, 3), np.complex64)], "path": ["a"]}),
        TypeError,
        "image 'a': pixels must be real numbers",
    ),
    "ray-keys-str": (
        lambda: RayPadBatch().make_params("ab", [(1, 2), (2, 2)]),
        TypeError,
        "keys must be a sequence",
    ),
    # distributed
    "local_rank-str": (lambda: local_rank("1"), TypeError, "index must be an int"),  # type: ignore[arg-type]
    "local_rank-negative": (lambda: local_rank(-1), ValueError, "index must be an int >= 0"),
    "rank_generator-seed": (lambda: rank_generator(1.0), TypeError, "seed must be an int"),  # type: ignore[arg-type]
    "rank_generator-rank": (lambda: rank_generator(1, "0"), TypeError, "rank must be an int"),  # type: ignore[arg-type]
    "rank_generator-negative": (lambda: rank_generator(1, -2), ValueError, "rank must be"),
    "visible_devices-bytes": (lambda: visible_devices(b"0,1"), TypeError, "value must be a str"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_arguments_are_named(name: str) -> None:
    call, error, match = CASES[name]
    with pytest.raises(error, match=match):
        call()


def test_odd_but_valid_values_give_what_they_mean() -> None:
    # Negative and huge staggers are taken modulo the tile's width, as the texture pad does.
    tile = torch.arange(12, dtype=torch.uint8).reshape(3, 4)
    a = PadCollate(8, texture=tile, stagger=-1, random_offset=False)(IMAGES)
    b = PadCollate(8, texture=tile, stagger=3, random_offset=False)(IMAGES)
    assert torch.equal(a, b)
    # Any int seed (negative, beyond 64 bits) is a seed of its own, the same on every call.
    for seed in (-5, 2**70):
        x = RayPadBatch(8, placement="random", seed=seed)(ROWS)["region"]
        assert np.array_equal(x, RayPadBatch(8, placement="random", seed=seed)(ROWS)["region"])
    assert torch.equal(
        torch.randint(0, 9, (4,), generator=rank_generator(2**200, 3)),
        torch.randint(0, 9, (4,), generator=rank_generator(2**200, 3)),
    )
    # A fractional fill on an integer image truncates, as torchvision's does.
    out = PadCollate(6, padding_mode="constant", fill=7.9, placement="top_left")(IMAGES[:1])
    assert out[0, :, 5].unique().tolist() == [7]
    # Images that need grad, or are not contiguous, are padded as they are.
    x = torch.rand(3, 4, 5, requires_grad=True)
    padded = PadCollate(padding_mode="constant")([x, x.detach().transpose(1, 2)])
    assert padded.shape == (2, 3, 5, 5)
    # Zero-channel images and float Regions data holding whole numbers are fine.
    assert PadCollate()([torch.zeros(0, 2, 3)] * 2).shape == (2, 0, 2, 3)
    assert Regions(torch.tensor([[0.0, 1.0, 2.0, 3.0]])).tolist() == [[0, 1, 2, 3]]
