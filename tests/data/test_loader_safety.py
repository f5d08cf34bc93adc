"""DataLoader workers: every start method, with and without Taichi in the parent, never a hang.

Each scenario runs in a fresh Python process (a script file, so that ``spawn`` and
``forkserver`` workers can import its dataset) under a timeout: a hang fails the test instead of
stalling CI. The children print one JSON report; the batches in it are checked here against the
numpy reference. The three children run at the same time, since most of their time is spent
starting worker processes.

* the matrix {fork, forkserver, spawn} x {the parent used Taichi before, it did not}, with a
  per-sample ``BrickPad`` in the dataset and ``PadCollate`` as ``collate_fn``: every combination
  gives the reference batches; the workers run the kernel except fork workers of a parent that
  started Taichi (they take the torch route);
* worker seeding: random draws (``BrickPad`` and ``PadCollate``, with and without generators)
  differ between workers and epochs, and repeat under the same seeds;
* persistent workers with ``prefetch_factor``; a consumer leaving a ``DeviceLoader`` early stops
  the worker processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
import torch
from reference import assert_bitwise_equal, texture_pad_ref

import tipad_transforms.functional as F

# Seconds for the three children together: several times what they take on a loaded 2-core
# machine, far below a CI stall.
TIMEOUT = 300

pytestmark = pytest.mark.slow

_COMMON = """
import json, multiprocessing, sys, time, traceback
import torch
from torch.utils.data import DataLoader, Dataset, default_collate, get_worker_info
from tipad_transforms import BrickPad
from tipad_transforms.backends import TAICHI
import tipad_transforms.functional as F
from tipad_transforms.data import DeviceLoader, PadCollate

N = 8


def image(i):
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, 256, (3, 6 + i % 4, 7 + (2 * i) % 5), dtype=torch.uint8, generator=g)


def offset(i):
    return (i % 5, (3 * i) % 7)


class Padded(Dataset):
    # Item i: image(i) through BrickPad(2, offset=offset(i)) in the worker, and whether the
    # Taichi kernel may run in that worker.
    def __init__(self):
        self.pads = [BrickPad(2, offset=offset(i)) for i in range(N)]

    def __len__(self):
        return N

    def __getitem__(self, i):
        out = self.pads[i](image(i))
        return out, torch.tensor(TAICHI.refusal(torch.device("cpu")) is None)


def loader(method, workers=2, **kwargs):
    return DataLoader(
        Padded(), batch_size=3, num_workers=workers, multiprocessing_context=method, timeout=120,
        collate_fn=PadCollate(placement="center", random_offset=False, return_regions=True),
        **kwargs,
    )


def listed(batches):
    return [[t.tolist() for t in batch] for batch in batches]


def attempt(report, name, fn):
    # Progress on stderr: if the child hangs, the test's message shows where.
    start = time.perf_counter()
    print(f"start {name}", file=sys.stderr, flush=True)
    try:
        report[name] = fn()
    except Exception:
        report[name + "_error"] = traceback.format_exc()
    report[name + "_s"] = round(time.perf_counter() - start, 2)
    print(f"done {name} in {report[name + '_s']} s", file=sys.stderr, flush=True)
"""

_MATRIX = """
if __name__ == "__main__":
    report = {}
    if sys.argv[1] == "used":
        F.brick_pad(torch.zeros(3, 2, 2, dtype=torch.uint8), 1)
    report["parent_before"] = TAICHI.runtime_arch()
    # One worker for the fresh-interpreter methods: each costs seconds of imports and Taichi
    # start-up, and the parent's state cannot reach them anyway; two fork workers.
    for method, workers in (("fork", 2), ("forkserver", 1), ("spawn", 1)):
        attempt(report, method, lambda: listed(loader(method, workers)))
    report["parent_after"] = TAICHI.runtime_arch()
    print("REPORT " + json.dumps(report))
"""

_FEATURES = """
class Draws(Dataset):
    # Item i: the offset a random BrickPad draws for it, and the worker that drew it.
    def __init__(self, generator):
        self.pad = BrickPad(2, random_offset=True, generator=generator)

    def __len__(self):
        return N

    def __getitem__(self, i):
        x = torch.zeros(3, 4, 4, dtype=torch.uint8)
        return self.pad.make_params([x])["offset"], torch.tensor(get_worker_info().id)


