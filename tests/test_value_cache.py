"""``_value_cache.ValueCache``: derived values reused while (and only while) a tensor holds the
same bytes; ``KeyedCache``: a signature's constants, made once per key, bounded."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tipad_transforms._value_cache import KeyedCache, ValueCache


def _counting(cache: ValueCache[torch.Tensor], t: torch.Tensor, made: list[int]) -> torch.Tensor:
    def make() -> torch.Tensor:
        made.append(1)
        return t * 2

    return cache.get(t, "x2", make)


def test_reused_while_the_bytes_are_equal_remade_when_they_change() -> None:
    cache: ValueCache[torch.Tensor] = ValueCache(4)
    made: list[int] = []
    t = torch.randn(5, 7, generator=torch.Generator().manual_seed(1))
    first = _counting(cache, t, made)
    assert _counting(cache, t, made) is first and len(made) == 1
    t.data[2, 3] += 1  # no version bump
    assert torch.equal(_counting(cache, t, made), t * 2) and len(made) == 2
    with torch.inference_mode():  # inference tensors have no version counter at all
        u = torch.ones(3)
        v = _counting(cache, u, made)
        u.add_(1)
        assert torch.equal(_counting(cache, u, made), torch.full((3,), 4.0)) and v[0] == 2


def test_compared_as_bits() -> None:
    cache: ValueCache[torch.Tensor] = ValueCache(4)
    made: list[int] = []
    t = torch.tensor([0.0, float("nan"), 1.0])
    _counting(cache, t, made)
    _counting(cache, t, made)  # NaN equals itself bitwise: a hit
    assert len(made) == 1
    t.data[0] = -0.0  # equal as floats, not as bits
    _counting(cache, t, made)
    assert len(made) == 2


def test_strided_and_odd_sized_tensors_and_eviction() -> None:
    cache: ValueCache[torch.Tensor] = ValueCache(2)
    made: list[int] = []
    base = torch.arange(33, dtype=torch.uint8)
    odd = base[1:]  # 32 bytes at an odd address: compared byte by byte
    strided = torch.arange(40, dtype=torch.int16).view(5, 8)[:, ::2]
    for t in (odd, strided, odd, strided):
        assert torch.equal(_counting(cache, t, made), t * 2)
    assert len(made) == 2
    third = torch.zeros(3)
    _counting(cache, third, made)  # evicts the oldest (odd)
    _counting(cache, strided, made)
    _counting(cache, odd, made)
    assert len(made) == 4


def test_a_value_made_in_inference_mode_is_not_served_outside_it() -> None:
    cache: ValueCache[torch.Tensor] = ValueCache(4)
    made: list[int] = []
    t = torch.ones(4)
    with torch.inference_mode():
        assert _counting(cache, t, made).is_inference()
    outside = _counting(cache, t, made)
    assert not outside.is_inference() and len(made) == 2
    with torch.inference_mode():
        _counting(cache, t, made)
    assert len(made) == 2  # each mode's value, reused in its mode


def test_a_changed_tensor_replaces_its_own_entry_and_evicts_nothing() -> None:
    cache: ValueCache[torch.Tensor] = ValueCache(2)
    made: list[int] = []
    a, b = torch.ones(4), torch.zeros(4)
    _counting(cache, b, made)  # the oldest entry
    _counting(cache, a, made)
    a.data[0] = 5.0  # a's entry is remade in place; b's must stay
    _counting(cache, a, made)
    _counting(cache, b, made)
    assert len(made) == 3


def test_keyed_values_are_made_once_per_key_and_bounded() -> None:
    cache: KeyedCache[torch.Tensor] = KeyedCache(3)
    made: list[int] = []

    def make(k: int) -> torch.Tensor:
        made.append(k)
        return torch.full((2,), k)

    first = cache.get(1, lambda: make(1))
    assert cache.get(1, lambda: make(1)) is first and made == [1]
    for k in (2, 3):
        cache.get(k, lambda k=k: make(k))  # type: ignore[misc]
    assert len(cache) == 3 and made == [1, 2, 3]
    four = cache.get(4, lambda: make(4))  # full: starts over with the new key
    assert len(cache) == 1 and torch.equal(four, torch.full((2,), 4))
    assert cache.get(1, lambda: make(1)) is not first and made == [1, 2, 3, 4, 1]


def test_keyed_values_made_in_inference_mode_are_normal_tensors() -> None:
    # The op saves cached constants (a default lattice) for a later call's backward.
    cache: KeyedCache[torch.Tensor] = KeyedCache(4)
    with torch.inference_mode():
        t = cache.get("zeros", lambda: torch.zeros(3))
    assert not t.is_inference()


def test_a_failed_make_stores_nothing() -> None:
    cache: KeyedCache[torch.Tensor] = KeyedCache(4)

    def fail() -> torch.Tensor:
        raise ValueError("bad fill")

    with pytest.raises(ValueError, match="bad fill"):
        cache.get("k", fail)
    assert len(cache) == 0


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's notes on quantized and sparse
@pytest.mark.parametrize("kind", ["quantized", "sparse", "nested", "meta", "subclass"])
def test_tensors_without_readable_bytes_are_derived_afresh(kind: str) -> None:
    # The texture cache read a quantized texture's bytes through a uint8 view: a segfault. Such
    # tensors (and fakes, subclasses, meta tensors) are never looked up: derived each time.
    t = torch.rand(2, 3)
    odd = {
        "quantized": lambda: torch.quantize_per_tensor(t, 0.1, 0, torch.quint8),
        "sparse": lambda: t.to_sparse(),
        "nested": lambda: torch.nested.nested_tensor([t, t]),
        "meta": lambda: t.to("meta"),
        "subclass": lambda: t.as_subclass(_Sub),
    }[kind]()
    cache: ValueCache[str] = ValueCache(4)
    made: list[int] = []

    def make() -> str:
        made.append(1)
        return "made"

    assert cache.get(odd, "x", make) == "made" and cache.get(odd, "x", make) == "made"
    assert len(made) == 2 and not cache._entries


class _Sub(torch.Tensor):
    pass


def test_nothing_is_cached_while_tracing() -> None:
    # A failed torch.export left FakeTensors in the caches, which later eager calls returned.
    from torch._subclasses import FakeTensorMode

    keyed: KeyedCache[torch.Tensor] = KeyedCache(4)
    values: ValueCache[torch.Tensor] = ValueCache(4)
    real = torch.ones(3)
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = keyed.get("k", lambda: torch.zeros(2))
        values.get(real, "v", lambda: torch.zeros(2))
    assert type(fake).__name__ == "FakeTensor"
    assert len(keyed) == 0 and not values._entries
    assert type(keyed.get("k", lambda: torch.zeros(2))) is torch.Tensor


def test_fills_are_cached_by_their_bits() -> None:
    # fill=0.0 and fill=-0.0 shared one cache entry (equal and of equal hash as floats), so the
    # border's sign depended on which came first; a NaN fill was never found again.
    import tipad_transforms.functional as F
    from tipad_transforms._value_cache import _CONSTANTS

    def fills() -> list[Any]:
        return [key for key in _CONSTANTS._entries if key[0] == "fill"]  # type: ignore[index]

    x = torch.rand(1, 2, 2)
    for first, second in ((0.0, -0.0), (-0.0, 0.0), ([0.0], [-0.0]), ((-0.0,), (0.0,))):
        _CONSTANTS.clear()
        for fill in (first, second, first):
            value = fill if isinstance(fill, float) else fill[0]
            out = F.pad(x, 1, fill=fill)
            assert bool(torch.signbit(out[0, 0, 0])) == (str(value) == "-0.0"), (first, fill)
    _CONSTANTS.clear()
    F.pad(x, 1, fill=float("nan"))
    F.pad(x, 1, fill=float("nan"))
    assert len(fills()) == 1
