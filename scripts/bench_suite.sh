#!/usr/bin/env bash
# The test suite's time as a new user meets it: `make test` in a fresh clone of this checkout's HEAD with its
# own .venv, timed as a whole and per test (pytest's 25 slowest, printed by every run).
#
#   scripts/bench_suite.sh [--runs N] [--cold] [--busy] [--out DIR]
#
#   --runs N  N runs in a row in the same clone (the first sets up .venv; a flake shows as a failed run)
#   --cold    nothing cached: HOME is an empty folder, so pip's cache, the vLLM CPU environment
#             (~/.cache/crossed-rlvr), DeepSpeed's compiled op and Hugging Face's caches are built anew
#             (system packages such as Debian's chromium stay installed)
#   --busy    one core held busy by another process (`yes`) for the whole run
#
# Writes DIR/run-K.log (default /tmp/crossed-bench-suite) and prints one line per run: exit status, the
# command's wall time and pytest's own summary line; then where the run's time went (DIR/timeline-K, summed up
# by scripts/suite_timeline.py into DIR/timeline-K.txt: each worker's busy time, each group's, the costliest tests).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
runs=1 cold=0 busy=0 out=/tmp/crossed-bench-suite
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --cold) cold=1; shift ;;
    --busy) busy=1; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_suite.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
rm -rf "$out"
mkdir -p "$out"
git clone --quiet "$here" "$out/clone"
env_home=$HOME
if [ "$cold" = 1 ]; then env_home=$out/home; mkdir -p "$env_home"; fi
hog=
if [ "$busy" = 1 ]; then yes >/dev/null & hog=$!; fi
trap '[ -n "$hog" ] && kill "$hog" 2>/dev/null || true' EXIT
for k in $(seq 1 "$runs"); do
  start=$(date +%s)
  set +e
  (cd "$out/clone" && HOME=$env_home CROSSED_SUITE_TIMELINE=$out/timeline-$k make test) >"$out/run-$k.log" 2>&1
  code=$?
  set -e
  took=$(( $(date +%s) - start ))
  summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$out/run-$k.log" | tail -1 | sed 's/=//g')
  printf 'run %d: exit %d, make test %dm%02ds, pytest:%s\n' "$k" "$code" $((took / 60)) $((took % 60)) "$summary"
  if [ -d "$out/timeline-$k" ]; then
    "$out/clone/.venv/bin/python" "$here/scripts/suite_timeline.py" "$out/timeline-$k" >"$out/timeline-$k.txt" || true
  fi
done
