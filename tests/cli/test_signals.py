"""``tipad pad`` stopped by a signal: SIGTERM and SIGINT end the worker processes with the parent
and leave no temporary file (exit 128 + N); SIGKILL of the parent does not leave its workers
running; and a run killed at random points never leaves a partial or wrong output.

Each run is the real command in its own session (``start_new_session``), so that its process
group can be checked for survivors afterwards. To signal a run while it writes, whatever the
machine's speed, the test waits for a temporary file to appear, freezes the whole group
(SIGSTOP), checks that the file is still there, sends the signal and lets the group go on.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from tipad_transforms.cli import main

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc, process groups")

ENV = {**os.environ, "TI_SKIP_VERSION_CHECK": "ON", "ENABLE_TAICHI_HEADER_PRINT": "0"}
TEMP = re.compile(r"\..+\.tipad-[0-9]+-[0-9a-f]{8}\.tmp")
#: Generous limits for a loaded machine: they end a hung test, nothing waits for them.
DEADLINE_S = 120.0


def start(*args: str | Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tipad_transforms", "pad", *map(str, args)]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        start_new_session=True,  # its own process group: pgid == pid
    )


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (zombies, already dead, left out)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            members.append(int(entry))
    return members


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.002)


def temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(".*") if TEMP.fullmatch(p.name)]


def outputs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not TEMP.fullmatch(p.name))


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def noise_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 images of noise, 400x300: each takes a while to encode, so a signal can find a
    worker writing (32 or more files: --workers 2 starts two workers)."""
    tree = tmp_path_factory.mktemp("noise") / "tree"
    tree.mkdir()
    rng = np.random.default_rng(7)
    for i in range(40):
        arr = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)
        PIL.Image.fromarray(arr).save(tree / f"n{i:02d}.png", compress_level=0)
    return tree


def signal_while_writing(
    proc: subprocess.Popen[bytes], out: Path, send: Callable[[], None], total: int
) -> None:
    """Call ``send`` while the run ``proc`` is writing a file into ``out`` (group frozen)."""
    pgid = proc.pid
    for _ in range(1000):
        wait_until(lambda: bool(temporaries(out)) or proc.poll() is not None, "a write")
        assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
        os.killpg(pgid, signal.SIGSTOP)
        if temporaries(out):  # still writing, now frozen: not finished between look and stop
            assert len(outputs(out)) < total
            send()
            os.killpg(pgid, signal.SIGCONT)
            return
        os.killpg(pgid, signal.SIGCONT)
    raise AssertionError("never caught the run writing")


def check_outputs(out: Path, sources: list[Path]) -> None:
    """Every output that exists is a whole image of the padded size."""
    names = {p.name: p for p in sources}
    for path in outputs(out):
        with PIL.Image.open(names[path.name]) as a, PIL.Image.open(path) as b:
            b.load()  # decodes to the end: not truncated
            assert b.size == (a.width + 16, a.height + 16), path


@pytest.mark.parametrize(
    ("signum", "to_group", "workers"),
    [
        (signal.SIGTERM, False, 2),  # kill -TERM PID, timeout, SLURM, Kubernetes
        (signal.SIGTERM, False, 0),  # this process writing
        (signal.SIGINT, True, 2),  # Ctrl-C: the terminal signals the whole group
    ],
    ids=["SIGTERM-workers", "SIGTERM-in-process", "SIGINT-group"],
)
def test_a_stop_signal_ends_every_process_and_leaves_no_temporary_file(
    tmp_path: Path, noise_tree: Path, signum: int, to_group: bool, workers: int
) -> None:
    out = tmp_path / "out"
    sources = sorted(noise_tree.iterdir())
    before = digest(noise_tree)
    proc = start(noise_tree, "-o", out, "--mode", "edge", "--padding", "8", "--workers", workers)

    def send() -> None:
        (os.killpg if to_group else os.kill)(proc.pid, signum)

    signal_while_writing(proc, out, send, len(sources))
    _, stderr = proc.communicate(timeout=DEADLINE_S)
    err = stderr.decode()
    assert proc.returncode == 128 + signum, err[-3000:]
    assert "Traceback" not in err and f"stopped by {signal.Signals(signum).name}" in err
    # The parent ended its workers before it exited: nothing of the run is left.
    assert group_members(proc.pid) == []
    assert temporaries(out) == []
    check_outputs(out, sources)
    assert digest(noise_tree) == before


