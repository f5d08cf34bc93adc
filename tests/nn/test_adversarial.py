"""An adversarial sweep over tipad_transforms.nn (issue 22): constructors, forward calls,
``init_state``, ``from_state_dict``, ``generate`` and ``sample_logits`` given wrong types,
dtypes (complex, int, bool, dtype names as strings), shapes, devices (meta), layouts (sparse,
nested) and huge, negative or NaN numbers.

Every case ends in a TypeError or ValueError whose message names the argument (or the
state-dict key), or in a correct result, checked against a reference. 0.5.2 gave KeyError,
IndexError, unpacking errors, "Invalid device string", raw comparison errors, torch's
internal errors for meta/sparse/nested tensors, and a model with ``head_size=256`` that
built but failed on every forward.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import rwkv7_reference as ref
import torch
from torch import nn

from tipad_transforms.nn import (
    RWKV4,
    RWKV7,
    RWKV7Block,
    RWKV7ChannelMix,
    RWKV7TimeMix,
    RWKVBlock,
    RWKVChannelMix,
    RWKVTimeMix,
    generate,
    lora_widths,
    sample_logits,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V, C, N = 50, 32, 8
Case = Any  # a pytest.param of (call, expected)


def raises(error: type[Exception], name: str) -> tuple[type[Exception], str]:
    """The expected outcome: ``error`` with ``name`` (the argument or key) in its message."""
    return error, name


def case(id_: str, call: Callable[[], object], expected: object) -> Case:
    return pytest.param(call, expected, id=id_)


def run_case(call: Callable[[], object], expected: object) -> None:
    if isinstance(expected, tuple):
        error, name = expected
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no torch-route warning, no cast warning: refused
            with pytest.raises((TypeError, ValueError)) as info:
                call()
        assert isinstance(info.value, error), f"{type(info.value).__name__}: {info.value}"
        assert re.search(re.escape(name), str(info.value)), f"{name!r} not in: {info.value}"
    else:
        check = expected
        assert callable(check)
        check(call())


# ---- constructors ---------------------------------------------------------------------------

BAD_SIZES: list[tuple[str, object, type[Exception]]] = [
    ("None", None, TypeError),
    ("str", "8", TypeError),
    ("float", 8.0, TypeError),
    ("bool", True, TypeError),
    ("nan", math.nan, TypeError),
    ("zero", 0, ValueError),
    ("negative", -3, ValueError),
    ("2**31", 2**31, ValueError),
    ("10**30", 10**30, ValueError),
]

CONSTRUCTORS: dict[str, tuple[Callable[..., object], dict[str, object], list[str]]] = {
    # name: (class, working arguments, the size arguments to spoil one at a time)
    "RWKV7": (
        RWKV7,
        {"vocab_size": V, "n_embd": C, "n_layer": 2, "head_size": N},
        ["vocab_size", "n_embd", "n_layer", "head_size", "dim_ffn", "w_lora", "a_lora",
         "v_lora", "g_lora"],
    ),
    "RWKV4": (RWKV4, {"vocab_size": V, "n_embd": C, "n_layer": 2},
              ["vocab_size", "n_embd", "n_layer", "dim_att", "dim_ffn"]),
    "RWKV7TimeMix": (RWKV7TimeMix, {"n_embd": C, "head_size": N},
                     ["n_embd", "n_layer", "head_size", "w_lora", "g_lora"]),
    "RWKV7ChannelMix": (RWKV7ChannelMix, {"n_embd": C}, ["n_embd", "n_layer", "dim_ffn"]),
    "RWKV7Block": (RWKV7Block, {"n_embd": C, "head_size": N},
                   ["n_embd", "n_layer", "head_size", "dim_ffn", "a_lora", "v_lora"]),
    "RWKVTimeMix": (RWKVTimeMix, {"n_embd": C}, ["n_embd", "dim_att", "n_layer"]),
    "RWKVChannelMix": (RWKVChannelMix, {"n_embd": C}, ["n_embd", "dim_ffn", "n_layer"]),
    "RWKVBlock": (RWKVBlock, {"n_embd": C}, ["n_embd", "dim_att", "dim_ffn", "n_layer"]),
    "lora_widths": (lora_widths, {"n_embd": C}, ["n_embd"]),
}  # fmt: skip


def constructor_cases() -> list[Case]:
    cases = []
    for name, (cls, good, sizes) in CONSTRUCTORS.items():
        for arg in sizes:
            for label, value, error in BAD_SIZES:
                if value is None and arg not in ("vocab_size", "n_embd", "n_layer"):
                    continue  # None is the default of the optional sizes
                kwargs = {**good, arg: value}
                cases.append(case(f"{name}-{arg}-{label}", lambda c=cls, k=kwargs: c(**k),
                                  raises(error, arg)))  # fmt: skip
        if "n_layer" in sizes and name not in ("RWKV7", "RWKV4"):
            for bad in (-1, 2, "0", None, 1.0):
                kwargs = {**good, "layer_id": bad, "n_layer": 2}
                cases.append(case(f"{name}-layer_id-{bad!r}", lambda c=cls, k=kwargs: c(**k),
                                  raises(ValueError, "layer_id")))  # fmt: skip
    cases += [
        case("RWKV7-head_size-256", lambda: RWKV7(V, 256, 1, head_size=256),
             raises(ValueError, "head_size must be at most 128")),
        case("RWKV7TimeMix-head_size-256", lambda: RWKV7TimeMix(512, head_size=256),
             raises(ValueError, "head_size must be at most 128")),
        case("RWKV7-head_size-not-dividing", lambda: RWKV7(V, C, 1, head_size=12),
             raises(ValueError, "head_size=12 must divide n_embd=32")),
        # Sizes each within bounds whose tensors no memory holds: 2**42 or 2**62 numbers.
        case("RWKV7-too-large", lambda: RWKV7(2**30, 2**12, 1, head_size=64),
             raises(ValueError, "vocab_size=1073741824, n_embd=4096")),
        case("RWKV4-overflowing", lambda: RWKV4(2**31 - 1, 2**31 - 1, 1),
             raises(ValueError, "is too large")),
        case("RWKV7ChannelMix-too-large", lambda: RWKV7ChannelMix(2**20, dim_ffn=2**22),
             raises(ValueError, "n_embd=1048576")),
        # A depth with zeros too many: refused before any layer is built (0.5.2 built layer
        # after layer until the system killed the process).
        case("RWKV7-too-deep", lambda: RWKV7(V, C, 2**31 - 1, head_size=N),
             raises(ValueError, "n_layer=2147483647")),
        case("RWKV4-too-deep", lambda: RWKV4(V, 768, 10**6), raises(ValueError, "n_layer=1000000")),
        case("RWKV7-ok-head_size-128", lambda: RWKV7(V, 128, 1, head_size=128),
             lambda m: m(torch.tensor([[1, 2]])).shape == (1, 2, V) or pytest.fail("shape")),
    ]  # fmt: skip
    return cases


@pytest.mark.parametrize(("call", "expected"), constructor_cases())
def test_constructors(call: Callable[[], object], expected: object) -> None:
    run_case(call, expected)


# ---- forward calls --------------------------------------------------------------------------


def rwkv7() -> RWKV7:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return ref.randomise(RWKV7(V, C, 2, head_size=N))  # type: ignore[return-value]


def rwkv4() -> RWKV4:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return ref.randomise(RWKV4(V, C, 2))  # type: ignore[return-value]


IDX = torch.tensor([[3, 1, 4, 1, 5]])


def same_as_int64(kind: Callable[[], nn.Module]) -> Callable[[object], None]:
    def check(out: object) -> None:
        torch.testing.assert_close(out, kind()(IDX), rtol=0, atol=0)

    return check


def meta_logits(out: object) -> None:
    assert isinstance(out, torch.Tensor) and out.is_meta and out.shape == (1, 5, V)


def nested(*shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors are in prototype stage"
        return torch.nested.nested_tensor([torch.zeros(s, dtype=dtype) for s in shapes])


def with_state(
    make: Callable[[], nn.Module], spoil: Callable[[list[Any]], object]
) -> Callable[[], object]:
    """``model(IDX, spoil(model.init_state(1)))``."""

    def run() -> object:
        model = make()
        return model(IDX, spoil(model.init_state(1)))  # type: ignore[operator]

    return run


def part(field: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[list[Any]], Any]:
    """A state with layer 1's ``att.<field>`` replaced by ``fn`` of it."""

    def spoiled(state: list[Any]) -> list[Any]:
        s = state[1]
        att = s.att._replace(**{field: fn(getattr(s.att, field))})
        return [state[0], s._replace(att=att)]

    return spoiled


