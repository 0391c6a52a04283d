#!/usr/bin/env bash
# Regenerate locks/cpu-py311.txt: the exact CPU stack `make setup` installs (torch 2.13.0 CPU build,
# DeepSpeed 0.19.8, the project's dependencies and its dev extra (which holds train and verl), frozen from a .venv that passed
# `make test`. make setup installs it with --no-deps, so the environment is this list and nothing else;
# tests/test_install.py checks that it satisfies pyproject.toml and that the .venv is exactly it.
#   scripts/lock_cpu.sh [VENV]   (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
py=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
out=locks/cpu-py${py/./}.txt
{
  echo "# CPU stack of crossed-rlvr (Linux x86_64, Python $py): made by scripts/lock_cpu.sh from a .venv that"
  echo "# passed make test; scripts/setup_cpu.sh installs it with pip --no-deps: torch's +cpu build from pip's own"
  echo "# configuration or PyTorch's CPU index (TORCH_INDEX), every other line from PyPI."
  "$venv/bin/python" -m pip freeze --exclude-editable | grep -vE '^(pip|setuptools|wheel)==' | LC_ALL=C sort -f
} > "$out"
echo "$out: $(grep -c '==' "$out") pins"
