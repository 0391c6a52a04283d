#!/usr/bin/env bash
# Regenerate locks/gpu-py312.txt, the GPU stack `pip install -e '.[gpu]'` resolves to (verl 0.9.1's vllm
# extra: vllm 0.24.0, torch 2.11.0, transformers 5.9.0), and check that it resolves with wheels only
# (antlr4-python3-runtime, hydra's pure-Python parser runtime, ships only as a source archive).
# Needs uv (pip install uv) and the package index; tests/test_install.py checks the lock against pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
target=(--extra gpu --python-platform x86_64-manylinux_2_31 --python-version 3.12)
uv pip compile pyproject.toml "${target[@]}" --no-header -o locks/gpu-py312.txt --quiet
sed -i '1i # GPU stack of crossed-rlvr (Linux x86_64, Python 3.12): made by scripts/lock_gpu.sh with\n#   uv pip compile pyproject.toml --extra gpu --python-platform x86_64-manylinux_2_31 --python-version 3.12' locks/gpu-py312.txt
wheels=()
# deepspeed ships only as a source archive too (its metadata is static: uv resolves it without building)
for name in $(grep -oE '^[A-Za-z0-9_.-]+==' locks/gpu-py312.txt | sed 's/==//' | grep -vE '^(antlr4-python3-runtime|deepspeed)$'); do
  wheels+=(--only-binary "$name")
done
for v in 3.11 3.12; do
  uv pip compile pyproject.toml --extra gpu --python-platform x86_64-manylinux_2_31 --python-version "$v" \
    "${wheels[@]}" --quiet -o /dev/null && echo "Python $v: resolves with wheels only"
done
grep -E '^(verl|vllm|torch|transformers|trl)==' locks/gpu-py312.txt
