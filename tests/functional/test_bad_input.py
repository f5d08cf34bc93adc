"""Bad input: a TypeError / ValueError whose message names the offending argument."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from reference import assert_bitwise_equal, random_image

import tipad_transforms.functional as F
from tipad_transforms import ops
from tipad_transforms.transforms import Pad, TexturePad

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


# ---------------------------------------------------------------------------------------------
# tensors with no plain strided memory: refused by name before anything reads them


def _quantized(t: torch.Tensor) -> torch.Tensor:
    return torch.quantize_per_tensor(t.float(), 0.1, 0, torch.quint8)


def _nested(t: torch.Tensor) -> torch.Tensor:
    return torch.nested.nested_tensor([t, t])


def _jagged(t: torch.Tensor) -> torch.Tensor:
    return torch.nested.nested_tensor([t, t], layout=torch.jagged)


def _csr(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1).to_sparse_csr()


KINDS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "quantized": (_quantized, "quantized"),
    "sparse_coo": (lambda t: t.to_sparse(), "sparse_coo"),
    "sparse_csr": (_csr, "sparse_csr"),
    "nested": (_nested, "nested"),
    "jagged": (_jagged, "nested"),
}

_OP_REST = (
    torch.empty(0),
    torch.empty(0),
    torch.zeros(1, 2, dtype=torch.int32),
    torch.zeros(1, dtype=torch.int32),
    0,
)
_PLACE = torch.zeros(1, 2, dtype=torch.long)
_W = torch.zeros(5)
_K = torch.rand(3, 4, 5)

# argument name -> (the call with that argument replaced, a tensor of the argument's usual kind)
ARGUMENTS: dict[str, tuple[str, Callable[[torch.Tensor], Any], torch.Tensor]] = {
    "pad inpt": ("inpt", lambda t: F.pad(t, 1), X[0]),
    "pad reflect inpt": ("inpt", lambda t: F.pad(t, 1, padding_mode="reflect"), X[0]),
    "pad fill": ("fill", lambda t: F.pad(X, 1, fill=t), torch.rand(3)),
    "pad out": ("out", lambda t: F.pad(X[0, :, :2, :3], 1, out=t), torch.rand(3, 4, 5)),
    "texture_pad inpt": ("inpt", lambda t: F.texture_pad(t, 1, TEX), X[0]),
    "texture_pad texture": ("texture", lambda t: F.texture_pad(X, 1, t), TEX),
    "texture_pad offset": (
        "offset",
        lambda t: F.texture_pad(X, 1, TEX, offset=t),
        torch.ones(2, 2, dtype=torch.long),
    ),
    "texture_pad texture_index": (
        "texture_index",
        lambda t: F.texture_pad(X, 1, BANK, texture_index=t),
        torch.ones(2, dtype=torch.long),
    ),
    "brick_pad inpt": ("inpt", lambda t: F.brick_pad(t, 1), X[0]),
    "pad_stack images": ("images[0]", lambda t: F.pad_stack([t], (6, 7), _PLACE), X[0]),
    "pad_stack placement": ("placement", lambda t: F.pad_stack([X[0]], (6, 7), t), _PLACE),
    "Pad()": ("inpt", lambda t: Pad(1)(t), X[0]),
    "TexturePad texture": ("texture", lambda t: TexturePad(1, t), TEX),
    "ops.pad x": ("x", lambda t: ops.pad(t, [1, 1, 1, 1], "edge", *_OP_REST), X[:1]),
    "ops.pad fill": (
        "fill",
        lambda t: ops.pad(X[:1], [1, 1, 1, 1], "constant", t, *_OP_REST[1:]),
        torch.rand(3),
    ),
    "ops.pad_stack images": (
        "images",
        lambda t: ops.pad_stack(t, torch.tensor([[4, 5, 0, 0]]), [3, 4, 5], "edge", *_OP_REST),
        X[0].reshape(-1),
    ),
    "ops.wkv k": ("k", lambda t: ops.wkv(_W, _W, t, _K), _K),
    "ops.wkv state": ("state", lambda t: ops.wkv(_W, _W, _K, _K, t), torch.rand(3, 3, 5)),
    "ops.time_conv k": ("k", lambda t: ops.time_conv(torch.rand(3, 2), t), torch.rand(3, 3, 4)),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's notes on these prototype kinds
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("where", list(ARGUMENTS))
def test_tensors_without_strided_memory_are_refused_by_name(where: str, kind: str) -> None:
    # A quantized texture crashed the process (SIGSEGV in the texture cache's byte view);
    # other kinds met INTERNAL ASSERTs, "NestedTensorImpl doesn't support sizes", torch's
    # "could not run ... with arguments from the 'SparseCPU' backend" or wrong results.
    name, call, usual = ARGUMENTS[where]
    make, word = KINDS[kind]
    try:
        odd = make(usual)
    except RuntimeError:
        pytest.skip(f"torch cannot make a {kind} tensor of {usual.dtype}")
    with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be a dense .*{word}"):
        call(odd)


@pytest.mark.filterwarnings("ignore::UserWarning")  # quantized tensors are deprecated
def test_quantized_texture_no_longer_crashes() -> None:
    # The reproducer, verbatim: at 0.5.2 the texture cache's byte view of it killed the
    # process (rc 139) where it was found, and raised "Creation of quantized tensor requires
    # quantized dtype" here; now a TypeError naming texture before anything reads it.
    texture = torch.quantize_per_tensor(torch.rand(3, 2, 2), 0.1, 0, torch.quint8)
    with pytest.raises(TypeError, match=r"^texture must be a dense"):
        F.texture_pad(torch.rand(3, 4, 4), 1, texture)


META = ["pad inpt", "pad fill", "pad out", "texture_pad inpt", "texture_pad texture",
        "texture_pad offset", "texture_pad texture_index", "brick_pad inpt", "pad_stack images",
        "pad_stack placement", "Pad()", "TexturePad texture"]  # fmt: skip


@pytest.mark.parametrize("where", META)
def test_meta_tensors_are_refused_by_the_functionals(where: str) -> None:
    # A meta texture or fill reached "Cannot copy out of meta tensor; no data!", a meta image
    # with a CPU texture a device mismatch deep inside: padding needs data.
    name, call, usual = ARGUMENTS[where]
    with pytest.raises(ValueError, match=rf"^{re.escape(name)} is a meta tensor"):
        call(usual.to("meta"))


def test_meta_tensors_give_shapes_at_the_ops() -> None:
    # The ops keep torch's meta semantics: their fake implementation gives the output's shape.
    x = torch.empty(2, 3, 4, 5, device="meta")
    empty = torch.empty(0, device="meta")
    lattice = (torch.zeros(2, 2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32))
    out = ops.pad(x, [1, 2, 3, 4], "reflect", empty, empty, *(t.to("meta") for t in lattice), 0)
    assert out.device.type == "meta" and out.shape == (2, 3, 10, 9)
    y = ops.wkv(
        *(torch.empty(5, device="meta") for _ in range(2)),
        *(torch.empty(2, 3, 5, device="meta") for _ in range(2)),
    )
    assert y.device.type == "meta" and y.shape == (2, 3, 5)  # fmt: skip


@pytest.mark.parametrize("padding", [b"12", bytearray(b"\x01\x02"), "12", memoryview(b"1")])
def test_text_and_bytes_are_not_paddings(padding: Any) -> None:
    # F.pad(img, b"12") padded by 49 and 50 pixels (bytes iterate as ints); torchvision raises
    # TypeError.
    from torchvision.transforms.v2 import functional as tvF

    with pytest.raises(TypeError):
        tvF.pad(X, padding)  # the reference behaviour
    for call in (
        lambda: F.pad(X, padding),
        lambda: F.texture_pad(X, padding, TEX),
        lambda: F.brick_pad(X, padding),
        lambda: Pad(padding),
        lambda: TexturePad(padding, TEX),
    ):
        with pytest.raises(TypeError, match=r"^padding must be"):
            call()


def test_texture_pad_checks_padding_before_texture_and_out() -> None:
    # As pad does: a bad padding is named first, before any texture conversion runs.
    x = torch.zeros(3, 4, 4)
    with pytest.raises(TypeError, match="padding"):
        F.texture_pad(x, "ab", torch.zeros(5, 2, 2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="padding"):
        F.texture_pad(x, "ab", torch.zeros(3, 2, 2), out=torch.zeros(1))  # type: ignore[arg-type]
