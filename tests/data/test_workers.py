"""What ``PadCollate``, ``GPUCollate`` and ``RayPadBatch`` hold survives spawn and forkserver.

A DataLoader pickles its ``collate_fn`` into every spawn/forkserver worker. torch pickles a
``torch.Generator`` with its state as a tensor, which ``torch.multiprocessing`` sends through
shared memory and a spawned process cannot map ("unable to resize file"): 0.5.2's workers died
before their first batch. Here the generator travels as bytes; the child process below runs the
same seeded loader with fork, spawn and forkserver workers and must get the same batches from
all three (the worker's copy starts in the parent's state, so its draws are a fork worker's),
and a ``RayPadBatch`` sent to a spawned process pads as it does here.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest
import torch

from tipad_transforms import BrickPad, TexturePad
from tipad_transforms._seeding import GeneratorState
from tipad_transforms.data import GPUCollate, PadCollate, RayPadBatch

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240  # seconds: the child starts three worker processes, each imports torch


def _draws(collate: PadCollate) -> list[list[int]]:
    return collate.make_params([(5, 6), (7, 3), (2, 2)])["placement"].tolist()


@pytest.mark.parametrize("pickler", [pickle.dumps, ForkingPickler.dumps], ids=["pickle", "mp"])
def test_a_pickled_generator_is_an_independent_copy_in_the_same_state(pickler: object) -> None:
    gen = torch.Generator().manual_seed(1)
    torch.randint(0, 9, (5,), generator=gen)  # not at its seed's start: the state travels
    collate = PadCollate(10, placement="random", generator=gen)
    copy = pickle.loads(bytes(pickler(collate)))  # type: ignore[operator]
    assert isinstance(copy.generator, torch.Generator) and copy.generator is not gen
    assert "Tensor" not in repr(collate.__getstate__()["generator"])  # plain bytes
    first, second = _draws(copy), _draws(copy)
    assert first != second
    # The same state, and a stream of its own: the original did not move when the copy drew.
    assert _draws(collate) == first and _draws(collate) == second


@pytest.mark.parametrize("cls", [BrickPad, TexturePad])
def test_a_transforms_generator_pickles_as_bytes_in_the_same_state(cls: type) -> None:
    gen = torch.Generator().manual_seed(3)
    torch.randint(0, 9, (5,), generator=gen)
    args = () if cls is BrickPad else (torch.arange(12, dtype=torch.uint8).reshape(3, 4),)
    pad = cls(2, *args, random_offset=True, generator=gen)
    state = ForkingPickler.dumps(pad)
    assert isinstance(pad.__getstate__()["generator"], GeneratorState)  # plain bytes
    copy = pickle.loads(state)
    assert isinstance(copy.generator, torch.Generator) and copy.generator is not gen
    x = torch.zeros(3, 3, 5, 5, dtype=torch.uint8)
    assert torch.equal(copy(x), pad(x))  # the same state: the same draws
    assert copy.padding == pad.padding and repr(copy) == repr(pad)


def test_gpu_collate_and_ray_pad_batch_pickle_whole() -> None:
    gen = torch.Generator().manual_seed(4)
    texture = torch.arange(12, dtype=torch.uint8).reshape(3, 4)
    for obj in (
        GPUCollate("cpu", size=10, placement="random", generator=gen, texture=texture),
        RayPadBatch(size=10, placement="random", texture=texture, seed=2),
    ):
        copy = pickle.loads(ForkingPickler.dumps(obj))
        assert repr(copy) == repr(obj)
    copy = pickle.loads(ForkingPickler.dumps(GPUCollate("cpu", generator=gen)))
    assert copy.generator.initial_seed() == 4 and copy.device == torch.device("cpu")


_CHILD = """
import hashlib, json, multiprocessing, sys
import numpy as np
import torch
from torch.utils.data import DataLoader
from tipad_transforms import BrickPad
from tipad_transforms.data import PadCollate, RayPadBatch

TEXTURE = torch.arange(3 * 4 * 5, dtype=torch.uint8).reshape(3, 4, 5) * 4


def image(i):
    g = torch.Generator().manual_seed(i)
    return torch.randint(0, 256, (3, 5 + i % 4, 6 + i % 3), dtype=torch.uint8, generator=g)


def batches(method):
    collate = PadCollate(
        (9, 9), placement="random", texture=TEXTURE, generator=torch.Generator().manual_seed(1),
        return_regions=True,
    )
    loader = DataLoader(
        [image(i) for i in range(8)], batch_size=2, num_workers=1, collate_fn=collate,
        multiprocessing_context=method, generator=torch.Generator().manual_seed(5), timeout=120,
    )
    out = []
    for images, regions in loader:
        digest = hashlib.sha256(images.numpy().tobytes()).hexdigest()[:16]
        out.append([digest, regions.tolist(), list(regions.canvas_size)])
    return out


class Bricked(torch.utils.data.Dataset):
    # A Dataset whose transform holds a generator: spawn workers get it pickled.
    def __init__(self):
        self.pad = BrickPad(3, random_offset=True, generator=torch.Generator().manual_seed(2))

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.pad(image(i))


def transformed(method):
    loader = DataLoader(
        Bricked(), batch_size=1, num_workers=1, multiprocessing_context=method,
        generator=torch.Generator().manual_seed(5), timeout=120,
    )
    return [hashlib.sha256(x.numpy().tobytes()).hexdigest()[:16] for x in loader]


def ray_pad(pad, batch, queue):
    out = pad(batch)
    queue.put((out["image"].tobytes(), out["region"].tolist()))


if __name__ == "__main__":
    report = {m: batches(m) for m in ("fork", "spawn", "forkserver")}
    report["transform"] = {m: transformed(m) for m in ("fork", "spawn")}
    rng = np.random.default_rng(0)
    batch = {
        "image": [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(5, 9), (11, 4)]],
        "path": np.array(["a.png", "b.png"]),
    }
    pad = RayPadBatch(size=12, placement="random", texture=TEXTURE, seed=3)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=ray_pad, args=(pad, batch, queue))
    proc.start()
    got = queue.get(timeout=120)
    proc.join(60)
    here = pad(batch)
    report["ray_same"] = got == (here["image"].tobytes(), here["region"].tolist())
    print("REPORT " + json.dumps(report))
"""


@pytest.mark.slow
def test_spawn_and_forkserver_workers_draw_what_fork_workers_draw(tmp_path: Path) -> None:
    script = tmp_path / "workers.py"
    script.write_text(textwrap.dedent(_CHILD))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdout=o,
            stderr=e,
            cwd=tmp_path,
            env=env,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child hung; stderr:\n{err.read_text()[-3000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    lines = [ln for ln in out.read_text().splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, err.read_text()[-4000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    fork = report["fork"]
    assert len(fork) == 4 and all(canvas == [9, 9] for _, _, canvas in fork)
    assert len({str(regions) for _, regions, _ in fork}) > 1, "the placements were not random"
    assert report["spawn"] == fork, "spawn workers drew other placements than fork workers"
    assert report["forkserver"] == fork, "forkserver workers drew other placements"
    assert report["ray_same"], "RayPadBatch padded otherwise in a spawned process"
    drawn = report["transform"]
    assert len(set(drawn["fork"])) > 1 and drawn["spawn"] == drawn["fork"], drawn
