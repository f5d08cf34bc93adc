"""Docs that cannot drift: every Python code block of README.md and docs/**/*.md runs, in order,
one namespace per file (as a reader runs them top to bottom), with its printed claims asserted.

Blocks written as ``>>>`` sessions are doctests (their outputs are the claims); other Python
blocks run as scripts and state their claims with ``assert``. A block guarded by
``if __name__ == "__main__":`` runs as a script of its own in a fresh interpreter: spawned
DataLoader workers import the main module again, and a script may change its whole process
(``bind_device`` narrows ``CUDA_VISIBLE_DEVICES``; the Ray recipe starts a local Ray). Blocks
in other languages (bash, text) are left alone. Sybil (a well-kept doc-testing library) finds
the blocks; each file is one test, so the repository's fixtures (conftest.py's guard against the
torch fallback) apply to it.
"""

from __future__ import annotations

import doctest
import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sybil import Document
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
MAIN_GUARD = 'if __name__ == "__main__":'
FENCE = re.compile(r"^[ \t]*```python[ \t]*\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)


def _main_guarded_blocks() -> list[tuple[str, str]]:
    """(where, source) of every block that must run as a main module."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for fence in FENCE.finditer(text):
            if MAIN_GUARD in fence.group(1):
                line = text.count("\n", 0, fence.start()) + 1
                found.append((f"{path.relative_to(ROOT).as_posix()}:{line}", fence.group(1)))
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_code_blocks_run_and_their_claims_hold(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # paths in the docs are relative to the repository's root
    document = Document.parse(
        str(path), PythonCodeBlockParser(doctest_optionflags=FLAGS), SkipParser()
    )
    examples = list(document)
    # Every ```python block yields examples: a block the parser missed would go untested.
    for fence in FENCE.finditer(document.text):
        where = f"{path.name}, line {document.text.count(chr(10), 0, fence.start()) + 1}"
        assert any(fence.start() <= e.region.start < fence.end() for e in examples), where
    for example in examples:
        source = example.parsed
        if not (isinstance(source, str) and MAIN_GUARD in source):  # those: the test below
            example.evaluate()


@pytest.mark.slow  # spawned DataLoader workers start torch and Taichi each: ~20 s of CPU
@pytest.mark.parametrize(
    "where, source", [pytest.param(*block, id=block[0]) for block in _main_guarded_blocks()]
)
def test_main_guarded_blocks_run_as_scripts(where: str, source: str, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(ROOT), TI_SKIP_VERSION_CHECK="ON", ENABLE_TAICHI_HEADER_PRINT="0")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{where}:\n{result.stdout}\n{result.stderr}"


def test_every_python_block_is_found() -> None:
    """The fence pattern above sees the blocks (including those indented in a list)."""
    text = (ROOT / "docs" / "quickstart.md").read_text()
    assert len(FENCE.findall(text)) == text.count("```python") >= 5
    assert [where for where, _ in _main_guarded_blocks()] != []


def _modules_with_examples() -> list[str]:
    package = ROOT / "tipad_transforms"
    return sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in package.rglob("*.py")
        if ">>>" in p.read_text()
    )


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples_run(name: str) -> None:
    """The Examples sections of the docstrings (what the API pages show) run, outputs checked."""
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=FLAGS)
    assert result.attempted > 0 and result.failed == 0, result


def test_benchmark_tables_match_their_recorded_json() -> None:
    """docs/benchmarks.md's generated tables are what docs/results holds: a re-recorded JSON
    without `make_figures.py bench-tables`, or a hand-edited table, fails here."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "make_figures.py"), "bench-tables", "--check"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "matches docs/results" in proc.stdout
