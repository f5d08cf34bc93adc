"""The chunked (WY) forward of ``ops.wkv7`` (``ops/rwkv7/chunked.py``, the CPU order's path for
long sequences) against the float64 recurrence of ``test_wkv7``: values, checkpoints, the
gradients that the backward computes from its checkpoints, and the fallbacks to the
recurrence. Chunks of 8 steps and ``MIN_STEPS = 1`` put every tail, chunk boundary and
``T < chunk`` case into a few steps."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import pytest
import torch

from tipad_transforms.backends import TAICHI
from tipad_transforms.ops import wkv7
from tipad_transforms.ops.rwkv7 import chunked
from tipad_transforms.ops.rwkv7 import op as ops_module
from tipad_transforms.ops.rwkv7 import taichi as wkv7_taichi

from .test_wkv7 import _loss_grads, _upstream, assert_close, make_inputs, make_state
from .test_wkv7 import recurrence_wkv7 as reference

CHUNK = 8


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """The chunked form for any length, chunks of 8 steps, the CPU order; yields the results
    of the form's calls (True: it served the call)."""
    if os.environ.get("TIPAD_TEST_ARCH"):
        pytest.skip("GPU lane: the chunked form belongs to the CPU order (torch products)")
    wkv7(*(torch.zeros(1, 1, 1, 1) for _ in range(6)))
    monkeypatch.setattr(TAICHI, "gpu_order", False)
    monkeypatch.setattr(chunked, "MIN_STEPS", 1)
    monkeypatch.setattr(ops_module, "_CHUNK", CHUNK)
    served: list[bool] = []
    run = chunked.forward

    def spy(*args: torch.Tensor | int) -> bool:
        served.append(run(*args))  # type: ignore[arg-type]
        return served[-1]

    monkeypatch.setattr(chunked, "forward", spy)
    yield served


