"""The one selection policy (``backends/__init__.py``): backends tried in order, a refusal warns
once and hands over to the next, tests choose and observe backends (``use``, ``forbid``,
``record``), a new family is a folder plus one registration, and the frame budget of a call
from the user's line to the Taichi launch."""

from __future__ import annotations

import inspect
import os
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from reference import assert_bitwise_equal, pad_ref, random_image

import tipad_transforms
import tipad_transforms.functional as F
from tipad_transforms import backends, ops
from tipad_transforms._compat import taichi as compat
from tipad_transforms.backends import TAICHI

PACKAGE = os.path.dirname(tipad_transforms.__file__) + os.sep


def test_every_family_runs_on_taichi_and_says_so() -> None:
    x = random_image((2, 3, 5, 6), torch.float32, seed=1).requires_grad_()
    with backends.record() as ran:
        F.pad(x, 2, padding_mode="reflect").sum().backward()
        ops.time_conv(torch.rand(3, 2), torch.rand(1, 3, 5))
        ops.wkv(torch.rand(4), torch.rand(4), torch.rand(1, 2, 4), torch.rand(1, 2, 4))
        ops.wkv7(*(torch.rand(1, 2, 1, 4) for _ in range(6)))
    assert ran == [
        ("pad", "forward", "taichi"),
        ("pad", "backward", "taichi"),
        ("time_conv", "forward", "taichi"),
        ("wkv", "forward", "taichi"),
        ("wkv7", "forward", "taichi"),
    ]


@pytest.mark.allow_fallback
@pytest.mark.parametrize("mode", ["edge", "constant"])
def test_use_chooses_the_backend_and_both_give_the_same_bits(mode: str) -> None:
    x = random_image((2, 3, 7, 5), torch.uint8, seed=2)
    with backends.record() as ran:
        with backends.use("torch"):
            on_torch = F.pad(x, (3, 1, 2, 4), fill=9, padding_mode=mode)
        on_taichi = F.pad(x, (3, 1, 2, 4), fill=9, padding_mode=mode)
    assert [r[2] for r in ran] == ["torch", "taichi"]
    assert_bitwise_equal(on_torch, on_taichi)
    assert_bitwise_equal(on_taichi, pad_ref(x, (3, 1, 2, 4), mode, 9))


def test_forbid_stops_a_fallback_not_a_chosen_backend() -> None:
    # The suite forbids the torch route (conftest); a `use` inside chooses it deliberately.
    x = random_image((1, 2, 3), torch.uint8, seed=3)
    with backends.record() as ran:
        with backends.use("torch"):
            F.pad(x, 1)
            with backends.use("taichi"):
                F.pad(x, 1)
        with pytest.raises(backends.Forbidden), backends.use("taichi", "torch"):
            with backends.forbid("taichi"):
                F.pad(x, 1)  # forbidden inside the use: stopped
        F.pad(x, 1)
    assert [r[2] for r in ran] == ["torch", "taichi", "taichi"]
    with pytest.raises(backends.Forbidden), backends.use("torch"), backends.use("taichi"):
        with backends.forbid("taichi"):
            F.pad(x, 1)


def test_an_implementation_is_read_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # A test may replace a family's implementation (to spy on what it writes, say).
    from tipad_transforms.ops.rwkv4 import taichi as wkv_taichi

    real, written = wkv_taichi.forward, []

    def spy(*tensors: torch.Tensor) -> None:
        written.extend(t.data_ptr() for t in tensors[5:])  # y, the new state
        real(*tensors)

    k = torch.rand(2, 1, 8)
    ops.wkv(torch.rand(8), torch.rand(8), k, k)
    monkeypatch.setattr(wkv_taichi, "forward", spy)
    with torch.no_grad():
        y, new = ops.wkv(torch.rand(8), torch.rand(8), k, k, ops.init_wkv_state(2, 8))
    assert written == [y.data_ptr(), new.data_ptr()]


def test_use_refuses_names_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="backends must be some of"):
        with backends.use("cuda"):
            pass
    with pytest.raises(ValueError, match="backends must be some of"):
        with backends.use():
            pass


def test_a_refusal_with_no_backend_left_raises_the_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TAICHI, "refusal", lambda device: "refused by test_policy")
    with backends.use("taichi"), pytest.warns(RuntimeWarning, match="refused by test_policy"):
        with pytest.raises(backends.Refused, match="no backend in use could run padding"):
            F.pad(torch.zeros(1, 2, 2), 1)


