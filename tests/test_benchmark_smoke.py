"""The benchmark scripts still run and their own cross-checks pass (smoke runs, not timings).

Each script checks its peers' results before timing them (bit-equal canvases, images where the
regions say, RWKV results within tolerance) and exits non-zero when a check fails; these runs
catch a script that drifted from the package, not a slow kernel.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _run(script: str, out: Path, *args: str) -> dict[str, object]:
    cmd = [sys.executable, str(BENCH / script), "--quick", "--out", str(out), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (result,) = out.glob("*.json")
    return dict(json.loads(result.read_text()))


@pytest.mark.slow
def test_loader_benchmark_pipelines_check_their_batches(tmp_path: Path) -> None:
    report = _run("loader.py", tmp_path, "--peers", "a", "b", "a-tipad", "c", "--repeats", "1")
    pipelines = report["pipelines"]
    assert isinstance(pipelines, list)
    assert [p["key"] for p in pipelines] == ["a", "b", "a-tipad", "c"]
    assert all(str(p["check"]).startswith("first batch:") for p in pipelines)


@pytest.mark.slow
def test_rwkv_benchmark_cross_checks_the_ops(tmp_path: Path) -> None:
    report = _run("rwkv_ops.py", tmp_path, "--repeats", "1")
    assert report["errors"] == [] and report["workloads"]


@pytest.mark.slow
def test_percall_benchmark_checks_its_peers(tmp_path: Path) -> None:
    report = _run("percall.py", tmp_path, "--repeats", "1", "--compile")
    workloads = report["workloads"]
    assert isinstance(workloads, list) and len(workloads) >= 4
    checks = [p["check"] for w in workloads for p in w["peers"]]
    assert "bit-equal to torchvision.v2" in checks and "bit-equal to tipad.wkv" in checks
    # Images of many sizes, one per call: tipad's reflection gives v2's bits on every image.
    sizes = next(w for w in workloads if "many sizes" in str(w["title"]))
    assert [p["check"] for p in sizes["peers"]][1] == "bit-equal to torchvision.v2"
    rnn = next(w for w in workloads if str(w["title"]).startswith("RWKV-4"))
    assert "tipad-compiled" in [p["key"] for p in rnn["peers"]]
    # A new process pads on the torch route first by default, and starts Taichi at once with
    # TIPAD_WARMUP=0; each reports the call that started it.
    firsts = {r["warmup"]: r for r in report["first_call"]}
    assert sorted(firsts) == ["0", "default"]
    assert firsts["default"]["calls_before_taichi"] > 0 == firsts["0"]["calls_before_taichi"]
    # The seed canvas's eager gather is timed only after drawing tipad's canvas bit for bit.
    peers = {p["key"]: p for w in workloads for p in w["peers"]}
    assert peers["torch.gather"]["check"] == "bit-equal to tipad.fresh"
    assert "cpu" in report["canvas_breakdown"]["medians_s"]["first_touch_launch"]


@pytest.mark.slow
def test_percall_worker_epochs_report_every_pipeline(tmp_path: Path) -> None:
    report = _run("percall.py", tmp_path, "--only-workers", "--epochs", "1")
    epochs, ratios = report["epochs_s"], report["ratio_to_v2"]
    assert isinstance(epochs, dict) and isinstance(ratios, dict)
    pipelines = ("BrickPad", "BrickPad, Taichi at once", "v2.Pad")
    keys = [f"{ctx} {p}" for ctx in ("forkserver", "worker_context") for p in pipelines]
    assert sorted(epochs) == sorted(keys) == sorted(ratios)
    assert all(len(v) == 2 and min(v) > 0 for v in epochs.values())  # server start + 1 ranked
    assert ratios["forkserver v2.Pad"] == ratios["worker_context v2.Pad"] == 1.0


@pytest.mark.slow
def test_fresh_memory_benchmark_reports_both_measurements(tmp_path: Path) -> None:
    report = _run("fresh_memory.py", tmp_path)
    touch = report["first_touch"]
    assert isinstance(touch, list) and len(touch) == 4
    assert all(r["first_us_per_page"] > 0 and r["again_us_per_page"] > 0 for r in touch)
    series = report["per_call_s"]
    assert isinstance(series, dict) and sorted(series) == ["advised", "plain"]
    assert all(len(times) == 8 and min(times) > 0 for times in series.values())
