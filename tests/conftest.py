"""Shared fixtures for the padding engine's tests.

The helpers (references, comparisons, random inputs) live in ``reference.py`` so that test
modules import them explicitly; this file only holds pytest wiring.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

# Same quiet defaults as the Makefile, for runs of plain `pytest`.
os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
os.environ.setdefault("ENABLE_TAICHI_HEADER_PRINT", "0")
# Every process (this one, DataLoader workers, subprocesses) starts Taichi at its first padding
# call, with no torch-route warm-up: the tests are about the kernel (and the worker tests about
# Taichi in workers: fork safety, preloading), whose few small calls would otherwise never reach
# it. test_warmup.py sets its own.
os.environ["TIPAD_WARMUP"] = "0"
os.environ.pop("TIPAD_WORKER_WARMUP", None)  # a developer's own would win in the workers


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "allow_fallback: the test may (or must) use the torch fallback route"
    )


@pytest.fixture(autouse=True)
def _kernel_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail any test that is silently served by the torch fallback instead of the kernel.

    The fallback computes the same values, so a test comparing results could not otherwise tell
    which route ran; only tests marked ``allow_fallback`` may use it.
    """
    if request.node.get_closest_marker("allow_fallback") is None:
        from tipad_transforms import _fallback

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("the torch fallback ran where the Taichi kernel should have")

        # Every torch route that stands in for a kernel (each op adds its own when it gets one).
        for name in (
            "pad",
            "pad_backward",
            "pad_stack",
            "pad_stack_backward",
            "time_conv",
            "time_conv_backward",
            "wkv",
            "wkv_backward",
            "wkv7",
            "wkv7_backward",
        ):
            monkeypatch.setattr(_fallback, name, refuse)
    yield


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every kernel launch: the family of every ``_runtime.session`` entered."""
    from tipad_transforms import _runtime

    log: list[str] = []
    real = _runtime.session

    @contextlib.contextmanager
    def counting(device: Any, family: str, build: Any, tensors: Any = ()) -> Iterator[Any]:
        log.append(family)
        with real(device, family, build, tensors) as kernels:
            yield kernels

    monkeypatch.setattr(_runtime, "session", counting)
    return log


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for a whole module, restored afterwards: the RWKV layer tests run
    tiny tensors, where a second thread only adds waiting (a lot on a busy shared machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
