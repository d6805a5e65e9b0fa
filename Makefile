# Two commands set a fresh machine up: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO_DB ?= .demo/replaylog-demo.db

.PHONY: demo test lint soak bench bench-smoke bench-instructions clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "replaylog needs Python 3.11 or newer: run make PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	@mkdir -p $(dir $(DEMO_DB))
	$(VENV)/bin/replaylog --db $(DEMO_DB) demo

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -n 2 -q

soak: $(STAMP)
	$(PY) -m pytest -q -m soak tests --soak

bench: $(STAMP)
	$(PY) -m bench

bench-smoke: $(STAMP)
	$(PY) -m bench --smoke

bench-instructions: $(STAMP)
	$(PY) -m bench.instructions

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache
