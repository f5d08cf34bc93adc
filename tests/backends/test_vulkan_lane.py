"""The GPU-compiler test lane: ``TIPAD_TEST_ARCH=vulkan`` starts Taichi on Vulkan for CPU
tensors and gives the families their GPU loop order; a missing device or a mistyped value is an
error, never a silent run on the CPU (which would pass every lane test without compiling one GPU
kernel). Each case runs in a fresh interpreter: Taichi starts once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tipad_transforms.backends.taichi import TEST_ARCH_ENV

_SCRIPT = textwrap.dedent(
    """
    import json, os
    import numpy as np, torch
    os.environ["TIPAD_WARMUP"] = "0"
    import tipad_transforms.functional as F
    from tipad_transforms.backends import TAICHI
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (2, 3, 9, 11), dtype=torch.uint8, generator=g)
    try:
        y = F.pad(x, [3, 1, 4, 2], padding_mode="reflect")
    except Exception as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
    else:
        ref = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 2), (3, 4)), mode="reflect")
        print(json.dumps({"arch": TAICHI.runtime_arch(), "gpu_order": TAICHI.gpu_order,
                          "exact": bool(np.array_equal(y.numpy(), ref))}))
    """
)


def _child(**env: str) -> dict[str, Any]:
    environ = {**os.environ, "TI_SKIP_VERSION_CHECK": "ON", **env}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=environ, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def vulkan() -> dict[str, Any]:
    """The lane's result on this machine; the tests that need a Vulkan device skip without."""
    result = _child(**{TEST_ARCH_ENV: "vulkan"})
    if result.get("error") == "RuntimeError" and "instead" in result["message"]:
        pytest.skip("no Vulkan device (apt-get install mesa-vulkan-drivers libvulkan1)")
    return result


def test_the_lane_runs_the_gpu_order_on_vulkan_for_cpu_tensors(vulkan: dict[str, Any]) -> None:
    assert vulkan == {"arch": "vulkan", "gpu_order": True, "exact": True}


def test_without_a_vulkan_device_the_lane_fails_loudly() -> None:
    # An ICD list with no driver in it: Taichi then falls back to the CPU with a warning.
    result = _child(**{TEST_ARCH_ENV: "vulkan", "VK_ICD_FILENAMES": "/nonexistent/icd.json"})
    assert result["error"] == "RuntimeError", result
    assert TEST_ARCH_ENV in result["message"] and "vulkaninfo" in result["message"]


def test_a_mistyped_lane_is_a_value_error_naming_the_variable() -> None:
    result = _child(**{TEST_ARCH_ENV: "vulcan"})
    assert result["error"] == "ValueError", result
    assert TEST_ARCH_ENV in result["message"] and "'vulcan'" in result["message"]


def test_the_cpu_lane_is_the_default() -> None:
    assert _child(**{TEST_ARCH_ENV: "cpu"}) == {"arch": "cpu", "gpu_order": False, "exact": True}
