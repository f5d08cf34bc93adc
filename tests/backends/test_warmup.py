"""The warm-up of a process that has not started Taichi (``backends/warmup.py``): padding's forward
prefers the torch backend until the process's budget is spent.

A process (the main one or a DataLoader worker) that has not started Taichi pads on the torch
route until that has cost it its budget (``set_warmup``, ``TIPAD_WARMUP``; in workers
``TIPAD_WORKER_WARMUP`` first), then starts Taichi; the bits are the kernel's either way, a
refused launch still warns, and nothing changes for ops whose torch route is not exact (the
RWKV operators). In-process tests stand in for a fresh process (``TAICHI.running``) and a
worker (``get_worker_info``); two tests run real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from reference import assert_bitwise_equal, random_image

import tipad_transforms
import tipad_transforms.functional as F
from tipad_transforms import backends
from tipad_transforms.backends import TAICHI, warmup

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["main", "worker"])
def fresh(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type[warmup._State]:
    """This process as one that has not started Taichi (the main process, or a DataLoader
    worker), with a 1 s budget of which nothing is spent yet; returns the warm-up's state."""
    F.pad(torch.zeros(1, 2, 2), 1, padding_mode="reflect")  # the kernel compiled, for reference
    if request.param == "worker":
        monkeypatch.setattr(warmup, "get_worker_info", lambda: SimpleNamespace(id=0))
    monkeypatch.setattr(TAICHI, "running", lambda: False)
    monkeypatch.setattr(warmup._State, "spent", 0.0)
    monkeypatch.setattr(warmup._State, "budget", 1.0)
    return warmup._State


@pytest.fixture
def budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget unresolved (read again at the next use), and set_warmup's value restored."""
    monkeypatch.setattr(warmup._State, "budget", None)
    monkeypatch.setattr(warmup._State, "chosen", None)
    for name in (warmup.WARMUP_ENV, warmup.WORKER_WARMUP_ENV):
        monkeypatch.delenv(name, raising=False)


class _TorchRuns(list[int]):
    """A 1 for every padding call the torch backend ran (``backends.record``'s entries)."""

    def append(self, run: Any) -> None:
        if run == ("pad", "forward", "torch"):
            super().append(1)


@pytest.fixture
def routed() -> Iterator[list[int]]:
    with backends.record(_TorchRuns()) as runs:
        yield runs


@pytest.mark.allow_fallback
@pytest.mark.parametrize("mode", ["reflect", "constant", "texture"])
def test_a_fresh_process_pads_on_the_torch_route_until_its_budget_is_spent(
    fresh: type[warmup._State],
    mode: str,
    launches: list[str],
    routed: list[int],
) -> None:
    image = random_image((3, 17, 23), torch.uint8, seed=31)
    texture = random_image((3, 5, 7), torch.uint8, seed=32)

    def run() -> torch.Tensor:
        if mode == "texture":
            return F.texture_pad(image, (4, 3, 6, 2), texture, stagger=2)
        return F.pad(image, [4, 3, 6, 2], fill=[7, 8, 9], padding_mode=mode)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warm-up is silent
        warm = run()
    assert routed == [1] and launches == [] and fresh.spent > 0
    fresh.spent = fresh.budget or 0.0  # the budget is spent: the next call launches
    cold = run()
    assert routed == [1] and launches == ["pad"]
    assert_bitwise_equal(warm, cold)


@pytest.mark.allow_fallback
def test_pad_stack_warms_up_too(
    fresh: type[warmup._State], launches: list[str], routed: list[int]
) -> None:
    images = [random_image((3, 5 + i, 9 - i), torch.float32, seed=40 + i) for i in range(3)]
    placement = torch.tensor([[0, 1], [3, 2], [1, 0]])
    warm = F.pad_stack(images, (12, 14), placement, padding_mode="symmetric")
    assert routed == [1] and launches == []
    fresh.spent = 2.0
    cold = F.pad_stack(images, (12, 14), placement, padding_mode="symmetric")
    assert_bitwise_equal(cold, warm)
    assert routed == [1] and launches == ["pad"]


