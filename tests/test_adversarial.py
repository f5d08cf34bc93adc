"""Adversarial sweep over every public function and class of ``tipad_transforms.functional``,
``tipad_transforms.ops`` and ``tipad_transforms.transforms``: each argument in turn replaced by
other types, dtypes (complex, bool, quantized and the unsigned ones included), shapes, layouts
(sparse, nested), the meta device, huge and negative numbers, NaN and infinite fills.

Every case ends one of two ways: a TypeError or ValueError whose message names the argument
that was varied, or a result equal to an independent reference (``tests/reference.py``'s numpy
index maps, numpy and torchvision on PIL images, float64 recurrences and convolutions written
here from the formulas); and the inputs are never modified. Any other exception fails the case.

The sweep runs in this process, no subprocess per case (thousands of them would take minutes):
a case that crashes the interpreter (a segfault) ends the pytest run, which fails it, and
faulthandler (asserted on below) prints the crashing case's stack.
"""

from __future__ import annotations

import faulthandler
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch
import torch.nn.functional as nnF
from reference import (
    assert_bitwise_equal,
    bits,
    convert_texture,
    pad_ref,
    random_image,
    sides,
    texture_pad_ref,
)
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as tvF

import tipad_transforms.functional as F
from tipad_transforms import ops
from tipad_transforms.transforms import BrickPad, Pad, TexturePad

# ---------------------------------------------------------------------------------------------
# the cases


@dataclass(frozen=True)
class Case:
    """``call()`` must raise a TypeError/ValueError naming ``arg`` or return a result that
    ``check`` accepts (it compares with the reference); ``None`` for ``check``: no result is
    acceptable, the call must be refused."""

    api: str
    arg: str
    label: str
    call: Callable[[], Any]
    check: Callable[[Any], None] | None
    inputs: tuple[Any, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.api}-{self.arg}-{self.label}"


CASES: list[Case] = []


def _readable(t: Any) -> bool:
    """Whether ``t`` is a tensor whose bits a snapshot can hold (the never-modified check)."""
    return (
        isinstance(t, torch.Tensor)
        and t.layout == torch.strided
        and not t.is_quantized
        and not t.is_nested
        and not t.is_meta
        and not t.is_complex()
    )


def _tensors_in(values: Any) -> tuple[torch.Tensor, ...]:
    found: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, (list, tuple)):
            found.extend(_tensors_in(v))
        elif _readable(v):
            found.append(v)
    return tuple(found)


def _quiet(fn: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        # torch's notes on prototype tensor kinds and deprecated quantization, the torch-route
        # warning of a refused device: the outcome is what the sweep checks.
        warnings.simplefilter("ignore")
        return fn()


# Image-like tensors: random values spanning each dtype.
SHAPE = (2, 3, 4, 5)
X = random_image(SHAPE, torch.float32, seed=1)
TEX = random_image((3, 2, 3), torch.float32, seed=2).sigmoid()  # in [0, 1]: any image dtype
BANK = random_image((2, 3, 2, 3), torch.float32, seed=3).sigmoid()
DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
]


def _image_of(dtype: torch.dtype, shape: tuple[int, ...] = SHAPE, seed: int = 1) -> torch.Tensor:
    if dtype in (torch.uint16, torch.uint32, torch.uint64):
        return random_image(shape, torch.int64, seed=seed).abs().remainder(2**15).to(dtype)
    return random_image(shape, dtype, seed=seed)


def tensor_variants(base: torch.Tensor, *, dtypes: bool = True) -> Iterator[tuple[str, Any]]:
    """Stand-ins for a tensor argument: other dtypes, kinds, shapes, devices and non-tensors."""
    if dtypes:
        for dtype in DTYPES:
            if dtype != base.dtype:
                yield str(dtype).split(".")[-1], _image_of(dtype, tuple(base.shape))
    yield "complex64", base.to(torch.complex64)
    yield "quantized", _quiet(lambda: torch.quantize_per_tensor(base.float(), 0.1, 0, torch.quint8))
    yield "sparse_coo", base.to_sparse()
    if base.dim() >= 2:
        yield "sparse_csr", _quiet(lambda: base.reshape(-1, base.shape[-1]).to_sparse_csr())
    yield "nested", _quiet(lambda: torch.nested.nested_tensor([base, base]))
    yield "jagged", _quiet(lambda: torch.nested.nested_tensor([base, base], layout=torch.jagged))
    yield "meta", base.to("meta")
    yield "0-d", base.reshape(-1)[0].clone()
    yield "1-d", base.reshape(-1).clone()
    yield "empty", base[..., :0].clone()
    if base.dim() >= 2:
        yield "strided", base.mT.contiguous().mT  # same shape, another memory order
    yield "extra dim", base[None].clone()
    if base.is_floating_point():
        yield "requires_grad", base.clone().requires_grad_()
        yield "nan", torch.full_like(base, float("nan"))
        yield "inf", torch.full_like(base, float("-inf"))
    yield "None", None
    yield "int", 3
    yield "str", "x"
    yield "list", base.tolist()
    yield "numpy", base.numpy()


INTS: list[tuple[str, Any]] = [
    ("0", 0),
    ("1", 1),
    ("-1", -1),
    ("7", 7),
    ("2**31", 2**31),
    ("-2**31", -(2**31)),
    ("2**63", 2**63),
    ("-2**63-1", -(2**63) - 1),
    ("2**64", 2**64),
    ("bool", True),
    ("float", 1.5),
    ("float 2.0", 2.0),
    ("nan", float("nan")),
    ("inf", float("inf")),
    ("None", None),
    ("str", "1"),
    ("bytes", b"1"),
    ("tensor", torch.tensor(2)),
    ("complex", 1j),
]
PADDINGS: list[tuple[str, Any]] = [
    *INTS,
    ("(1, 2)", (1, 2)),
    ("[3]", [3]),
    ("(1, 2, 3, 4)", (1, 2, 3, 4)),
    ("crop (-1, 0, 2, -2)", (-1, 0, 2, -2)),
    ("crop all", (-3, 0, -3, 0)),
    ("(1, 2, 3)", (1, 2, 3)),
    ("()", ()),
    ("(1.0, 2)", (1.0, 2)),
    ("(True, 2)", (True, 2)),
    ("(2**31, 0)", (2**31, 0)),
    ("10**9", 10**9),
    ("b'12'", b"12"),
    ("'12'", "12"),
    ("range(2)", range(2)),
    ("nested list", [[1], [2]]),
]
FILLS: list[tuple[str, Any]] = [
    ("0", 0),
    ("1", 1),
    ("-1", -1),
    ("0.5", 0.5),
    ("-0.0", -0.0),
    ("nan", float("nan")),
    ("inf", float("inf")),
    ("-inf", float("-inf")),
    ("255", 255),
    ("256", 256),
    ("2**63", 2**63),
    ("-2**63", -(2**63)),
    ("2**64", 2**64),
    ("1e300", 1e300),
    ("bool", True),
    ("None", None),
    ("per channel", [1, 2, 3]),
    ("per channel floats", (0.5, -0.0, float("nan"))),
    ("one in a list", [7]),
    ("two values", [1, 2]),
    ("four values", [1, 2, 3, 4]),
    ("str", "0"),
    ("bytes", b"0"),
    ("complex", 1j),
    ("dict", {"x": 1}),
    ("tensor", torch.tensor([1.0, 2.0, 3.0])),
    ("tensor 1", torch.tensor(4)),
    ("list of str", ["a"]),
]
MODES: list[tuple[str, Any]] = [
    (mode, mode)
    for mode in ("constant", "edge", "reflect", "symmetric", "circular", "replicate", "wrap")
] + [
    ("texture", "texture"),
    ("mirror", "mirror"),
    ("upper", "REFLECT"),
    ("empty", ""),
    ("None", None),
    ("int", 1),
]
OFFSETS: list[tuple[str, Any]] = [
    ("(1, 2)", (1, 2)),
    ("5", 5),
    ("-3", -3),
    ("(2**63, 0)", (2**63, 0)),
    ("(-2**62, 2**62)", (-(2**62), 2**62)),
    ("(1,)", (1,)),
    ("(1, 2, 3)", (1, 2, 3)),
    ("(1.0, 2)", (1.0, 2)),
    ("(True, 0)", (True, 0)),
    ("None", None),
    ("str", "xy"),
    ("tensor (2,)", torch.tensor([1, -2])),
    ("tensor per sample", torch.tensor([[1, 2], [-3, 4]])),
    ("tensor int32", torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)),
    ("tensor float", torch.tensor([1.0, 2.0])),
    ("tensor bool", torch.tensor([True, False])),
    ("tensor wrong shape", torch.ones(3, 2, dtype=torch.long)),
    ("tensor huge", torch.tensor([2**62, -(2**62)])),
]
INDICES: list[tuple[str, Any]] = [
    ("None", None),
    ("0", 0),
    ("1", 1),
    ("2", 2),
    ("-1", -1),
    ("2**63", 2**63),
    ("bool", True),
    ("float", 1.0),
    ("str", "random"),
    ("tensor", torch.tensor([1, 0])),
    ("tensor 0-d", torch.tensor(1)),
    ("tensor out of bank", torch.tensor([0, 5])),
    ("tensor negative", torch.tensor([0, -1])),
    ("tensor float", torch.tensor([1.0, 0.0])),
    ("tensor wrong shape", torch.tensor([0, 1, 0])),
]


