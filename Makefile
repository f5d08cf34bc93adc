# `make demo` and `make test` work from a fresh clone on a machine with only Python and pip.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TI_SKIP_VERSION_CHECK := ON
export ENABLE_TAICHI_HEADER_PRINT := 0
# mkdocs-material's banner about its successor, printed on every build
export NO_MKDOCS_2_WARNING := 1

.PHONY: demo test lint typecheck docs docs-serve pytest dist bench clean

# rwkv (--no-deps): BlinkDL's inference package, the tests' independent client for the RWKV
# models; its model code needs torch only, its declared tokenizers/huggingface-hub are not needed.
# editable_mode=strict: the install is a plain path in a .pth file, which type checkers read (the
# default is an import hook that mypy cannot follow). A new module needs this step again (touch
# pyproject.toml); tests and mypy run on the checkout itself and see it at once.
$(STAMP): pyproject.toml requirements/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements/constraints.txt -e '.[test,bench,examples,docs,ray]' \
		--config-settings editable_mode=strict
	$(PY) -m pip install -q -c requirements/constraints.txt --no-deps rwkv
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tipad_transforms demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP)
	$(PY) -m pytest -q

# The site (site/): API pages generated from the docstrings; warnings are errors.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --quiet

docs-serve: $(STAMP)
	$(VENV)/bin/mkdocs serve

# sdist + wheel in dist/, the wheel built from the sdist; no build isolation, so nothing is
# downloaded (setuptools comes with the test extra).
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .
	$(PY) -m twine check --strict dist/*

test: lint typecheck docs pytest

bench: $(STAMP)
	$(PY) benchmarks/pad.py

clean:
	rm -rf $(VENV) out build dist site *.egg-info .pytest_cache .mypy_cache .ruff_cache
