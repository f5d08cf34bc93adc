"""The Taichi module of the Taichi backend: upstream ``taichi`` or ``taichi_forge``, chosen,
imported quietly, packaged.

`make test` runs this file in both venvs (upstream taichi in one, taichi_forge in the other), so
each test checks the backend installed where it runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch
from reference import assert_bitwise_equal, pad_ref, random_image

import tipad_transforms
import tipad_transforms.functional as F
from tipad_transforms.backends import TAICHI
from tipad_transforms.backends import taichi as taichi_backend
from tipad_transforms.cli import main

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = [name for name in taichi_backend.MODULES if importlib.util.find_spec(name) is not None]
MISSING = [name for name in taichi_backend.MODULES if name not in INSTALLED]


def _child(script: str, *flags: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter (one Taichi per process); its last line is JSON."""
    environ = {k: v for k, v in os.environ.items() if k != taichi_backend.ENV_VAR}
    environ.update(env or {})
    try:
        proc = subprocess.run(
            [sys.executable, *flags, "-c", textwrap.dedent(script)],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=ROOT,
            env=environ,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"child process hung: {exc.stderr!r}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        **json.loads(proc.stdout.splitlines()[-1]),
    }


# ---------------------------------------------------------------------------------------------
# quiet import (issue 8: the first kernel call raised under -W error::DeprecationWarning)


@pytest.mark.parametrize("name", INSTALLED)
def test_first_kernel_call_on_each_backend_under_warnings_as_errors(name: str) -> None:
    # Taichi's import warns about locale.getdefaultlocale (deprecated since Python 3.11); users'
    # test suites run with warnings as errors, so the first pad must not surface it. -W error
    # covers issue 8's -W error::DeprecationWarning and every other category.
    report = _child(
        """
        import json, sys, warnings
        import torch, tipad_transforms.functional as F
        from tipad_transforms.backends import TAICHI
        before = list(warnings.filters)
        gen = torch.Generator().manual_seed(3)
        x = torch.randint(0, 256, (2, 3, 5, 6), dtype=torch.uint8, generator=gen)
        y = F.pad(x, (3, 1, 4, 2), padding_mode="reflect")
        print(json.dumps({"x": x.tolist(), "y": y.tolist(),
                          "backend": TAICHI.describe(),
                          "filters_kept": list(warnings.filters) == before,
                          "modules": sorted(m for m in ("taichi", "taichi_forge")
                                            if m in sys.modules)}))
        """,
        "-W",
        "error",
        env={taichi_backend.ENV_VAR: name.replace("_", "-")},  # pip's spelling is accepted too
    )
    assert report["stderr"] == ""
    assert report["filters_kept"], "the quiet import left the user's warning filters changed"
    x = torch.tensor(report["x"], dtype=torch.uint8)
    assert_bitwise_equal(
        torch.tensor(report["y"], dtype=torch.uint8), pad_ref(x, (3, 1, 4, 2), "reflect")
    )
    assert report["backend"].split()[0] == name
    assert report["modules"] == [name], "one Taichi per process"


def test_bad_choices_are_refused() -> None:
    with pytest.raises(ValueError, match="name must be one of"):
        tipad_transforms.set_backend("quadrants")
    with pytest.raises(TypeError, match="name must be a str"):
        tipad_transforms.set_backend(3)  # type: ignore[arg-type]
    F.pad(torch.zeros(1, 1, 1), 1)  # the backend is in use from here on
    in_use = TAICHI.chosen()
    other = next(n for n in taichi_backend.MODULES if n != in_use)
    with pytest.raises(RuntimeError, match=f"already runs its kernels on {in_use}"):
        tipad_transforms.set_backend(other)
    tipad_transforms.set_backend(in_use)  # the one in use: nothing to do
    tipad_transforms.set_backend(None)
    assert TAICHI.chosen() == in_use == TAICHI.ti.__name__