# ---------------------------------------------------------------------------------------------
# references


def _plain(t: Any) -> Any:
    return t.as_subclass(torch.Tensor) if isinstance(t, torch.Tensor) else t


def _crop(out: torch.Tensor, padding: Any) -> torch.Tensor:
    left, top, right, bottom = sides(padding)
    h, w = out.shape[-2], out.shape[-1]
    return out[
        ..., max(-top, 0) : h - max(-bottom, 0), max(-left, 0) : w - max(-right, 0)
    ].contiguous()


def _grow(padding: Any) -> tuple[int, int, int, int]:
    left, top, right, bottom = sides(padding)
    return max(left, 0), max(top, 0), max(right, 0), max(bottom, 0)


_NUMPY_MODES = {
    "edge": "edge",
    "replicate": "edge",
    "reflect": "reflect",
    "symmetric": "symmetric",
    "circular": "wrap",
    "wrap": "wrap",
}


def ref_pil_pad(img: PIL.Image.Image, padding: Any, fill: Any, padding_mode: str) -> Any:
    """torchvision's PIL padding: constant through torchvision itself (a tensor fill as its
    values, beyond torchvision); the other modes as numpy.pad of the image's own array (which
    torchvision does too, but it returns another mode: RGB for LAB, and no circular)."""
    if padding_mode == "constant":
        if isinstance(fill, torch.Tensor):
            fill = fill.tolist()
        return tvF.pad(img, list(sides(padding)), fill=fill, padding_mode="constant")
    left, top, right, bottom = sides(padding)
    if min(left, top, right, bottom) < 0:
        raise NotImplementedError("crops of PIL images are not in this reference")
    arr = np.array(img)
    widths = [(top, bottom), (left, right)] + [(0, 0)] * (arr.ndim - 2)
    padded = np.pad(arr, widths, mode=_NUMPY_MODES[padding_mode])
    size = (padded.shape[1], padded.shape[0])
    if img.mode == "1":
        return PIL.Image.fromarray(padded)
    out = PIL.Image.frombytes(img.mode, size, np.ascontiguousarray(padded).tobytes())
    if img.mode in ("P", "PA"):
        out.putpalette(img.getpalette())
    return out


