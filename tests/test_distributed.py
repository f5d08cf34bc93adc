"""One GPU per rank (``tipad_transforms.distributed``) and the DDP example under torchrun.

* ``bind_device``: the environment it leaves for every launcher shape (torchrun's LOCAL_RANK,
  an explicit index as under ``torch.multiprocessing.spawn``, a scheduler's narrowed
  ``CUDA_VISIBLE_DEVICES`` with indices or UUIDs, a process bound already), its errors, and
  the refusal when CUDA started too early. In this process CUDA's state is monkeypatched (a
  real narrowing would bind the test process itself); the spawn test binds real processes.
* ``examples/train_ddp.py`` with gloo on this CPU: 2 ranks on one node, 2 nodes of 1 rank (two
  torchrun launches meeting on 127.0.0.1), and 1 process: parameters identical across ranks
  after every step, disjoint shards that cover the data and change with ``set_epoch``, the
  2-rank loss equal to the 1-process loss on the same global batch, per-rank draws that differ
  and replay from the seed.

Every child process leads its own session, has a deadline, and is killed with its whole group.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from tipad_transforms import distributed
from tipad_transforms._compat import torch as ctorch
from tipad_transforms.backends import TAICHI
from tipad_transforms.distributed import bind_device, rank_generator, visible_devices

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_ddp.py"
# Seconds for all the launches of a fixture together: a few times what they take on a loaded
# 2-core machine, far below a CI stall.
TIMEOUT = 170

# ---------------------------------------------------------------------------------------------
# bind_device, in this process, with CUDA's state monkeypatched


@pytest.fixture
def cuda_state(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A fake CUDA: ``physical`` GPUs (NVML), a runtime that sees ``runtime`` devices once
    asked (None: as many as the narrowed variable names), ``initialized`` by torch or not."""
    state: dict[str, Any] = {"physical": 4, "runtime": None, "initialized": False, "count": 4}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(distributed, "_bound", None)  # each test is a fresh process

    def runtime_count() -> int:
        if state["runtime"] is not None:
            return int(state["runtime"])
        visible = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
        return state["physical"] if visible is None else min(len(visible), state["physical"])

    monkeypatch.setattr(ctorch, "nvml_device_count", lambda: state["physical"])
    monkeypatch.setattr(ctorch, "cuda_device_count", runtime_count)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: state["initialized"])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: state["count"])
    return state


@pytest.mark.parametrize(
    ("value", "entries"),
    [
        (None, None),
        ("", []),
        ("0,1", ["0", "1"]),
        (" GPU-8f2a , MIG-11c/7 ", ["GPU-8f2a", "MIG-11c/7"]),
        ("3,-1,2", ["3"]),
        ("NoDevFiles", []),
    ],
)
def test_visible_devices_reads_the_variable_as_cuda_does(
    value: str | None, entries: list[str] | None
) -> None:
    assert visible_devices(value) == entries


