"""The eager direct route of the padding functionals (``ops.padding.pad_direct``) and the Taichi
kernel's per-signature launch plans (``ops/padding/taichi.py _Plan``).

The direct route skips the ``tipad::pad`` custom-op dispatch for eager plain tensors without
autograd; it must give the op's bits (seeded random inputs, poisoned ``out=``, every mode,
several dtypes, sizes on and off the 8-byte word, unaligned views, per-sample texture
parameters), leave autograd, modes and compilation to the op, and actually be taken.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from reference import assert_bitwise_equal, random_image
from torch.utils._python_dispatch import TorchDispatchMode

from tipad_transforms import BrickPad, TexturePad
from tipad_transforms import functional as F
from tipad_transforms._compat import taichi as _lean
from tipad_transforms.ops.padding import op as ops_pad
from tipad_transforms.ops.padding import taichi as runtime_pad

MODES = ("constant", "edge", "reflect", "symmetric", "circular")
DTYPES = (torch.uint8, torch.int16, torch.float32, torch.float64, torch.bool)
# (C, H, W): an 8-byte multiple per row for uint8, and shapes that are on no word boundary.
SHAPES = ((3, 8, 16), (2, 7, 5), (1, 13, 11))


def _op_route(fn: Callable[[], torch.Tensor], monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
    """``fn()`` with the direct route switched off: through the custom op, as before."""
    with monkeypatch.context() as m:
        m.setattr(ops_pad, "eager", lambda *tensors: False)
        before = ops_pad.direct_calls
        result = fn()
        assert ops_pad.direct_calls == before
    return result


def _direct(fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    before = ops_pad.direct_calls
    result = fn()
    assert ops_pad.direct_calls > before, "the direct route was not taken"
    return result


def _unaligned(x: torch.Tensor) -> torch.Tensor:
    """``x``'s values in a contiguous view one element into its buffer: not 8-byte aligned
    (no word moves) unless the elements are 8 bytes (which move one at a time anyway)."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype)
    view = flat[1:].view(x.shape)
    view.copy_(x)
    assert view.is_contiguous() and (view.data_ptr() % 8 != 0 or x.element_size() == 8)
    return view


def _numpy_pad(x: torch.Tensor, pads: tuple[int, ...], fill: int, mode: str) -> torch.Tensor:
    """The independent reference: ``numpy.pad``."""
    left, top, right, bottom = pads
    widths = [(0, 0)] * (x.dim() - 2) + [(top, bottom), (left, right)]
    kind = {"edge": "edge", "reflect": "reflect", "symmetric": "symmetric", "circular": "wrap"}
    arr = x.numpy()
    if mode == "constant":
        value = np.asarray(fill).astype(arr.dtype)
        return torch.from_numpy(np.pad(arr, widths, mode="constant", constant_values=value))
    return torch.from_numpy(np.pad(arr, widths, mode=kind[mode]))


