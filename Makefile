# `make demo` and `make test` work from a fresh clone on a machine with only Python and pip.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TI_SKIP_VERSION_CHECK := ON
export ENABLE_TAICHI_HEADER_PRINT := 0

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml requirements/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements/constraints.txt -e '.[test,bench,examples]'
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

test: lint typecheck pytest

bench: $(STAMP)
	$(PY) benchmarks/pad.py

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
