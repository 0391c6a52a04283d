# Two entry points for a fresh machine: `make study` (the main job) and `make test` (the tests).
# Each sets up .venv on first use: CPU torch 2.13.0 first (pip takes it from a local file), then the project.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup study test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

study: setup
	$(VENV)/bin/crossed-rlvr panel

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) scripts/bench_readers.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