@pytest.mark.parametrize("in_worker", [False, True])
def test_once_taichi_runs_the_kernel_launches_at_once(
    in_worker: bool, launches: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # conftest's guard fails any call the torch route serves.
    with warmup.no_warmup():
        F.pad(torch.zeros(1, 2, 2), 1, padding_mode="edge")  # Taichi runs in this process
    monkeypatch.setattr(warmup._State, "spent", 0.0)
    monkeypatch.setattr(warmup._State, "budget", 10.0)
    if in_worker:
        monkeypatch.setattr(warmup, "get_worker_info", lambda: SimpleNamespace(id=0))
    x = random_image((2, 6, 6), torch.float32, seed=50)
    F.pad(x, 2, padding_mode="edge")
    assert launches == ["pad", "pad"]


@pytest.mark.allow_fallback
def test_set_warmup_zero_starts_taichi_at_the_next_call(
    fresh: type[warmup._State], budget: None, launches: list[str]
) -> None:
    x = random_image((2, 6, 6), torch.float32, seed=51)
    tipad_transforms.set_warmup(5)
    warm = F.pad(x, 2, padding_mode="circular")
    assert launches == [] and 0 < fresh.spent < 5
    tipad_transforms.set_warmup(0)
    assert_bitwise_equal(F.pad(x, 2, padding_mode="circular"), warm)
    assert launches == ["pad"]
    tipad_transforms.set_warmup(None)  # back to the environment: unset, so the default
    assert warmup.budget() == 0.5
    tipad_transforms.set_warmup(np.float32(0.25))  # any real number, as a float
    assert warmup.budget() == 0.25 and type(warmup._State.chosen) is float


@pytest.mark.parametrize(
    ("seconds", "error", "match"),
    [("1", TypeError, "seconds must be a number or None, got str"),
     (True, TypeError, "got bool"),
     (-1, ValueError, "seconds must be >= 0, got -1"),
     (float("nan"), ValueError, "got nan")],
)  # fmt: skip
def test_set_warmup_refuses_bad_values(
    seconds: object, error: type[Exception], match: str, budget: None
) -> None:
    with pytest.raises(error, match=match):
        tipad_transforms.set_warmup(seconds)  # type: ignore[arg-type]
    assert warmup._State.chosen is None


def test_a_large_output_launches_at_once(
    fresh: type[warmup._State], launches: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One torch-route call on it could cost more than the whole budget, and a second canvas.
    x = random_image((1, 6, 6), torch.uint8, seed=90)
    monkeypatch.setattr(warmup, "MAX_BYTES", 10 * 10 - 1)
    F.pad(x, 2, padding_mode="reflect")  # a 10x10 canvas: one byte over
    assert launches == ["pad"] and fresh.spent == 0.0


@pytest.mark.allow_fallback
def test_a_canvas_at_the_size_limit_still_warms_up(
    fresh: type[warmup._State], launches: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warmup, "MAX_BYTES", 10 * 10)
    F.pad(random_image((1, 6, 6), torch.uint8, seed=91), 2, padding_mode="reflect")
    assert launches == [] and fresh.spent > 0


def test_a_taichi_the_user_started_counts_as_running(
    launches: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Our own start is hidden; the runtime that runs in this process (Taichi initialised, as a
    # user's ti.init would) is enough to launch at once.
    with warmup.no_warmup():
        F.pad(torch.zeros(1, 2, 2), 1, padding_mode="edge")
    monkeypatch.setattr(TAICHI, "started", lambda: False)
    monkeypatch.setattr(warmup._State, "spent", 0.0)
    monkeypatch.setattr(warmup._State, "budget", 10.0)
    assert TAICHI.running()
    F.pad(random_image((1, 4, 4), torch.float32, seed=92), 1, padding_mode="edge")
    assert launches[-1:] == ["pad"]


def test_a_forked_child_starts_its_warmup_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmup._State, "spent", 0.4)
    monkeypatch.setattr(warmup._State, "budget", 0.5)
    monkeypatch.setattr(warmup._State, "chosen", 0.0)  # the parent's set_warmup(0)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once (no pytest teardown here)
        try:
            state = [warmup._State.spent, warmup._State.budget, warmup._State.chosen]
            os.write(write, json.dumps(state).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = json.loads(pipe.read())
    os.waitpid(pid, 0)
    # Nothing spent; its budget read from the environment at its own first use.
    assert report == [0.0, None, None]
    assert (warmup._State.spent, warmup._State.budget, warmup._State.chosen) == (0.4, 0.5, 0)


def test_the_rwkv_operators_do_not_warm_up(fresh: type[warmup._State], launches: list[str]) -> None:
    # Their torch route rounds differently from the kernel: a warm-up would change bits.
    from tipad_transforms.ops import init_wkv_state, wkv

    k, v = (random_image((1, 2, 8), torch.float32, seed=s) for s in (60, 61))
    wkv(torch.zeros(8), torch.zeros(8), k, v, init_wkv_state(1, 8))
    assert launches == ["wkv"] and fresh.spent == 0.0


@pytest.mark.allow_fallback
def test_a_refused_launch_still_warns_during_the_warm_up(
    fresh: type[warmup._State], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TAICHI, "refusal", lambda device: "a test's refusal")
    monkeypatch.setattr(backends, "_warned", set())
    with pytest.warns(RuntimeWarning, match="a test's refusal"):
        F.pad(random_image((1, 4, 4), torch.float32, seed=70), 1, padding_mode="reflect")
    assert fresh.spent == 0.0  # the refused route is not warm-up time


@pytest.mark.parametrize(
    ("raw", "seconds"), [("", 0.5), ("0", 0.0), ("0.25", 0.25), ("-3", 0.0), (" 2 ", 2.0)]
)
def test_budget_from_the_environment(
    raw: str, seconds: float, budget: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warmup.WARMUP_ENV, raw)
    monkeypatch.setenv(warmup.WORKER_WARMUP_ENV, "7")  # a worker's only
    assert warmup.budget() == seconds
    monkeypatch.setenv(warmup.WARMUP_ENV, "99")  # read once per process
    assert warmup.budget() == seconds


@pytest.mark.parametrize(
    ("worker_raw", "raw", "seconds"),
    [("3", "2", 3.0), ("", "2", 2.0), ("", "", 0.5), ("0", "", 0.0)],
)
def test_a_workers_budget_prefers_its_own_variable(
    worker_raw: str, raw: str, seconds: float, budget: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warmup, "get_worker_info", lambda: SimpleNamespace(id=0))
    monkeypatch.setenv(warmup.WORKER_WARMUP_ENV, worker_raw)
    monkeypatch.setenv(warmup.WARMUP_ENV, raw)
    assert warmup.budget() == seconds


def test_set_warmup_wins_over_the_environment(
    budget: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warmup.WARMUP_ENV, "3")
    tipad_transforms.set_warmup(0.125)
    assert warmup.budget() == 0.125


@pytest.mark.parametrize("name", ["TIPAD_WARMUP", "TIPAD_WORKER_WARMUP"])
@pytest.mark.parametrize("raw", ["half a second", "nan"])
def test_a_bad_budget_warns_and_keeps_the_default(
    name: str, raw: str, budget: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warmup, "get_worker_info", lambda: SimpleNamespace(id=0))
    monkeypatch.setenv(name, raw)
    with pytest.warns(RuntimeWarning, match=f"{name}='{raw}'"):
        assert warmup.budget() == 0.5


MAIN = """
import json, sys
import torch
import tipad_transforms
import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI

g = torch.Generator().manual_seed(3)
x = torch.randint(0, 256, (3, 40, 30), dtype=torch.uint8, generator=g)
warm = F.brick_pad(x, 5)
report = {"started": TAICHI.started(), "taichi_imported": "taichi" in sys.modules}
tipad_transforms.set_warmup(0)
report["same"] = torch.equal(F.brick_pad(x, 5), warm)
report["started_after"] = TAICHI.started()
print(json.dumps(report))
"""


def test_a_new_process_pads_its_first_image_without_starting_taichi(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.pop("TIPAD_WARMUP", None)  # the package's default, as a user gets it (conftest sets 0)
    proc = subprocess.run(
        [sys.executable, "-c", MAIN], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report == {
        "started": False, "taichi_imported": False, "same": True, "started_after": True
    }  # fmt: skip


WORKERS = """
import json, sys
import torch
from torch.utils.data import DataLoader, Dataset
from tipad_transforms import BrickPad
from tipad_transforms.backends import TAICHI


def image(i):
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, 256, (3, 20 + i, 30 - i), dtype=torch.uint8, generator=g)


class Items(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        out = BrickPad(3, offset=(i, 2 * i))(image(i))
        return out, TAICHI.started()


if __name__ == "__main__":
    items = [
        (padded.tolist(), started)
        for padded, started in DataLoader(
            Items(), batch_size=None, num_workers=1, multiprocessing_context="spawn"
        )
    ]
    here = [BrickPad(3, offset=(i, 2 * i))(image(i)).tolist() for i in range(4)]
    print(json.dumps({"same": [p == h for (p, _), h in zip(items, here)],
                      "started": [s for _, s in items]}))
"""


@pytest.mark.slow  # a spawn worker per budget: ~10 s on the 2-core box
@pytest.mark.parametrize(("budget", "started"), [("1e-9", [False, True, True, True]),
                                                 ("60", [False] * 4)])  # fmt: skip
def test_spawn_workers_warm_up_then_start_taichi(
    budget: str, started: list[bool], tmp_path: Path
) -> None:
    script = tmp_path / "load.py"
    script.write_text(WORKERS)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        TIPAD_WORKER_WARMUP=budget,
        TIPAD_WARMUP="0",  # the parent's reference on the kernel; its workers read their own
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    # The first sample always warms up (nothing spent yet); a tiny budget is spent by it.
    assert report == {"same": [True] * 4, "started": started}


def test_no_warmup_launches_and_restores_the_setting(
    fresh: type[warmup._State], budget: None, launches: list[str]
) -> None:
    tipad_transforms.set_warmup(60)
    with warmup.no_warmup():
        F.pad(random_image((1, 5, 5), torch.float32, seed=80), 1, padding_mode="edge")
    assert launches == ["pad"]
    assert warmup.budget() == 60


def test_the_demo_timing_table_times_the_kernel(
    fresh: type[warmup._State], budget: None, launches: list[str]
) -> None:
    # A fresh process would pad on the torch route first; the table's rows must not.
    # (conftest fails any call the torch route serves.)
    from tipad_transforms.cli.timing import time_paddings

    tipad_transforms.set_warmup(60)
    rows = time_paddings(4, 1, 1, "cpu")
    assert [r.label for r in rows][:2] == ["BrickPad", "TexturePad (stripes)"]
    assert launches.count("pad") >= 2 * 7  # every tipad row, batch and image
    assert rows[-1].label == "same-bytes copy_" and rows[-1].batch_ms > 0
    assert {p for r in rows for p in r.peers} <= {r.label for r in rows}  # every peer timed
    assert warmup.budget() == 60