# T: one step, less than a chunk, one chunk, a partial last chunk, whole chunks.
@pytest.mark.parametrize("n_t", [1, 5, 8, 21, 24])
@pytest.mark.parametrize("n_n", [5, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_values_and_gradients(n_t: int, n_n: int, dtype: torch.dtype, forced: list[bool]) -> None:
    shape = (2, n_t, 3, n_n)
    math_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    xs = make_inputs(*shape, dtype, seed=40 + n_t)
    state = make_state(2, 3, n_n, math_dtype, seed=41)
    y_ref, s_ref = reference(*(x.double() for x in xs), state.double())
    y, s = wkv7(*xs, state)
    assert forced == [True]
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    assert_close(y, y_ref, rtol=tol, atol=tol)
    assert_close(s, s_ref, rtol=tol, atol=tol)
    gy, gs = _upstream(*shape, dtype, seed=42)
    ref = _loss_grads(reference, [x.double() for x in (*xs, state)], gy.double(), gs.double())
    got = _loss_grads(wkv7, [*xs, state], gy, gs)
    assert forced == [True, True]  # the backward started from the form's checkpoints
    gtol = 1e-10 if dtype == torch.float64 else 2e-4
    for x, z in zip(got, ref, strict=True):
        assert_close(x, z, rtol=gtol, atol=gtol * max(1.0, z.abs().max().item()))


@pytest.mark.parametrize("n_t", [13, 16])
def test_launcher_writes_every_output_and_checkpoint(n_t: int, forced: list[bool]) -> None:
    n_b, n_h, n_n = 2, 2, 7
    xs = make_inputs(n_b, n_t, n_h, n_n, seed=43)
    state = make_state(n_b, n_h, n_n)
    ops = [x.clone() for x in xs]
    ops[1] = torch.exp(ops[1])
    for save in (False, True):
        slots = math.ceil(n_t / CHUNK) + 1 if save else 1
        y = torch.full((n_b, n_t, n_h, n_n), float("nan"))
        states = torch.full((n_b, n_h, slots, n_n, n_n), float("nan"))
        wkv7_taichi.forward(*ops, state, y, states, CHUNK)
        y_ref, s_ref = reference(*(x.double() for x in xs), state.double())
        assert_close(y, y_ref, rtol=2e-5, atol=2e-5)
        assert_close(states[:, :, -1], s_ref, rtol=2e-5, atol=2e-5)
    assert forced == [True, True]
    assert torch.equal(states[:, :, 0], state)
    for c in range(1, slots - 1):
        mid = reference(*(x[:, : c * CHUNK].double() for x in xs), state.double())[1]
        assert_close(states[:, :, c], mid, rtol=2e-5, atol=2e-5)


def test_fast_decay_runs_the_recurrence(forced: list[bool]) -> None:
    # A decay of e^-6 per step: e^-48 over a chunk of 8, past float32's LOG_RANGE (40).
    xs = make_inputs(1, 20, 2, 4, seed=44)
    xs[1] = torch.full_like(xs[1], -6.0)
    state = make_state(1, 2, 4)
    y, s = wkv7(*xs, state)
    assert forced == []  # not eligible: the form did not run
    y_ref, s_ref = reference(*(x.double() for x in xs), state.double())
    assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    assert_close(s, s_ref, rtol=1e-5, atol=1e-5)


def test_non_finite_values_stay_where_they_arise(forced: list[bool]) -> None:
    xs = make_inputs(1, 20, 2, 4, seed=45)
    xs[2][0, 11, 1, 0] = float("inf")  # a key of head 1 at step 11, inside the second chunk
    y = wkv7(*xs)
    assert isinstance(y, torch.Tensor)
    assert forced == [False]  # the form saw the inf and handed the call to the recurrence
    assert torch.isfinite(y[0, :, 0]).all()
    assert torch.isfinite(y[0, :11, 1]).all() and not torch.isfinite(y[0, 11:, 1]).any()
    xs = make_inputs(1, 20, 2, 4, seed=45)
    xs[1][0, 9, 0, 2] = float("nan")  # a NaN decay fails the eligibility check at once
    y = wkv7(*xs)
    assert isinstance(y, torch.Tensor)
    assert forced == [False]
    assert torch.isfinite(y[0, :9]).all() and torch.isnan(y[0, 9:, 0]).all()


def test_outputs_whose_sum_overflows_go_to_the_recurrence(forced: list[bool]) -> None:
    # The form's finite check sums its outputs: finite values near float32's limit make the
    # sum overflow, and the recurrence serves the call (correct, only slower).
    xs = make_inputs(1, 16, 2, 4, seed=47)
    xs[3] = torch.full_like(xs[3], 1e37)  # v: y ~ 1e37 r.k, summed over 128 outputs
    xs[0] = torch.ones_like(xs[0])
    xs[2] = torch.full_like(xs[2], 2.0)
    y, _ = wkv7(*xs, make_state(1, 2, 4))
    assert forced == [False]
    assert torch.isfinite(y).all() and float(y.double().sum()) > 3.4e38
    y_ref, _ = reference(*(x.double() for x in xs), make_state(1, 2, 4).double())
    assert_close(y.double(), y_ref, rtol=1e-5, atol=0.0)


def test_eligibility() -> None:
    d = torch.full((1, 64, 1, 4), math.exp(-1.0))
    assert chunked.MIN_STEPS <= 64 and chunked.eligible(d, 32)  # e^-32 over a chunk
    assert not chunked.eligible(d[:, : chunked.MIN_STEPS - 1], 32)  # too short
    assert not chunked.eligible(d, chunked.MAX_CHUNK + 1)
    assert not chunked.eligible(d, 41)  # e^-41 is past float32's range
    assert chunked.eligible(d.double(), 41)
    zero = d.clone()
    zero[0, 3, 0, 1] = 0.0
    assert not chunked.eligible(zero, 8)


def test_unit_lower_solve_matches_a_triangular_solve() -> None:
    g = torch.Generator().manual_seed(46)
    m = torch.randn(3, 2, 9, 9, generator=g, dtype=torch.float64).tril(-1) * 0.5
    rhs = torch.randn(3, 2, 9, 5, generator=g, dtype=torch.float64)
    eye = torch.eye(9, dtype=torch.float64)
    want = torch.linalg.solve_triangular(eye - m, rhs, upper=False, unitriangular=True)
    x = rhs.clone()
    assert chunked._unit_lower_solve_(m, x) is x  # in place
    assert_close(x, want, rtol=1e-12, atol=1e-12)
    # As the form calls it: m a corner of a larger product (a strided view), x two blocks of
    # right-hand sides side by side, each solved.
    product = torch.randn(3, 2, 18, 18, generator=g, dtype=torch.float64)
    product[..., :9, :9] = m
    wide = torch.randn(3, 2, 9, 8, generator=g, dtype=torch.float64)
    wide[..., :5] = rhs
    rest = wide[..., 5:].clone()
    chunked._unit_lower_solve_(product[..., :9, :9], wide)
    assert_close(wide[..., :5], want, rtol=1e-12, atol=1e-12)
    rest_want = torch.linalg.solve_triangular(eye - m, rest, upper=False, unitriangular=True)
    assert_close(wide[..., 5:], rest_want, rtol=1e-12, atol=1e-12)


def test_masks_keep_the_strict_and_inclusive_lower_triangles() -> None:
    mask = chunked._masks(4, torch.float32)
    strict, incl = torch.ones(4, 4).tril(-1), torch.ones(4, 4).tril()
    assert torch.equal(mask[:4, :4], strict) and torch.equal(mask[:4, 4:], strict)
    assert torch.equal(mask[4:, :4], incl) and torch.equal(mask[4:, 4:], incl)


@pytest.mark.parametrize("keep", [True, False], ids=["scratch-kept", "scratch-off"])
def test_scratch_is_reused_per_thread_and_never_shared(
    keep: bool, forced: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Repeated calls of one shape reuse the thread's buffers (or, with SCRATCH_BYTES = 0,
    # allocate afresh) and give the same values; other shapes in between replace them; a
    # second thread, run at the same time, gets its own.
    import threading

    if not keep:
        monkeypatch.setattr(chunked, "SCRATCH_BYTES", 0)
    shapes = [(2, 21, 3, 5), (1, 16, 2, 7), (2, 21, 3, 5)]
    inputs = [make_inputs(*shape, torch.float64, seed=60 + i) for i, shape in enumerate(shapes)]
    states = [make_state(sh[0], sh[2], sh[3], torch.float64, seed=70) for sh in shapes]
    want = [reference(*xs, st) for xs, st in zip(inputs, states, strict=True)]
    barrier = threading.Barrier(2)
    got: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    errors: list[BaseException] = []
    kept: dict[str, tuple[torch.Size, int]] = {}

    def run(name: str) -> None:
        try:
            barrier.wait()
            results = []
            for xs, st in zip(inputs, states, strict=True):
                for _ in range(2):
                    y, s = wkv7(*xs, st)
                    results.append((y.clone(), s.clone()))
            got[name] = results
            key, buffers = chunked._Scratch._local.held  # this thread's, after its last call
            kept[name] = (key[0], len(buffers))
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(f"t{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert forced[:12] == [True] * 12
    for results in got.values():
        for i, (y, s) in enumerate(results):
            assert_close(y, want[i // 2][0], rtol=1e-12, atol=1e-12)
            assert_close(s, want[i // 2][1], rtol=1e-12, atol=1e-12)
    for shape, count in kept.values():
        assert shape == torch.Size(shapes[-1])
        assert (count > 10) if keep else (count == 0)
    if keep:  # switching the scratch off frees what a thread holds at its next call
        xs, st = inputs[0], states[0]
        wkv7(*xs, st)
        assert len(chunked._Scratch._local.held[1]) > 10
        monkeypatch.setattr(chunked, "SCRATCH_BYTES", 0)
        y, _ = wkv7(*xs, st)
        assert chunked._Scratch._local.held[1] == {}
        assert_close(y, want[0][0], rtol=1e-12, atol=1e-12)
