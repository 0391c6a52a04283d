#!/usr/bin/env bash
# One-GPU smoke test of the GPU path (crossed_rlvr/study/smoke.py says what it runs); no network needed.
#   scripts/gpu_smoke.sh MODEL_DIR DATA_DIR [RUN_DIR] [hydra overrides ...] [--dry-run]
# One PASS/FAIL line per stage; exits non-zero on the first failure.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
[ -x "$py" ] || py=$(command -v python3)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export WANDB_MODE=${WANDB_MODE:-offline}
exec "$py" -m crossed_rlvr.study.smoke "$@"
