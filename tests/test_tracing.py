"""Tracing never changes eager behaviour: torch.export, torch.jit.trace and torch.compile of code
that pads record the ``tipad`` custom ops and give the eager result, no cache keeps a tensor
made under a tracer, and one check (``_tracing.tracing``, read by ``_tracing.eager``)
tells every tracing, export, functorch and mode state from plain eager execution.

References: ``tests/reference.py`` (numpy index maps, written from the spec), and eager calls
made in a process state no tracer has touched.
"""

from __future__ import annotations

import contextlib
import inspect
import pydoc
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from reference import assert_bitwise_equal, pad_ref, random_image, texture_pad_ref
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torchvision import tv_tensors

import tipad_transforms.functional as F
from tipad_transforms import ops
from tipad_transforms._tracing import eager, tracing, untraced
from tipad_transforms._value_cache import KeyedCache, ValueCache
from tipad_transforms.functional import _brick
from tipad_transforms.ops.padding import op as pad_module

TEXTURE = random_image((3, 4, 5), torch.float32, seed=3)


class _Padder(torch.nn.Module):
    """A module whose forward pads its input with one of the functionals (the texture a buffer,
    as a model would hold it)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.register_buffer("texture", TEXTURE.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "reflect":
            return F.pad(x, [1, 2, 3, 4], padding_mode="reflect")
        if self.kind == "constant":
            return F.pad(x, 2, fill=[0.25, -0.0, 7.0])
        if self.kind == "brick":
            return F.brick_pad(x, 3)
        return F.texture_pad(x, (2, 1), self.texture, stagger=2, offset=(1, 3))


KINDS = ["reflect", "constant", "brick", "texture"]


def _reference(kind: str, x: torch.Tensor) -> torch.Tensor:
    """The result from the references (brick: the tile rendered by the public function)."""
    plain = x.as_subclass(torch.Tensor)
    if kind == "reflect":
        return pad_ref(plain, [1, 2, 3, 4], "reflect")
    if kind == "constant":
        return pad_ref(plain, 2, "constant", fill=[0.25, -0.0, 7.0])
    if kind == "brick":
        tile = F.make_brick_texture(channels=3)
        return texture_pad_ref(plain, 3, tile, stagger=F.running_bond_stagger())
    return texture_pad_ref(plain, (2, 1), TEXTURE, stagger=2, offset=(1, 3))


def _cached_tensors() -> Iterator[torch.Tensor]:
    """Every tensor held by a module-level KeyedCache or ValueCache of the package (found in
    the modules' globals, so a new cache is covered too)."""
    found = {
        f"{name}.{attr}": value
        for name, module in list(sys.modules.items())
        if name.startswith("tipad_transforms")
        for attr, value in vars(module).items()
        if isinstance(value, (KeyedCache, ValueCache))
    }
    # The package's caches of tensors: the shared constants, texture conversions, word tables.
    assert set(found) >= {
        "tipad_transforms._value_cache._CONSTANTS",
        "tipad_transforms.functional._convert._BANKS",
        "tipad_transforms.ops.padding.taichi._words_cache",
    }, sorted(found)
    caches = list(found.values())
    for cache in caches:
        if isinstance(cache, KeyedCache):
            yield from (v for v in cache._entries.values() if isinstance(v, torch.Tensor))
        elif isinstance(cache, ValueCache):
            for entry in cache._entries.values():
                yield from (v for v in entry if isinstance(v, torch.Tensor))


def _assert_caches_plain() -> None:
    """No cache holds a fake, functional or traced tensor (the brick renderer's lru_cache
    included)."""
    kinds = {type(t).__name__ for t in _cached_tensors()}
    assert kinds <= {"Tensor"}, f"a cache holds {kinds - {'Tensor'}}"
    rendered = _brick._render(6, 12, 2, 4, 2, (0.6, 0.3, 0.2), (0.7, 0.7, 0.6), 0.1, 0.05, 0.1, 0)
    assert type(rendered) is torch.Tensor


def _graph_targets(ep: torch.export.ExportedProgram) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


# ---------------------------------------------------------------------------------------------
# the one check


def _seen_in(run: Callable[[Callable[[torch.Tensor], torch.Tensor]], Any]) -> list[bool]:
    """``[tracing(), eager(x)]`` as first seen by a function that ``run`` traces (jit.trace
    runs it again afterwards, to check the trace)."""
    seen: list[bool] = []

    def probe(x: torch.Tensor) -> torch.Tensor:
        if not seen:
            seen[:] = [tracing(), eager(x)]
        # Also in the result: strict export drops side effects such as the line above.
        return x + (1 if tracing() else 0) + (2 if eager(x) else 0)

    result = run(probe)
    if isinstance(result, torch.export.ExportedProgram) and not seen:
        x = torch.rand(2)
        code = int((result.module()(x) - x).round()[0])
        seen[:] = [bool(code & 1), bool(code & 2)]
    return seen


class _UserDispatchMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


class _UserFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


def _under(mode: Any) -> Callable[[Callable[[torch.Tensor], torch.Tensor]], Any]:
    def run(fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        with mode:
            return fn(torch.rand(2))

    return run


def _export(fn: Callable[[torch.Tensor], torch.Tensor], strict: bool = False) -> Any:
    class Wrap(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return fn(x)

    return torch.export.export(Wrap(), (torch.rand(2),), strict=strict)


def _make_fx(**kwargs: Any) -> Callable[[Callable[[torch.Tensor], torch.Tensor]], Any]:
    from torch.fx.experimental.proxy_tensor import make_fx

    return lambda fn: make_fx(fn, **kwargs)(torch.rand(2))


def _jit_trace(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor | None = None) -> Any:
    with warnings.catch_warnings():
        # torch.jit.trace's deprecation notice, and its notes on shapes read as Python ints.
        warnings.simplefilter("ignore")
        return torch.jit.trace(fn, (torch.rand(2) if x is None else x,))


def _fake_mode() -> Any:
    from torch._subclasses import FakeTensorMode

    return FakeTensorMode()


STATES: dict[str, Callable[[Callable[[torch.Tensor], torch.Tensor]], Any]] = {
    "torch.compile": lambda fn: torch.compile(fn, fullgraph=True, backend="eager")(torch.rand(2)),
    "export": _export,
    "export strict": lambda fn: _export(fn, strict=True),
    "jit.trace": _jit_trace,
    "vmap": lambda fn: torch.func.vmap(fn)(torch.rand(3, 2)),
    "grad": lambda fn: torch.func.grad(lambda x: fn(x).sum())(torch.rand(2)),
    "functionalize": lambda fn: torch.func.functionalize(fn)(torch.rand(2)),
    "make_fx real": _make_fx(),
    "make_fx fake": _make_fx(tracing_mode="fake"),
    "make_fx symbolic": _make_fx(tracing_mode="symbolic"),
    "make_fx pre_dispatch": _make_fx(pre_dispatch=True),
    "FakeTensorMode": lambda fn: _under(_fake_mode())(fn),
    "a user's TorchDispatchMode": _under(_UserDispatchMode()),
    "a user's TorchFunctionMode": _under(_UserFunctionMode()),
    "a torch.device context": _under(torch.device("cpu")),
}


@pytest.mark.filterwarnings("ignore:While compiling, we found certain side effects")
@pytest.mark.parametrize("state", list(STATES))
def test_every_tracing_state_is_seen(state: str) -> None:
    # torch.jit.trace was missed (a traced call skipped the dispatcher: the trace recorded the
    # torch route's ops, or hit an INTERNAL ASSERT on the kernel's pointers).
    torch._dynamo.reset()
    assert _seen_in(STATES[state]) == [True, False]


EAGER_CONTEXTS: dict[str, Callable[[], Any]] = {
    "plain": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "enable_grad": torch.enable_grad,
}


@pytest.mark.parametrize("context", list(EAGER_CONTEXTS))
def test_eager_states_are_eager(context: str) -> None:
    with EAGER_CONTEXTS[context]():
        assert not tracing()
        assert eager(torch.rand(2))


def test_untraced_runs_outside_every_tracer() -> None:
    from torch._subclasses import FakeTensorMode

    with FakeTensorMode():
        fake = torch.ones(2)
        real = untraced(lambda: torch.ones(2))
    assert type(fake).__name__ == "FakeTensor"
    assert type(real) is torch.Tensor and torch.equal(real, torch.ones(2))
    with pytest.raises(ValueError, match="from the helper"), FakeTensorMode():
        untraced(lambda: (_ for _ in ()).throw(ValueError("from the helper")))


# ---------------------------------------------------------------------------------------------
# torch.export


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("wrap", [False, True], ids=["tensor", "tv_tensors.Image"])
def test_export_records_the_op_and_equals_eager(kind: str, wrap: bool) -> None:
    # Failed with "We found a fake tensor in the exported program constant's list" (the kernel's
    # plain view of the fake input), and left fake tensors in the caches.
    x = random_image((2, 3, 6, 7), torch.float32, seed=11)
    inpt = tv_tensors.Image(x) if wrap else x
    ep = torch.export.export(_Padder(kind), (inpt,))
    assert "tipad.pad.default" in _graph_targets(ep)
    # The brick tile is a constant of the program, not a trace of its random draws.
    assert not any("rand" in t for t in _graph_targets(ep))
    want = _reference(kind, x)
    program = ep.module()
    for _ in range(2):  # a second run equals the first: no generator state in the program
        assert_bitwise_equal(program(x), want)
    other = random_image((2, 3, 6, 7), torch.float32, seed=12)
    assert_bitwise_equal(program(other), _reference(kind, other))
    assert_bitwise_equal(_Padder(kind)(inpt).as_subclass(torch.Tensor), want)
    _assert_caches_plain()


def test_eager_calls_work_after_a_failed_export() -> None:
    # After a failed export the next eager F.brick_pad(tv_tensors.Image(...)) raised "the raw
    # Tensor object is already associated to a python object of type FakeTensor" and F.pad
    # returned a FakeTensor: the caches held tensors made under the export's fake mode.
    class Fails(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            texture = torch.full((3, 2, 2), 0.5)
            y = F.pad(x, 2, padding_mode="reflect") + F.pad(x, 2, fill=3.0)
            y = y + F.brick_pad(x, 2) + F.texture_pad(x, 2, texture, offset=(1, 1))
            if y.sum() > 0:  # data-dependent control flow: export fails here, on purpose
                return y
            return -y

    x = random_image((3, 5, 4), torch.float32, seed=13)
    with pytest.raises(Exception, match=r"(?i)data.dependent|guard|sum"):
        torch.export.export(Fails(), (x,))
    _assert_caches_plain()
    image = tv_tensors.Image(x)
    for kind in KINDS:
        fn = {
            "reflect": lambda t: F.pad(t, [1, 2, 3, 4], padding_mode="reflect"),
            "constant": lambda t: F.pad(t, 2, fill=[0.25, -0.0, 7.0]),
            "brick": lambda t: F.brick_pad(t, 3),
            "texture": lambda t: F.texture_pad(t, (2, 1), TEXTURE, stagger=2, offset=(1, 3)),
        }[kind]
        for inpt in (x, image):
            out = fn(inpt)
            assert type(out) is type(inpt)
            assert_bitwise_equal(out.as_subclass(torch.Tensor), _reference(kind, x))


# ---------------------------------------------------------------------------------------------
# torch.jit.trace


@pytest.mark.parametrize("kind", KINDS)
def test_jit_trace_records_the_op(kind: str) -> None:
    # Failed with an INTERNAL ASSERT (aten::view in alias analysis) once Taichi ran, and traced
    # the torch route's index ops before (the call skipped the dispatcher).
    x = random_image((3, 6, 7), torch.float32, seed=14)
    traced = _jit_trace(_Padder(kind), x)
    kinds = [node.kind() for node in traced.graph.nodes()]
    assert "tipad::pad" in kinds
    assert "aten::index_select" not in kinds  # the torch route's ops are not in the trace
    other = random_image((3, 6, 7), torch.float32, seed=15)
    assert_bitwise_equal(traced(x), _reference(kind, x))
    assert_bitwise_equal(traced(other), _reference(kind, other))
    _assert_caches_plain()


# ---------------------------------------------------------------------------------------------
# torch.compile


@pytest.mark.parametrize("kind", KINDS)
def test_compile_fullgraph_equals_eager(kind: str) -> None:
    torch._dynamo.reset()
    x = random_image((2, 3, 6, 7), torch.float32, seed=16)
    compiled = torch.compile(_Padder(kind), fullgraph=True, backend="aot_eager")
    assert_bitwise_equal(compiled(x), _reference(kind, x))
    _assert_caches_plain()
    assert_bitwise_equal(_Padder(kind)(x), _reference(kind, x))


# ---------------------------------------------------------------------------------------------
# help() on the public ops

OPS = [
    "pad",
    "pad_out",
    "pad_backward",
    "pad_stack",
    "pad_stack_backward",
    "time_conv",
    "init_wkv_state",
    "wkv",
]


@pytest.mark.parametrize("name", OPS)
def test_help_shows_each_ops_own_docstring_and_signature(name: str) -> None:
    # help(ops.pad) showed torch's generic CustomOpDef text.
    fn = getattr(ops, name)
    assert inspect.isfunction(fn)
    text = pydoc.render_doc(fn)
    assert "CustomOpDef" not in text
    doc = inspect.getdoc(fn)
    assert doc and doc.splitlines()[0] in text
    params = list(inspect.signature(fn).parameters)
    assert params and all(p in text for p in params)
    assert "Raises" in doc or "Args" in doc


@pytest.mark.parametrize(
    ("public", "op"),
    [
        (ops.pad, pad_module._pad_op),
        (ops.pad_stack, pad_module._pad_stack_op),
    ],
)
def test_public_op_costs_no_extra_frame(
    public: Callable[..., Any], op: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The public function calls the op's OpOverload itself: as many Python frames between the
    # caller and the implementation as CustomOpDef.__call__ puts there.
    depths: list[int] = []
    name = "_check_forward" if public is ops.pad else "_check_stack_forward"
    real = getattr(pad_module, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        depths.append(len(inspect.stack(0)))
        return real(*args, **kwargs)

    monkeypatch.setattr(pad_module, name, counting)
    if public is ops.pad:
        args: tuple[Any, ...] = (torch.rand(1, 2, 3, 3), [1, 1, 1, 1], "edge", torch.empty(0),
                                 torch.empty(0), torch.zeros(1, 2, dtype=torch.int32),
                                 torch.zeros(1, dtype=torch.int32), 0)  # fmt: skip
    else:
        args = (torch.rand(18), torch.tensor([[3, 3, 0, 0]]), [2, 3, 3], "edge", torch.empty(0),
                torch.empty(0), torch.zeros(1, 2, dtype=torch.int32),
                torch.zeros(1, dtype=torch.int32), 0)  # fmt: skip
    public(*args)
    op(*args)
    assert len(depths) == 2 and depths[0] == depths[1]