def model_cases() -> list[Case]:
    cases = []
    for name, make in (("RWKV7", rwkv7), ("RWKV4", rwkv4)):
        bad_idx: list[tuple[str, object, type[Exception]]] = [
            ("list", [[1, 2]], TypeError),
            ("float", IDX.float(), TypeError),
            ("complex", IDX.to(torch.complex64), TypeError),
            ("bool", IDX.bool(), TypeError),
            ("1-D", IDX[0], ValueError),
            ("3-D", IDX[None], ValueError),
            ("sparse", IDX.to_sparse(), TypeError),
            ("nested", nested((3,), (2,), dtype=torch.int64), TypeError),
            ("meta", IDX.to("meta"), ValueError),
            ("vocab", torch.tensor([[0, V]]), ValueError),
            ("negative", torch.tensor([[-1, 2]]), ValueError),
        ]
        for label, idx, error in bad_idx:
            cases.append(case(f"{name}-idx-{label}", lambda m=make, i=idx: m()(i),
                              raises(error, "idx")))  # fmt: skip
        cases += [
            case(f"{name}-idx-int32", lambda m=make: m()(IDX.int()), same_as_int64(make)),
            case(f"{name}-meta-model", lambda m=make: m().to("meta")(IDX.to("meta")), meta_logits),
            case(f"{name}-idx-empty", lambda m=make: m()(IDX[:, :0]),
                 lambda out: out.shape == (1, 0, V) or pytest.fail(str(out.shape))),
        ]  # fmt: skip

        bad_state: list[tuple[str, Callable[[list[Any]], object], type[Exception], str]] = [
            ("str", lambda s: "state", TypeError, "state"),
            ("tensor", lambda s: torch.zeros(2), TypeError, "state"),
            ("ints", lambda s: [1, 2], TypeError, "state"),
            ("short", lambda s: s[:1], ValueError, "state"),
            ("batch", lambda s: [type(b)(*(type(p)(*(t.expand(3, *t.shape[1:]) for t in p))
                                           for p in b)) for b in s], ValueError, "state."),
            ("wkv float64", part("wkv", lambda t: t.double()), TypeError, "state.wkv"),
            ("wkv sparse", part("wkv", lambda t: t.to_sparse()), TypeError, "state.wkv"),
            ("wkv meta", part("wkv", lambda t: t.to("meta")), ValueError, "state.wkv"),
            ("shift int", part("shift", lambda t: t.long()), TypeError, "state.shift"),
            ("shift list", part("shift", lambda t: t.tolist()), TypeError, "state.shift"),
        ]  # fmt: skip
        for label, spoil, error, key in bad_state:
            run = with_state(make, spoil)
            cases.append(case(f"{name}-state-{label}", run, raises(error, key)))
        # The recurrent form checks what the model checks, with the same errors.
        recurrent = lambda m=make: m().recurrent()  # noqa: E731
        for label, idx, error in bad_idx:
            cases.append(case(f"{name}.recurrent-idx-{label}", lambda r=recurrent, i=idx: r()(i),
                              raises(error, "idx")))  # fmt: skip
        for label, spoil, error, key in bad_state:
            run = with_state(recurrent, spoil)  # type: ignore[arg-type]
            cases.append(case(f"{name}.recurrent-state-{label}", run, raises(error, key)))
        bad_init: list[tuple[str, dict[str, object], type[Exception], str]] = [
            ("batch 0", {"batch_size": 0}, ValueError, "batch_size"),
            ("batch str", {"batch_size": "2"}, TypeError, "batch_size"),
            ("dtype str", {"dtype": "float32"}, TypeError, "dtype"),
            ("dtype int", {"dtype": torch.int64}, TypeError, "dtype"),
            ("dtype complex", {"dtype": torch.complex64}, TypeError, "dtype"),
            ("device", {"device": "nope"}, ValueError, "device"),
            ("device -1", {"device": -1}, ValueError, "device"),
            ("device list", {"device": ["cpu"]}, TypeError, "device"),
        ]
        for label, kwargs, error, key in bad_init:
            args = {"batch_size": 1, **kwargs}
            call = lambda m=make, a=args: m().init_state(**a)  # noqa: E731
            cases.append(case(f"{name}-init_state-{label}", call, raises(error, key)))
    return cases