def _poisoned(shape: torch.Size | tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.full(tuple(shape), float("nan"), dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(tuple(shape), dtype=dtype)
    return torch.full(tuple(shape), 77, dtype=dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_direct_equals_op_standard_modes(
    mode: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i, shape in enumerate(SHAPES):
        x = random_image((2, *shape), dtype, seed=i)
        pads = (3, 1, 4, 2) if mode != "reflect" else (3, 1, 4, 5)
        fill = 1 if mode == "constant" else 0
        for image in (x, _unaligned(x)):
            expected = _op_route(lambda: F.pad(image, pads, fill, mode), monkeypatch)  # noqa: B023
            got = _direct(lambda: F.pad(image, pads, fill, mode))  # noqa: B023
            assert_bitwise_equal(got, expected)
            assert_bitwise_equal(got, _numpy_pad(image, pads, fill, mode))
            # Poisoned out= (unaligned too): every element written, the same bits.
            for out in (
                _poisoned(expected.shape, dtype),
                _unaligned(_poisoned(expected.shape, dtype)),
            ):
                _direct(lambda: F.pad(image, pads, fill, mode, out=out))  # noqa: B023
                assert_bitwise_equal(out, expected)


@pytest.mark.parametrize("dtype", (torch.uint8, torch.float32, torch.int64), ids=str)
def test_direct_equals_op_texture_per_sample(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(5)
    x = random_image((3, 2, 3, 9, 14), dtype, seed=3)
    bank = random_image((4, 3, 5, 7), dtype, seed=4)
    offset = torch.randint(-40, 40, (3, 2, 2), generator=g)
    index = torch.randint(0, 4, (3, 2), generator=g)
    kwargs: dict[str, Any] = dict(stagger=3, offset=offset, texture_index=index)
    for image in (x, _unaligned(x)):
        # Borders large enough that the texture's word table is used on aligned images.
        for pads in ((5, 2, 6, 3), (40, 33, 41, 30)):
            expected = _op_route(
                lambda: F.texture_pad(image, pads, bank, **kwargs),  # noqa: B023
                monkeypatch,
            )
            got = _direct(lambda: F.texture_pad(image, pads, bank, **kwargs))  # noqa: B023
            assert_bitwise_equal(got, expected)
            out = _poisoned(expected.shape, dtype)
            _direct(lambda: F.texture_pad(image, pads, bank, out=out, **kwargs))  # noqa: B023
            assert_bitwise_equal(out, expected)


def test_changed_offsets_in_place_are_seen() -> None:
    """The plan reuses the last call's lattice only while the same tensors are unchanged."""
    x = random_image((2, 3, 6, 6), torch.uint8, seed=7)
    tex = random_image((3, 4, 5), torch.uint8, seed=8)
    offset = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    first = F.texture_pad(x, 4, tex, offset=offset)
    offset[1, 1] = 0  # in place: same tensor, new version
    second = F.texture_pad(x, 4, tex, offset=offset)
    fresh = F.texture_pad(x, 4, tex, offset=offset.clone())
    assert_bitwise_equal(second, fresh)
    assert not torch.equal(first[1], second[1])
    assert torch.equal(first[0], second[0])


def test_transforms_take_the_direct_route(monkeypatch: pytest.MonkeyPatch) -> None:
    x = random_image((3, 20, 24), torch.uint8, seed=9)
    batch = random_image((4, 3, 20, 24), torch.uint8, seed=10)
    tex = random_image((3, 6, 5), torch.uint8, seed=11)
    for t in (TexturePad(5, tex), BrickPad(6), BrickPad(7, random_offset=True)):
        for image in (x, batch):
            torch.manual_seed(0)
            expected = _op_route(lambda: t(image), monkeypatch)  # noqa: B023
            torch.manual_seed(0)
            assert_bitwise_equal(_direct(lambda: t(image)), expected)  # noqa: B023


def test_autograd_goes_through_the_op() -> None:
    x = random_image((2, 3, 5, 6), torch.float64, seed=12).requires_grad_()
    before = ops_pad.direct_calls
    y = F.pad(x, (2, 3, 1, 4), padding_mode="reflect")
    assert ops_pad.direct_calls == before
    assert y.grad_fn is not None
    weight = random_image(y.shape, torch.float64, seed=13)
    (y * weight).sum().backward()
    # Independent reference: torch's own reflect pad in float64.
    ref_x = x.detach().clone().requires_grad_()
    (torch.nn.functional.pad(ref_x, (2, 1, 3, 4), mode="reflect") * weight).sum().backward()
    assert x.grad is not None and ref_x.grad is not None
    torch.testing.assert_close(x.grad, ref_x.grad, rtol=0, atol=1e-12)
    # Without grad mode the same tensor takes the direct route.
    with torch.no_grad():
        out = _direct(lambda: F.pad(x, (2, 3, 1, 4), padding_mode="reflect"))
    assert_bitwise_equal(out, y.detach())


def test_a_texture_that_requires_grad_goes_through_the_op() -> None:
    x = random_image((1, 3, 4, 4), torch.float32, seed=14)
    tex = random_image((3, 2, 3), torch.float32, seed=15).requires_grad_()
    before = ops_pad.direct_calls
    F.texture_pad(x, 2, tex).sum().backward()
    assert ops_pad.direct_calls == before
    assert tex.grad is not None and tex.grad.abs().sum() > 0


class _Log(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_sees_the_op() -> None:
    x = random_image((3, 5, 5), torch.uint8, seed=16)
    before = ops_pad.direct_calls
    with _Log() as log:
        F.pad(x, 2, padding_mode="edge")
    assert ops_pad.direct_calls == before
    assert any("tipad.pad" in op for op in log.ops), log.ops


def test_a_tensor_subclass_goes_through_the_op() -> None:
    class Sub(torch.Tensor):
        pass

    x = random_image((3, 5, 5), torch.uint8, seed=17)
    before = ops_pad.direct_calls
    tex = x[:, :2, :2].contiguous().as_subclass(Sub)
    F.texture_pad(x, 2, tex)
    # texture_bank hands the kernel a plain tensor: the direct route is fine here...
    assert ops_pad.direct_calls == before + 1
    # ...but a subclass out= keeps the op.
    out = torch.empty(3, 9, 9, dtype=torch.uint8).as_subclass(Sub)
    F.pad(x, 2, out=out)
    assert ops_pad.direct_calls == before + 1


def test_compile_traces_the_op() -> None:
    x = random_image((2, 3, 6, 7), torch.uint8, seed=18)
    fn = torch.compile(
        lambda t: F.pad(t, (1, 2, 3, 4), padding_mode="symmetric"),
        fullgraph=True,
        backend="aot_eager",
    )
    before = ops_pad.direct_calls
    got = fn(x)
    assert ops_pad.direct_calls == before
    assert_bitwise_equal(got, F.pad(x, (1, 2, 3, 4), padding_mode="symmetric"))


def test_plans_launch_through_the_bound_lean_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """A repeated signature launches with raw pointers (``_lean.Bound``), same bits."""
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("Vulkan lane: the lean launcher is off on an arch that copies host arrays")
    calls: list[bool] = []
    real = _lean.Bound.launch

    def counting(self: _lean.Bound, arrays: Any) -> bool:
        ran = real(self, arrays)
        calls.append(ran)
        return ran

    monkeypatch.setattr(_lean.Bound, "launch", counting)
    x = random_image((2, 3, 10, 12), torch.uint8, seed=19)
    tex = random_image((3, 4, 3), torch.uint8, seed=20)
    first = F.texture_pad(x, (20, 17, 21, 19), tex, stagger=1)
    F.texture_pad(x, (20, 17, 21, 19), tex, stagger=1)
    calls.clear()
    again = F.texture_pad(_poison_allocator(x), (20, 17, 21, 19), tex, stagger=1)
    assert calls == [True]
    assert_bitwise_equal(again, first)
    assert len(runtime_pad._plans) <= runtime_pad._PLANS_SIZE


def _poison_allocator(x: torch.Tensor) -> torch.Tensor:
    # Fresh outputs land in recently freed blocks: fill a few with a sentinel first.
    for _ in range(3):
        torch.full((1 << 14,), 0x5A, dtype=torch.uint8)
    return x


def test_brickpad_tile_size_follows_changed_options() -> None:
    """``tile_size`` is computed once per options, yet follows ``brick_options`` when changed."""
    from tipad_transforms.functional._brick import brick_tile_size

    t = BrickPad(4, random_offset=True, courses=3)
    assert t.tile_size == brick_tile_size(courses=3)
    t.brick_options["courses"] = 2
    assert t.tile_size == brick_tile_size(courses=2)
    t.brick_options = {"mortar": 1}
    assert t.tile_size == brick_tile_size(mortar=1)


def test_pad_stack_takes_the_direct_route_and_the_op_gives_the_same_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    images = [random_image(s, torch.uint8, seed=30 + i) for i, s in enumerate(SHAPES[:1] * 2)]
    images.append(random_image((3, 5, 9), torch.uint8, seed=33))
    tex = random_image((3, 4, 7), torch.uint8, seed=34)
    places = torch.tensor([[1, 2], [3, 0], [4, 6]])  # (top, left) of each image
    for kwargs in ({"padding_mode": "reflect"}, {"padding_mode": "texture", "texture": tex}):

        def run(kw: dict[str, Any] = kwargs) -> torch.Tensor:
            return F.pad_stack(images, (12, 20), places, **kw)

        direct = _direct(run)
        op = _op_route(run, monkeypatch)
        assert_bitwise_equal(direct, op)
        for i, (im, (top, left)) in enumerate(zip(images, places.tolist(), strict=True)):
            h, w = im.shape[-2:]
            pads = (left, top, 20 - left - w, 12 - top - h)
            if kwargs["padding_mode"] == "reflect":
                assert_bitwise_equal(direct[i], _numpy_pad(im, pads, 0, "reflect"))
            else:
                assert_bitwise_equal(direct[i], F.texture_pad(im, pads, tex))
    # A graph to record: the op (and its autograd).
    floats = [im.float().requires_grad_() for im in images]
    before = ops_pad.direct_calls
    F.pad_stack(floats, (12, 20), places, padding_mode="edge").sum().backward()
    assert ops_pad.direct_calls == before
    assert all(f.grad is not None for f in floats)


def test_plan_cache_holds_many_sizes_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # Images of many sizes (a dataset's) each keep their plan up to _PLANS_SIZE; past it the
    # oldest go first, and every call still gives torch's reflection (no stale plan is used).
    monkeypatch.setattr(runtime_pad, "_plans", {})
    monkeypatch.setattr(runtime_pad, "_PLANS_SIZE", 4)
    built: list[int] = []
    real_init = runtime_pad._Plan.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(runtime_pad._Plan, "__init__", counting)
    sizes = [(5, 7), (6, 9), (8, 5), (7, 7)]
    images = [random_image((3, h, w), torch.uint8, seed=h * 10 + w) for h, w in sizes]

    def pad_all() -> None:
        for img in images:
            got = F.pad(img, [2, 3, 4, 1], padding_mode="reflect")
            want = torch.nn.functional.pad(img[None].float(), [2, 4, 3, 1], mode="reflect")
            assert_bitwise_equal(got, want[0].to(torch.uint8))

    pad_all()
    assert len(built) == 4
    pad_all()  # the same sizes again (the next epoch): every plan reused
    assert len(built) == 4
    more = random_image((3, 9, 6), torch.uint8, seed=96)
    F.pad(more, [2, 3, 4, 1], padding_mode="reflect")
    assert len(runtime_pad._plans) == 4 and len(built) == 5
    pad_all()
    assert len(runtime_pad._plans) <= 4
