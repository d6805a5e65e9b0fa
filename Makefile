# Two commands set a fresh machine up: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO_DB ?= .demo/replaylog-demo.db

.PHONY: demo demo-fresh test lint soak bench bench-smoke bench-instructions postgres postgres-stop clean

# setup.py builds the optional compiled paths (the SQLite store's, the mark writer, the per-slot
# modules compiled by mypyc): a change to their sources rebuilds them.
$(STAMP): pyproject.toml setup.py replaylog/engine/store/sqlite/_speedups.c replaylog/engine/_marks.c \
		replaylog/engine/cursor.py replaylog/engine/worker/run.py replaylog/engine/worker/committer.py
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "replaylog needs Python 3.11 or newer: run make PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	@mkdir -p $(dir $(DEMO_DB))
	$(VENV)/bin/replaylog --db $(DEMO_DB) demo

# The demo seeded afresh: drops what was done in the demo database since.
demo-fresh: $(STAMP)
	@mkdir -p $(dir $(DEMO_DB))
	$(VENV)/bin/replaylog --db $(DEMO_DB) demo --fresh

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

# The suite starts hundreds of Python processes (workers, the command line, doc examples).
# Compiled here once, each loads the package's bytecode; where PYTHONDONTWRITEBYTECODE is
# set, Python writes no cache itself and every process compiles every module it imports
# from source (1.6x the CPU of `import replaylog.cli`).
# Four pytest workers on two cores: most tests spend much of their time waiting on a
# worker subprocess, a commit's fsync or the PostgreSQL server, and two left the CPUs
# idle for ~40% of the run. worksteal: an idle worker takes queued tests from a busy one,
# so a long test at the end does not leave the others idle.
PYTEST_WORKERS ?= 4
# A test still running after this many seconds fails with every thread's stack (pytest-timeout):
# the slowest take ~20 s beside two busy loops, and each wait in a test has its own deadline.
TEST_TIMEOUT ?= 600

test: lint
	$(PY) -m compileall -q replaylog tests bench
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal -q --timeout $(TEST_TIMEOUT)

soak: $(STAMP)
	$(PY) -m pytest -q -m soak tests --soak

bench: $(STAMP)
	$(PY) -m bench

bench-smoke: $(STAMP)
	$(PY) -m bench --smoke

# A local PostgreSQL server (the dev extra's pgserver) in .demo/postgres: prints the URL to use.
postgres: $(STAMP)
	$(PY) -m bench.pg_server start

postgres-stop: $(STAMP)
	$(PY) -m bench.pg_server stop

bench-instructions: $(STAMP)
	$(PY) -m bench.instructions

clean:
	@if [ -x $(PY) ]; then $(PY) -m bench.pg_server stop; fi
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache build
	rm -f replaylog/engine/store/sqlite/_speedups.*.so