@pytest.mark.parametrize(("call", "expected"), model_cases())
def test_model_calls(call: Callable[[], object], expected: object) -> None:
    run_case(call, expected)


LAYER_KINDS: dict[str, Callable[[], nn.Module]] = {
    "RWKV7TimeMix": lambda: RWKV7TimeMix(C, 1, 2, head_size=N),
    "RWKV7ChannelMix": lambda: RWKV7ChannelMix(C),
    "RWKV7Block": lambda: RWKV7Block(C, 1, 2, head_size=N),
    "RWKVTimeMix": lambda: RWKVTimeMix(C),
    "RWKVChannelMix": lambda: RWKVChannelMix(C),
    "RWKVBlock": lambda: RWKVBlock(C),
}
X = torch.randn(2, 5, C, generator=torch.Generator().manual_seed(1))


def call_layer(make: Callable[[], nn.Module], x: object, v_first: object = X) -> Callable[[], Any]:
    def call() -> Any:
        m = make()
        return m(x, v_first) if isinstance(m, RWKV7TimeMix | RWKV7Block) else m(x)

    return call


def nan_propagates(out: object) -> None:
    y = out[0] if isinstance(out, tuple) else out
    assert isinstance(y, torch.Tensor) and torch.isnan(y).any()


def layer_cases() -> list[Case]:
    cases = []
    x_nan = X.clone()
    x_nan[0, 2, 3] = math.nan
    for name, make in LAYER_KINDS.items():
        bad_x: list[tuple[str, object, type[Exception]]] = [
            ("list", X.tolist(), TypeError),
            ("int", X.long(), TypeError),
            ("complex", X.to(torch.complex64), TypeError),
            ("2-D", X[0], ValueError),
            ("width", X[..., :16], ValueError),
            ("sparse", X.to_sparse(), TypeError),
            ("nested", nested((5, C), (3, C)), TypeError),
            ("meta", X.to("meta"), ValueError),
            ("float64", X.double(), TypeError),
        ]
        for label, x, error in bad_x:
            v_first = x if label in ("meta", "float64") else X
            cases.append(case(f"{name}-x-{label}", call_layer(make, x, v_first),
                              raises(error, "x")))  # fmt: skip
        cases.append(case(f"{name}-x-nan", call_layer(make, x_nan), nan_propagates))
        if name in ("RWKV7TimeMix", "RWKV7Block"):
            bad_v: list[tuple[str, object, type[Exception]]] = [
                ("None", None, ValueError),
                ("list", X.tolist(), TypeError),
                ("shape", X[:, :3], ValueError),
                ("float64", X.double(), TypeError),
                ("sparse", X.to_sparse(), TypeError),
                ("meta", X.to("meta"), ValueError),
            ]
            for label, v, error in bad_v:
                cases.append(case(f"{name}-v_first-{label}", call_layer(make, X, v),
                                  raises(error, "v_first")))  # fmt: skip
    return cases


