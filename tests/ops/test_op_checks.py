"""Direct ``torch.ops.tipad.*`` calls with arguments their kernels cannot take: each gets a
ValueError/TypeError that names the argument, from the real and the fake implementation alike,
and never reaches a kernel. ``pad_out`` refuses inputs that overlap ``out`` in memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tipad_transforms.ops  # noqa: F401  (registers torch.ops.tipad)
from tipad_transforms.backends import TAICHI

I32 = torch.int32
ops = torch.ops.tipad


def _pad_args(**change: Any) -> list[Any]:
    x = torch.rand(2, 3, 4, 5)
    args = dict(
        x=x,
        padding=[1, 2, 3, 4],
        mode="texture",
        fill=torch.rand(3),
        texture=torch.rand(2, 3, 3, 2),
        offset=torch.zeros(2, 2, dtype=I32),
        texture_index=torch.zeros(2, dtype=I32),
        stagger=0,
    )
    args.update(change)
    return list(args.values())


def _pad_backward_args(**change: Any) -> list[Any]:
    args = dict(
        grad=torch.rand(2, 3, 10, 9),
        x_shape=[2, 3, 4, 5],
        padding=[1, 2, 3, 4],
        mode="texture",
        texture=torch.rand(2, 3, 3, 2),
        offset=torch.zeros(2, 2, dtype=I32),
        texture_index=torch.zeros(2, dtype=I32),
        stagger=0,
    )
    args.update(change)
    return list(args.values())


def _stack_args(**change: Any) -> list[Any]:
    args = dict(
        images=torch.rand(3 * (4 * 5 + 2 * 3)),
        sizes=torch.tensor([[4, 5, 0, 0], [2, 3, 1, 1]]),
        canvas=[3, 6, 6],
        mode="constant",
        fill=torch.rand(3),
        texture=torch.empty(0),
        offset=torch.zeros(2, 2, dtype=I32),
        texture_index=torch.zeros(2, dtype=I32),
        stagger=0,
    )
    args.update(change)
    return list(args.values())


def _stack_backward_args(**change: Any) -> list[Any]:
    args = dict(
        grad=torch.rand(2, 3, 6, 6),
        sizes=torch.tensor([[4, 5, 0, 0], [2, 3, 1, 1]]),
        numel=3 * (4 * 5 + 2 * 3),
        mode="constant",
        texture=torch.empty(0),
        offset=torch.zeros(2, 2, dtype=I32),
        texture_index=torch.zeros(2, dtype=I32),
        stagger=0,
    )
    args.update(change)
    return list(args.values())


def _wkv_args(**change: Any) -> list[Any]:
    args = dict(
        time_decay=torch.rand(4),
        time_first=torch.rand(4),
        k=torch.rand(2, 3, 4),
        v=torch.rand(2, 3, 4),
        state=torch.rand(2, 3, 4),
        save=True,
    )
    args.update(change)
    return list(args.values())


def _wkv_backward_args(**change: Any) -> list[Any]:
    args = dict(
        time_decay=torch.rand(4),
        time_first=torch.rand(4),
        k=torch.rand(2, 3, 4),
        v=torch.rand(2, 3, 4),
        state=torch.rand(2, 3, 4),
        saved=torch.rand(3, 2, 4, 4),
        grad_y=torch.rand(2, 3, 4),
        grad_state=torch.rand(2, 3, 4),
    )
    args.update(change)
    return list(args.values())


def _conv_args(**change: Any) -> list[Any]:
    args = dict(w=torch.rand(3, 5), k=torch.rand(2, 3, 7), eps=0.0)
    args.update(change)
    return list(args.values())


def _conv_backward_args(**change: Any) -> list[Any]:
    args = dict(grad=torch.rand(2, 3, 7), w=torch.rand(3, 5), k=torch.rand(2, 3, 7))
    args.update(change, grad_w=True, grad_k=True)
    return list(args.values())


def _pad_out_args(**change: Any) -> list[Any]:
    out = change.pop("out", torch.empty(2, 3, 10, 9))
    return [*_pad_args(**change), out]


E = ValueError
T = TypeError
CASES: list[tuple[str, Callable[..., Any], Callable[..., list[Any]], dict[str, Any], Any, str]] = [
    ("pad x 1-D", ops.pad, _pad_args, dict(x=torch.rand(5)), E, r"^x must have shape"),
    ("pad padding 3", ops.pad, _pad_args, dict(padding=[1, 2, 3]), E, r"^padding must be 4"),
    ("pad padding < 0", ops.pad, _pad_args, dict(padding=[1, -2, 3, 4]), E, r"^padding must"),
    ("pad mode", ops.pad, _pad_args, dict(mode="mirror"), E, r"^mode must be one of"),
    (
        "pad empty reflect",
        ops.pad,
        _pad_args,
        dict(x=torch.rand(2, 3, 0, 5), mode="reflect"),
        E,
        r"^x of shape \(2, 3, 0, 5\) holds no pixels: mode 'reflect' needs a non-empty",
    ),
    (
        "pad fill shape",
        ops.pad,
        _pad_args,
        dict(mode="constant", fill=torch.rand(2)),
        E,
        r"^fill must have shape \(3,\)",
    ),
    (
        "pad fill dtype",
        ops.pad,
        _pad_args,
        dict(mode="constant", fill=torch.rand(3).double()),
        T,
        r"^fill must be torch.float32",
    ),
    (
        "pad fill device",
        ops.pad,
        _pad_args,
        dict(mode="constant", fill=torch.rand(3, device="meta")),
        E,
        r"^fill is on meta, x on cpu",
    ),
    ("pad texture 3-D", ops.pad, _pad_args, dict(texture=torch.rand(3, 3, 2)), E, r"^texture must"),
    (
        "pad texture channels",
        ops.pad,
        _pad_args,
        dict(texture=torch.rand(1, 2, 3, 2)),
        E,
        r"^texture must be \(K, 1 or 3",
    ),
    (
        "pad texture empty tile",
        ops.pad,
        _pad_args,
        dict(texture=torch.rand(1, 3, 0, 2)),
        E,
        r"^texture must",
    ),
    (
        "pad texture dtype",
        ops.pad,
        _pad_args,
        dict(texture=torch.rand(2, 3, 3, 2).half()),
        T,
        r"^texture must be torch.float32",
    ),
    (
        "pad offset shape",
        ops.pad,
        _pad_args,
        dict(offset=torch.zeros(1, 2, dtype=I32)),
        E,
        r"^offset must have shape \(2, 2\)",
    ),
    (
        "pad offset dtype",
        ops.pad,
        _pad_args,
        dict(offset=torch.zeros(2, 2, dtype=torch.int64)),
        T,
        r"^offset must be torch.int32",
    ),
    (
        "pad index shape",
        ops.pad,
        _pad_args,
        dict(texture_index=torch.zeros(3, dtype=I32)),
        E,
        r"^texture_index must have shape \(2,\)",
    ),
    (
        "pad index device",
        ops.pad,
        _pad_args,
        dict(texture_index=torch.zeros(2, dtype=I32, device="meta")),
        E,
        r"^texture_index is on meta",
    ),
    ("pad stagger", ops.pad, _pad_args, dict(stagger=2**40), E, r"^stagger must fit in int32"),
    ("pad_out mode", ops.pad_out, _pad_out_args, dict(mode="mirror"), E, r"^pad_mode must be"),
    (
        "pad_out shape",
        ops.pad_out,
        _pad_out_args,
        dict(out=torch.empty(2, 3, 10, 8)),
        E,
        r"^out must have shape \(2, 3, 10, 9\)",
    ),
    (
        "pad_out dtype",
        ops.pad_out,
        _pad_out_args,
        dict(out=torch.empty(2, 3, 10, 9).double()),
        T,
        r"^out must be torch.float32",
    ),
    (
        "pad_out device",
        ops.pad_out,
        _pad_out_args,
        dict(out=torch.empty(2, 3, 10, 9, device="meta")),
        E,
        r"^out is on meta, x on cpu",
    ),
    (
        "pad_out strides",
        ops.pad_out,
        _pad_out_args,
        dict(out=torch.empty(2, 3, 9, 10).transpose(2, 3)),
        E,
        r"^out must be contiguous",
    ),
    (
        "pad_backward grad int",
        ops.pad_backward,
        _pad_backward_args,
        dict(grad=torch.zeros(2, 3, 10, 9, dtype=torch.uint8)),
        T,
        r"^grad must be a floating",
    ),
    (
        "pad_backward grad shape",
        ops.pad_backward,
        _pad_backward_args,
        dict(grad=torch.rand(2, 3, 10, 8)),
        E,
        r"^grad must have shape \(2, 3, 10, 9\)",
    ),
    (
        "pad_backward x_shape",
        ops.pad_backward,
        _pad_backward_args,
        dict(x_shape=[5]),
        E,
        r"^x_shape must be",
    ),
    (
        "pad_backward index",
        ops.pad_backward,
        _pad_backward_args,
        dict(texture_index=torch.zeros(2, dtype=torch.int64)),
        T,
        r"^texture_index must be torch.int32",
    ),
    (
        "pad_stack images 2-D",
        ops.pad_stack,
        _stack_args,
        dict(images=torch.rand(3, 26)),
        E,
        r"^images must be 1-D",
    ),
    (
        "pad_stack sizes",
        ops.pad_stack,
        _stack_args,
        dict(sizes=torch.zeros(2, 3)),
        E,
        r"^sizes must be an \(N, 4\)",
    ),
    ("pad_stack canvas", ops.pad_stack, _stack_args, dict(canvas=[3, 6]), E, r"^canvas must be"),
    ("pad_stack mode", ops.pad_stack, _stack_args, dict(mode="wrap"), E, r"^mode must be one of"),
    ("pad_stack fill", ops.pad_stack, _stack_args, dict(fill=torch.rand(1)), E, r"^fill must have"),
    (
        "pad_stack fill dtype",
        ops.pad_stack,
        _stack_args,
        dict(fill=torch.zeros(3, dtype=torch.uint8)),
        T,
        r"^fill must be torch.float32",
    ),
    ("pad_stack texture", ops.pad_stack, _stack_args, dict(mode="texture"), E, r"^texture must"),
    (
        "pad_stack offset",
        ops.pad_stack,
        _stack_args,
        dict(offset=torch.zeros(2, 3, dtype=I32)),
        E,
        r"^offset must have shape \(2, 2\)",
    ),
    (
        "pad_stack_backward grad 3-D",
        ops.pad_stack_backward,
        _stack_backward_args,
        dict(grad=torch.rand(3, 6, 6)),
        E,
        r"^grad must be \(N, C, H, W\)",
    ),
    (
        "pad_stack_backward grad int",
        ops.pad_stack_backward,
        _stack_backward_args,
        dict(grad=torch.zeros(2, 3, 6, 6, dtype=torch.int64)),
        T,
        r"^grad must be a floating",
    ),
    (
        "pad_stack_backward grad n",
        ops.pad_stack_backward,
        _stack_backward_args,
        dict(grad=torch.rand(3, 3, 6, 6)),
        E,
        r"^grad must hold 2 canvases",
    ),
    (
        "pad_stack_backward numel",
        ops.pad_stack_backward,
        _stack_backward_args,
        dict(numel=-1),
        E,
        r"^numel must be >= 0",
    ),
    (
        "pad_stack_backward index",
        ops.pad_stack_backward,
        _stack_backward_args,
        dict(texture_index=torch.zeros(1, dtype=I32)),
        E,
        r"^texture_index must have shape \(2,\)",
    ),
    (
        "wkv k 2-D",
        ops.wkv_forward,
        _wkv_args,
        dict(k=torch.rand(3, 4)),
        E,
        r"^k must be \(B, T, C\)",
    ),
    (
        "wkv k int",
        ops.wkv_forward,
        _wkv_args,
        dict(k=torch.zeros(2, 3, 4, dtype=torch.int64)),
        T,
        r"^k must be float16",
    ),
    (
        "wkv v shape",
        ops.wkv_forward,
        _wkv_args,
        dict(v=torch.rand(2, 3, 5)),
        E,
        r"^v must have k's",
    ),
    (
        "wkv v dtype",
        ops.wkv_forward,
        _wkv_args,
        dict(v=torch.rand(2, 3, 4).double()),
        T,
        r"^v must have k's dtype",
    ),
    (
        "wkv time_decay",
        ops.wkv_forward,
        _wkv_args,
        dict(time_decay=torch.rand(5)),
        E,
        r"^time_decay must be \(4,\)",
    ),
    (
        "wkv time_first int",
        ops.wkv_forward,
        _wkv_args,
        dict(time_first=torch.zeros(4, dtype=I32)),
        T,
        r"^time_first must be float16",
    ),
    (
        "wkv state shape",
        ops.wkv_forward,
        _wkv_args,
        dict(state=torch.rand(2, 2, 4)),
        E,
        r"^state must be \(2, 3, 4\)",
    ),
    (
        "wkv state dtype",
        ops.wkv_forward,
        _wkv_args,
        dict(state=torch.rand(2, 3, 4).double()),
        T,
        r"^state must be torch.float32",
    ),
    (
        "wkv device",
        ops.wkv_forward,
        _wkv_args,
        dict(v=torch.rand(2, 3, 4, device="meta")),
        E,
        r"^v is on meta, k on cpu",
    ),
    (
        "wkv_backward saved",
        ops.wkv_backward,
        _wkv_backward_args,
        dict(saved=torch.rand(3, 2, 3, 4)),
        E,
        r"^saved must be \(3, 2, 0 or 4, 4\)",
    ),
    (
        "wkv_backward saved dtype",
        ops.wkv_backward,
        _wkv_backward_args,
        dict(saved=torch.rand(3, 2, 4, 4).double()),
        T,
        r"^saved must be torch.float32",
    ),
    (
        "wkv_backward grad_y",
        ops.wkv_backward,
        _wkv_backward_args,
        dict(grad_y=torch.rand(2, 3, 5)),
        E,
        r"^grad_y must have shape \(2, 3, 4\)",
    ),
    (
        "wkv_backward grad_state int",
        ops.wkv_backward,
        _wkv_backward_args,
        dict(grad_state=torch.zeros(2, 3, 4, dtype=I32)),
        T,
        r"^grad_state must be float16",
    ),
    (
        "wkv_backward k",
        ops.wkv_backward,
        _wkv_backward_args,
        dict(k=torch.rand(2, 3)),
        E,
        r"^k must be \(B, T, C\)",
    ),
    (
        "time_conv w 3-D",
        ops.time_conv_forward,
        _conv_args,
        dict(w=torch.rand(3, 1, 5)),
        E,
        r"^w must be \(C, L\)",
    ),
    (
        "time_conv k 2-D",
        ops.time_conv_forward,
        _conv_args,
        dict(k=torch.rand(3, 7)),
        E,
        r"^k must be \(B, C, T\)",
    ),
    (
        "time_conv channels",
        ops.time_conv_forward,
        _conv_args,
        dict(w=torch.rand(4, 5)),
        E,
        r"^w has 4 channels",
    ),
    (
        "time_conv L = 0",
        ops.time_conv_forward,
        _conv_args,
        dict(w=torch.rand(3, 0)),
        E,
        r"^w must hold at least one tap",
    ),
    (
        "time_conv k int",
        ops.time_conv_forward,
        _conv_args,
        dict(k=torch.zeros(2, 3, 7, dtype=I32)),
        T,
        r"^k must be float16",
    ),
    (
        "time_conv device",
        ops.time_conv_forward,
        _conv_args,
        dict(k=torch.rand(2, 3, 7, device="meta")),
        E,
        r"^w is on cpu, k on meta",
    ),
    (
        "time_conv_backward grad shape",
        ops.time_conv_backward,
        _conv_backward_args,
        dict(grad=torch.rand(2, 3, 6)),
        E,
        r"^grad must have shape \(2, 3, 7\)",
    ),
    (
        "time_conv_backward grad int",
        ops.time_conv_backward,
        _conv_backward_args,
        dict(grad=torch.zeros(2, 3, 7, dtype=I32)),
        T,
        r"^grad must be float16",
    ),
    (
        "time_conv_backward w",
        ops.time_conv_backward,
        _conv_backward_args,
        dict(w=torch.rand(3)),
        E,
        r"^w must be \(C, L\)",
    ),
]


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a kernel session was entered")

    monkeypatch.setattr(TAICHI, "session", refuse)


@pytest.mark.parametrize(
    ("op", "make", "change", "error", "match"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_bad_direct_op_call_names_the_argument(
    op: Any, make: Callable[..., list[Any]], change: dict[str, Any], error: Any, match: str,
    no_launch: None,
) -> None:  # fmt: skip
    args = make(**change)
    with pytest.raises(error, match=match):
        op(*args)
    # The fake implementation (torch.compile's tracing) checks the same on metadata alone.
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(error, match=match):
            op(*fake)


@pytest.mark.parametrize("make", [_pad_args, _pad_out_args, _pad_backward_args, _stack_args,
                                  _stack_backward_args, _wkv_args, _wkv_backward_args, _conv_args,
                                  _conv_backward_args])  # fmt: skip
def test_the_good_calls_of_the_table_run(make: Callable[..., list[Any]]) -> None:
    # Each bad case above changes one argument of a call that works.
    op = {
        _pad_args: ops.pad, _pad_out_args: ops.pad_out, _pad_backward_args: ops.pad_backward,
        _stack_args: ops.pad_stack, _stack_backward_args: ops.pad_stack_backward,
        _wkv_args: ops.wkv_forward, _wkv_backward_args: ops.wkv_backward,
        _conv_args: ops.time_conv_forward, _conv_backward_args: ops.time_conv_backward,
    }[make]  # fmt: skip
    op(*make())


# ---------------------------------------------------------------------------------------------
# out= overlapping an input


def _canvas_and_views() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    out = torch.zeros(2, 3, 10, 9)
    flat = out.view(-1)
    return (
        out,
        {
            "x": out[:, :, :4, :5],
            "fill": out[0, :, 0, 0],  # a view of the border it would write: once a wrong border
            "texture": out[:, :, :3, :2],
            "offset": flat[:4].view(torch.int32).view(2, 2),
            "texture_index": flat[-2:].view(torch.int32),
        },
    )


@pytest.mark.parametrize("name", ["x", "fill", "texture", "offset", "texture_index"])
def test_pad_out_refuses_inputs_overlapping_out(name: str, no_launch: None) -> None:
    out, views = _canvas_and_views()
    args = dict(zip(["x", "padding", "mode", "fill", "texture", "offset", "texture_index",
                     "stagger"], _pad_args(mode="constant"), strict=True))  # fmt: skip
    if name == "x":
        args["x"] = views["x"]
    else:
        args[name] = views[name]
    if name in ("x", "offset"):
        args["x"] = args["x"].contiguous() if name != "x" else args["x"]
    with pytest.raises(ValueError, match=f"^out must not overlap {name} in memory$"):
        ops.pad_out(*args.values(), out)


def test_pad_out_fill_in_separate_memory_is_exact() -> None:
    out = torch.zeros(2, 3, 10, 9)
    fill = out[0, :, 0, 0].clone() + 7
    x = torch.rand(2, 3, 4, 5)
    ops.pad_out(*_pad_args(x=x, mode="constant", fill=fill), out)
    assert torch.equal(out[:, :, 2:6, 1:6], x)
    border = out.clone()
    border[:, :, 2:6, 1:6] = 7
    assert (border == 7).all()