class Recording:
    # collate_fn: the samples, plus the placements and lattice offsets PadCollate draws here.
    def __init__(self, collate):
        self.collate = collate

    def __call__(self, samples):
        params = self.collate.make_params([(4, 4 + k) for k in range(len(samples))])
        return (*default_collate(samples), params["placement"], params["offset"])


def draws(use_generator, persistent):
    def gen(seed):
        return torch.Generator().manual_seed(seed) if use_generator else None

    torch.manual_seed(7)  # the DataLoader draws its workers' base seed from it (or from gen)
    dl = DataLoader(
        Draws(gen(0)), batch_size=2, num_workers=2, multiprocessing_context="fork",
        collate_fn=Recording(
            PadCollate((8, 12), placement="random", generator=gen(1), return_regions=True)
        ),
        generator=gen(2), persistent_workers=persistent, timeout=120,
    )
    return [listed(dl) for epoch in range(2)]


def persistent():
    dl = loader("fork", persistent_workers=True, prefetch_factor=1)
    return [listed(dl) for epoch in range(2)]


def early_break():
    for batch in DeviceLoader(loader("fork"), "cpu"):
        break
    start = time.perf_counter()
    while multiprocessing.active_children() and time.perf_counter() - start < 30:
        time.sleep(0.05)
    return {"left": len(multiprocessing.active_children()), "s": time.perf_counter() - start}


if __name__ == "__main__":
    report = {}
    # Taichi runs here first, so these fork workers take the torch route: they skip seconds of
    # Taichi start-up each (the matrix covers both routes).
    F.brick_pad(torch.zeros(3, 2, 2, dtype=torch.uint8), 1)
    for name in ("generator", "generator_again", "global", "global_again"):
        attempt(report, name, lambda: draws(name.startswith("generator"), False))
    attempt(report, "generator_persistent", lambda: draws(True, True))
    attempt(report, "persistent", persistent)
    attempt(report, "early_break", early_break)
    print("REPORT " + json.dumps(report))
"""


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # The child's whole session: its DataLoader workers, a forkserver, a resource tracker.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Run the three children at once; their parsed reports by name.

    Output goes to files, not pipes: a worker outliving its child would hold a pipe open and
    hang the read. Each child leads its own session, killed whole at the end.
    """
    folder = tmp_path_factory.mktemp("loader_safety")
    matrix, features = folder / "matrix.py", folder / "features.py"
    matrix.write_text(textwrap.dedent(_COMMON) + textwrap.dedent(_MATRIX))
    features.write_text(textwrap.dedent(_COMMON) + textwrap.dedent(_FEATURES))
    commands = {
        "fresh": [str(matrix), "fresh"],
        "used": [str(matrix), "used"],
        "features": [str(features)],
    }
    procs = {}
    for name, args in commands.items():
        with (folder / f"{name}.out").open("wb") as out, (folder / f"{name}.err").open("wb") as err:
            procs[name] = subprocess.Popen(
                [sys.executable, *args], stdout=out, stderr=err, cwd=folder, start_new_session=True
            )
    deadline = time.monotonic() + TIMEOUT
    reports: dict[str, dict[str, Any]] = {}
    try:
        for name, proc in procs.items():
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.wait()
                err = (folder / f"{name}.err").read_text()
                pytest.fail(
                    f"child {name!r} hung (killed after {TIMEOUT} s); stderr:\n{err[-3000:]}"
                )
            stdout = (folder / f"{name}.out").read_text()
            stderr = (folder / f"{name}.err").read_text()
            lines = [ln for ln in stdout.splitlines() if ln.startswith("REPORT ")]
            assert proc.returncode == 0 and lines, (
                f"child {name!r} exited with {proc.returncode}:\n{stdout[-2000:]}\n{stderr[-3000:]}"
            )
            reports[name] = json.loads(lines[-1][len("REPORT ") :])
            reports[name]["stderr"] = stderr
    finally:
        for proc in procs.values():
            _kill_group(proc)
    return reports


# ---------------------------------------------------------------------------------------------
# the expected batches, from the reference (the same images and offsets as the children)

N = 8
TILE = F.make_brick_texture(channels=3)
STAGGER = F.running_bond_stagger()