def test_forbid_fails_a_call_the_torch_backend_would_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # conftest forbids "torch" for every test not marked allow_fallback: this one.
    monkeypatch.setattr(TAICHI, "refusal", lambda device: "refused by test_policy, forbid")
    with pytest.warns(RuntimeWarning), pytest.raises(backends.Forbidden, match=r"pad\.forward"):
        F.pad(torch.zeros(1, 2, 2), 1)


@pytest.mark.allow_fallback
def test_a_refusal_warns_once_per_operation_and_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TAICHI, "refusal", lambda device: "refused by test_policy, once")
    k = torch.rand(1, 3, 4)
    with backends.record() as ran:
        with pytest.warns(RuntimeWarning, match="computing wkv with the slower torch route"):
            first = ops.wkv(torch.rand(4), torch.rand(4), k, k)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ops.wkv(torch.rand(4), torch.rand(4), k, k)
    assert ran == [("wkv", "forward", "torch")] * 2
    monkeypatch.undo()
    assert first.shape == k.shape


NEW_FAMILY = {
    "__init__.py": "from .op import double\n",
    "op.py": """
        import torch
        from tipad_transforms import backends

        TWICE = backends.family("twice", __package__, "doubling", ("forward",))

        def double(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            TWICE.forward(x, out)
            return out
        """,
    "taichi.py": """
        from tipad_transforms.backends import Refused, TAICHI

        def forward(x, out):
            reason = TAICHI.refusal(x.device) or ("odd sizes" if x.numel() % 2 else None)
            if reason is not None:
                raise Refused(reason)
            out.copy_(x + x)
        """,
    "reference.py": """
        def forward(x, out):
            out.copy_(x * 2)
        """,
}


@pytest.mark.allow_fallback
def test_a_new_family_is_one_folder_and_one_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A family in a folder of its own (here outside the package, as a plugin would be), found
    # by the policy through its registration alone: nothing else in tipad_transforms changes.
    folder = tmp_path / "twice_family"
    folder.mkdir()
    for name, text in NEW_FAMILY.items():
        (folder / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    from twice_family import double  # type: ignore[import-not-found]

    with backends.record() as ran:
        assert torch.equal(double(torch.arange(4.0)), torch.arange(4.0) * 2)
        with pytest.warns(RuntimeWarning, match=r"odd sizes\); doubling with the slower"):
            assert torch.equal(double(torch.arange(3.0)), torch.arange(3.0) * 2)
    assert ran == [("twice", "forward", "taichi"), ("twice", "forward", "torch")]
    monkeypatch.delitem(sys.modules, "twice_family")


# ---------------------------------------------------------------------------------------------
# the frame budget: package frames from the user's call to the Taichi launch (after warm-up)


def _launch_depths(run: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The package frames on the stack at each lean launch of ``run()`` (the launch itself
    included), outermost first, once its signatures are compiled and recorded."""
    if not compat.lean_supported(TAICHI.load()):
        pytest.skip("the lean launcher is off for this Taichi: the public call launches")
    run()
    run()
    stacks: list[list[str]] = []
    real = compat.Bound.launch

    def counting(self: compat.Bound, arrays: Any) -> bool:
        frames, frame = ["_compat/taichi.py:Bound.launch"], inspect.currentframe()
        frame = frame.f_back if frame is not None else None
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(PACKAGE):
                frames.append(f"{os.path.relpath(name, PACKAGE)}:{frame.f_code.co_name}")
            frame = frame.f_back
        stacks.append(frames[::-1])
        return real(self, arrays)

    monkeypatch.setattr(compat.Bound, "launch", counting)
    run()
    return stacks


_X = torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8)
_R7 = [torch.rand(1, 1, 2, 8) for _ in range(6)]
BUDGETS = {
    'F.pad(x, 4, padding_mode="reflect")': (lambda: F.pad(_X, 4, padding_mode="reflect"), 7),
    "F.texture_pad(x, 4, tile)": (lambda: F.texture_pad(_X, 4, _X[:, :5, :7]), 7),
    # BrickPad(4)(x) must reach the launch within 7: the transform's own frame or two and these.
    "F.brick_pad(x, 4)": (lambda: F.brick_pad(_X, 4), 6),
    "BrickPad(4)(x)": (lambda: tipad_transforms.BrickPad(4)(_X), 7),
    "ops.wkv7, one token": (lambda: ops.wkv7(*_R7, state=torch.zeros(1, 2, 8, 8)), 6),
}


@pytest.mark.parametrize("call", list(BUDGETS))
def test_a_call_reaches_the_launch_within_its_frame_budget(
    call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, budget = BUDGETS[call]
    stacks = _launch_depths(run, monkeypatch)
    assert len(stacks) == 1, "one launch per call"
    assert 0 < len(stacks[0]) <= budget, f"{len(stacks[0])} package frames: {stacks[0]}"