@pytest.mark.parametrize(("call", "expected"), layer_cases())
def test_layer_calls(call: Callable[[], object], expected: object) -> None:
    run_case(call, expected)


# ---- from_state_dict --------------------------------------------------------------------------


def changed(sd: dict[str, torch.Tensor], **edits: object) -> dict[str, object]:
    """``sd`` with keys (``.`` spelled ``__``) dropped (``DROP``), replaced by a value or
    by a function of their tensor."""
    out: dict[str, object] = dict(sd)
    for key, value in edits.items():
        key = key.replace("__", ".")
        if value is DROP:
            del out[key]
        elif callable(value):
            out[key] = value(sd[key])
        else:
            out[key] = value
    return out


DROP = object()


def loads_as(dtype: torch.dtype, source: dict[str, torch.Tensor]) -> Callable[[object], None]:
    def check(m: object) -> None:
        assert isinstance(m, nn.Module)
        for k, v in m.state_dict().items():
            assert v.dtype == dtype and torch.equal(v, source[k].to(dtype)), k

    return check


def sd_cases() -> list[Case]:
    cases = []
    for name, cls, good in (
        ("RWKV7", RWKV7, rwkv7().state_dict()),
        ("RWKV4", RWKV4, rwkv4().state_dict()),
    ):
        key = "blocks.1.att." + ("w1" if name == "RWKV7" else "time_first")
        k_ = key.replace(".", "__")
        ffn1 = {k.replace(".", "__"): DROP for k in good if k.startswith("blocks.1.ffn")}
        complex_sd = {k: v.to(torch.complex64) for k, v in good.items()}
        extra = {"blocks__0__ffn__s_emb__weight": torch.zeros(3)}
        bad: list[tuple[str, object, dict[str, object], type[Exception], str]] = [
            ("not a mapping", [1, 2], {}, TypeError, "sd"),
            ("None", None, {}, TypeError, "sd"),
            ("empty", {}, {}, ValueError, "'emb.weight'"),
            ("value None", changed(good, **{k_: None}), {}, TypeError, key),
            ("value list", changed(good, emb__weight=torch.Tensor.tolist), {}, TypeError, "emb"),
            ("int values", changed(good, head__weight=torch.Tensor.long), {}, TypeError, "head"),
            ("complex values", complex_sd, {}, TypeError, "emb.weight"),
            ("sparse", changed(good, head__weight=torch.Tensor.to_sparse), {}, TypeError, "head"),
            ("meta", changed(good, head__weight=lambda t: t.to("meta")), {}, ValueError, "head"),
            ("missing key", changed(good, **{k_: DROP}), {}, ValueError, key),
            ("missing layer", changed(good, **ffn1), {}, ValueError, "blocks.1.ffn"),
            ("misshapen", changed(good, **{k_: lambda t: t[:-1]}), {}, ValueError, key),
            ("1-D emb", changed(good, emb__weight=lambda t: t[0]), {}, ValueError, "emb.weight"),
            ("extra key", changed(good, **extra), {}, ValueError, "blocks.0.ffn.s_emb.weight"),
            ("bad layer index", {**good, "blocks.x.ln1.weight": torch.zeros(C)}, {}, ValueError,
             "blocks.x.ln1.weight"),
            ("dtype str", good, {"dtype": "float32"}, TypeError, "dtype"),
            ("dtype None", good, {"dtype": None}, TypeError, "dtype"),
            ("dtype int", good, {"dtype": torch.int64}, TypeError, "dtype"),
            ("dtype complex", good, {"dtype": torch.complex64}, TypeError, "dtype"),
        ]  # fmt: skip
        for label, sd, kwargs, error, named in bad:
            call = lambda c=cls, s=sd, k=kwargs: c.from_state_dict(s, **k)  # noqa: E731
            cases.append(case(f"{name}-{label}", call, raises(error, named)))
        bf16 = {k: v.bfloat16() for k, v in good.items()}
        as_bf16 = {k: v.float() for k, v in bf16.items()}
        to_bf16 = lambda c=cls, g=good: c.from_state_dict(g, dtype=torch.bfloat16)  # noqa: E731
        cases += [
            case(f"{name}-bf16 values", lambda c=cls, b=bf16: c.from_state_dict(b),
                 loads_as(torch.float32, as_bf16)),
            case(f"{name}-dtype bf16", to_bf16, loads_as(torch.bfloat16, good)),
        ]  # fmt: skip
    # One head of 256 (r_k (1, 256)): a size ops.wkv7 cannot take.
    wide = RWKV7(V, 256, 1, head_size=128).state_dict()
    wide["blocks.0.att.r_k"] = torch.zeros(1, 256)
    cases.append(case("RWKV7-head_size-256", lambda: RWKV7.from_state_dict(wide),
                      raises(ValueError, "head_size must be at most 128")))  # fmt: skip
    return cases


