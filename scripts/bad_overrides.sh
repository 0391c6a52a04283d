#!/usr/bin/env bash
# The first line each bad override prints, and how long it takes (all before any stage runs).
#   bash scripts/bad_overrides.sh
set -u
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin}
cd "$(mktemp -d)"
printf '| command | override | exit | seconds | first line |\n|---|---|---|---|---|\n'
while read -r cmd ov; do
  start=$(date +%s.%N)
  out=$("$BIN/$cmd" "$ov" run_dir=bad 2>&1); rc=$?
  end=$(date +%s.%N)
  first=$(printf '%s\n' "$out" | grep -v '^Set the environment\|^$' | head -1)
  printf '| %s | `%s` | %s | %.1f | %s |\n' "$cmd" "$ov" "$rc" "$(echo "$end - $start" | bc)" "${first:0:140}"
done <<'LIST'
crossed-train seed=abc
crossed-study evaluation.samples=many
crossed-eval eval.temperature=hot
crossed-study arms.parallel=two
crossed-study foo=1
crossed-eval experiment=tiny
crossed-study experiment=nope
crossed-train convention=hashh
crossed-study evaluation.requests=[hash,boxd]
crossed-study evaluation.templates=[original,para_c]
crossed-study stages=some
crossed-sft mode=both
crossed-study arms.kind=ppo
crossed-study recipe.group_size=1
crossed-eval samples=0
crossed-study initial.follow_rate=2
crossed-study experiment=qwen2.5-7b-gsm8k-crossed
crossed-study tracking=onlin
LIST
