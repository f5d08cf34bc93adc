"""The Vulkan lane (``TIPAD_TEST_ARCH=vulkan``) for the RWKV-4 tests: SPIR-V has no 64-bit
exp, so the tests that run the kernel in float64 skip by name there; the CPU loop order checks
nothing new on Vulkan, so its parametrizations are left out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HERE = Path(__file__).parent

_LANE = os.environ.get("TIPAD_TEST_ARCH") == "vulkan"
# Tests that run the kernels in float64 without a dtype parameter.
_FLOAT64 = {
    "test_backward_recomputes_states_when_not_saved",
    "test_float64_inputs_compute_in_float64",
    "test_forward_matches_explicit_formula",
    "test_forward_with_state_matches_recurrence",
    "test_gradcheck_float64",
    "test_gradients_without_state_match_explicit_formula",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not _LANE:
        return
    skip = pytest.mark.skip(reason="Vulkan: SPIR-V has no 64-bit exp")
    cpu_order = pytest.mark.skip(reason="Vulkan lane: the CPU loop order checks nothing new")
    for item in items:
        # The hook sees the whole session's items, not only this folder's.
        if _HERE not in Path(item.path).parents:
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "float64" in str(params.get("dtype", "")) or item.originalname in _FLOAT64:
            item.add_marker(skip)
        elif params.get("lanes") is False:
            item.add_marker(cpu_order)
