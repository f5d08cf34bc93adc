"""The distributions as a user gets them: what the sdist and the wheel hold, their metadata, and
the wheel installed into a fresh virtual environment and run from outside the repository.

Everything here is offline: the distributions are built without build isolation (the running
environment's setuptools), installed with ``--no-deps --no-index``, and the fresh environments
reuse the running environment's torch, torchvision and Taichi through a ``.pth`` line.
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

import tipad_transforms

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FILES = sorted(
    p.relative_to(ROOT).as_posix()
    for p in (ROOT / "tipad_transforms").rglob("*")
    if p.is_file() and "__pycache__" not in p.parts
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(TI_SKIP_VERSION_CHECK="ON", ENABLE_TAICHI_HEADER_PRINT="0")
    return env


def _run(*cmd: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel), built as ``make dist`` builds them: the wheel is built from the sdist."""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


def _fresh_venv(path: Path) -> Path:
    """A new venv that sees the running environment's packages (torch, ...), not its .pth hooks."""
    _run(sys.executable, "-m", "venv", "--without-pip", path)
    python = path / "bin" / "python"
    purelib = Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
    )
    reused = dict.fromkeys(sysconfig.get_path(k) for k in ("purelib", "platlib"))
    # A directory named in a .pth is appended to sys.path, after the venv's own site-packages, and
    # its own .pth files are not run: this checkout's editable install does not leak in.
    (purelib / "_reuse_running_env.pth").write_text("\n".join(reused) + "\n")
    return python


def _pip(python: Path, *args: str | Path) -> None:
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        *args,
    )


def test_sdist_holds_the_package_and_leaves_the_tests_out(dists: tuple[Path, Path]) -> None:
    sdist, _ = dists
    with tarfile.open(sdist) as tar:
        top = sdist.name.removesuffix(".tar.gz")
        names = {n.removeprefix(top + "/") for n in tar.getnames()}
    for name in [
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "docs/pypi.md",
        "pyproject.toml",
        *PACKAGE_FILES,
    ]:
        assert name in names, f"{name} missing from {sdist.name}"
    # On purpose (MANIFEST.in): the tests need the repository (examples/, benchmarks/, docs/).
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "examples/"))]


def test_wheel_holds_the_package_and_the_license(dists: tuple[Path, Path]) -> None:
    _, wheel = dists
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [n for n in PACKAGE_FILES if n not in names]
    assert not missing, f"not in the wheel: {missing}"
    dist_info = f"tipad_transforms-{tipad_transforms.__version__}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "Apache License" in (ROOT / "LICENSE").read_text()


def test_metadata_renders_and_says_what_the_package_supports(dists: tuple[Path, Path]) -> None:
    sdist, wheel = dists
    _run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel)
    dist_info = f"tipad_transforms-{tipad_transforms.__version__}.dist-info"
    meta = email.parser.Parser().parsestr(
        zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    )
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    # The Python classifiers are exactly the minor versions that Requires-Python admits.
    admitted = SpecifierSet(meta["Requires-Python"])
    listed = {c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r".*Python :: 3\.\d+", c)}
    assert listed == {f"3.{m}" for m in range(6, 20) if f"3.{m}.0" in admitted}
    # The package index shows the description outside the repository: no relative link or image.
    body = meta.get_payload()
    assert isinstance(body, str) and "tipad_transforms" in body
    targets = re.findall(r"\]\(([^)\s]+)", body) + re.findall(r"src=[\"']([^\"']+)", body)
    relative = [t for t in targets if not t.startswith(("https://", "http://", "#"))]
    assert not relative, f"relative links in the long description: {relative}"


# One interpreter start: checks that the wheel's requirements are met, that the package imported
# is the installed one, its bundled samples, and two pads checked against torch.
USER_SCRIPT = textwrap.dedent(
    """
    import importlib.metadata as md
    import sys

    import torch
    from packaging.requirements import Requirement

    import tipad_transforms
    import tipad_transforms.functional as F
    from tipad_transforms.assets import load_sample

    assert tipad_transforms.__file__.startswith(sys.prefix), tipad_transforms.__file__
    for line in md.requires("tipad_transforms"):
        req = Requirement(line)
        if req.marker is None:
            assert md.version(req.name) in req.specifier, (req, md.version(req.name))
    x = torch.arange(2 * 3 * 4, dtype=torch.uint8).reshape(2, 3, 4)
    expected = torch.nn.functional.pad(x, (1, 3, 2, 4), value=7)  # (left, right, top, bottom)
    assert torch.equal(F.pad(x, (1, 2, 3, 4), fill=7), expected)
    walled = F.brick_pad(x, 2)
    assert walled.shape == (2, 7, 8) and torch.equal(walled[:, 2:5, 2:6], x)
    assert load_sample("present").size == (128, 128)
    print("ok")
    """
)


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs_outside_the_repository(
    dists: tuple[Path, Path], tmp_path: Path
) -> None:
    _, wheel = dists
    python = _fresh_venv(tmp_path / "venv")
    _pip(python, wheel)
    elsewhere = tmp_path / "user"
    elsewhere.mkdir()
    tipad = _run(python.parent / "tipad", "--version", cwd=elsewhere)
    assert tipad.stdout.strip().startswith(f"tipad {tipad_transforms.__version__} (taichi")
    # RuntimeWarning as an error: the torch fallback (which warns) must not serve these calls.
    assert (
        _run(python, "-W", "error::RuntimeWarning", "-c", USER_SCRIPT, cwd=elsewhere).stdout.strip()
        == "ok"
    )


@pytest.mark.slow
def test_strict_editable_install_is_seen_by_mypy(dists: tuple[Path, Path], tmp_path: Path) -> None:
    """setuptools' default editable hook is an import hook that mypy cannot follow; strict mode is
    a plain path in a .pth, which it reads. The Makefile installs that way, README says so."""
    assert "--config-settings editable_mode=strict" in (ROOT / "Makefile").read_text()
    sdist, _ = dists
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    (source,) = (tmp_path / "src").iterdir()
    python = _fresh_venv(tmp_path / "venv")
    _pip(python, "--no-build-isolation", "--config-settings", "editable_mode=strict", "-e", source)
    user = tmp_path / "user"
    user.mkdir()
    (user / "use.py").write_text(
        "import tipad_transforms\n\nversion: int = tipad_transforms.__version__\n"
    )
    # Only the package's __init__ and _version are read (torch & co. would take minutes).
    (user / "mypy.ini").write_text(
        "[mypy]\nfollow_imports = skip\n"
        "[mypy-tipad_transforms,tipad_transforms._version]\nfollow_imports = silent\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--python-executable",
            str(python),
            "--cache-dir",
            str(tmp_path / "cache"),
            "use.py",
        ],
        cwd=user,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    # The one error proves mypy found the package and read its types.
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        'use.py:3: error: Incompatible types in assignment (expression has type "str"'
        in result.stdout
    )
    assert "Cannot find implementation" not in result.stdout
