# make install: build .venv (keeps an importable torch, else installs $(TORCH) first so pip never
#               pulls a CUDA build), then the package in editable mode.
# make test:    install + test extras, then the layer contracts (lint-imports, pyproject.toml), ruff (RUFF=0
#               skips it), and the whole pytest suite on PYTEST_WORKERS processes (pytest-xdist; what .ci/run calls).
# make test-fast: the same checks without the tests marked `slow` (real training runs, recipes): the edit loop.
# make demo:    the quick start on the embedded toy corpus (examples/toy/demo.sh).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2
# the tree is ruff-clean (pyproject.toml's rules); RUFF=0 skips the lint for a quick local run
RUFF ?= 1

.PHONY: install test test-fast lint demo clean

install:
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install "$(TORCH)"
	$(PIP) install -q -e .

lint: install
	$(PIP) install -q -e ".[test]"
	$(VENV)/bin/lint-imports --no-logo
ifeq ($(RUFF),1)
	$(VENV)/bin/ruff check .
endif

test: lint
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) $(PYTEST_ARGS) tests

test-fast: lint
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) -m "not slow" $(PYTEST_ARGS) tests

demo: install
	PATH="$(abspath $(VENV))/bin:$$PATH" bash examples/toy/demo.sh

clean:
	rm -rf demo build dist *.egg-info .import_linter_cache .ruff_cache
