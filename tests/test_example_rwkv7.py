"""examples/train_rwkv7_char.py still trains, generates and state-tunes: its quick mode, run as a
user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_rwkv7_char.py"


def held_out_column(table: str) -> list[float]:
    rows = re.findall(r"^\s*(\d+)\s+(?:(\d+\.\d+)\s+)?(\d+\.\d+)\s", table, flags=re.MULTILINE)
    return [float(r[2]) for r in rows]


def run_example(*flags: str) -> str:
    # The CPU path whatever the machine; this checkout's package whatever is installed.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--quick", *flags],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_quick_run_with_bf16_autocast_and_activation_checkpointing_trains() -> None:
    # As RWKV-LM trains; 0.5.2 failed at the first forward ("w must have r's dtype").
    out = run_example("--bf16", "--grad-cp")
    assert "bfloat16 autocast, activation checkpointing" in out.split("\n")[0]
    losses = held_out_column(out.split("3. state tuning")[0])
    assert len(losses) >= 3 and losses[-1] < losses[0] - 1.0, out
    assert out.split("-" * 60)[1].strip("\n").startswith("The "), out


def test_quick_run_trains_samples_and_tunes_the_state() -> None:
    out = run_example()
    training, tuning = out.split("3. state tuning")
    losses = held_out_column(training)
    assert len(losses) >= 3, out
    assert losses[0] > 4.0  # about log(vocabulary size) before training
    assert losses[-1] < losses[0] - 1.0, out
    samples = out.split("-" * 60)
    assert samples[1].strip("\n").startswith("The ") and len(samples[1]) >= 80, out
    tuned = held_out_column(tuning)
    assert len(tuned) >= 2 and tuned[-1] < tuned[0], out  # only the state trained, yet it helps
    assert "1,024 numbers trained" in tuning  # 2 layers x 2 heads x 16 x 16
    assert samples[3].strip("\n").startswith("The "), out