def _image(i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, 256, (3, 6 + i % 4, 7 + (2 * i) % 5), dtype=torch.uint8, generator=g)


def _expected_batches() -> list[tuple[torch.Tensor, list[list[int]]]]:
    """Per batch: the canvases and the regions ``(top, left, h, w)``."""
    per_sample = [
        texture_pad_ref(_image(i), 2, TILE, stagger=STAGGER, offset=(i % 5, (3 * i) % 7))
        for i in range(N)
    ]
    batches = []
    for start in range(0, N, 3):
        group = per_sample[start : start + 3]
        out_h, out_w = max(x.shape[-2] for x in group), max(x.shape[-1] for x in group)
        canvases, regions = [], []
        for x in group:
            h, w = x.shape[-2:]
            top, left = (out_h - h) // 2, (out_w - w) // 2
            padding = (left, top, out_w - left - w, out_h - top - h)
            canvases.append(texture_pad_ref(x, padding, TILE, stagger=STAGGER))
            regions.append([top, left, h, w])
        batches.append((torch.stack(canvases), regions))
    return batches


def _check_batches(got: list[list[Any]], kernel: bool) -> None:
    want = _expected_batches()
    assert len(got) == len(want)
    for (images, flags, regions), (canvases, want_regions) in zip(got, want, strict=True):
        assert_bitwise_equal(torch.tensor(images, dtype=torch.uint8), canvases)
        assert regions == want_regions
        assert flags == [kernel] * len(flags), "the kernel route in the workers"


@pytest.mark.parametrize("parent", ["fresh", "used"])
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_start_method_matrix(reports: dict[str, dict[str, Any]], method: str, parent: str) -> None:
    report = reports[parent]
    assert f"{method}_error" not in report, report.get(f"{method}_error")
    assert report["parent_before"] == (None if parent == "fresh" else "cpu")
    # Fork workers of a parent running Taichi must not start it (they would hang): torch route.
    _check_batches(report[method], kernel=not (method == "fork" and parent == "used"))


def test_parent_without_taichi_stays_without(reports: dict[str, dict[str, Any]]) -> None:
    assert reports["fresh"]["parent_after"] is None, "the workers' padding started the parent's"
    assert "RuntimeWarning" not in reports["fresh"]["stderr"]
    assert "torch route" in reports["used"]["stderr"], "fork workers should warn of the fallback"


def _by_worker(epoch: list[list[Any]]) -> dict[int, list[Any]]:
    """Draws of one epoch, by worker: (dataset offsets, collate placements, collate offsets)."""
    out: dict[int, list[Any]] = {}
    for offsets, workers, placement, lattice in epoch:
        assert len(set(workers)) == 1, "a batch comes from one worker"
        out.setdefault(workers[0], []).append((offsets, placement, lattice))
    return out


@pytest.mark.parametrize("source", ["generator", "global", "generator_persistent"])
def test_worker_draws_differ_and_repeat(reports: dict[str, dict[str, Any]], source: str) -> None:
    report = reports["features"]
    assert f"{source}_error" not in report, report.get(f"{source}_error")
    epochs = report[source]
    assert len(epochs) == 2 and all(len(e) == N // 2 for e in epochs)
    for epoch in epochs:
        workers = _by_worker(epoch)
        assert sorted(workers) == [0, 1]
        for part in range(3):  # dataset draws, collate placements, collate lattice offsets
            assert [d[part] for d in workers[0]] != [d[part] for d in workers[1]], (
                f"workers 0 and 1 drew the same values (part {part})"
            )
    assert epochs[0] != epochs[1], "two epochs drew the same values"
    if not source.endswith("persistent"):
        assert report[f"{source}_again"] == epochs, "the same seeds gave other draws"


def test_persistent_workers_with_prefetch_factor(reports: dict[str, dict[str, Any]]) -> None:
    report = reports["features"]
    assert "persistent_error" not in report, report.get("persistent_error")
    for epoch in report["persistent"]:
        _check_batches(epoch, kernel=False)  # fork workers of a parent running Taichi


def test_early_break_stops_the_workers(reports: dict[str, dict[str, Any]]) -> None:
    report = reports["features"]
    assert "early_break_error" not in report, report.get("early_break_error")
    assert report["early_break"]["left"] == 0, "worker processes still alive 30 s after break"
