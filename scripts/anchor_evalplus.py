#!/usr/bin/env python
"""Our execution scoring against EvalPlus 0.3.1's own, sample by sample, and the time each takes.

    python scripts/anchor_evalplus.py --out /tmp/anchor [--mutants 2] [--runs 3] [--evalplus-venv /tmp/epvenv]

Samples: every HumanEval+ v0.1.10 canonical solution, plus ``--mutants`` single-point mutants of each (an
arithmetic, comparison, boolean or constant change, chosen by a fixed seed; mutants that only reformat are
dropped), written as one EvalPlus samples file. The same file is scored by ``crossed-rescore code`` (the sandbox)
and by ``evalplus.evaluate`` 0.3.1 in a throw-away venv (created with pip when missing; EvalPlus reads our shipped
dataset through ``HUMANEVAL_OVERRIDE_PATH``, so it downloads nothing), both with 2 workers. Prints the agreement of
the base and plus statuses, every disagreement, and the wall time of each scorer (expected outputs computed
before either is timed; each scorer timed ``--runs`` times, alternating, and the median reported). Needs the
network only to install EvalPlus.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from crossed_rlvr.tasks.code import HUMANEVAL_PLUS, load_code_dataset

SWAPS: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
                           ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                           ast.NotEq: ast.Eq, ast.And: ast.Or, ast.Or: ast.And, ast.Mod: ast.FloorDiv}


def sites(tree: ast.AST) -> list[tuple[ast.AST, str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.BoolOp)) and type(node.op) in SWAPS:
            found.append((node, "op", 0))
        elif isinstance(node, ast.Compare):
            found += [(node, "cmp", k) for k, op in enumerate(node.ops) if type(op) in SWAPS]
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            found.append((node, "const", 0))
    return found


def mutate(program: str, rng: random.Random, n: int) -> list[str]:
    base = ast.unparse(ast.parse(program))
    out: list[str] = []
    candidates = list(range(len(sites(ast.parse(program)))))
    rng.shuffle(candidates)
    for pick in candidates:
        tree = ast.parse(program)
        node, kind, k = sites(tree)[pick]
        if kind == "op":
            node.op = SWAPS[type(node.op)]()
        elif kind == "cmp":
            node.ops[k] = SWAPS[type(node.ops[k])]()
        else:
            node.value += 1
        text = ast.unparse(tree)
        if text != base and text not in out:
            out.append(text)
        if len(out) == n:
            break
    return out


def evalplus_python(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "evalplus==0.3.1"], check=True)
    return py


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--mutants", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evalplus-venv", type=Path, default=Path("/tmp/evalplus-0.3.1"))
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each scorer; the median is reported")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ds = load_code_dataset()
    rows = []
    for k, (tid, task) in enumerate(ds.tasks.items()):
        rows.append({"task_id": tid, "solution": task.reference})
        for text in mutate(task.reference, random.Random(args.seed * 1000 + k), args.mutants):
            rows.append({"task_id": tid, "solution": text})
    for name in ("ours", "evalplus"):
        (args.out / name).mkdir(exist_ok=True)
        (args.out / name / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (args.out / name / "samples_eval_results.json").unlink(missing_ok=True)
    print(f"{len(rows)} samples ({len(ds.tasks)} canonical, {len(rows) - len(ds.tasks)} mutants)")

    # expected outputs first, so that neither timing includes them
    plain = args.out / "HumanEvalPlus-v0.1.10.jsonl"
    plain.write_bytes(gzip.decompress(HUMANEVAL_PLUS.read_bytes()))
    env = {**os.environ, "HUMANEVAL_OVERRIDE_PATH": str(plain)}
    py = evalplus_python(args.evalplus_venv)
    warm = args.out / "warm"
    warm.mkdir(exist_ok=True)
    (warm / "samples.jsonl").write_text("".join(json.dumps({"task_id": t, "solution": ds.tasks[t].reference}) + "\n"
                                                for t in ds.tasks))
    (warm / "samples_eval_results.json").unlink(missing_ok=True)
    subprocess.run([str(py), "-m", "evalplus.evaluate", "--dataset", "humaneval", "--samples",
                    str(warm / "samples.jsonl"), "--parallel", str(args.parallel)], env=env, check=True,
                   capture_output=True)
    shutil.rmtree(warm)
    from crossed_rlvr.eval.score.execution import expected_outputs
    from crossed_rlvr.sandbox.bwrap import Sandbox

    with Sandbox(slots=args.parallel) as box:
        expected_outputs(ds, box)

    ours_times, theirs_times = [], []
    for _ in range(args.runs):  # alternating, so a slow spell of the machine costs both alike
        for name in ("ours", "evalplus"):
            (args.out / name / "samples_eval_results.json").unlink(missing_ok=True)  # EvalPlus reuses one
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "crossed_rlvr.rescore.cli", "code", "--dataset", str(HUMANEVAL_PLUS),
                        "--samples", str(args.out / "ours" / "samples.jsonl"), "--slots", str(args.parallel)],
                       check=True, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        ours_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run([str(py), "-m", "evalplus.evaluate", "--dataset", "humaneval", "--samples",
                        str(args.out / "evalplus" / "samples.jsonl"), "--parallel", str(args.parallel)], env=env,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        theirs_times.append(time.perf_counter() - start)
    ours_s, theirs_s = statistics.median(ours_times), statistics.median(theirs_times)

    ours = json.loads((args.out / "ours" / "samples_eval_results.json").read_text())["eval"]
    theirs = json.loads((args.out / "evalplus" / "samples_eval_results.json").read_text())["eval"]
    agree, differ = Counter(), []
    for tid in ds.tasks:
        for k, (a, b) in enumerate(zip(ours[tid], theirs[tid], strict=True)):
            assert a["solution"] == b["solution"]
            for part in ("base", "plus"):
                same = a[f"{part}_status"] == b[f"{part}_status"]
                agree[(part, same)] += 1
                if not same:
                    differ.append({"task_id": tid, "sample": k, "part": part, "ours": a[f"{part}_status"],
                                   "evalplus": b[f"{part}_status"], "crossed": a["crossed"][part]})
    n = len(rows)
    summary = {"samples": n, "mutants": n - len(ds.tasks),
               "base_agree": agree[("base", True)], "plus_agree": agree[("plus", True)],
               "ours_pass_base": sum(e["base_status"] == "pass" for v in ours.values() for e in v),
               "evalplus_pass_base": sum(e["base_status"] == "pass" for v in theirs.values() for e in v),
               "ours_pass_plus": sum(e["plus_status"] == "pass" for v in ours.values() for e in v),
               "evalplus_pass_plus": sum(e["plus_status"] == "pass" for v in theirs.values() for e in v),
               "ours_s": round(ours_s, 1), "evalplus_s": round(theirs_s, 1),
               "ours_runs_s": [round(t, 1) for t in ours_times], "evalplus_runs_s": [round(t, 1) for t in theirs_times],
               "disagreements": differ}
    (args.out / "anchor.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "disagreements"}, indent=1))
    for d in differ:
        print("DIFFER", json.dumps(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