@pytest.fixture
def fresh_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The choice as before any launch, with nothing imported (the real modules stay put)."""
    monkeypatch.setattr(TAICHI, "ti", None)
    monkeypatch.setattr(TAICHI, "choice", None)
    monkeypatch.delenv(taichi_backend.ENV_VAR, raising=False)
    for name in taichi_backend.MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)


def _installed(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        if name in taichi_backend.MODULES:
            return object() if name in names else None
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.usefixtures("fresh_choice")
def test_automatic_choice_order(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "taichi", "taichi_forge")
    assert TAICHI.chosen() == "taichi"  # both installed: upstream, the tested default
    _installed(monkeypatch, "taichi_forge")
    assert TAICHI.chosen() == "taichi_forge"  # Python 3.14: only the fork installs
    _installed(monkeypatch, "taichi", "taichi_forge")
    # A Taichi the user already imported wins: one Taichi per process.
    monkeypatch.setitem(sys.modules, "taichi_forge", types.ModuleType("taichi_forge"))
    assert TAICHI.chosen() == "taichi_forge"
    monkeypatch.setenv(taichi_backend.ENV_VAR, "taichi")  # then the environment variable
    assert TAICHI.chosen() == "taichi"
    tipad_transforms.set_backend("taichi_forge")  # and set_backend above all
    assert TAICHI.chosen() == "taichi_forge"
    _installed(monkeypatch)
    tipad_transforms.set_backend(None)
    monkeypatch.delenv(taichi_backend.ENV_VAR)
    monkeypatch.delitem(sys.modules, "taichi_forge")
    with pytest.raises(ModuleNotFoundError, match="pip install taichi"):
        TAICHI.chosen()
    assert TAICHI.describe() == "no Taichi installed"


@pytest.mark.usefixtures("fresh_choice")
@pytest.mark.parametrize("name", MISSING)
def test_choosing_a_missing_backend_says_what_to_install(name: str) -> None:
    tipad_transforms.set_backend(name)
    with pytest.raises(ModuleNotFoundError, match=f"pip install {name.replace('_', '-')}"):
        TAICHI.load()
    assert TAICHI.ti is None


@pytest.mark.usefixtures("fresh_choice")
def test_bad_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(taichi_backend.ENV_VAR, "tachi")
    with pytest.raises(ValueError, match=f"^{taichi_backend.ENV_VAR} must be one of"):
        TAICHI.load()
    assert TAICHI.describe().startswith(f"no Taichi ({taichi_backend.ENV_VAR} must be one of")


# ---------------------------------------------------------------------------------------------
# the seam on either module: version accessor, fork hook


def test_backend_and_version_accessors() -> None:
    F.pad(torch.zeros(1, 1, 1), 1)
    ti = TAICHI.ti
    name, version = TAICHI.describe().split()
    assert name == ti.__name__ and version == ".".join(map(str, ti.__version__))
    dist = {"taichi": "taichi", "taichi_forge": "taichi-forge"}[name]
    assert version == importlib.metadata.version(dist)


def test_kernels_compile_with_upstreams_optimisations() -> None:
    # taichi_forge's default compile tier skips the advanced IR passes (RWKV kernels 3-5x
    # slower): the seam asks every backend for upstream's pipeline.
    F.pad(torch.zeros(1, 1, 1), 1)
    cfg = TAICHI.ti.lang.impl.current_cfg()
    assert cfg.advanced_optimization
    if TAICHI.ti.__name__ == "taichi_forge":
        assert cfg.compile_tier == "full"


def test_version_names_the_backend(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == f"tipad {tipad_transforms.__version__} ({TAICHI.describe()})"
    assert out.split("(")[1].split()[0] in INSTALLED


def test_demo_footer_names_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import ImageDraw

    drawn: list[str] = []
    real = ImageDraw.ImageDraw.text

    def text(self: Any, xy: Any, text: str, *args: Any, **kwargs: Any) -> Any:
        drawn.append(str(text))
        return real(self, xy, text, *args, **kwargs)

    monkeypatch.setattr(ImageDraw.ImageDraw, "text", text)
    argv = ["demo", "--out", str(tmp_path), "--padding", "8", "--runs", "1", "--batch", "1"]
    assert main(argv) == 0
    footer = [t for t in drawn if "made by `tipad demo`" in t]
    assert len(footer) == 1 and f" · {TAICHI.describe()} · " in footer[0], drawn[-3:]


def test_fork_after_the_user_started_this_taichi() -> None:
    # The fork hook must see a runtime the user started with either module (before the seam
    # ever imported it): forked workers then take the torch route instead of hanging.
    report = _child(
        """
        import importlib, json, warnings
        from tipad_transforms.backends import TAICHI
        ti = importlib.import_module(TAICHI.chosen())
        ti.init(arch=ti.cpu)
        import torch
        import tipad_transforms.functional as F
        from torch.utils.data import DataLoader, Dataset

        class Padded(Dataset):
            def __len__(self):
                return 2
            def __getitem__(self, i):
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    y = F.pad(torch.arange(6.0).reshape(1, 2, 3) + i, 1, padding_mode="edge")
                return y, len(w)

        loader = DataLoader(Padded(), batch_size=1, num_workers=2,
                            multiprocessing_context="fork")
        got = [(y[0].tolist(), int(n)) for y, n in loader]
        print(json.dumps({"got": got, "module": ti.__name__}))
        """
    )
    for i, (y, warned) in enumerate(report["got"]):
        want = pad_ref(torch.arange(6.0).reshape(1, 2, 3) + i, (1, 1, 1, 1), "edge")
        assert_bitwise_equal(torch.tensor(y), want)
        assert warned >= 1, "the forked worker should have taken the torch route"


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float64], ids=str)
def test_kernels_on_this_backend(dtype: torch.dtype) -> None:
    x = random_image((2, 3, 5, 7), dtype, seed=31)
    for mode in ("constant", "edge", "reflect", "circular"):
        assert_bitwise_equal(
            F.pad(x, (2, 5, 3, 1), padding_mode=mode, fill=1), pad_ref(x, (2, 5, 3, 1), mode, 1)
        )


# ---------------------------------------------------------------------------------------------
# packaging: the dependencies resolve where upstream Taichi has no wheels


def _registry_reachable(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=15):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"{url} cannot be reached from here ({exc})"


@pytest.mark.parametrize(
    ("python", "taichi"), [("3.14", "taichi-forge"), ("3.13", "taichi"), ("3.10", "taichi")]
)
def test_dependencies_resolve_on_manylinux(python: str, taichi: str) -> None:
    """Resolve pyproject.toml (all extras) for CPython ``python`` on manylinux_2_35 x86_64.

    Nothing is installed or downloaded beyond metadata (uv reads a wheel's METADATA with range
    requests), and only wheels count: a dependency without a wheel for that Python fails here.
    """
    import uv

    reason = _registry_reachable("https://pypi.org/simple/taichi-forge/")
    if reason is not None:
        pytest.skip(reason)
    env = dict(os.environ)
    # The system's CA store, as pip here is told to use (a proxy may sign PyPI's certificates).
    cert = env.get("PIP_CERT") or env.get("SSL_CERT_FILE")
    if cert is None and Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        cert = "/etc/ssl/certs/ca-certificates.crt"
    if cert is not None:
        env["SSL_CERT_FILE"] = cert
    uv_bin = uv.find_uv_bin()
    assert shutil.which(uv_bin) is not None
    proc = subprocess.run(
        [
            uv_bin, "pip", "compile", "--no-config", "--quiet", "--all-extras",
            "--python-version", python, "--python-platform", "x86_64-manylinux_2_35",
            "--only-binary", ":all:", "--no-header", "--no-annotate",
            str(ROOT / "pyproject.toml"),
        ],
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    pins = dict(line.split("==", 1) for line in proc.stdout.split() if "==" in line)
    assert taichi in pins, f"{taichi} missing from the resolution for {python}: {pins}"
    other = {"taichi": "taichi-forge", "taichi-forge": "taichi"}[taichi]
    assert other not in pins, "both Taichis in one install"
    assert {"torch", "torchvision", "numpy", "pillow"} <= pins.keys()
