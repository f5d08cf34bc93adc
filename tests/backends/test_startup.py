"""Start-up cost of a process: what importing the package, importing Taichi and building the
kernels must not do (counted, never timed: times are for benchmarks/percall.py)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tipad_transforms._compat.cpython import seed_getmodule_cache
from tipad_transforms.backends import taichi as taichi_backend

ROOT = Path(__file__).resolve().parents[2]

# Counts the rescans of sys.modules that inspect.getmodule does when a file name is not in its
# cache (inspect copies sys.modules once per rescan), with the file name that caused each.
# Shared by this process and the child processes (the text runs there).
COUNTER = """
import inspect, sys

class _CountingModules(dict):
    def __init__(self, log):
        self.log = log

    def copy(self):
        self.log.append(inspect._asking)
        return sys.modules.copy()

    def get(self, *args):
        return sys.modules.get(*args)

    def __getitem__(self, key):
        return sys.modules[key]

    def __contains__(self, key):
        return key in sys.modules


class _Sys:
    def __init__(self, log):
        self.modules = _CountingModules(log)

    def __getattr__(self, name):
        return getattr(sys, name)


def count_scans(log):
    real = inspect.getmodule

    def asking(object, _filename=None):
        inspect._asking = _filename if _filename is not None else repr(object)
        return real(object, _filename)

    inspect._asking = None
    inspect.getmodule = asking
    inspect.sys = _Sys(log)
"""


def _frozen_frames(tmp_path: Path) -> list[FrameType]:
    """Frames of the import machinery, caught while a module is being imported."""
    (tmp_path / "catch_frames.py").write_text(
        "import sys\n"
        "FRAMES = []\n"
        "f = sys._getframe()\n"
        "while f is not None:\n"
        "    if f.f_code.co_filename.startswith('<frozen importlib'):\n"
        "        FRAMES.append(f)\n"
        "    f = f.f_back\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("catch_frames")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("catch_frames", None)
    frames: list[FrameType] = module.FRAMES
    return frames


def test_seeded_frozen_frames_answer_the_same_without_rescans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = _frozen_frames(tmp_path)
    assert {f.f_code.co_filename for f in frames} <= set(taichi_backend.FROZEN_FILES)
    assert frames, "no frame of the import machinery caught"
    namespace: dict[str, Any] = {}
    exec(COUNTER, namespace)
    log: list[Any] = []
    # Start as a process that never seeded (the package may have seeded this one already).
    seeded = {
        f: inspect.modulesbyfile.pop(f)
        for f in taichi_backend.FROZEN_FILES
        if f in inspect.modulesbyfile
    }
    try:
        monkeypatch.setattr(inspect, "getmodule", inspect.getmodule)
        monkeypatch.setattr(inspect, "sys", inspect.sys)
        namespace["count_scans"](log)
        before = [inspect.getframeinfo(f) for f in frames]
        unseeded_scans = len(log)
        seed_getmodule_cache(taichi_backend.FROZEN_FILES)
        del log[:]
        after = [inspect.getframeinfo(f) for f in frames]
        # What Taichi's _inside_class reads: no source lines either way, so "not in a class".
        assert after == before
        assert all(info.code_context is None for info in after)
        assert inspect.getsourcefile(frames[0]) is None
        assert unseeded_scans >= len(frames)  # the counter sees the rescans...
        assert log == []  # ...and the seeded cache leaves none
    finally:
        for f in taichi_backend.FROZEN_FILES:
            inspect.modulesbyfile.pop(f, None)
        inspect.modulesbyfile.update(seeded)


def test_seeding_keeps_an_existing_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    name = taichi_backend.FROZEN_FILES[0]
    monkeypatch.setitem(inspect.modulesbyfile, name, "someone_elses")
    seed_getmodule_cache(taichi_backend.FROZEN_FILES)
    assert inspect.modulesbyfile[name] == "someone_elses"


def _child(script: str) -> dict[str, Any]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    proc = subprocess.run(
        [sys.executable, "-c", COUNTER + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


def test_taichi_import_and_first_launch_rescan_no_modules() -> None:
    # torch loaded first (2,400 modules: what makes a rescan cost), then counted: importing
    # Taichi (hundreds of decorators), building our kernels and compiling the first one.
    out = _child(
        """
        import json, torch
        log = []
        count_scans(log)
        import tipad_transforms.functional as F
        after_import = list(log)
        padding_only = sorted(m for m in sys.modules if m.startswith("tipad_transforms"))
        from tipad_transforms.backends import TAICHI
        TAICHI.load()
        after_taichi = list(log)
        F.brick_pad(torch.arange(48, dtype=torch.uint8).reshape(3, 4, 4), 2)
        print(json.dumps({"import": after_import, "taichi": after_taichi, "all": log,
                          "modules": padding_only}))
        """
    )
    # Padding imports neither the RWKV side nor the transform classes (lazy package names).
    lazy = (
        "tipad_transforms.nn",
        "tipad_transforms.transforms",
        "tipad_transforms.ops.rwkv4.taichi",
        "tipad_transforms.ops.rwkv7.taichi",
        "tipad_transforms.ops.timex.taichi",
    )
    assert "tipad_transforms.functional" in out["modules"]
    assert not [m for m in out["modules"] if m.startswith(lazy)]
    frozen = [f for f in out["all"] if f in taichi_backend.FROZEN_FILES]
    assert frozen == []
    assert out["taichi"] == out["import"]  # importing Taichi rescanned nothing
    assert out["all"] == out["taichi"]  # nor did building and compiling the kernel


def test_lazy_package_names_resolve() -> None:
    import tipad_transforms
    from tipad_transforms import backends

    for name in tipad_transforms.__all__:
        assert getattr(tipad_transforms, name) is not None
        assert name in dir(tipad_transforms)
    assert tipad_transforms.BrickPad is tipad_transforms.transforms.BrickPad
    assert tipad_transforms.RWKV4 is tipad_transforms.nn.RWKV4
    assert tipad_transforms.set_backend is backends.set_backend
    assert tipad_transforms.set_warmup is backends.set_warmup
    with pytest.raises(AttributeError, match="no attribute 'Brickpad'"):
        tipad_transforms.Brickpad  # noqa: B018
    for name in backends.__all__:
        assert getattr(backends, name) is not None


WORKER_MAIN = """
import json, os, sys

import torch
from torch.utils.data import DataLoader

IMPORTED_BY = os.getpid()  # the process that ran this module's top level


class Report(torch.utils.data.Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, i):
        main = sys.modules["__mp_main__"]
        return json.dumps({
            "main_ran_in_worker": main.IMPORTED_BY == os.getpid(),
            "ready": [m in sys.modules for m in ("torchvision", "taichi",
                                                 "tipad_transforms.transforms")],
            "taichi_started": sys.modules["tipad_transforms.backends"].TAICHI.runtime_arch(),
        })


if __name__ == "__main__":
    from tipad_transforms.data import worker_context

    loader = DataLoader(Report(), batch_size=None, num_workers=1,
                        multiprocessing_context=worker_context("forkserver"))
    print(next(iter(loader)))
"""


@pytest.mark.slow  # a fresh interpreter, a forkserver and a worker: ~10 s on the 2-core box
def test_forkserver_workers_inherit_the_main_module_and_imports(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(WORKER_MAIN)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.pop("TIPAD_FORKSERVER_MAIN", None)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    # The server imported the main module (CPython before gh-126631 would not by itself) and what a
    # padding worker needs; Taichi imported there, never started (fork safe).
    assert report == {"main_ran_in_worker": False, "ready": [True] * 3, "taichi_started": None}
