"""examples/train_rwkv_char.py still trains and generates: its quick mode, run as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_rwkv_char.py"


def test_quick_run_lowers_the_loss_and_prints_a_sample() -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # the CPU path, whatever the machine
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--quick"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    rows = re.findall(r"^\s*(\d+)\s+(?:(\d+\.\d+)\s+)?(\d+\.\d+)\s", out, flags=re.MULTILINE)
    held_out = [float(r[2]) for r in rows]
    assert len(held_out) >= 3, out
    assert held_out[0] > 4.0  # about log(vocabulary size) before training
    assert held_out[-1] < held_out[0] - 1.0, out
    sample = out.split("-" * 60)[1].strip("\n")
    assert sample.startswith("The ") and len(sample) >= 80, out
