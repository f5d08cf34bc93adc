"""Fixtures of the command line's tests."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def make_image_tree() -> Callable[..., list[Path]]:
    """``benchmarks/cli_pad.py``'s ``make_image_tree(root, count, seed)``: the tree of small
    mixed images (PNG, JPEG, GIF; 8-40 px) that the benchmark pads."""
    spec = importlib.util.spec_from_file_location("cli_pad", ROOT / "benchmarks" / "cli_pad.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    make: Callable[..., list[Path]] = module.make_image_tree
    return make
