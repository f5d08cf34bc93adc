"""Bad input: a TypeError / ValueError whose message names the offending argument."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from reference import assert_bitwise_equal, random_image

import tipad_transforms.functional as F

X = random_image((2, 3, 4, 5), torch.float32, seed=1)
XU = random_image((3, 4, 5), torch.uint8, seed=2)
TEX = random_image((3, 2, 3), torch.float32, seed=3)
BANK = random_image((2, 3, 2, 3), torch.float32, seed=4)


def _texture_pad(**overrides: Any) -> Callable[[], Any]:
    kwargs: dict[str, Any] = {"x": X, "padding": 2, "texture": TEX}
    kwargs.update(overrides)

    def call() -> Any:
        kw = dict(kwargs)
        x, padding, texture = kw.pop("x"), kw.pop("padding"), kw.pop("texture")
        return F.texture_pad(x, padding, texture, **kw)

    return call


CASES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    # x
    ("x 1-d", lambda: F.pad(torch.zeros(5), 1), ValueError, r"\binpt\b"),
    ("x 0-d", lambda: F.texture_pad(torch.tensor(1.0), 1, TEX), ValueError, r"\binpt\b"),
    ("x list", lambda: F.pad([[1, 2], [3, 4]], 1), TypeError, r"\binpt\b"),
    ("x numpy", lambda: F.pad(X.numpy(), 1), TypeError, r"\binpt\b"),
    (
        "x complex",
        lambda: F.pad(torch.zeros(1, 2, 2, dtype=torch.cfloat), 1),
        TypeError,
        r"\binpt\b",
    ),
    # padding
    ("padding crops too much", lambda: F.pad(X, -3), ValueError, "padding"),
    ("padding crops a side away", lambda: F.pad(X, (1, 2, -9, 4)), ValueError, "padding"),
    ("padding 2**63", lambda: F.pad(X, 2**63), ValueError, "padding"),
    ("padding 2**31", lambda: F.pad(X, (0, 2**31, 0, 0)), ValueError, "padding"),
    ("padding -2**31", lambda: F.pad(X, (0, 0, -(2**31), 0)), ValueError, "padding"),
    ("padding 10**9 both ways", lambda: F.pad(X, 10**9), ValueError, "padding"),
    ("offset 2**64", _texture_pad(offset=(2**64, 0)), ValueError, "offset"),
    ("offset -2**63-1", _texture_pad(offset=-(2**63) - 1), ValueError, "offset"),
    (
        "texture_index 2**64",
        _texture_pad(texture=TEX[None], texture_index=2**64),
        ValueError,
        "texture_index",
    ),
    ("padding len 3", lambda: F.pad(X, (1, 2, 3)), ValueError, "padding"),
    ("padding len 5", lambda: F.pad(X, [1, 2, 3, 4, 5]), ValueError, "padding"),
    ("padding empty", lambda: F.pad(X, []), ValueError, "padding"),
    ("padding float", lambda: F.pad(X, 1.5), TypeError, "padding"),
    ("padding float in seq", lambda: F.pad(X, (1, 2.0)), TypeError, "padding"),
    ("padding bool", lambda: F.pad(X, True), TypeError, "padding"),
    ("padding bool in seq", lambda: F.pad(X, (1, False)), TypeError, "padding"),
    ("padding str", lambda: F.pad(X, "2"), TypeError, "padding"),
    ("padding None", lambda: F.texture_pad(X, None, TEX), TypeError, "padding"),
    # mode
    ("mode unknown", lambda: F.pad(X, 1, padding_mode="mirror"), ValueError, "mode"),
    ("mode texture", lambda: F.pad(X, 1, padding_mode="texture"), ValueError, "mode"),
    ("mode case", lambda: F.pad(X, 1, padding_mode="Reflect"), ValueError, "mode"),
    ("mode not str", lambda: F.pad(X, 1, padding_mode=3), TypeError, "mode"),
    # fill
    ("fill wrong length", lambda: F.pad(X, 1, fill=[1, 2]), ValueError, "fill"),
    ("fill too long", lambda: F.pad(X, 1, fill=[1, 2, 3, 4]), ValueError, "fill"),
    ("fill 256 uint8", lambda: F.pad(XU, 1, fill=256), ValueError, "fill"),
    ("fill -1 uint8", lambda: F.pad(XU, 1, fill=-1), ValueError, "fill"),
    ("fill -0.5 uint8", lambda: F.pad(XU, 1, fill=-0.5), ValueError, "fill"),
    ("fill 1e5 float16", lambda: F.pad(XU.half(), 1, fill=1e5), ValueError, "fill"),
    ("fill nan uint8", lambda: F.pad(XU, 1, fill=float("nan")), ValueError, "fill"),
    ("fill huge int64", lambda: F.pad(XU.long(), 1, fill=2**64), ValueError, "fill"),
    ("fill str", lambda: F.pad(X, 1, fill="red"), TypeError, "fill"),
    ("fill list of str", lambda: F.pad(X, 1, fill=["a", "b", "c"]), TypeError, "fill"),
    # texture
    ("texture not tensor", _texture_pad(texture=[[0.0, 1.0]]), TypeError, "texture"),
    ("texture 1-d", _texture_pad(texture=torch.rand(4)), ValueError, "texture"),
    ("texture 5-d", _texture_pad(texture=torch.rand(1, 1, 3, 2, 2)), ValueError, "texture"),
    ("texture channels", _texture_pad(texture=torch.rand(2, 2, 2)), ValueError, "texture"),
    ("texture bank channels", _texture_pad(texture=torch.rand(2, 4, 2, 2)), ValueError, "texture"),
    ("texture empty h", _texture_pad(texture=torch.rand(3, 0, 2)), ValueError, "texture"),
    ("texture empty w", _texture_pad(texture=torch.rand(0, 2)), ValueError, "texture"),
    ("texture empty bank", _texture_pad(texture=torch.rand(0, 3, 2, 2)), ValueError, "texture"),
    ("texture > 1 for uint8", _texture_pad(x=XU, texture=TEX.abs() + 1), ValueError, "texture"),
    ("texture < 0 for uint8", _texture_pad(x=XU, texture=-TEX.abs() - 0.1), ValueError, "texture"),
    (
        "texture nan for uint8",
        _texture_pad(x=XU, texture=torch.tensor([[0.5, float("nan")]])),
        ValueError,
        "texture",
    ),
    (
        "texture 2 for bool",
        _texture_pad(x=XU.bool(), texture=torch.full((2, 2), 2.0)),
        ValueError,
        "texture",
    ),
    # texture_index
    ("index too large", _texture_pad(texture=BANK, texture_index=2), ValueError, "texture_index"),
    ("index negative", _texture_pad(texture=BANK, texture_index=-1), ValueError, "texture_index"),
    (
        "index per sample outside",
        _texture_pad(texture=BANK, texture_index=torch.tensor([0, 5])),
        ValueError,
        "texture_index",
    ),
    (
        "index beyond int32",
        _texture_pad(texture=BANK, texture_index=torch.tensor([0, 2**32])),
        ValueError,
        "texture_index",
    ),
    (
        "index wrong shape",
        _texture_pad(texture=BANK, texture_index=torch.tensor([0, 1, 0])),
        ValueError,
        "texture_index",
    ),
    (
        "index float",
        _texture_pad(texture=BANK, texture_index=torch.tensor([0.0, 1.0])),
        TypeError,
        "texture_index",
    ),
    ("index str", _texture_pad(texture=BANK, texture_index="0"), TypeError, "texture_index"),
    # offset
    ("offset 3 values", _texture_pad(offset=(1, 2, 3)), ValueError, "offset"),
    (
        "offset per sample wrong",
        _texture_pad(offset=torch.zeros(3, 2, dtype=torch.long)),
        ValueError,
        "offset",
    ),
    (
        "offset last dim 3",
        _texture_pad(offset=torch.zeros(2, 3, dtype=torch.long)),
        ValueError,
        "offset",
    ),
    (
        "offset too many dims",
        _texture_pad(offset=torch.zeros(1, 2, 2, dtype=torch.long)),
        ValueError,
        "offset",
    ),
    ("offset float", _texture_pad(offset=(1.0, 2.0)), TypeError, "offset"),
    ("offset float tensor", _texture_pad(offset=torch.zeros(2, 2)), TypeError, "offset"),
    ("offset bools", _texture_pad(offset=(True, False)), TypeError, "offset"),
    ("offset None", _texture_pad(offset=None), TypeError, "offset"),
    # stagger
    ("stagger float", _texture_pad(stagger=1.5), TypeError, "stagger"),
    ("stagger bool", _texture_pad(stagger=True), TypeError, "stagger"),
    # out
    ("out wrong shape", lambda: F.pad(X, 1, out=torch.empty(2, 3, 6, 6)), ValueError, r"\bout\b"),
    (
        "out wrong dtype",
        lambda: F.pad(X, 1, out=torch.empty(2, 3, 6, 7, dtype=torch.float64)),
        TypeError,
        r"\bout\b",
    ),
    (
        "out wrong device",
        lambda: F.pad(X, 1, out=torch.empty(2, 3, 6, 7, device="meta")),
        ValueError,
        r"\bout\b",
    ),
    (
        "out non-contiguous",
        lambda: F.pad(X, 1, out=torch.empty(2, 3, 7, 6).transpose(-1, -2)),
        ValueError,
        r"\bout\b",
    ),
    ("out not tensor", lambda: F.pad(X, 1, out=[0.0]), TypeError, r"\bout\b"),
    (
        "out with grad x",
        lambda: F.pad(X.clone().requires_grad_(), 1, out=torch.empty(2, 3, 6, 7)),
        ValueError,
        r"\bout\b",
    ),
    (
        "out with grad texture",
        _texture_pad(texture=TEX.clone().requires_grad_(), out=torch.empty(2, 3, 8, 9)),
        ValueError,
        r"\bout\b",
    ),
    (
        "out requires grad",
        lambda: F.pad(X, 1, out=torch.empty(2, 3, 6, 7, requires_grad=True)),
        ValueError,
        r"\bout\b",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_named(call: Callable[[], Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_out_aliasing_x_is_rejected() -> None:
    store = torch.zeros(2 * 3 * 6 * 7)
    x = store[: 2 * 3 * 4 * 5].view(2, 3, 4, 5)
    with pytest.raises(ValueError, match=r"\bout\b"):
        F.pad(x, 1, out=store.view(2, 3, 6, 7))


def test_failed_calls_leave_inputs_and_out_alone() -> None:
    x = XU.clone()
    out = torch.full((3, 6, 7), 77, dtype=torch.uint8)
    with pytest.raises(ValueError, match="fill"):
        F.pad(x, 1, fill=300, out=out)
    with pytest.raises(ValueError, match="texture"):
        F.texture_pad(x, 1, TEX + 2, out=out)
    assert_bitwise_equal(x, XU)
    assert bool((out == 77).all())


@pytest.mark.parametrize("fn", ["pad", "texture_pad", "brick_pad"])
def test_pil_and_tensor_paths_validate_alike(fn: str) -> None:
    import PIL.Image

    img = PIL.Image.new("RGB", (4, 3))
    args: dict[str, tuple[Any, ...]] = {
        "pad": (-2,),
        "texture_pad": (-2, torch.rand(3, 2, 2)),
        "brick_pad": (-2,),
    }
    with pytest.raises(ValueError, match="padding"):
        getattr(F, fn)(img, *args[fn])