def test_torchrun_local_rank_narrows_to_the_ranks_gpu(
    cuda_state: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert bind_device() == torch.device("cuda", 0)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    # Again: a no-op (the variable names one device now, the process is bound).
    assert bind_device() == torch.device("cuda", 0)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2"


@pytest.mark.parametrize(
    ("visible", "index", "want"),
    [
        ("4,5,6,7", 2, "6"),  # a scheduler gave this job GPUs 4-7
        ("GPU-aaaa,GPU-bbbb", 1, "GPU-bbbb"),  # UUIDs are kept as written
        ("MIG-1111,MIG-2222", 0, "MIG-1111"),
    ],
)
def test_narrowed_list_is_indexed(
    cuda_state: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    visible: str,
    index: int,
    want: str,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert bind_device(index) == torch.device("cuda", 0)  # explicit, as under mp.spawn
    assert os.environ["CUDA_VISIBLE_DEVICES"] == want
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setenv("LOCAL_RANK", str(index))
    bind_device()  # the same from LOCAL_RANK (torchrun, a SLURM wrapper that exports it)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == want


def test_a_process_bound_by_its_launcher_stays_bound(
    cuda_state: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray (num_gpus=1) or SLURM (--gpus-per-task=1) already gave the process one GPU.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-cccc")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert bind_device() == torch.device("cuda", 0)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-cccc"
    with pytest.raises(ValueError, match=r"local rank 1 has no GPU.*names 1 device"):
        bind_device(1)  # an explicit index must exist


def test_without_a_launcher_the_process_binds_local_rank_0(cuda_state: dict[str, Any]) -> None:
    # 0.5.2: "LOCAL_RANK is not set" under a plain `python script.py`.
    assert bind_device() == torch.device("cuda", 0)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert bind_device() == torch.device("cuda", 0)  # again: a no-op
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


@pytest.mark.parametrize("index", [0, 1, 3])
def test_binding_the_same_index_again_is_a_no_op(cuda_state: dict[str, Any], index: int) -> None:
    # 0.5.2: the second bind_device(1) raised "local rank 1 has no GPU" (the first had
    # narrowed the variable to one entry).
    assert bind_device(index) == torch.device("cuda", 0)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == str(index)
    assert bind_device(index) == torch.device("cuda", 0)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == str(index)
    # A process already started CUDA on its one GPU: still the same answer.
    cuda_state.update(initialized=True, count=1)
    assert bind_device(index) == torch.device("cuda", 0)
    if index > 1:  # a rank beyond the one device this process sees now
        with pytest.raises(ValueError, match=r"local rank 1 has no GPU.*names 1 device"):
            bind_device(1)


def test_no_gpu_gives_cpu_with_the_variable_set(
    cuda_state: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    cuda_state.update(physical=-1, runtime=0)  # no NVML, no driver: this machine
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert bind_device() == torch.device("cpu")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"


@pytest.mark.parametrize(
    ("visible", "local", "index", "error", "match"),
    [
        (None, "one", None, ValueError, "LOCAL_RANK must be an integer"),
        (None, None, -1, ValueError, "index must be an int >= 0"),
        (None, None, 1.0, TypeError, "index must be an int"),
        (None, None, True, TypeError, "index must be an int"),
        ("0,1", "2", None, ValueError, r"local rank 2 has no GPU: CUDA_VISIBLE_DEVICES='0,1'"),
        (None, None, 4, ValueError, "local rank 4 has no GPU: this machine has 4"),
        ("", "0", None, ValueError, "names 0 device"),
    ],
)
def test_bad_rank_or_devices(
    cuda_state: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    visible: str | None,
    local: str | None,
    index: Any,
    error: type[Exception],
    match: str,
) -> None:
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    if local is not None:
        monkeypatch.setenv("LOCAL_RANK", local)
    with pytest.raises(error, match=match):
        bind_device(index)
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == visible


def test_cuda_initialised_with_every_gpu_visible_is_refused(
    cuda_state: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The usual recipe: torch.cuda.set_device(local_rank) ran before the binding.
    cuda_state.update(initialized=True, count=8)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(RuntimeError, match="CUDA already started") as info:
        bind_device()
    message = str(info.value)
    assert "8 devices visible" in message and "bind_device() first thing" in message
    assert "CUDA_VISIBLE_DEVICES set to its one GPU" in message
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_runtime_started_by_a_device_query_is_refused_and_env_restored(
    cuda_state: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch.cuda.is_available() without NVML started the runtime with all GPUs: torch is not
    # "initialized", but the runtime will never see the narrowed variable.
    cuda_state.update(runtime=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("LOCAL_RANK", "3")
    with pytest.raises(RuntimeError, match="4 devices visible"):
        bind_device()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_cuda_initialised_on_the_bound_gpu_is_accepted(
    cuda_state: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    cuda_state.update(initialized=True, count=1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(RuntimeError, match="CUDA already started in this process with 1 devices"):
        bind_device()  # one device seen, but not the rank's (6): refused
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6")
    assert bind_device() == torch.device("cuda", 0)


def test_refusal_of_cuda_n_names_the_binding() -> None:
    for device in ("cuda:1", "cuda:7"):
        reason = TAICHI.refusal(torch.device(device))
        assert reason is not None and "tipad_transforms.distributed.bind_device()" in reason
        assert "LOCAL_RANK" in reason and "cuda:0" in reason
    reason = TAICHI.refusal(torch.device("cuda", 0))
    assert "bind_device" not in (reason or ""), "cuda:0 is not refused for its index"


def test_rank_generators_differ_by_rank_and_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    def draws(g: torch.Generator) -> list[int]:
        return torch.randint(0, 2**62, (8,), generator=g).tolist()

    assert draws(rank_generator(3, 0)) == draws(rank_generator(3, 0))
    assert draws(rank_generator(3, 0)) != draws(rank_generator(3, 1))
    assert draws(rank_generator(3, 0)) != draws(rank_generator(4, 0))
    monkeypatch.setenv("RANK", "5")
    assert draws(rank_generator(3)) == draws(rank_generator(3, 5))
    with pytest.raises(TypeError, match="seed must be an int"):
        rank_generator("3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rank must be an int >= 0"):
        rank_generator(3, -1)
    with pytest.raises(TypeError, match="rank must be an int or None"):
        rank_generator(3, "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rank must be an int or None"):
        rank_generator(3, True)
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK must be an integer >= 0, got 'two'"):
        rank_generator(3)
    with pytest.raises(TypeError, match="value must be a str or None"):
        visible_devices(0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# child processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "TI_SKIP_VERSION_CHECK": "ON"}
    env.update(ENABLE_TAICHI_HEADER_PRINT="0", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    for name in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "RANK", "WORLD_SIZE"):
        env.pop(name, None)
    return env


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # The launcher's whole session: torchrun's agent and its ranks, spawn's children.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


class Children:
    """Child processes, each leading its own session, output to files (a straggler holding a
    pipe open cannot hang the read), all killed with their groups at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.deadline = time.monotonic() + TIMEOUT

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        with (self.folder / f"{name}.out").open("wb") as out:
            self.procs[name] = subprocess.Popen(
                [sys.executable, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                env=env or _env(),
                start_new_session=True,
            )

    def output(self, name: str) -> str:
        return (self.folder / f"{name}.out").read_text(errors="replace")

    def wait(self, name: str) -> str:
        proc = self.procs[name]
        try:
            proc.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.close()
            pytest.fail(f"{name!r} hung (killed after {TIMEOUT} s):\n{self.output(name)[-3000:]}")
        assert proc.returncode == 0, (
            f"{name!r} exited {proc.returncode}:\n{self.output(name)[-4000:]}"
        )
        return self.output(name)

    def close(self) -> None:
        for proc in self.procs.values():
            _kill_group(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


_SPAWN = """
import json, os, sys
import torch.multiprocessing as mp


def child(index, folder):
    import torch
    from tipad_transforms.distributed import bind_device

    device = bind_device(index)
    with open(os.path.join(folder, f"spawn{index}.json"), "w") as f:
        json.dump({"visible": os.environ["CUDA_VISIBLE_DEVICES"], "device": str(device),
                   "initialized": torch.cuda.is_initialized()}, f)


if __name__ == "__main__":
    os.environ["CUDA_VISIBLE_DEVICES"] = "GPU-aaaa,GPU-bbbb"  # a scheduler's UUIDs
    mp.spawn(child, args=(sys.argv[1],), nprocs=2, join=True)
"""


# ---------------------------------------------------------------------------------------------
# examples/train_ddp.py

SAMPLES, BATCH, EPOCHS, SEED = 32, 4, 2, 0
ARGS = ["--samples", str(SAMPLES), "--epochs", str(EPOCHS), "--seed", str(SEED), "--workers", "0"]


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_ddp_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torchrun(nnodes: int, node_rank: int, nproc: int, port: int, *args: str) -> list[str]:
    return [
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--node_rank={node_rank}",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={port}",
        str(EXAMPLE),
        *ARGS,
        *args,
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Reports by run: ``"node"`` (1 node x 2 ranks, no random draws), ``"nodes"`` (2 nodes x 1
    rank, random draws), ``"single"`` (1 process, the node run's global batch, in this process
    while the others run), ``"spawn"`` (two mp.spawn children that bind, no training). All at
    once: most of their time is start-up."""
    folder = tmp_path_factory.mktemp("ddp")
    children = Children(folder)
    node_port, nodes_port = _free_port(), _free_port()
    fixed = ["--augment", "fixed", "--batch-size", str(BATCH)]
    drawn = ["--augment", "random", "--batch-size", str(BATCH)]
    script = folder / "spawn_bind.py"
    script.write_text(textwrap.dedent(_SPAWN))
    try:
        children.start("spawn", [str(script), str(folder)])
        children.start("node", _torchrun(1, 0, 2, node_port, *fixed, "--report-dir", "node"))
        for r in range(2):
            children.start(
                f"nodes{r}", _torchrun(2, r, 1, nodes_port, *drawn, "--report-dir", "nodes")
            )
        threads = torch.get_num_threads()
        try:
            single = ["--device", "cpu", "--augment", "fixed", "--batch-size", str(2 * BATCH)]
            _example().main([*ARGS, *single, "--report-dir", str(folder / "single")])
        finally:
            torch.set_num_threads(threads)
        # One forkserver DataLoader worker: rank_generator's generator travels in PadCollate.
        workers = [*ARGS[:-1], "1", "--device", "cpu", "--batch-size", str(BATCH)]
        children.start("workers", [str(EXAMPLE), *workers, "--report-dir", "workers"])
        for name in ("node", "nodes0", "nodes1", "spawn", "workers"):
            output = children.wait(name)
            # Every rank ran the Taichi kernels (this process's run is held to it by conftest).
            assert "the Taichi kernel cannot run here" not in output, output[-3000:]
    finally:
        children.close()
    out: dict[str, list[dict[str, Any]]] = {}
    for run, world in (("node", 2), ("nodes", 2), ("single", 1), ("workers", 1)):
        out[run] = [json.loads((folder / run / f"rank{r}.json").read_text()) for r in range(world)]
        print(f"{run}: " + ", ".join(f"rank {r['rank']} {r['wall_s']:.1f} s" for r in out[run]))
    out["spawn"] = [json.loads((folder / f"spawn{i}.json").read_text()) for i in range(2)]
    return out


@pytest.mark.slow
def test_the_example_trains_with_forkserver_workers(runs: dict[str, list[dict[str, Any]]]) -> None:
    # 0.5.2: "DataLoader worker exited unexpectedly" (the generator could not be sent).
    (report,) = runs["workers"]
    assert len(report["epochs"]) == EPOCHS
    for epoch in report["epochs"]:
        assert len(epoch["steps"]) == SAMPLES // BATCH
        labels = [lab for s in epoch["steps"] for lab in s["labels"]]
        assert labels == [i % 4 for i in epoch["indices"]]
    regions = [s["regions"] for e in report["epochs"] for s in e["steps"]]
    assert len({str(r) for r in regions}) > 1, "the worker drew no random placements"


@pytest.mark.slow
def test_spawned_processes_bind_their_own_gpu(runs: dict[str, list[dict[str, Any]]]) -> None:
    got = runs["spawn"]
    assert [g["visible"] for g in got] == ["GPU-aaaa", "GPU-bbbb"]
    assert all(g["device"] == "cpu" and not g["initialized"] for g in got)  # no GPU here


@pytest.mark.slow
@pytest.mark.parametrize("run", ["node", "nodes"])
def test_torchrun_binds_and_trains_in_step(runs: dict[str, list[dict[str, Any]]], run: str) -> None:
    reports = runs[run]
    assert [r["rank"] for r in reports] == [0, 1] and all(r["world"] == 2 for r in reports)
    # One node: local ranks 0 and 1 -> GPUs "0" and "1"; two nodes: local rank 0 on each.
    want = ["0", "1"] if run == "node" else ["0", "0"]
    assert [r["cuda_visible_devices"] for r in reports] == want
    assert len(reports[0]["epochs"]) == EPOCHS
    for epoch in range(EPOCHS):
        steps = [r["epochs"][epoch]["steps"] for r in reports]
        assert len(steps[0]) == len(steps[1]) == SAMPLES // (2 * BATCH)
        for k, (a, b) in enumerate(zip(*steps, strict=True)):
            assert a["params"] == b["params"], f"epoch {epoch} step {k}: parameters differ"
            assert a["global_loss"] == pytest.approx(b["global_loss"], rel=1e-6)
            assert a["global_loss"] == pytest.approx((a["loss"] + b["loss"]) / 2, rel=1e-5)
        # Shards: disjoint, together the whole dataset; a new order every epoch.
        shards = [r["epochs"][epoch]["indices"] for r in reports]
        assert not set(shards[0]) & set(shards[1])
        assert sorted(shards[0] + shards[1]) == list(range(SAMPLES))
        for r in reports:
            labels = [lab for s in r["epochs"][epoch]["steps"] for lab in s["labels"]]
            assert labels == [i % 4 for i in r["epochs"][epoch]["indices"]], "shard vs batches"
    for r in reports:
        assert r["epochs"][0]["indices"] != r["epochs"][1]["indices"], "set_epoch: same order"


@pytest.mark.slow
def test_two_ranks_lose_what_one_process_loses(runs: dict[str, list[dict[str, Any]]]) -> None:
    (single,) = runs["single"]
    two = runs["node"][0]
    for epoch in range(EPOCHS):
        got = [s["global_loss"] for s in two["epochs"][epoch]["steps"]]
        want = [s["loss"] for s in single["epochs"][epoch]["steps"]]
        assert len(got) == len(want) == SAMPLES // (2 * BATCH)
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), f"epoch {epoch}"
        # The same global batches: the single process's batch is the union of the ranks'.
        union = sorted(
            runs["node"][0]["epochs"][epoch]["indices"]
            + runs["node"][1]["epochs"][epoch]["indices"]
        )
        assert union == sorted(single["epochs"][epoch]["indices"])


@pytest.mark.slow
def test_rank_draws_differ_and_replay_from_the_seed(
    runs: dict[str, list[dict[str, Any]]],
) -> None:
    example = _example()
    reports = runs["nodes"]

    def params_of(collate: Any, sizes: list[tuple[int, int]]) -> list[Any]:
        placements = collate.make_params(sizes)["placement"].tolist()
        return list(zip(placements, sizes, strict=True))

    def replay(rank_of_generator: int, report: dict[str, Any]) -> list[list[list[int]]]:
        # What PadCollate draws for this rank's batches from rank_generator(seed + 1, rank).
        collate = example.make_collate("random", rank_generator(SEED + 1, rank_of_generator))
        out = []
        for epoch in report["epochs"]:
            indices = epoch["indices"]
            for k in range(len(epoch["steps"])):
                sizes = [example.sample_size(i) for i in indices[k * BATCH : (k + 1) * BATCH]]
                where = params_of(collate, sizes)
                out.append([[t + 2, x + 2, h, w] for (t, x), (h, w) in where])
        return out

    for rank, report in enumerate(reports):
        regions = [s["regions"] for e in report["epochs"] for s in e["steps"]]
        assert regions == replay(rank, report), f"rank {rank}: draws do not replay from the seed"
        assert regions != replay(1 - rank, report), "ranks 0 and 1 draw the same values"
