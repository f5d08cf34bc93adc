# `make demo` and `make test` work from a fresh clone on a machine with only Python and pip.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TI_SKIP_VERSION_CHECK := ON
export ENABLE_TAICHI_HEADER_PRINT := 0
# mkdocs-material's banner about its successor, printed on every build
export NO_MKDOCS_2_WARNING := 1

# The other Taichi: a second venv that sees the first one's packages (torch is 5.5 GB: installed
# once) except upstream taichi, plus taichi-forge, so it runs as a Python 3.14 install would.
FORGE_VENV ?= .venv-forge
FORGE_PY := $(FORGE_VENV)/bin/python
FORGE_STAMP := $(FORGE_VENV)/.installed
# Every kernel family (tests/ops: a new family's folder is in without a change here), the
# backends and the functionals that reach the kernels, run again on taichi_forge.
KERNEL_TESTS := tests/ops tests/backends/test_taichi_choice.py tests/backends/test_runtime.py \
	tests/backends/test_policy.py tests/backends/test_compat_taichi.py \
	tests/functional/test_texture_pad.py tests/functional/test_pad.py \
	tests/data/test_loader_safety.py

# The GPU-compiler lane: the kernel families' tests again with Taichi on Vulkan for CPU tensors
# (TIPAD_TEST_ARCH=vulkan), so every GPU loop order goes through Taichi's GPU compiler, shared
# arrays and block syncs included. Without a GPU, Mesa's software Vulkan (lavapipe) runs it:
# .ci/run installs it where it can (apt-get install mesa-vulkan-drivers libvulkan1).
VULKAN_TESTS := tests/ops
HAS_VULKAN := $(PY) -c "import sys, taichi as ti; from tipad_transforms._compat.taichi import \
	runtime_arch; ti.init(arch=ti.vulkan, log_level=ti.ERROR); sys.exit(runtime_arch(ti) != 'vulkan')"

.PHONY: demo test lint typecheck docs docs-serve pytest pytest-forge pytest-vulkan dist bench \
	bench-backends clean

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

$(FORGE_STAMP): $(STAMP)
	test -x $(FORGE_PY) || $(PY) -m venv $(FORGE_VENV)
	rm -rf $(FORGE_VENV)/base && mkdir $(FORGE_VENV)/base
	base=$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	for f in "$$base"/*; do case "$${f##*/}" in \
		taichi|taichi-*|pip|pip-*|setuptools|setuptools-*|_distutils_hack|*.pth|__editable__*) ;; \
		*) ln -s "$$f" $(FORGE_VENV)/base/ ;; \
	esac; done
	# The base packages, then this checkout (the package is not installed here: on this Python
	# its markers would pull upstream taichi).
	printf '%s\n' "$$(realpath $(FORGE_VENV)/base)" "$(CURDIR)" > \
		"$$($(FORGE_PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/_tipad_base.pth"
	$(FORGE_PY) -m pip install -q -c requirements/constraints.txt taichi-forge taichi-forge-runtime
	touch $(FORGE_STAMP)

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

# Not run again here: the 3.14 resolution (no Taichi in it) and the torch.compile / opcheck
# tests (they check the ops' torch registration, the same code whichever Taichi runs them).
# Known to differ on taichi_forge, left out by name (CHANGELOG): the lean launcher and the
# word-view read check (upstream internals, off on forge by design), and three runtime tests
# whose child processes import upstream `taichi` by name.
FORGE_KNOWN := test_plans_launch_through_the_bound_lean_launcher test_reads_stay_in_the_word_view \
	test_users_taichi_with_default_ip_i64_is_refused_with_the_reason \
	test_users_failed_default_ip_i16_start_leaves_the_kernels_working \
	test_interrupted_first_import_of_taichi_recovers_at_the_next_call
pytest-forge: $(FORGE_STAMP)
	$(FORGE_PY) -m pytest -q -p no:cacheprovider $(KERNEL_TESTS) \
		-k "not test_dependencies_resolve and not compile and not opcheck \
		$(foreach t,$(FORGE_KNOWN),and not $(t))"

# torch.compile and opcheck are left out as in the forge lane: they check the registration.
pytest-vulkan: $(STAMP)
	@if $(HAS_VULKAN) >/dev/null 2>&1; then \
		echo "TIPAD_TEST_ARCH=vulkan pytest $(VULKAN_TESTS)"; \
		TIPAD_TEST_ARCH=vulkan $(PY) -m pytest -q -p no:cacheprovider $(VULKAN_TESTS) \
			-k "not compile and not opcheck" -rs; \
	else \
		echo "pytest-vulkan: SKIPPED: Taichi finds no Vulkan device here" \
			"(apt-get install mesa-vulkan-drivers libvulkan1)"; \
	fi

test: lint typecheck docs pytest pytest-forge pytest-vulkan

bench: $(STAMP)
	$(PY) benchmarks/pad.py

bench-backends: $(STAMP) $(FORGE_STAMP)
	$(PY) benchmarks/backends.py --python taichi_forge=$(FORGE_PY)

clean:
	rm -rf $(VENV) $(FORGE_VENV) out build dist site *.egg-info .pytest_cache .mypy_cache .ruff_cache
