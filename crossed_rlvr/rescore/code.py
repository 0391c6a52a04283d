"""``crossed-rescore code``: samples made elsewhere, scored by execution in the sandbox, in EvalPlus's own shapes.

    crossed-rescore code --dataset HumanEvalPlus.jsonl.gz --samples samples.jsonl

The samples file is EvalPlus's (and HumanEval's): JSON Lines with ``task_id`` and either ``solution`` (the whole
program) or ``completion`` (what follows the prompt), in any order, several per task. The result is written
beside it as ``<stem>_eval_results.json`` in the shape ``evalplus.evaluate`` writes (``eval[task_id]``: one entry
per sample in file order with ``base_status``, ``plus_status``, ``base_fail_tests``, ``plus_fail_tests``), so an
EvalPlus run compares line by line; it adds ``pass_at_k`` (base and plus, EvalPlus's k of 1, 10 and 100 that
every task has samples for), the dataset's sha256, and per entry ``crossed`` (our status of each part, which tells
a timeout and an out-of-memory apart from a failure). An existing result file is never overwritten.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.files import atomic_write_json, json_lines
from crossed_rlvr.limits import Parser, add_number

if TYPE_CHECKING:
    from crossed_rlvr.eval.score.execution import Verdict


class SamplesError(CrossedError, ValueError):
    pass


def read_samples(path: Path, tasks: dict[str, Any]) -> list[dict[str, Any]]:
    """Each sample's task id and program, in file order; a bad line is refused with the file, line and field."""
    out = []
    for row, where in json_lines(path, SamplesError):
        at = f"{where.path}:{where.line}"
        if not isinstance(row, dict):
            raise SamplesError(f"{at}: a sample is a JSON object")
        if "task_id" not in row:
            raise SamplesError(f"{at}: missing field 'task_id'")
        tid = str(row["task_id"])
        if tid not in tasks:
            raise SamplesError(f"{at}: field 'task_id': {tid!r} is not a task of the dataset")
        if "solution" in row:
            if not isinstance(row["solution"], str):
                raise SamplesError(f"{at}: field 'solution' must be a string")
            program = row["solution"]
        elif "completion" in row:
            if not isinstance(row["completion"], str):
                raise SamplesError(f"{at}: field 'completion' must be a string")
            program = tasks[tid].prompt + row["completion"]
        else:
            raise SamplesError(f"{at}: a sample needs 'solution' or 'completion'")
        out.append({"task_id": tid, "solution": program, "line": where.line})
    if not out:
        raise SamplesError(f"{path}: no samples")
    return out


def _jsonable(x: object) -> object:
    if isinstance(x, (list, tuple)):
        return [_jsonable(i) for i in x]
    if isinstance(x, (set, frozenset)):
        return [_jsonable(i) for i in x]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, complex):
        return str(x)
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return x


def _fail_tests(v: Verdict, inputs: list[Any]) -> list[Any]:
    """EvalPlus's fast check reports the one input it stopped on (none when the part passed)."""
    if v.evalplus == "pass" or v.evalplus is None:
        return []
    k = v.passed if v.evalplus == "fail" else v.passed - 1
    return [_jsonable(inputs[k])] if 0 <= k < len(inputs) else []


def pass_at_ks(counts: dict[str, tuple[int, int]]) -> dict[str, float]:
    """EvalPlus's summary: pass@k (Eq. 11) averaged over tasks, for k of 1, 10 and 100 that every task reaches."""
    from crossed_rlvr.analysis.coverage import pass_at_k_items

    n = np.array([a for a, _ in counts.values()])
    c = np.array([b for _, b in counts.values()])
    return {f"pass@{k}": float(pass_at_k_items(c, n, k).mean()) for k in (1, 10, 100) if len(n) and n.min() >= k}


def _evalplus_hash(path: Path) -> str:
    """EvalPlus's own dataset hash: the md5 of the decompressed file."""
    from crossed_rlvr.tasks.code import dataset_bytes

    return hashlib.md5(dataset_bytes(path)).hexdigest()


def score_samples(dataset: str, samples: str, out: str | None = None, slots: int = 2,
                  cache_dir: str | None = None, progress: bool = True) -> Path:
    from tqdm import tqdm

    from crossed_rlvr.eval.score.execution import Executor
    from crossed_rlvr.sandbox.bwrap import Sandbox
    from crossed_rlvr.tasks.code import load_code_dataset

    sample_path = Path(samples)
    target = Path(out) if out else sample_path.with_name(sample_path.stem + "_eval_results.json")
    if target.exists():
        raise SamplesError(f"{target} exists: results are never overwritten (move it away, or give -o)")
    ds = load_code_dataset(dataset)
    rows = read_samples(sample_path, ds.tasks)
    with Sandbox(slots=slots) as box:
        executor = Executor(ds, box, Path(cache_dir) if cache_dir else None)
        with tqdm(total=2 * len(rows), desc="crossed-rescore code", unit="part", disable=not progress) as bar:
            verdicts = executor.score([(r["task_id"], r["solution"]) for r in rows], progress=bar.update)
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    counts: dict[str, dict[str, list[int]]] = {"base": defaultdict(lambda: [0, 0]), "plus": defaultdict(lambda: [0, 0])}
    for row, v in zip(rows, verdicts):
        tid = row["task_id"]
        results[tid].append({
            "task_id": tid, "solution": row["solution"],
            "base_status": v["base"].evalplus, "plus_status": v["plus"].evalplus,
            "base_fail_tests": _fail_tests(v["base"], executor.inputs(tid, "base")),
            "plus_fail_tests": _fail_tests(v["plus"], executor.inputs(tid, "plus")),
            "crossed": {"line": row["line"], "base": v["base"].as_dict(), "plus": v["plus"].as_dict()}})
        for part, ok in (("base", v["base"].status == "pass"),
                         ("plus", v["base"].status == "pass" and v["plus"].status == "pass")):
            counts[part][row["task_id"]][0] += 1
            counts[part][row["task_id"]][1] += ok
    doc = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
           "hash": _evalplus_hash(Path(dataset)),
           "dataset_sha256": ds.sha256, "dataset": str(dataset), "samples": str(sample_path),
           "eval": dict(results),
           "pass_at_k": {part: pass_at_ks({t: (a, b) for t, (a, b) in counts[part].items()}) for part in counts},
           "tasks_scored": len(results), "tasks_in_dataset": len(ds.tasks)}
    atomic_write_json(target, doc)
    return target


def main(argv: list[str]) -> int:
    parser = Parser(prog="crossed-rescore code", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="EvalPlus dataset file (.jsonl or .jsonl.gz)")
    parser.add_argument("--samples", required=True, help="EvalPlus samples (.jsonl: task_id + solution/completion)")
    parser.add_argument("-o", "--out", default=None, help="result file (default: <samples stem>_eval_results.json)")
    add_number(parser, "--slots", 1, 256, default=2, help="samples run at once, each under its own uid")
    parser.add_argument("--cache", default=None, help="expected outputs' cache (default ~/.cache/crossed-rlvr/code-oracle)")
    args = parser.parse_args(argv)
    target = score_samples(args.dataset, args.samples, args.out, args.slots, args.cache)
    doc = json.loads(target.read_text())
    for part, label in (("base", "base tests"), ("plus", "base + extra tests")):
        shown = ", ".join(f"{k} {v:.4f}" for k, v in doc["pass_at_k"][part].items())
        print(f"{label}: {shown}")
    print(target)
    return 0