def test_sigkill_of_the_parent_does_not_leave_its_workers_running(
    tmp_path: Path, noise_tree: Path
) -> None:
    out = tmp_path / "out"
    sources = sorted(noise_tree.iterdir())
    proc = start(noise_tree, "-o", out, "--mode", "edge", "--padding", "8", "--workers", "2")
    signal_while_writing(proc, out, lambda: os.kill(proc.pid, signal.SIGKILL), len(sources))
    proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL
    # Orphaned, each worker sees its parent gone, removes its temporary file and exits.
    wait_until(lambda: group_members(proc.pid) == [], "the workers to exit")
    assert temporaries(out) == []
    check_outputs(out, sources)


# ---------------------------------------------------------------------------------------------
# fault injection


def _written_since(folder: Path, since_ns: int) -> int:
    """How many outputs in ``folder`` were (re)written at or after ``since_ns``."""
    count = 0
    for current, _, names in os.walk(folder):
        for name in names:
            if TEMP.fullmatch(name):
                continue
            try:
                st = os.stat(os.path.join(current, name), follow_symlinks=False)
            except FileNotFoundError:  # replaced this instant
                continue
            count += st.st_mtime_ns >= since_ns
    return count


def _run_here(capsys: pytest.CaptureFixture[str], *args: str | Path) -> None:
    """``tipad pad ARGS`` in this process (torch is imported already: fast)."""
    status = main(["pad", *map(str, args)])
    assert status == 0, capsys.readouterr().err[-3000:]


@pytest.mark.slow  # ~40 s on two free cores: 20 fresh processes
def test_sigkill_at_random_points_never_leaves_a_partial_or_wrong_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_image_tree: Callable[..., list[Path]]
) -> None:
    tree = tmp_path / "tree"
    make_image_tree(tree, 200, seed=5)  # PNG, JPEG and GIF, 8-40 px
    inputs = digest(tree)
    args = ["-r", "--mode", "reflect", "--padding", "3"]
    reference = tmp_path / "reference"  # what a clean run writes
    _run_here(capsys, tree, "-o", reference, *args, "--workers", "0")
    expected = digest(reference)
    assert len(expected) == 200

    def lane(seed: int, kills: int) -> int:
        """``kills`` runs into one output folder, each SIGKILLed once a random number (0 to
        200) of its outputs are written, whatever the machine's speed; the state is checked
        after each. Returns how many were killed with some but not all outputs written."""
        rng = np.random.default_rng(seed)
        out = tmp_path / f"out{seed}"
        mid_run = 0
        for i in range(kills):
            workers, point = int(rng.choice([0, 2])), int(rng.integers(0, 201))
            since = time.time_ns()
            proc = start(tree, "-o", out, *args, "--workers", workers)
            written = 0
            while proc.poll() is None and (written := _written_since(out, since)) < point:
                time.sleep(0.01)
            proc.kill()
            proc.communicate(timeout=DEADLINE_S)  # 0.5.2: orphaned workers kept its pipes open
            mid_run += 0 < written < 200 and proc.returncode == -signal.SIGKILL
            pgid = proc.pid
            wait_until(lambda: group_members(pgid) == [], "the workers to exit")  # noqa: B023
            # Every output is absent or exactly what a clean run writes; the only temporary
            # file left is the one this process was writing itself when it was killed (the
            # next run removes it), never one of a worker's.
            for path in outputs(out):
                rel = str(path.relative_to(out))
                assert rel in expected, rel
                digest_ = hashlib.sha256(path.read_bytes()).hexdigest()
                assert digest_ == expected[rel], f"{rel} after kill {i} of lane {seed}"
            assert len(temporaries(out)) <= (1 if workers == 0 else 0), temporaries(out)
        return mid_run

    # Two lanes at once (half the wall time where two cores are free), ten kills each.
    with ThreadPoolExecutor(2) as lanes:
        mid_run = sum(lanes.map(lane, [1, 2], [10, 10]))
    assert mid_run >= 10  # most kills land while files are written (points drawn in 0..200)
    for seed in (1, 2):
        # Resume: the outputs present are left, the rest written, the temporary file of a
        # killed run removed.
        out = tmp_path / f"out{seed}"
        _run_here(capsys, tree, "-o", out, *args, "--skip-existing", "--workers", "0")
        assert digest(out) == expected and temporaries(out) == []
    assert digest(tree) == inputs
