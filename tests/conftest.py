"""Shared fixtures for the package's tests.

The helpers (references, comparisons, random inputs) live in ``reference.py`` so that test
modules import them explicitly; this file only holds pytest wiring.
"""

from __future__ import annotations

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

from tipad_transforms import backends


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "allow_fallback: the test may (or must) use the torch backend"
    )


@pytest.fixture(autouse=True)
def _kernel_only(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail any test that is silently served by the torch backend instead of the kernel.

    The torch backend computes the same values, so a test comparing results could not
    otherwise tell which ran; only tests marked ``allow_fallback`` may use it.
    """
    if request.node.get_closest_marker("allow_fallback") is not None:
        yield
        return
    with backends.forbid("torch"):
        yield


class _Launches(list[str]):
    """The family of every operation the Taichi backend ran (``backends.record``'s entries)."""

    def append(self, run: Any) -> None:
        family, _, backend = run
        if backend == "taichi":
            super().append(family)


@pytest.fixture
def launches() -> Iterator[list[str]]:
    """Records the family (``"pad"``, ``"wkv"``, ...) of every operation the Taichi backend
    runs (a kernel launch each, or a few for an RWKV backward)."""
    log = _Launches()
    with backends.record(log):
        yield log


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for a whole module, restored afterwards: the RWKV layer tests run
    tiny tensors, where a second thread only adds waiting (a lot on a busy shared machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
