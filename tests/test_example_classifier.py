"""examples/train_classifier.py trains, in a fresh process, and beats chance by a wide margin."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_classifier.py"
ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)x(\d+)x(\d+)\s+([\d.]+)\s*$")
FALLBACK = "the Taichi kernel cannot run here"

if importlib.util.find_spec("sklearn") is None:  # the example's data ships with scikit-learn
    pytest.skip("needs scikit-learn (the examples extra)", allow_module_level=True)


@pytest.mark.slow
def test_quick_run_learns_the_digits_with_the_kernel_in_every_process() -> None:
    env = {**os.environ, "TI_SKIP_VERSION_CHECK": "ON", "ENABLE_TAICHI_HEADER_PRINT": "0"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--quick", "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=EXAMPLE.parent.parent,
    )
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    # Spawned workers and the main process all ran the kernel, none the torch route.
    assert FALLBACK not in done.stderr, done.stderr[-3000:]

    rows = [m for m in map(ROW.match, done.stdout.splitlines()) if m]
    assert [int(m[1]) for m in rows] == [1, 2, 3], done.stdout
    for m in rows:
        channels, height, width = int(m[5]), int(m[6]), int(m[7])
        # Canvases: the batch's largest digit (<= 32) rounded up to 8, plus the 4-px device wall.
        assert channels == 1 and height % 8 == 0 and width % 8 == 0, m[0]
        assert 24 <= height <= 40 and 24 <= width <= 40, m[0]
    losses = [float(m[2]) for m in rows]
    assert losses[-1] < losses[0], done.stdout
    final = re.search(r"test accuracy ([\d.]+) after 3 epochs", done.stdout)
    assert final is not None, done.stdout
    accuracy = float(final[1])
    assert accuracy == float(rows[-1][4])
    # Chance is 0.1; three epochs reach about 0.9 here. A broken pipeline (images misplaced,
    # labels shuffled against images) stays near chance.
    assert accuracy > 0.6, done.stdout
    print(f"quick run: test accuracy {accuracy:.3f} in {wall:.1f} s")
