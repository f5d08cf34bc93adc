"""Fixtures of the command line's tests."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli_pad_benchmark() -> ModuleType:
    """``benchmarks/cli_pad.py``, imported."""
    spec = importlib.util.spec_from_file_location("cli_pad", ROOT / "benchmarks" / "cli_pad.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def make_image_tree(cli_pad_benchmark: ModuleType) -> Callable[..., list[Path]]:
    """The benchmark's ``make_image_tree(root, count, seed)``: the tree of small mixed images
    (PNG, JPEG, GIF; 8-40 px) that it pads."""
    make: Callable[..., list[Path]] = cli_pad_benchmark.make_image_tree
    return make
