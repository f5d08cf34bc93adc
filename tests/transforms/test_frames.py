"""A transform is one frame over its functional: ``BrickPad(4)(x)`` reaches the kernel launch
through ``BrickPad.transform`` and then exactly the frames of ``functional.brick_pad(x, 4)``.

The frames are counted where Taichi is asked to launch (the first call into the ``taichi``
package, Python or C, made while padding), after warm-up (``TIPAD_WARMUP=0``, conftest); only
frames of this package's files count. The functional's own budget is tested with the ops.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torchvision import tv_tensors

import tipad_transforms
import tipad_transforms.functional as F
from tipad_transforms import BrickPad, Pad, TexturePad

PACKAGE = str(Path(tipad_transforms.__file__).parent)


def _in_taichi(frame: FrameType, event: str, arg: Any) -> bool:
    """Whether this profiler event enters Taichi (``taichi`` or ``taichi_forge``)."""
    if event == "call":
        return bool({"taichi", "taichi_forge"} & set(Path(frame.f_code.co_filename).parts))
    owner = getattr(arg, "__self__", None) if event == "c_call" else None
    return type(owner).__module__.split(".")[0] in ("taichi", "taichi_forge")


def launch_stack(call: Callable[[], Any]) -> list[str]:
    """``file:function`` of the package frames on the stack at ``call``'s first Taichi call."""
    found: list[list[str]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if found or not _in_taichi(frame, event, arg):
            return
        stack: list[str] = []
        f: FrameType | None = frame
        while f is not None:
            if f.f_code.co_filename.startswith(PACKAGE):
                stack.append(f"{Path(f.f_code.co_filename).name}:{f.f_code.co_name}")
            f = f.f_back
        found.append(stack[::-1])

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    assert found, "no Taichi launch seen: the call did not reach the kernel"
    return found[0]


def _warm(*calls: Callable[[], Any]) -> None:
    for call in calls:  # compile and cache: the counted call is a steady-state one
        call()
        call()


def test_brickpad_is_one_frame_over_brick_pad() -> None:
    x = torch.zeros(3, 8, 8, dtype=torch.uint8)
    t = BrickPad(4)
    _warm(lambda: t(x), lambda: F.brick_pad(x, 4))
    via_transform, direct = launch_stack(lambda: t(x)), launch_stack(lambda: F.brick_pad(x, 4))
    assert [f for f in via_transform if f.startswith("transforms.py:")] == [
        "transforms.py:transform"
    ]
    assert via_transform == ["transforms.py:transform", *direct], (via_transform, direct)


def test_every_transform_calls_its_functional_directly() -> None:
    x = tv_tensors.Image(torch.zeros(3, 8, 8))
    tex = torch.rand(3, 4, 4)
    cases: list[tuple[Callable[..., Any], Callable[[], Any]]] = [
        (Pad(2, padding_mode="reflect"), lambda: F.pad(x, 2, padding_mode="reflect")),
        (TexturePad(2, tex, random_offset=True), lambda: F.texture_pad(x, 2, tex)),
        (BrickPad(2, random_offset=True), lambda: F.brick_pad(x, 2)),
    ]
    for t, functional in cases:
        call = functools.partial(t, x)
        _warm(call, functional)
        want = ["transforms.py:transform", *launch_stack(functional)]
        assert launch_stack(call) == want, type(t).__name__
