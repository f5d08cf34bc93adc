"""``benchmarks/gpu_check.py --dry-run`` walks every section on the CPU and names what needs CUDA.

The script is prepared for the day a GPU is lent (one run, no second chance): this run catches a
section that no longer imports, calls an API that moved, or forgets to say what it skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"

EXPECTED_SKIPS = [
    "side-stream ordering: needs CUDA",
    "data: GPUCollate vs PadCollate: needs CUDA",
    "data: DeviceLoader with a busy side-stream consumer: needs CUDA",
    "rwkv: rwkv side-stream ordering (wkv, time_conv): needs CUDA",
    "pad_peers: CV-CUDA copymakeborderstack: needs CUDA",
    "timing article (skipped: its eager gather is slow on a CPU)",
    "two_process: cuda:1 refusal naming bind_device: needs 2+ visible GPUs, found 0",
    "two_process: two processes with bind_device (torchrun, NCCL): needs 2+ visible GPUs, found 0",
]


@pytest.mark.slow
def test_dry_run_walks_every_section_and_names_its_skips(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # the dry run must not need a GPU
    env.pop("TIPAD_TEST_ARCH", None)  # the CPU's own Taichi backend, whatever lane runs this
    cmd = [sys.executable, str(BENCH / "gpu_check.py"), "--dry-run", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=BENCH)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["verdict"] == "PASS" and report["failures"] == []
    assert report["settings"]["device"] == "cpu" and report["settings"]["quick"]
    for section in ("correctness", "stream_check", "data", "rwkv", "pad_peers", "orders"):
        assert section in report, section
    for section in ("data", "rwkv", "pad_peers", "orders", "two_process"):
        assert report[section]["ok"], (section, report[section])
    assert report["correctness"]["n_cases"] > 0 and report["correctness"]["cpu_reference"] == "ok"
    status = {w["key"]: w["status"] for w in report["workloads"]}
    assert status == {
        "article": "skipped: its eager gather is slow on a CPU",
        "batch-uint8": "ok",
        "batch-float32": "ok",
    }
    assert report["targets"] and report["first_call"]
    assert "plot" in report
    rwkv = [w["workload"] for w in report["rwkv"]["timing"]["workloads"]]
    assert any(w.startswith("time_conv") for w in rwkv) and any(" bf16 " in w for w in rwkv)
    orders = report["orders"]["timing"]["workloads"]
    assert {o["switch"] for o in orders} == {
        "tipad_transforms.ops.padding.taichi.GPU_ROW_BLOCKS",
        "tipad_transforms.ops.rwkv7.taichi.GPU_BLOCK_ORDER",
        "tipad_transforms.ops.timex.taichi.GPU_TILES",
    }
    peers = report["pad_peers"]["timing"]["workloads"]
    assert {p["workload"].split()[1] for p in peers} == {
        "constant",
        "edge",
        "symmetric",
        "circular",
    }
    skipped = report["skipped"]
    for name in EXPECTED_SKIPS:
        assert name in skipped, (name, skipped)
    assert any("vs fla chunk_rwkv7/fused_recurrent_rwkv7" in s for s in skipped), skipped
    for name in EXPECTED_SKIPS:
        assert f"skipped: {name}" in done.stdout
    assert "GPU CHECK PASS on cpu" in done.stdout


def test_order_switch_is_restored_after_an_error() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import gpu_orders
    finally:
        sys.path.remove(str(BENCH))
    module = types.SimpleNamespace(FLAG=True)
    with pytest.raises(RuntimeError), gpu_orders.switched(module, "FLAG", False):
        assert module.FLAG is False
        raise RuntimeError("boom")
    assert module.FLAG is True
