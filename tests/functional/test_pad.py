"""pad(): standard modes against torchvision, torch.nn.functional.pad and numpy.pad."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
import textwrap

import numpy as np
import PIL.Image
import pytest
import torch
import torch.nn.functional as nnF
from reference import (
    STANDARD_MODES,
    assert_bitwise_equal,
    fill_values,
    numpy_pad,
    pad_ref,
    random_image,
)
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as tvF

import tipad_transforms.functional as F

# (left, top, right, bottom) paddings for a 5x6 (H x W) image.
SMALL_PADS = [0, 1, (2, 3), (1, 0, 4, 2), (5, 4, 0, 1)]  # < size: every library accepts these
LARGE_PADS = [(7, 0, 0, 0), (0, 11, 0, 0), (13, 9, 17, 12), 25]  # > size: numpy.pad semantics


# ---------------------------------------------------------------------------------------------
# hand-pinned rows (the docstring's examples)


@pytest.mark.parametrize(
    ("mode", "row"),
    [
        ("constant", [9, 9, 1, 2, 3, 4, 9, 9]),
        ("edge", [1, 1, 1, 2, 3, 4, 4, 4]),
        ("replicate", [1, 1, 1, 2, 3, 4, 4, 4]),
        ("reflect", [3, 2, 1, 2, 3, 4, 3, 2]),
        ("symmetric", [2, 1, 1, 2, 3, 4, 4, 3]),
        ("circular", [3, 4, 1, 2, 3, 4, 1, 2]),
        ("wrap", [3, 4, 1, 2, 3, 4, 1, 2]),
    ],
)
def test_documented_rows(mode: str, row: list[int]) -> None:
    x = torch.tensor([[1, 2, 3, 4]], dtype=torch.int16)
    got = F.pad(x, (2, 0), fill=9, padding_mode=mode)
    assert got.tolist() == [row]


@pytest.mark.parametrize(
    ("mode", "row"),
    [
        # [1, 2, 3] padded by 5 on both sides: reflections and wraps repeat (numpy.pad).
        ("reflect", [2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2]),
        ("symmetric", [2, 3, 3, 2, 1, 1, 2, 3, 3, 2, 1, 1, 2]),
        ("circular", [2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]),
        ("edge", [1, 1, 1, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3]),
    ],
)
def test_padding_larger_than_image_by_hand(mode: str, row: list[int]) -> None:
    x = torch.tensor([[1.0, 2, 3]])
    assert F.pad(x, (5, 0), padding_mode=mode).tolist() == [row]


# ---------------------------------------------------------------------------------------------
# other libraries, where they accept the input


@pytest.mark.parametrize("padding", SMALL_PADS)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float64])
def test_matches_torchvision(padding: object, mode: str, dtype: torch.dtype) -> None:
    x = random_image((2, 3, 5, 6), dtype, seed=1)
    fill = 7 if mode == "constant" else 0
    want = tvF.pad(x, padding, fill=fill, padding_mode=mode)
    assert_bitwise_equal(F.pad(x, padding, padding_mode=mode, fill=fill), want)


def test_matches_torchvision_symmetric_at_image_size() -> None:
    x = random_image((3, 5, 6), seed=2)
    want = tvF.pad(x, [6, 5, 6, 5], padding_mode="symmetric")
    assert_bitwise_equal(F.pad(x, (6, 5, 6, 5), padding_mode="symmetric"), want)


@pytest.mark.parametrize(
    ("mode", "torch_mode", "pads"),
    [
        ("constant", "constant", [(1, 2, 3, 4), (9, 0, 0, 12)]),
        ("edge", "replicate", [(1, 2, 3, 4), (9, 0, 0, 12)]),
        ("reflect", "reflect", [(1, 2, 3, 4), (5, 4, 0, 0), (0, 0, 5, 4)]),  # torch: pad < size
        ("circular", "circular", [(1, 2, 3, 4), (6, 5, 0, 0), (0, 0, 6, 5)]),  # pad <= size
    ],
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_matches_torch_nn_functional_pad(
    mode: str, torch_mode: str, pads: list[tuple[int, int, int, int]], dtype: torch.dtype
) -> None:
    x = random_image((2, 3, 5, 6), dtype, seed=3)
    for left, top, right, bottom in pads:
        kwargs = {"value": 3} if mode == "constant" else {}
        want = nnF.pad(x, (left, right, top, bottom), mode=torch_mode, **kwargs)
        got = F.pad(x, (left, top, right, bottom), fill=3, padding_mode=mode)
        assert_bitwise_equal(got, want)


@pytest.mark.parametrize("padding", SMALL_PADS + LARGE_PADS)
@pytest.mark.parametrize("mode", STANDARD_MODES)
def test_matches_numpy_pad(padding: object, mode: str) -> None:
    x = random_image((2, 3, 5, 6), torch.float32, seed=4)
    got = F.pad(x, padding, fill=-1.5, padding_mode=mode)
    assert_bitwise_equal(got, numpy_pad(x, padding, mode, fill=-1.5))
    assert_bitwise_equal(got, pad_ref(x, padding, mode, fill=-1.5))


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (6, 1), (2, 2)])
@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric", "circular"])
def test_tiny_images_with_large_padding(shape: tuple[int, int], mode: str) -> None:
    x = random_image((2, *shape), torch.int16, seed=5)
    got = F.pad(x, (6, 5, 4, 7), padding_mode=mode)
    assert_bitwise_equal(got, numpy_pad(x, (6, 5, 4, 7), mode))


@pytest.mark.parametrize("mode", STANDARD_MODES)
@pytest.mark.parametrize("shape", [(5, 6), (1, 5, 6), (3, 5, 6), (2, 3, 5, 6), (2, 2, 3, 5, 6)])
def test_leading_dims(mode: str, shape: tuple[int, ...]) -> None:
    x = random_image(shape, torch.float32, seed=6)
    got = F.pad(x, (3, 8, 2, 1), fill=2, padding_mode=mode)
    assert_bitwise_equal(got, pad_ref(x, (3, 8, 2, 1), mode, fill=2))


def test_aliases() -> None:
    x = random_image((3, 4, 5), seed=7)
    assert_bitwise_equal(
        F.pad(x, (2, 9), padding_mode="replicate"), F.pad(x, (2, 9), padding_mode="edge")
    )
    assert_bitwise_equal(
        F.pad(x, (2, 9), padding_mode="wrap"), F.pad(x, (2, 9), padding_mode="circular")
    )
    assert not torch.equal(
        F.pad(x, (2, 9), padding_mode="wrap"), F.pad(x, (2, 9), padding_mode="reflect")
    )


# ---------------------------------------------------------------------------------------------
# constant fill


@pytest.mark.parametrize(
    ("dtype", "fill"),
    [
        (torch.uint8, 200),
        (torch.uint8, [0, 128, 255]),
        (torch.int8, (-128, 5, 127)),
        (torch.int64, 2**62 + 1),
        (torch.float32, -2.5),
        (torch.float32, torch.tensor([1.0, -0.0, float("inf")])),
        (torch.float16, 0.1),
        (torch.bfloat16, [1.5, 2.5, -3.0]),
        (torch.float64, float("nan")),
        (torch.bool, True),
        (torch.bool, [True, False, True]),
        (torch.int16, 3.0),  # an integral float is representable
    ],
)
def test_constant_fill(dtype: torch.dtype, fill: object) -> None:
    x = random_image((2, 3, 4, 5), dtype, seed=8)
    got = F.pad(x, (1, 2, 3, 4), padding_mode="constant", fill=fill)
    assert_bitwise_equal(got, pad_ref(x, (1, 2, 3, 4), "constant", fill))
    values = fill_values(fill, 3, dtype)
    for c in range(3):
        border = got[:, c, 0]  # the whole top row is border
        assert_bitwise_equal(border, values[c].expand_as(border))


def test_fill_precision_is_torchvisions() -> None:
    x = random_image((2, 1, 1), torch.float64, seed=15)
    assert F.pad(x, 1, fill=0.1)[1, 2, 2].item() == 0.1  # a number: one rounding, to float64
    # A sequence goes through torch.tensor's default dtype first, as in torchvision.
    got = F.pad(x, 1, fill=[0.1, 1 / 3])
    want = tvF.pad(x, 1, fill=[0.1, 1 / 3])
    assert_bitwise_equal(got, want)
    assert got[0, 0, 0].item() == torch.tensor(0.1, dtype=torch.float32).item()
    # A float64 tensor is a typed value: taken as it is.
    exact = F.pad(x, 1, fill=torch.tensor([0.1, 1 / 3], dtype=torch.float64))
    assert exact[0, 0, 0].item() == 0.1 and exact[1, 0, 0].item() == 1 / 3
    big = F.pad(torch.zeros(1, 1, 1, dtype=torch.int64), 1, fill=2**63 - 1)
    assert big[0, 0, 0].item() == 2**63 - 1


def test_negative_zero_fill_is_bit_exact() -> None:
    x = random_image((3, 2, 2), torch.float32, seed=9)
    got = F.pad(x, 1, fill=-0.0)
    assert bool((got[:, 0].view(torch.int32) == torch.tensor(-0.0).view(torch.int32)).all())


def test_fill_is_ignored_by_other_modes() -> None:
    x = random_image((3, 4, 4), torch.uint8, seed=10)
    assert_bitwise_equal(
        F.pad(x, 2, fill=[1, 2, 3], padding_mode="reflect"), F.pad(x, 2, padding_mode="reflect")
    )


# ---------------------------------------------------------------------------------------------
# out=, inputs, types


@pytest.mark.parametrize("mode", STANDARD_MODES)
def test_out_is_fully_written(mode: str) -> None:
    x = random_image((2, 3, 4, 5), torch.float64, seed=11)
    want = pad_ref(x, (6, 1, 2, 7), mode, fill=0.5)
    for poison in (float("nan"), -1e300):
        out = torch.full(want.shape, poison, dtype=torch.float64)
        assert F.pad(x, (6, 1, 2, 7), out=out, padding_mode=mode, fill=0.5) is out
        assert_bitwise_equal(out, want)


@pytest.mark.parametrize("mode", STANDARD_MODES)
def test_inputs_unchanged_and_layouts_agree(mode: str) -> None:
    x = random_image((2, 3, 5, 6), torch.float32, seed=12)
    fill = torch.tensor([1.0, 2.0, 3.0])
    saved_x, saved_fill = x.clone(), fill.clone()
    want = F.pad(x, (7, 2, 3, 8), padding_mode=mode, fill=fill)
    assert_bitwise_equal(x, saved_x)
    assert_bitwise_equal(fill, saved_fill)
    cl = x.to(memory_format=torch.channels_last)
    assert_bitwise_equal(F.pad(cl, (7, 2, 3, 8), padding_mode=mode, fill=fill), want)
    strided = torch.stack([x, x + 1], dim=-2).flatten(-3, -2)[..., ::2, :]
    assert not strided.is_contiguous()
    assert_bitwise_equal(F.pad(strided, (7, 2, 3, 8), padding_mode=mode, fill=fill), want)


def test_tv_tensors_and_pil() -> None:
    video = tv_tensors.Video(random_image((2, 3, 4, 5), torch.uint8, seed=13))
    got = F.pad(video, 2, padding_mode="symmetric")
    assert type(got) is tv_tensors.Video
    assert_bitwise_equal(got.as_subclass(torch.Tensor), pad_ref(video, 2, "symmetric"))
    arr = random_image((5, 4), torch.uint8, seed=14).numpy()
    img = PIL.Image.fromarray(arr, mode="L")
    padded = F.pad(img, (1, 2, 3, 4), padding_mode="reflect")
    assert isinstance(padded, PIL.Image.Image) and padded.mode == "L"
    np.testing.assert_array_equal(np.array(padded), np.pad(arr, ((2, 4), (1, 3)), "reflect"))


# ---------------------------------------------------------------------------------------------
# empty images (run in a child: a crash here must not take the whole suite down)

_EMPTY_SCRIPT = textwrap.dedent(
    """
    import torch
    import tipad_transforms.functional as F
    cases = []
    for shape in [(3, 0, 4), (3, 4, 0), (0, 3, 4, 4), (2, 0, 4, 4)]:
        x = torch.zeros(shape)
        cases.append(("constant", tuple(F.pad(x, (1, 2, 3, 4), fill=5.0).shape)))
        cases.append(("texture", tuple(F.texture_pad(x, 2, torch.rand(2, 3)).shape)))
        cases.append(("reflect-0", tuple(F.pad(x, 0, padding_mode="reflect").shape)))
    y = F.pad(torch.zeros(3, 0, 4), (1, 2, 3, 4), fill=5.0)
    assert bool((y == 5).all()), y
    print(cases)
    """
)


def test_empty_images() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _EMPTY_SCRIPT], capture_output=True, text=True, timeout=180
    )
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        pytest.fail(f"padding an empty image killed the process with {name}")
    assert proc.returncode == 0, f"child exited with {proc.returncode}: {proc.stderr[-2000:]}"
    got = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    want = []
    for shape in [(3, 0, 4), (3, 4, 0), (0, 3, 4, 4), (2, 0, 4, 4)]:
        want.append(("constant", (*shape[:-2], shape[-2] + 6, shape[-1] + 4)))
        want.append(("texture", (*shape[:-2], shape[-2] + 4, shape[-1] + 4)))
        want.append(("reflect-0", shape))
    assert got == want


def test_non_constant_mode_on_empty_image_is_rejected() -> None:
    with pytest.raises(ValueError, match="non-empty image"):
        F.pad(torch.zeros(3, 0, 4), 2, padding_mode="reflect")