@pytest.mark.parametrize(("call", "expected"), sd_cases())
def test_from_state_dict(call: Callable[[], object], expected: object) -> None:
    run_case(call, expected)


# ---- generate, sample_logits -----------------------------------------------------------------

# Whole numbers: the same logits as int64 and as float.
LOGITS = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 1.0, 1.0]])


def draw(logits: object, seed: int = 0, **kw: object) -> Callable[[], object]:
    g = torch.Generator().manual_seed(seed)
    return lambda: sample_logits(logits, generator=g, **kw)  # type: ignore[arg-type]


def gen(*args: object, **kw: object) -> Callable[[], object]:
    return lambda: generate(rwkv7(), *args, **kw)  # type: ignore[arg-type]


def is_(want: Callable[[torch.Tensor], bool]) -> Callable[[object], None]:
    def check(out: object) -> None:
        assert isinstance(out, torch.Tensor) and want(out), out

    return check


def sampling_cases() -> list[Case]:
    inf_row, none_row, masked, nan = (LOGITS.clone() for _ in range(4))
    inf_row[1, 2] = math.inf
    none_row[0] = -math.inf
    masked[:, 0] = -math.inf
    nan[1, 1] = math.nan
    cases = []
    bad_numbers: list[tuple[str, dict[str, object], type[Exception], str]] = [
        ("temperature None", {"temperature": None}, TypeError, "temperature"),
        ("temperature str", {"temperature": "1"}, TypeError, "temperature"),
        ("temperature bool", {"temperature": True}, TypeError, "temperature"),
        ("temperature tensor", {"temperature": torch.tensor(1.0)}, TypeError, "temperature"),
        ("temperature nan", {"temperature": math.nan}, ValueError, "temperature"),
        ("temperature -1", {"temperature": -1}, ValueError, "temperature"),
        ("temperature inf", {"temperature": math.inf}, ValueError, "temperature"),
        ("top_p None", {"top_p": None}, TypeError, "top_p"),
        ("top_p str", {"top_p": "0.5"}, TypeError, "top_p"),
        ("top_p 0", {"top_p": 0}, ValueError, "top_p"),
        ("top_p 1.5", {"top_p": 1.5}, ValueError, "top_p"),
        ("top_p nan", {"top_p": math.nan}, ValueError, "top_p"),
        ("generator int", {"generator": 3}, TypeError, "generator"),
    ]
    for label, kwargs, error, name in bad_numbers:
        call = lambda k=kwargs: sample_logits(LOGITS, **k)  # type: ignore[arg-type]  # noqa: E731
        cases.append(case(f"sample-{label}", call, raises(error, name)))
        cases.append(case(f"generate-{label}", gen([1, 2], 3, **kwargs), raises(error, name)))
    bad_logits: list[tuple[str, object, type[Exception]]] = [
        ("list", LOGITS.tolist(), TypeError),
        ("1-D", LOGITS[0], ValueError),
        ("3-D", LOGITS[None], ValueError),
        ("no tokens", LOGITS[:, :0], ValueError),
        ("complex", LOGITS.to(torch.complex64), TypeError),
        ("bool", LOGITS > 0, TypeError),
        ("sparse", LOGITS.to_sparse(), TypeError),
        ("nested", nested((4,), (3,)), TypeError),
        ("nan", nan, ValueError),
        ("+inf", inf_row, ValueError),
        ("all -inf", none_row, ValueError),
    ]
    for label, logits, error in bad_logits:
        cases.append(case(f"sample-logits-{label}", draw(logits), raises(error, "logits")))
    as_float = draw(LOGITS)()
    meta = lambda: sample_logits(LOGITS.to("meta"))  # noqa: E731
    cases += [
        case("sample-greedy +inf", draw(inf_row, temperature=0),
             is_(lambda t: t.tolist() == [0, 2])),
        case("sample-int logits", draw(LOGITS.long()), is_(lambda t: torch.equal(t, as_float))),
        case("sample-masked never drawn", draw(masked.repeat(50, 1), 1),
             is_(lambda t: bool((t != 0).all()))),
        case("sample-empty batch", draw(LOGITS[:0]), is_(lambda t: t.shape == (0,))),
        case("sample-meta", meta, is_(lambda t: t.is_meta and t.shape == (2,))),
    ]  # fmt: skip
    stateless = lambda idx, state: idx.float()  # noqa: E731
    bad_generate: list[tuple[str, Callable[[], object], type[Exception], str]] = [
        ("model int", lambda: generate(3, [1], 2), TypeError, "model"),  # type: ignore[arg-type]
        ("model without state", lambda: generate(stateless, [1], 2), TypeError, "model"),
        ("prompt str", gen("hello", 2), TypeError, "prompt"),
        ("prompt floats", gen([1.5, 2.0], 2), TypeError, "prompt"),
        ("prompt bools", gen([True], 2), TypeError, "prompt"),
        ("prompt empty", gen([], 2), ValueError, "prompt"),
        ("prompt 1-D", gen(torch.tensor([1, 2]), 2), ValueError, "prompt"),
        ("prompt float tensor", gen(torch.ones(1, 2), 2), TypeError, "prompt"),
        ("prompt sparse", gen(IDX.to_sparse(), 2), TypeError, "prompt"),
        ("prompt huge id", gen([10**30], 2), ValueError, "prompt"),
        ("prompt id past vocab", gen([V], 2), ValueError, "idx"),  # the model's own check
        ("max_new_tokens None", gen([1], None), TypeError, "max_new_tokens"),
        ("max_new_tokens str", gen([1], "3"), TypeError, "max_new_tokens"),
        ("max_new_tokens float", gen([1], 3.0), TypeError, "max_new_tokens"),
        ("max_new_tokens -1", gen([1], -1), ValueError, "max_new_tokens"),
        ("max_new_tokens 10**30", gen([1], 10**30), ValueError, "max_new_tokens"),
        ("max_new_tokens 2**60", gen([1], 2**60), ValueError, "max_new_tokens"),
        ("state str", gen([1], 2, state="x"), TypeError, "state"),
    ]
    for label, call, error, name in bad_generate:
        cases.append(case(f"generate-{label}", call, raises(error, name)))
    cases.append(case("generate-zero tokens", gen([1, 2], 0), is_(lambda t: t.shape == (1, 0))))
    return cases


@pytest.mark.parametrize(("call", "expected"), sampling_cases())
def test_sampling_and_generation(call: Callable[[], object], expected: object) -> None:
    run_case(call, expected)
