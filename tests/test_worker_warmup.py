"""A DataLoader worker's torch-route warm-up (``ops._route.exact_route``).

A worker that has not started Taichi pads on the torch route until that has cost it
``TIPAD_WORKER_WARMUP`` seconds, then starts Taichi; the bits are the kernel's either way, a
refused launch still warns, and nothing changes outside workers or for ops whose torch route is
not exact (the RWKV operators). In-process tests stand in for a worker (``get_worker_info``);
one test runs real spawn workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from reference import assert_bitwise_equal, random_image

import tipad_transforms.functional as F
from tipad_transforms import _fallback, _runtime
from tipad_transforms.ops import _route

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> type[_route._Warmup]:
    """This process as a DataLoader worker that has not started Taichi, with a 1 s budget of
    which nothing is spent yet; returns the warm-up's state."""
    F.pad(torch.zeros(1, 2, 2), 1, padding_mode="reflect")  # the kernel compiled, for reference
    monkeypatch.setattr(_route, "get_worker_info", lambda: SimpleNamespace(id=0))
    monkeypatch.setattr(_runtime, "started", lambda: False)
    monkeypatch.setattr(_route._Warmup, "spent", 0.0)
    monkeypatch.setattr(_route._Warmup, "budget", 1.0)
    return _route._Warmup


def _calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Counts calls of ``_fallback.<name>`` (still running it)."""
    calls: list[int] = []
    real = getattr(_fallback, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_fallback, name, counted)
    return calls


@pytest.mark.allow_fallback
@pytest.mark.parametrize("mode", ["reflect", "constant", "texture"])
def test_a_worker_pads_on_the_torch_route_until_its_budget_is_spent(
    worker: type[_route._Warmup],
    mode: str,
    launches: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    image = random_image((3, 17, 23), torch.uint8, seed=31)
    texture = random_image((3, 5, 7), torch.uint8, seed=32)

    def run() -> torch.Tensor:
        if mode == "texture":
            return F.texture_pad(image, (4, 3, 6, 2), texture, stagger=2)
        return F.pad(image, [4, 3, 6, 2], fill=[7, 8, 9], padding_mode=mode)

    routed = _calls(monkeypatch, "pad")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warm-up is silent
        warm = run()
    assert routed == [1] and launches == [] and worker.spent > 0
    worker.spent = worker.budget or 0.0  # the budget is spent: the next call launches
    cold = run()
    assert routed == [1] and launches == ["pad"]
    assert_bitwise_equal(warm, cold)


@pytest.mark.allow_fallback
def test_pad_stack_warms_up_too(
    worker: type[_route._Warmup], launches: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    images = [random_image((3, 5 + i, 9 - i), torch.float32, seed=40 + i) for i in range(3)]
    placement = torch.tensor([[0, 1], [3, 2], [1, 0]])
    routed = _calls(monkeypatch, "pad_stack")
    warm = F.pad_stack(images, (12, 14), placement, padding_mode="symmetric")
    assert routed == [1] and launches == []
    worker.spent = 2.0
    cold = F.pad_stack(images, (12, 14), placement, padding_mode="symmetric")
    assert_bitwise_equal(cold, warm)
    assert routed == [1] and launches == ["pad"]


def test_outside_a_worker_or_once_taichi_runs_the_kernel_launches_at_once(
    launches: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # conftest's guard fails any call the torch route serves.
    monkeypatch.setattr(_route._Warmup, "spent", 0.0)
    monkeypatch.setattr(_route._Warmup, "budget", 10.0)
    x = random_image((2, 6, 6), torch.float32, seed=50)
    F.pad(x, 2, padding_mode="edge")  # not a worker
    monkeypatch.setattr(_route, "get_worker_info", lambda: SimpleNamespace(id=0))
    F.pad(x, 2, padding_mode="edge")  # a worker whose Taichi already runs
    assert launches == ["pad", "pad"]


def test_the_rwkv_operators_do_not_warm_up(
    worker: type[_route._Warmup], launches: list[str]
) -> None:
    # Their torch route rounds differently from the kernel: a warm-up would change bits.
    from tipad_transforms.ops import init_wkv_state, wkv

    k, v = (random_image((1, 2, 8), torch.float32, seed=s) for s in (60, 61))
    wkv(torch.zeros(8), torch.zeros(8), k, v, init_wkv_state(1, 8))
    assert launches == ["wkv"] and worker.spent == 0.0


@pytest.mark.allow_fallback
def test_a_refused_launch_still_warns_during_the_warm_up(
    worker: type[_route._Warmup], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_runtime, "refusal", lambda device: "a test's refusal")
    monkeypatch.setattr(_route, "_warned", set())
    with pytest.warns(RuntimeWarning, match="a test's refusal"):
        F.pad(random_image((1, 4, 4), torch.float32, seed=70), 1, padding_mode="reflect")
    assert worker.spent == 0.0  # the refused route is not warm-up time


@pytest.mark.parametrize(
    ("raw", "budget"), [("", 0.5), ("0", 0.0), ("0.25", 0.25), ("-3", 0.0), (" 2 ", 2.0)]
)
def test_budget_from_the_environment(
    raw: str, budget: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_route.WORKER_WARMUP_ENV, raw)
    monkeypatch.setattr(_route._Warmup, "budget", None)
    assert _route._warmup_budget() == budget
    monkeypatch.setenv(_route.WORKER_WARMUP_ENV, "99")  # read once per process
    assert _route._warmup_budget() == budget


@pytest.mark.parametrize("raw", ["half a second", "nan"])
def test_a_bad_budget_warns_and_keeps_the_default(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_route.WORKER_WARMUP_ENV, raw)
    monkeypatch.setattr(_route._Warmup, "budget", None)
    with pytest.warns(RuntimeWarning, match=f"TIPAD_WORKER_WARMUP='{raw}'"):
        assert _route._warmup_budget() == 0.5


WORKERS = """
import json, sys
import torch
from torch.utils.data import DataLoader, Dataset
from tipad_transforms import BrickPad, _runtime


def image(i):
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, 256, (3, 20 + i, 30 - i), dtype=torch.uint8, generator=g)


class Items(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        out = BrickPad(3, offset=(i, 2 * i))(image(i))
        return out, _runtime.started()


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
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    # The first sample always warms up (nothing spent yet); a tiny budget is spent by it.
    assert report == {"same": [True] * 4, "started": started}