def ref_pad(inpt: Any, padding: Any, fill: Any = 0, padding_mode: str = "constant") -> Any:
    """``functional.pad`` from the references: numpy index maps (tensors, crops by slicing),
    torchvision for PIL images and boxes."""
    if isinstance(inpt, PIL.Image.Image):
        return ref_pil_pad(inpt, padding, fill, padding_mode)
    if isinstance(inpt, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
        return tvF.pad(inpt, list(sides(padding)), padding_mode=padding_mode)
    x = _plain(inpt)
    full = pad_ref(x, _grow(padding), padding_mode, 0 if fill is None else fill)
    return _crop(full, padding)


def ref_texture_pad(
    inpt: Any,
    padding: Any,
    texture: torch.Tensor,
    stagger: int = 0,
    offset: Any = (0, 0),
    texture_index: Any = None,
    fill: Any = 0,
    mask_fill: Any = None,
) -> Any:
    if isinstance(inpt, tv_tensors.Mask):
        return ref_pad(inpt, padding, mask_fill if mask_fill is not None else fill)
    if isinstance(inpt, (tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
        return ref_pad(inpt, padding)
    if isinstance(inpt, PIL.Image.Image):
        return _PilInterior(inpt, padding)
    x = _plain(inpt)
    if isinstance(offset, torch.Tensor) and isinstance(inpt, tv_tensors.Video):
        offset = offset.unsqueeze(-2)
    bank = _convert(_plain(texture).detach(), x.dtype)
    full = texture_pad_ref(
        x, _grow(padding), bank, stagger=stagger, offset=offset, texture_index=texture_index
    )
    return _crop(full, padding)


_WIDE = (torch.uint32, torch.uint64)


def _convert(texture: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``reference.convert_texture``, with the documented scaling for uint32 and uint64 (which
    torchvision's gives no range): floats to the full range in float64, saturating at the
    maximum, as for int32; their values to floats by ``1 / max``; none between integer dtypes."""
    if texture.dtype == dtype or dtype == torch.bool or texture.dtype == torch.bool:
        return convert_texture(texture, dtype)
    if dtype in _WIDE and texture.is_floating_point():
        top = torch.iinfo(dtype).max
        scaled = (texture.double() * (top + 1.0 - 1e-3)).floor()
        wide = scaled >= float(top)
        return torch.where(
            wide, torch.tensor(top, dtype=dtype), scaled.masked_fill(wide, 0).to(dtype)
        )
    if texture.dtype in _WIDE and dtype.is_floating_point:
        return (texture.double() * (1.0 / torch.iinfo(texture.dtype).max)).to(dtype)
    if texture.dtype in _WIDE or dtype in _WIDE:
        raise NotImplementedError("no integer scaling to or from uint32 and uint64")
    return convert_texture(texture, dtype)


@dataclass(frozen=True)
class _PilInterior:
    """The reference for a textured PIL image: the image's own pixels bit-exact in the middle
    of a canvas of the padded size, in the same mode and palette (the border's colours go
    through the mode's round trip, checked in test_pil.py)."""

    img: PIL.Image.Image
    padding: Any


def _brick_tile(x: torch.Tensor, **brick: Any) -> torch.Tensor:
    c = 1 if x.dim() == 2 else x.shape[-3]
    tile = F.make_brick_texture(**{"channels": F.brick_channels(c), **brick})
    return (tile >= 0.5) if x.dtype == torch.bool else _convert(tile, x.dtype)


def ref_brick_pad(
    inpt: Any,
    padding: Any,
    *,
    stagger: Any = None,
    offset: Any = (0, 0),
    fill: Any = 0,
    mask_fill: Any = None,
    **brick: Any,
) -> Any:
    if isinstance(inpt, (tv_tensors.Mask, tv_tensors.BoundingBoxes, tv_tensors.KeyPoints)):
        return ref_texture_pad(inpt, padding, TEX, fill=fill, mask_fill=mask_fill)
    if isinstance(inpt, PIL.Image.Image):
        return _PilInterior(inpt, padding)
    tile = _brick_tile(_plain(inpt), **brick)
    s = F.running_bond_stagger(**brick) if stagger is None else stagger
    return ref_texture_pad(inpt, padding, tile, stagger=s, offset=offset)


def _check_pil_interior(got: Any, expected: _PilInterior) -> None:
    img = expected.img
    left, top, right, bottom = sides(expected.padding)
    assert isinstance(got, PIL.Image.Image) and got.mode == img.mode
    assert got.size == (img.width + left + right, img.height + top + bottom)
    kept_h = img.height - max(-top, 0) - max(-bottom, 0)
    kept_w = img.width - max(-left, 0) - max(-right, 0)
    inner = np.array(got)[max(top, 0) : max(top, 0) + kept_h, max(left, 0) : max(left, 0) + kept_w]
    whole = np.array(img)[
        max(-top, 0) : max(-top, 0) + kept_h, max(-left, 0) : max(-left, 0) + kept_w
    ]
    np.testing.assert_array_equal(inner, whole)
    assert got.getpalette() == img.getpalette()


def _equal(want: Callable[[], Any]) -> Callable[[Any], None]:
    """A check comparing a result with the reference ``want()`` (computed only when needed)."""

    def check(got: Any) -> None:
        expected = want()
        if isinstance(expected, _PilInterior):
            _check_pil_interior(got, expected)
            return
        if isinstance(expected, PIL.Image.Image):
            assert isinstance(got, PIL.Image.Image) and got.mode == expected.mode
            np.testing.assert_array_equal(np.array(got), np.array(expected))
            assert got.getpalette() == expected.getpalette()
            return
        if isinstance(expected, tv_tensors.BoundingBoxes):
            assert isinstance(got, tv_tensors.BoundingBoxes)
            assert got.canvas_size == expected.canvas_size
        assert isinstance(got, torch.Tensor)
        assert_bitwise_equal(_plain(got).detach(), _plain(expected).detach())

    return check


def _close(want: Callable[[], Any], tol: float) -> Callable[[Any], None]:
    def check(got: Any) -> None:
        expected = want()
        gots = got if isinstance(got, tuple) else (got,)
        wants = expected if isinstance(expected, tuple) else (expected,)
        assert len(gots) == len(wants)
        for g, e in zip(gots, wants, strict=True):
            assert isinstance(g, torch.Tensor) and g.shape == e.shape
            g64, e64 = g.detach().double(), e.detach().double()
            assert torch.equal(g64.isnan(), e64.isnan())
            finite = e64.isfinite()
            assert torch.equal(g64[~finite & ~e64.isnan()], e64[~finite & ~e64.isnan()])
            torch.testing.assert_close(g64[finite], e64[finite], rtol=tol, atol=tol)

    return check


def _add(
    api: str, arg: str, label: str, call: Callable[[], Any], check: Any, inputs: Any = ()
) -> None:
    CASES.append(Case(api, arg, label, call, check, _tensors_in(inputs)))


def _sweep(
    api: str,
    fn: Callable[..., Any],
    ref: Callable[..., Any] | None,
    base: dict[str, Any],
    pools: dict[str, list[tuple[str, Any]]],
    *,
    positional: int = 0,
    compare: Callable[[Callable[[], Any]], Callable[[Any], None]] = _equal,
    names: dict[str, str] | None = None,
) -> None:
    """One case per (argument, stand-in value): ``fn(**base)`` with that argument replaced.
    ``positional``: how many leading arguments are passed by position; ``names``: the name an
    error must use for an argument, where it differs from the keyword (``inpt`` for ``image``)."""
    for arg, values in pools.items():
        for label, value in values:
            kwargs = dict(base, **{arg: value})

            def call(kwargs: dict[str, Any] = kwargs) -> Any:
                items = list(kwargs.items())
                args = [v for _, v in items[:positional]]
                return fn(*args, **dict(items[positional:]))

            check = None if ref is None else compare(lambda kwargs=kwargs: ref(**kwargs))
            inputs = [v for k, v in kwargs.items() if k != "out"]  # out= is written, by design
            _add(api, (names or {}).get(arg, arg), label, call, check, inputs)


# ---------------------------------------------------------------------------------------------
# functional


def _pil_images() -> list[tuple[str, Any]]:
    rng = np.random.default_rng(5)
    rgb = PIL.Image.fromarray(rng.integers(0, 256, (4, 5, 3), dtype=np.uint8))
    palette = rgb.convert("P", palette=PIL.Image.Palette.ADAPTIVE, colors=8)
    return [
        ("PIL RGB", rgb),
        ("PIL P", palette),
        ("PIL 1", rgb.convert("1")),
        ("PIL LAB", rgb.convert("LAB")),
        ("PIL I;16", rgb.convert("I;16")),
        ("PIL F", rgb.convert("F")),
    ]


def _targets() -> list[tuple[str, Any]]:
    mask = tv_tensors.Mask(random_image((4, 5), torch.uint8, seed=6))
    boxes = tv_tensors.BoundingBoxes(
        [[0, 1, 3, 4], [1, 0, 2, 2]], format="XYXY", canvas_size=(4, 5)
    )
    return [
        ("Image", tv_tensors.Image(X[0])),
        ("Video", tv_tensors.Video(X)),
        ("Mask", mask),
        ("BoundingBoxes", boxes),
    ]


IMAGES = [*tensor_variants(X), *_pil_images(), *_targets()]
OUTS: list[tuple[str, Any]] = [
    ("right", torch.zeros(2, 3, 6, 7)),
    ("wrong shape", torch.zeros(2, 3, 6, 6)),
    ("wrong dtype", torch.zeros(2, 3, 6, 7, dtype=torch.float64)),
    ("strided", torch.zeros(2, 3, 7, 6).mT),
    ("x itself", X),
    ("list", [0.0]),
    (
        "quantized",
        _quiet(lambda: torch.quantize_per_tensor(torch.zeros(2, 3, 6, 7), 1.0, 0, torch.quint8)),
    ),
    ("sparse", torch.zeros(2, 3, 6, 7).to_sparse()),
    ("meta", torch.zeros(2, 3, 6, 7, device="meta")),
    ("requires_grad", torch.zeros(2, 3, 6, 7, requires_grad=True)),
]


def _ref_pad_out(
    inpt: Any, padding: Any, fill: Any = 0, padding_mode: str = "constant", out: Any = None
) -> Any:
    return ref_pad(inpt, padding, fill, padding_mode)


_sweep(
    "functional.pad",
    F.pad,
    _ref_pad_out,
    {"inpt": X, "padding": 1, "fill": 0, "padding_mode": "constant"},
    {"inpt": IMAGES, "padding": PADDINGS, "fill": FILLS, "padding_mode": MODES},
    positional=2,
)
for mode in ("reflect", "circular"):
    _sweep(
        f"functional.pad {mode}",
        F.pad,
        _ref_pad_out,
        {"inpt": X, "padding": (2, 1, 3, 4), "fill": 0, "padding_mode": mode},
        {"inpt": IMAGES, "padding": PADDINGS},
        positional=2,
    )
_sweep(
    "functional.pad uint8",
    F.pad,
    _ref_pad_out,
    {"inpt": _image_of(torch.uint8), "padding": 1, "fill": 0},
    {"fill": FILLS},
    positional=2,
)
_sweep(
    "functional.pad bool",
    F.pad,
    _ref_pad_out,
    {"inpt": _image_of(torch.bool), "padding": 1, "fill": 0},
    {"fill": FILLS},
    positional=2,
)
_sweep(
    "functional.pad PIL",
    F.pad,
    _ref_pad_out,
    {"inpt": _pil_images()[1][1], "padding": 1, "fill": 0},
    {"fill": FILLS, "padding": PADDINGS},
    positional=2,
)
_sweep(
    "functional.pad out",
    F.pad,
    _ref_pad_out,
    {"inpt": X, "padding": 1, "out": None},
    {"out": OUTS},
    positional=2,
)
_sweep(
    "functional.pad_image",
    F.pad_image,
    lambda image, **kw: _ref_pad_out(image, **kw),
    {"image": X, "padding": (1, 2), "fill": 0.5},
    {"image": list(tensor_variants(X, dtypes=False)), "padding": PADDINGS[:12]},
    positional=2,
    names={"image": "inpt"},
)

TEXTURES = [
    *tensor_variants(TEX),
    ("one channel", TEX[:1]),
    ("2-D", TEX[0]),
    ("bank", BANK),
    ("two channels", TEX[:2]),
    ("5-D", BANK[None]),
    ("above 1", TEX + 1),
    ("uint8", _image_of(torch.uint8, (3, 2, 3))),
    ("empty tile", TEX[:, :0]),
]
_TEXTURE_BASE = {"inpt": X, "padding": (1, 2, 0, 3), "texture": TEX, "stagger": 1}
_sweep(
    "functional.texture_pad",
    F.texture_pad,
    ref_texture_pad,
    _TEXTURE_BASE,
    {
        "inpt": IMAGES,
        "padding": PADDINGS,
        "texture": TEXTURES,
        "stagger": INTS,
        "offset": OFFSETS,
        "fill": FILLS[:12],
        "mask_fill": FILLS[:12],
    },
    positional=3,
)
_sweep(
    "functional.texture_pad uint8",
    F.texture_pad,
    ref_texture_pad,
    dict(_TEXTURE_BASE, inpt=_image_of(torch.uint8)),
    {"texture": TEXTURES},
    positional=3,
)
_sweep(
    "functional.texture_pad bank",
    F.texture_pad,
    ref_texture_pad,
    dict(_TEXTURE_BASE, texture=BANK, texture_index=None),
    {"texture_index": INDICES, "offset": OFFSETS},
    positional=3,
)
_sweep(
    "functional.texture_pad mask",
    F.texture_pad,
    ref_texture_pad,
    dict(_TEXTURE_BASE, inpt=_targets()[2][1]),
    {"fill": FILLS, "mask_fill": FILLS},
    positional=3,
)
_sweep(
    "functional.texture_pad out",
    F.texture_pad,
    lambda out, **kw: ref_texture_pad(**kw),
    dict(_TEXTURE_BASE, padding=1, out=None),
    {"out": OUTS},
    positional=3,
)
_sweep(
    "functional.texture_pad_image",
    F.texture_pad_image,
    lambda image, **kw: ref_texture_pad(image, **kw),
    {"image": X, "padding": 2, "texture": TEX},
    {"image": list(tensor_variants(X, dtypes=False)), "texture": TEXTURES[:8]},
    positional=3,
    names={"image": "inpt"},
)

BRICK = {"brick_size": (2, 3), "mortar": 1, "bricks_per_tile": 2, "courses": 2}
BRICK_OPTIONS: dict[str, list[tuple[str, Any]]] = {
    "brick_size": [
        ("(3, 4)", (3, 4)),
        ("(1, 4)", (1, 4)),
        ("(0, 4)", (0, 4)),
        ("3", 3),
        ("(2.0, 3)", (2.0, 3)),
        ("(2, 3, 4)", (2, 3, 4)),
        ("str", "2x3"),
    ],
    "mortar": [("0", 0), ("-1", -1), ("1.0", 1.0), ("bool", True), ("2**63", 2**63)],
    "bricks_per_tile": [("0", 0), ("3", 3), ("None", None)],
    "courses": [("1", 1), ("0", 0), ("3", 3), ("float", 2.5)],
    "brick_color": [
        ("(0.1, 0.2, 0.3)", (0.1, 0.2, 0.3)),
        ("(1.5, 0, 0)", (1.5, 0, 0)),
        ("(0.5,)", (0.5,)),
        ("nan", (float("nan"), 0, 0)),
        ("str", "red"),
    ],
    "mortar_color": [("(0, 0, 0)", (0, 0, 0)), ("(-1, 0, 0)", (-1, 0, 0))],
    "shade_variation": [("0", 0), ("1", 1), ("1.5", 1.5), ("nan", float("nan")), ("str", "x")],
    "hue_variation": [("0.5", 0.5), ("-0.1", -0.1)],
    "noise": [("0", 0.0), ("inf", float("inf"))],
    "channels": [("1", 1), ("2", 2), ("4", 4), ("0", 0), ("5", 5), ("float", 3.0)],
    "seed": [
        ("7", 7),
        ("-1", -1),
        ("2**64-1", 2**64 - 1),
        ("2**64", 2**64),
        ("float", 1.5),
        ("str", "0"),
    ],
}
_sweep(
    "functional.brick_pad",
    F.brick_pad,
    ref_brick_pad,
    {"inpt": X, "padding": (3, 1, 2, 4), **BRICK},
    {
        "inpt": IMAGES,
        "padding": PADDINGS,
        "stagger": INTS,
        "offset": OFFSETS,
        "fill": FILLS[:12],
        **BRICK_OPTIONS,
    },
    positional=2,
)
_add(
    "functional.brick_pad",
    "bricks",
    "unknown option",
    lambda: F.brick_pad(X, 1, bricks=3),
    None,
)
_sweep(
    "functional.brick_pad_image",
    F.brick_pad_image,
    lambda image, **kw: ref_brick_pad(image, **kw),
    {"image": X, "padding": 2, **BRICK},
    {"image": list(tensor_variants(X, dtypes=False))},
    positional=2,
    names={"image": "inpt"},
)


def _check_brick_texture(options: dict[str, Any]) -> Callable[[Any], None]:
    """What ``make_brick_texture`` promises: its shape, dtype and range, the same tile twice."""

    def check(got: Any) -> None:
        opts = dict(options)
        bh, bw = opts.get("brick_size", (16, 50))
        m = opts.get("mortar", 3)
        shape = (
            opts.get("channels", 3),
            opts.get("courses", 4) * (bh + m),
            opts.get("bricks_per_tile", 5) * (bw + m),
        )
        assert isinstance(got, torch.Tensor) and tuple(got.shape) == shape
        assert got.dtype == opts.get("dtype", torch.float32)
        assert bool(((got >= 0) & (got <= 1)).all())
        assert_bitwise_equal(F.make_brick_texture(**options), got)

    return check


for arg, values in {
    **BRICK_OPTIONS,
    "dtype": [
        ("float64", torch.float64),
        ("bfloat16", torch.bfloat16),
        ("uint8", torch.uint8),
        ("str", "float32"),
        ("None", None),
    ],
    "device": [("cpu", "cpu"), ("meta", "meta"), ("bad", "nowhere"), ("float", 3.5)],
}.items():
    for label, value in values:
        options = dict(BRICK, **{arg: value})
        checker = _check_brick_texture(options)
        if arg == "device" and value == "meta":

            def checker(got):
                return None if got.device.type == "meta" else pytest.fail(str(got.device))

        _add(
            "functional.make_brick_texture",
            arg,
            label,
            lambda options=options: F.make_brick_texture(**options),
            checker,
        )

for label, value in INTS[:12]:
    want = value if value in (1, 2, 3, 4) and type(value) is int else 1
    _add(
        "functional.brick_channels",
        "image_channels",
        label,
        lambda value=value: F.brick_channels(value),
        lambda got, want=want: None if got == want and type(got) is int else pytest.fail(f"{got}"),
    )


def _check_stagger(options: dict[str, Any]) -> Callable[[Any], None]:
    def check(got: Any) -> None:
        bw = options.get("brick_size", (16, 50))[1]
        width = options.get("bricks_per_tile", 5) * (bw + options.get("mortar", 3))
        assert type(got) is int and 0 <= got < width

    return check


for arg in ("brick_size", "mortar", "bricks_per_tile", "courses", "seed"):
    for label, value in BRICK_OPTIONS[arg]:
        options = dict(BRICK, **{arg: value})
        _add(
            "functional.running_bond_stagger",
            arg,
            label,
            lambda options=options: F.running_bond_stagger(**options),
            _check_stagger(options),
        )


class _Custom(tv_tensors.TVTensor):
    pass


for label, value in [
    ("class", _Custom),
    ("instance", _Custom(torch.zeros(1))),
    ("str", "Mask"),
    ("None", None),
    ("int", int),
]:
    _add(
        "functional.register_kernel",
        "input_type",
        label,
        lambda value=value: F.register_kernel(F.pad, value),
        lambda got: None if callable(got) else pytest.fail("not a decorator"),
    )
for label, value in [("3", 3), ("None", None), ("str", "pad")]:
    _add(
        "functional.register_kernel",
        "functional",
        label,
        lambda value=value: F.register_kernel(value, _Custom),
        None,
    )
for label, value in [("1", 1), ("str", "yes")]:
    _add(
        "functional.register_kernel",
        "wrap",
        label,
        lambda value=value: F.register_kernel(F.pad, _Custom, wrap=value),
        None,
    )

_STACK_IMAGES = [
    random_image((3, 2, 3), torch.float32, seed=7),
    random_image((3, 4, 2), torch.float32, seed=8),
]
_PLACEMENT = torch.tensor([[1, 0], [0, 2]])


def ref_pad_stack(
    images: Any,
    size: Any,
    placement: Any,
    fill: Any = 0,
    padding_mode: str = "constant",
    texture: Any = None,
    stagger: int = 0,
    offset: Any = (0, 0),
    texture_index: Any = None,
) -> torch.Tensor:
    out = []
    where = placement.tolist()
    off = torch.as_tensor(offset).broadcast_to(len(images), 2)
    index = torch.as_tensor(0 if texture_index is None else texture_index).broadcast_to(len(images))
    for i, im in enumerate(images):
        top, left = where[i]
        h, w = im.shape[-2:]
        padding = (left, top, size[1] - left - w, size[0] - top - h)
        if padding_mode == "texture":
            out.append(ref_texture_pad(im, padding, texture, stagger, off[i], int(index[i])))
        else:
            out.append(ref_pad(im, padding, fill, padding_mode))
    return torch.stack(out)


_sweep(
    "functional.pad_stack",
    F.pad_stack,
    ref_pad_stack,
    {"images": _STACK_IMAGES, "size": (5, 6), "placement": _PLACEMENT, "fill": 0.5},
    {
        "images": [
            ("one", _STACK_IMAGES[:1]),
            ("empty list", []),
            ("tensor", X[0]),
            ("channels differ", [_STACK_IMAGES[0], _STACK_IMAGES[1][:2]]),
            ("dtypes differ", [_STACK_IMAGES[0], _STACK_IMAGES[1].double()]),
            ("None", None),
            (
                "quantized",
                [
                    _quiet(
                        lambda: torch.quantize_per_tensor(_STACK_IMAGES[0], 0.1, 0, torch.quint8)
                    ),
                    _STACK_IMAGES[1],
                ],
            ),
        ],
        "size": [
            ("(4, 4)", (4, 4)),
            ("(5, 6, 1)", (5, 6, 1)),
            ("(-5, 6)", (-5, 6)),
            ("(5.0, 6)", (5.0, 6)),
            ("5", 5),
            ("(2**40, 2**40)", (2**40, 2**40)),
        ],
        "placement": [
            ("negative", torch.tensor([[-1, 0], [0, 0]])),
            ("float", _PLACEMENT.float()),
            ("wrong shape", _PLACEMENT[:1]),
            ("list", [[1, 0], [0, 2]]),
            ("meta", _PLACEMENT.to("meta")),
        ],
        "fill": FILLS[:14],
        "padding_mode": MODES,
    },
    positional=3,
)
_sweep(
    "functional.pad_stack texture",
    F.pad_stack,
    ref_pad_stack,
    {
        "images": _STACK_IMAGES,
        "size": (5, 6),
        "placement": _PLACEMENT,
        "fill": 0,
        "padding_mode": "texture",
        "texture": BANK,
        "stagger": 1,
        "texture_index": None,
    },
    {
        "texture": [*TEXTURES[:10], ("None", None)],
        "stagger": INTS[:10],
        "offset": OFFSETS[:8],
        "texture_index": INDICES[:9],
    },
    positional=3,
)

# ---------------------------------------------------------------------------------------------
# transforms


def _pad_transform(build: Callable[..., Any], ref: Callable[..., Any], **base: Any) -> Any:
    """A stand-in value's transform: built (or refused) from ``base``, then applied to ``X``."""

    def run(**kwargs: Any) -> Any:
        return build(**kwargs)(X)

    def want(**kwargs: Any) -> Any:
        return ref(X, **kwargs)

    return run, want


def _ref_pad_transform(x: Any, padding: Any, fill: Any = 0, padding_mode: str = "constant") -> Any:
    value = fill.get(torch.Tensor, fill.get("others", 0)) if isinstance(fill, dict) else fill
    return ref_pad(x, padding, value, padding_mode)


run, want = _pad_transform(Pad, _ref_pad_transform)
_sweep(
    "transforms.Pad",
    run,
    want,
    {"padding": 2, "fill": 0, "padding_mode": "constant"},
    {
        "padding": PADDINGS,
        "fill": [
            *FILLS,
            ("dict", {tv_tensors.Mask: 255, "others": 3}),
            ("bad dict", {"others": "x"}),
        ],
        "padding_mode": MODES,
    },
)


def _ref_texture_transform(
    x: Any,
    padding: Any,
    texture: Any,
    stagger: int = 0,
    offset: Any = (0, 0),
    texture_index: Any = None,
    **_: Any,
) -> Any:
    return ref_texture_pad(x, padding, texture, stagger, offset, texture_index)


run, want = _pad_transform(TexturePad, _ref_texture_transform)
FLAGS: list[tuple[str, Any]] = [
    ("True", True),
    ("False", False),
    ("1", 1),
    ("None", None),
    ("str", "yes"),
]
GENERATORS: list[tuple[str, Any]] = [
    ("None", None),
    ("seeded", torch.Generator().manual_seed(1)),
    ("int", 42),
    ("numpy", np.random.default_rng(1)),
]
_sweep(
    "transforms.TexturePad",
    run,
    want,
    {"padding": (1, 2), "texture": TEX, "stagger": 1},
    {
        "padding": PADDINGS,
        "texture": TEXTURES,
        "stagger": INTS,
        "offset": [o for o in OFFSETS if not isinstance(o[1], torch.Tensor)],
        "texture_index": [i for i in INDICES if not isinstance(i[1], (torch.Tensor, str))],
        "same_on_batch": FLAGS,
        "fill": FILLS[:12],
        "mask_fill": FILLS[:12],
        "generator": GENERATORS,
    },
)
_sweep(
    "transforms.TexturePad bank",
    run,
    want,
    {"padding": (1, 2), "texture": BANK},
    {"texture_index": [i for i in INDICES if not isinstance(i[1], (torch.Tensor, str))]},
)


def _random_draws(build: Callable[..., Any], tile: Callable[[Any], torch.Tensor]) -> Any:
    """With ``random_offset``: the transform replays its own draws (``make_params``) as the
    reference texture mapping does, each draw inside the tile."""

    def run(**kwargs: Any) -> Any:
        t = build(**kwargs)
        params = t.make_params([X])
        return t, params, t.transform(X, params)

    def check_for(kwargs: dict[str, Any]) -> Callable[[Any], None]:
        def check(got: Any) -> None:
            t, params, out = got
            offset = params["offset"]
            th, tw = t.tile_size
            if isinstance(offset, torch.Tensor):
                assert offset.shape[-1] == 2
                assert bool(((offset >= 0) & (offset < torch.tensor([th, tw]))).all())
            index = params.get("texture_index")
            want = ref_texture_pad(X, t.padding, tile(t), t.stagger, offset, index)
            assert_bitwise_equal(out, want)

        return check

    return run, check_for


run_random, check_for = _random_draws(TexturePad, lambda t: t.texture)
for arg, values in {
    "random_offset": FLAGS,
    "same_on_batch": FLAGS,
    "texture_index": [("random", "random"), ("random, no bank", "random")],
}.items():
    for label, value in values:
        texture = TEX if label == "random, no bank" else BANK
        kwargs = {
            "padding": 2,
            "texture": texture,
            "random_offset": True,
            "generator": torch.Generator().manual_seed(3),
            arg: value,
        }
        _add(
            "transforms.TexturePad random",
            arg,
            label,
            lambda kwargs=kwargs, run=run_random: run(**kwargs),
            check_for(kwargs),
        )

run, want = _pad_transform(
    BrickPad,
    lambda x, **kw: ref_brick_pad(
        x,
        **{
            k: v
            for k, v in kw.items()
            if k not in ("fill", "mask_fill", "generator", "random_offset", "same_on_batch")
        },
    ),
)
_sweep(
    "transforms.BrickPad",
    run,
    want,
    {"padding": (2, 1, 0, 3), **BRICK},
    {
        "padding": PADDINGS,
        "stagger": INTS,
        "offset": [o for o in OFFSETS if not isinstance(o[1], torch.Tensor)],
        "fill": [*FILLS[:12], ("dict", {tv_tensors.Mask: 9})],
        "mask_fill": FILLS[:12],
        "generator": GENERATORS,
        **BRICK_OPTIONS,
    },
)
run_random, check_for = _random_draws(BrickPad, lambda t: _brick_tile(X, **t.brick_options))
for label, value in FLAGS:
    kwargs = {
        "padding": 2,
        "random_offset": value,
        "generator": torch.Generator().manual_seed(4),
        **BRICK,
    }
    _add(
        "transforms.BrickPad random",
        "random_offset",
        label,
        lambda kwargs=kwargs, run=run_random: run(**kwargs),
        check_for(kwargs),
    )
_add("transforms.BrickPad", "bricks", "unknown option", lambda: BrickPad(1, bricks=3), None)

# ---------------------------------------------------------------------------------------------
# ops

_I32 = torch.int32
_E = torch.empty(0)
_N = 2  # samples of X's leading dims
_OP_BASE = {
    "x": X,
    "padding": [1, 2, 0, 3],
    "mode": "reflect",
    "fill": _E,
    "texture": _E,
    "offset": torch.zeros(_N, 2, dtype=_I32),
    "texture_index": torch.zeros(_N, dtype=_I32),
    "stagger": 0,
}
_OP_PADDINGS: list[tuple[str, Any]] = [
    ("[0, 0, 0, 0]", [0, 0, 0, 0]),
    ("tuple", (1, 1, 1, 1)),
    ("[1, 2, 3]", [1, 2, 3]),
    ("negative", [1, -2, 3, 4]),
    ("[2**31, 0, 0, 0]", [2**31, 0, 0, 0]),
    ("[2**63, 0, 0, 0]", [2**63, 0, 0, 0]),
    ("floats", [1.0, 2, 3, 4]),
    ("bools", [True, 1, 1, 1]),
    ("int", 2),
    ("str", "1234"),
    ("None", None),
]


def ref_op_pad(
    x: Any,
    padding: Any,
    mode: str,
    fill: Any,
    texture: Any,
    offset: Any,
    texture_index: Any,
    stagger: int,
    out: Any = None,
) -> torch.Tensor:
    if mode == "texture":
        return texture_pad_ref(
            x, padding, texture, stagger=stagger, offset=offset, texture_index=texture_index
        )
    return pad_ref(x, padding, mode, fill if mode == "constant" else 0)


OP_TENSORS: dict[str, list[tuple[str, Any]]] = {
    "x": list(tensor_variants(X)),
    "padding": _OP_PADDINGS,
    "mode": MODES,
    "stagger": [
        ("2**31", 2**31),
        ("-2**31", -(2**31)),
        ("bool", True),
        ("float", 1.5),
        ("7", 7),
        ("None", None),
    ],
    "offset": [
        ("int64", torch.zeros(_N, 2, dtype=torch.long)),
        ("(2,)", torch.zeros(2, dtype=_I32)),
        ("float", torch.zeros(_N, 2)),
        (
            "quantized",
            _quiet(lambda: torch.quantize_per_tensor(torch.zeros(_N, 2), 1.0, 0, torch.quint8)),
        ),
        ("meta", torch.zeros(_N, 2, dtype=_I32, device="meta")),
        ("list", [[0, 0], [0, 0]]),
    ],
    "texture_index": [
        ("int64", torch.zeros(_N, dtype=torch.long)),
        ("(1,)", torch.zeros(1, dtype=_I32)),
        ("sparse", torch.zeros(_N, dtype=_I32).to_sparse()),
    ],
}
_sweep("ops.pad", ops.pad, ref_op_pad, _OP_BASE, OP_TENSORS)
_sweep(
    "ops.pad constant",
    ops.pad,
    ref_op_pad,
    dict(_OP_BASE, mode="constant", fill=torch.tensor([1.0, -0.0, float("nan")])),
    {
        "fill": [
            ("(1,)", torch.ones(1)),
            ("float64", torch.ones(3, dtype=torch.float64)),
            ("empty", _E),
            ("(3, 1)", torch.ones(3, 1)),
            ("nested", _quiet(lambda: torch.nested.nested_tensor([torch.ones(3)]))),
            ("None", None),
        ]
    },
)
_sweep(
    "ops.pad texture",
    ops.pad,
    ref_op_pad,
    dict(
        _OP_BASE,
        mode="texture",
        texture=BANK,
        texture_index=torch.tensor([1, 0], dtype=_I32),
        offset=torch.tensor([[1, -2], [3, 0]], dtype=_I32),
        stagger=2,
    ),
    {
        "texture": [
            (label, v[None] if isinstance(v, torch.Tensor) and v.dim() == 3 else v)
            for label, v in TEXTURES
        ],
        "texture_index": [
            ("out of bank", torch.tensor([0, 2], dtype=_I32)),
            ("negative", torch.tensor([-1, 0], dtype=_I32)),
        ],
    },
)


def _pad_out_call(**kwargs: Any) -> Any:
    out = kwargs.pop("out")
    result = ops.pad_out(**kwargs, out=out)
    assert result is None
    return out


_sweep(
    "ops.pad_out",
    _pad_out_call,
    lambda **kw: ref_op_pad(**{("mode" if k == "pad_mode" else k): v for k, v in kw.items()}),
    {
        **{("pad_mode" if k == "mode" else k): v for k, v in _OP_BASE.items()},
        "out": torch.zeros(2, 3, 9, 6),
    },
    {
        "out": [(label, v) for label, v in OUTS if label != "right"]
        + [("right", torch.zeros(2, 3, 9, 6)), ("x", X)],
        "pad_mode": MODES[:9],
    },
)


def ref_op_pad_backward(
    grad: Any,
    x_shape: Any,
    padding: Any,
    mode: str,
    texture: Any,
    offset: Any,
    texture_index: Any,
    stagger: int,
) -> tuple[torch.Tensor, ...]:
    """The vector-Jacobian product of the reference gather, by autograd in float64."""
    x = torch.zeros(x_shape, dtype=torch.float64, requires_grad=True)
    tex = texture.detach().double().requires_grad_()
    if mode == "texture":
        y = texture_pad_ref(
            x,
            padding,
            tex,
            stagger=stagger,
            offset=offset,
            texture_index=texture_index,
            differentiable=True,
        )
    else:
        y = pad_ref(x, padding, mode, 0, differentiable=True)
    gx, gt = torch.autograd.grad(y, (x, tex), grad.double(), allow_unused=True)
    return gx.to(grad.dtype), (torch.zeros_like(tex) if gt is None else gt).to(grad.dtype)


_GRAD = random_image((2, 3, 9, 6), torch.float32, seed=9)
_sweep(
    "ops.pad_backward",
    ops.pad_backward,
    ref_op_pad_backward,
    {
        "grad": _GRAD,
        "x_shape": list(SHAPE),
        "padding": [1, 2, 0, 3],
        "mode": "symmetric",
        "texture": _E,
        "offset": _OP_BASE["offset"],
        "texture_index": _OP_BASE["texture_index"],
        "stagger": 0,
    },
    {
        "grad": [
            *list(tensor_variants(_GRAD, dtypes=False)),
            ("uint8", _image_of(torch.uint8, (2, 3, 9, 6))),
            ("float64", _GRAD.double()),
        ],
        "x_shape": [
            ("negative", [2, 3, -4, 5]),
            ("short", [5]),
            ("str", "2345"),
            ("floats", [2.0, 3, 4, 5]),
            ("wrong", [2, 3, 4, 4]),
        ],
        "padding": _OP_PADDINGS[2:8],
        "mode": MODES,
    },
    compare=lambda want: _close(want, 1e-5),
)


def ref_op_pad_stack(
    images: Any,
    sizes: Any,
    canvas: Any,
    mode: str,
    fill: Any,
    texture: Any,
    offset: Any,
    texture_index: Any,
    stagger: int,
) -> torch.Tensor:
    out, start = [], 0
    for i, (h, w, top, left) in enumerate(sizes.tolist()):
        im = images[start : start + canvas[0] * h * w].reshape(canvas[0], h, w)
        start += canvas[0] * h * w
        padding = (left, top, canvas[2] - left - w, canvas[1] - top - h)
        out.append(
            ref_op_pad(
                im,
                padding,
                mode,
                fill,
                texture,
                offset[i : i + 1],
                texture_index[i : i + 1],
                stagger,
            )
        )
    return torch.stack(out)


_PACKED = torch.cat([im.reshape(-1) for im in _STACK_IMAGES])
_SIZES = torch.tensor([[2, 3, 1, 0], [4, 2, 0, 2]])
_sweep(
    "ops.pad_stack",
    ops.pad_stack,
    ref_op_pad_stack,
    {
        "images": _PACKED,
        "sizes": _SIZES,
        "canvas": [3, 5, 6],
        "mode": "edge",
        "fill": _E,
        "texture": _E,
        "offset": torch.zeros(2, 2, dtype=_I32),
        "texture_index": torch.zeros(2, dtype=_I32),
        "stagger": 0,
    },
    {
        "images": list(tensor_variants(_PACKED, dtypes=False)),
        "sizes": [
            ("float", _SIZES.float()),
            ("too big", torch.tensor([[2, 3, 4, 0], [4, 2, 0, 2]])),
            ("negative", torch.tensor([[2, 3, -1, 0], [4, 2, 0, 2]])),
            ("(2, 3)", _SIZES[:, :3]),
            ("sparse", _SIZES.to_sparse()),
            ("list", _SIZES.tolist()),
        ],
        "canvas": [
            ("[3, 5]", [3, 5]),
            ("[-3, 5, 6]", [-3, 5, 6]),
            ("[3, 5, 6.0]", [3, 5, 6.0]),
            ("[2, 5, 6]", [2, 5, 6]),
            ("str", "356"),
        ],
        "mode": MODES,
    },
)


def ref_op_pad_stack_backward(
    grad: Any,
    sizes: Any,
    numel: int,
    mode: str,
    texture: Any,
    offset: Any,
    texture_index: Any,
    stagger: int,
) -> tuple[torch.Tensor, ...]:
    images = torch.zeros(numel, dtype=torch.float64, requires_grad=True)
    tex = texture.detach().double().requires_grad_()
    y = []
    start = 0
    c, out_h, out_w = grad.shape[1:]
    for _i, (h, w, top, left) in enumerate(sizes.tolist()):
        im = images[start : start + c * h * w].reshape(c, h, w)
        start += c * h * w
        padding = (left, top, out_w - left - w, out_h - top - h)
        y.append(pad_ref(im, padding, mode, 0, differentiable=True))
    gi, gt = torch.autograd.grad(torch.stack(y), (images, tex), grad.double(), allow_unused=True)
    return gi.to(grad.dtype), (torch.zeros_like(tex) if gt is None else gt).to(grad.dtype)


_SGRAD = random_image((2, 3, 5, 6), torch.float32, seed=10)
_sweep(
    "ops.pad_stack_backward",
    ops.pad_stack_backward,
    ref_op_pad_stack_backward,
    {
        "grad": _SGRAD,
        "sizes": _SIZES,
        "numel": _PACKED.numel(),
        "mode": "reflect",
        "texture": _E,
        "offset": torch.zeros(2, 2, dtype=_I32),
        "texture_index": torch.zeros(2, dtype=_I32),
        "stagger": 0,
    },
    {
        "grad": list(tensor_variants(_SGRAD, dtypes=False)),
        "numel": [("-1", -1), ("wrong", 7), ("float", 42.0), ("bool", True), ("2**63", 2**63)],
        "mode": MODES,
    },
    compare=lambda want: _close(want, 1e-5),
)


def ref_time_conv(w: Any, k: Any, eps: float = 0.0) -> torch.Tensor:
    w2 = w.reshape(w.shape[0], -1).double()
    length = w2.shape[1]
    k64 = k.double()
    if k.shape[-1] == 0:
        return k64.new_empty(k.shape).to(torch.promote_types(w.dtype, k.dtype))
    out = nnF.conv1d(nnF.pad(k64, (length - 1, 0)), w2.unsqueeze(1), groups=k.shape[1]) + eps
    return out.to(torch.promote_types(w.dtype, k.dtype))


_W = random_image((3, 4), torch.float32, seed=11)
_K = random_image((2, 3, 6), torch.float32, seed=12)
_sweep(
    "ops.time_conv",
    ops.time_conv,
    ref_time_conv,
    {"w": _W, "k": _K, "eps": 0.5},
    {
        "w": [*list(tensor_variants(_W)), ("(C, 1, L)", _W[:, None]), ("L = 0", _W[:, :0])],
        "k": list(tensor_variants(_K)),
        "eps": [
            ("nan", float("nan")),
            ("inf", float("inf")),
            ("1e300", 1e300),
            ("bool", True),
            ("str", "0"),
            ("None", None),
            ("int", 2),
            ("tensor", torch.tensor(1.0)),
        ],
    },
    compare=lambda want: _close(want, 2e-2),
)


def ref_wkv(time_decay: Any, time_first: Any, k: Any, v: Any, state: Any = None) -> Any:
    """RWKV-4's stable recurrence in float64 (rwkv.md), from the formula."""
    w, u = -torch.exp(time_decay.double()), time_first.double()
    k64, v64 = k.double(), v.double()
    b, _, c = k.shape
    if state is None:
        aa, bb, pp = (
            torch.zeros(b, c, dtype=torch.float64),
            torch.zeros(b, c, dtype=torch.float64),
            torch.full((b, c), -1e38, dtype=torch.float64),
        )
    else:
        aa, bb, pp = state.double().unbind(1)
    ys = []
    for t in range(k.shape[1]):
        kt, vt = k64[:, t], v64[:, t]
        ww = u + kt
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        ys.append((e1 * aa + e2 * vt) / (e1 * bb + e2))
        ww = w + pp
        p = torch.maximum(ww, kt)
        e1, e2 = torch.exp(ww - p), torch.exp(kt - p)
        aa, bb, pp = e1 * aa + e2 * vt, e1 * bb + e2, p
    y = (torch.stack(ys, 1) if ys else k64.new_empty(k.shape)).to(k.dtype)
    if state is None:
        return y
    return y, torch.stack([aa, bb, pp], 1).to(state.dtype)


_TD = random_image((5,), torch.float32, seed=13) - 1
_TF = random_image((5,), torch.float32, seed=14)
_KK = random_image((2, 3, 5), torch.float32, seed=15)
_VV = random_image((2, 3, 5), torch.float32, seed=16)
_STATE = torch.stack([torch.zeros(2, 5), torch.ones(2, 5), torch.zeros(2, 5)], 1)
_sweep(
    "ops.wkv",
    ops.wkv,
    ref_wkv,
    {"time_decay": _TD, "time_first": _TF, "k": _KK, "v": _VV},
    {
        "time_decay": list(tensor_variants(_TD)),
        "time_first": list(tensor_variants(_TF)),
        "k": list(tensor_variants(_KK)),
        "v": list(tensor_variants(_VV)),
        "state": [
            ("float32", _STATE),
            ("float64", _STATE.double()),
            *list(tensor_variants(_STATE, dtypes=False)),
        ],
    },
    compare=lambda want: _close(want, 2e-2),
)

for arg, values in {
    # (2**31 would be a state of tens of GB: allocatable or not depending on the machine.)
    "batch_size": [i for i in INTS[:12] if i[0] != "2**31"] + [("2**62", 2**62)],
    "channels": [i for i in INTS[:12] if i[0] != "2**31"],
    "device": [("cpu", "cpu"), ("meta", "meta"), ("bad", "nowhere"), ("int", 3.5)],
    "dtype": [
        ("float64", torch.float64),
        ("float16", torch.float16),
        ("str", "float32"),
        ("None", None),
    ],
}.items():
    for label, value in values:
        kwargs = dict({"batch_size": 2, "channels": 3}, **{arg: value})

        def check_state(got: Any, kwargs: dict[str, Any] = kwargs) -> None:
            b, c = kwargs["batch_size"], kwargs["channels"]
            want = torch.zeros(b, 3, c, dtype=kwargs.get("dtype", torch.float32))
            want[:, 2] = -1e38
            assert got.device.type == str(kwargs.get("device", "cpu"))
            if got.device.type != "meta":
                assert_bitwise_equal(got, want)

        _add(
            "ops.init_wkv_state",
            arg,
            label,
            lambda kwargs=kwargs: ops.init_wkv_state(**kwargs),
            check_state,
        )


def ref_wkv7(r: Any, w: Any, k: Any, v: Any, a: Any, b: Any, state: Any = None) -> Any:
    """RWKV-7's recurrence in float64 from the formula: ``S_t = S_{t-1} diag(exp(w_t)) +
    (S_{t-1} a_t) b_t^T + v_t k_t^T``, ``y_t = S_t r_t``."""
    r, w, k, v, a, b = (t.double() for t in (r, w, k, v, a, b))
    n_b, n_t, n_h, n_n = r.shape
    s = torch.zeros(n_b, n_h, n_n, n_n, dtype=torch.float64) if state is None else state.double()
    ys = []
    for t in range(n_t):
        rt, wt, kt, vt, at, bt = (x[:, t] for x in (r, w, k, v, a, b))
        s = (
            s * torch.exp(wt)[:, :, None, :]
            + (s @ at[..., None]) * bt[:, :, None, :]
            + vt[..., None] * kt[:, :, None, :]
        )
        ys.append((s @ rt[..., None])[..., 0])
    y = (torch.stack(ys, 1) if ys else r.new_empty(r.shape)).to(
        k.dtype if state is None else r.dtype
    )
    return y if state is None else (y, s.to(state.dtype))


_R7 = [random_image((1, 3, 2, 4), torch.float32, seed=20 + i) * 0.5 for i in range(6)]
_R7[1] = -torch.exp(_R7[1])  # w: log-decay, negative
_sweep(
    "ops.wkv7",
    ops.wkv7,
    ref_wkv7,
    dict(zip("rwkvab", _R7, strict=True)),
    {
        name: [*list(tensor_variants(t, dtypes=False)), ("float64", t.double()), ("int", t.long())]
        for name, t in zip("rwkvab", _R7, strict=True)
    },
    compare=lambda want: _close(want, 1e-4),
)


# ---------------------------------------------------------------------------------------------
# the test


def test_faulthandler_shows_a_crashing_case() -> None:
    # A segfault in a case kills this process: faulthandler must be on to name it.
    assert faulthandler.is_enabled()


def _names(arg: str, message: str) -> bool:
    """Whether ``message`` names the argument (``images[0]`` names ``images``)."""
    return re.search(rf"(?<![\w.]){re.escape(arg)}(?![\w(])", message) is not None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_case_is_refused_by_name_or_equals_the_reference(case: Case) -> None:
    before = [bits(t.detach()).clone() for t in case.inputs]
    try:
        got = _quiet(case.call)
    except (TypeError, ValueError) as exc:
        assert _names(case.arg, str(exc)), f"{type(exc).__name__} does not name {case.arg}: {exc}"
        OUTCOMES["refused"] += 1
    else:
        assert case.check is not None, f"accepted, but must be refused: {got!r}"
        case.check(got)
        OUTCOMES["accepted"] += 1
    for t, snapshot in zip(case.inputs, before, strict=True):
        assert torch.equal(bits(t.detach()), snapshot), f"an input was modified: {t.shape}"


OUTCOMES = {"refused": 0, "accepted": 0}


def test_the_sweep_covers_every_public_callable() -> None:
    covered = {c.api.split(" ")[0] for c in CASES}
    public = {f"functional.{n}" for n in F.__all__} | {f"ops.{n}" for n in ops.__all__}
    public |= {f"transforms.{n}" for n in ("Pad", "TexturePad", "BrickPad")}
    assert public <= covered, public - covered
    assert len(CASES) > 1000


def test_the_sweep_ends_both_ways() -> None:
    # Runs after the sweep (pytest keeps the file's order): neither outcome may be vacuous.
    if sum(OUTCOMES.values()) != len(CASES):
        pytest.skip("the sweep ran in part (-k, -x or a failure)")
    assert OUTCOMES["refused"] > 500 and OUTCOMES["accepted"] > 500, OUTCOMES
