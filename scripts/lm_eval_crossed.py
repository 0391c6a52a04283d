"""A real lm-evaluation-harness run of a study's policies on the shipped tasks, imported, scored and analysed crossed.

lm-eval (from PyPI) loads the initial policy and every arm checkpoint with its own ``hf`` model
(``AutoTokenizer`` / ``AutoModelForCausalLM``) and runs the package's own lm-eval tasks
(``crossed-rlvr lm-eval-tasks``: ``crossed_gsm8k_<request>_<template>``, or ``crossed_math500_...`` for a MATH
study) under both requests, pointed at the study's frozen test items instead of the hub: the local tasks include
the shipped YAMLs and change only where the documents come from, so the prompts, decoding and filters are the
shipped ones (only ``--max-gen-toks`` is the run's). Every sample is logged as ``--log_samples`` does, through
lm-eval's Python API (``simple_evaluate`` and ``EvaluationTracker``), in this one process for every policy.
``crossed-import lm-eval`` reads each policy's output folder under the study's task, ``crossed-score`` scores the
responses, ``crossed-analyze`` finds the crossed pair.

    python scripts/lm_eval_crossed.py RUN_DIR OUT [--limit 8] [--max-gen-toks 48] [--templates original para_a]

RUN_DIR is a finished study (``crossed-study``): its frozen test items and ``stages/arms.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from crossed_rlvr.lm_eval_tasks import REQUESTS, TEMPLATES, hub_row, localize, task_name


def local_tasks(items: list[dict], folder: Path, task: str, templates: list[str]) -> list[str]:
    """The shipped tasks of the dataset the study's task is shaped like, reading the study's items."""
    dataset = "math500" if task.startswith("math") else "gsm8k"
    data = folder / f"{dataset}.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    data.write_text("".join(json.dumps(hub_row(it, dataset)) + "\n" for it in items))
    names = [task_name(dataset, r, t) for r in REQUESTS for t in templates]
    return localize(folder, {dataset: data}, names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--limit", type=int, default=8, help="documents per task")
    parser.add_argument("--max-gen-toks", type=int, default=48, help="the run's budget (the shipped tasks': 640)")
    parser.add_argument("--templates", nargs="+", default=["original"], choices=TEMPLATES, help="request wordings")
    args = parser.parse_args()
    run, out = args.run_dir, args.out
    items_file = next((run / "eval" / "items").glob("*.jsonl"))
    items = [json.loads(x) for x in items_file.read_text().splitlines() if x.strip()]
    task = items_file.stem.rsplit("-", 1)[0]
    arms = json.loads((run / "stages" / "arms.json").read_text())["info"]["arms"]
    policies = {"initial": run / "models" / "initial", **{name: Path(a["path"]) for name, a in sorted(arms.items())}}
    names = local_tasks(items, out / "tasks", task, args.templates)
    # lm-eval's Python API (simple_evaluate with its EvaluationTracker, what the ``lm_eval`` command runs), in this
    # process for every policy, with a task index of the local tasks alone: the command scans the YAML of every
    # built-in task on each start (two thirds of a run at this size), and pays torch's and lm-eval's imports again
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    from crossed_rlvr.analysis.cli import main as analyze
    from crossed_rlvr.eval.ingest.cli import main as import_outputs
    from crossed_rlvr.eval.score.scoring import main as score

    tasks = TaskManager(include_path=str(out / "tasks"), include_defaults=False)
    responses = []
    for policy, path in policies.items():
        slug = policy.replace("/", "_")
        start = time.perf_counter()
        tracker = EvaluationTracker(output_path=str(out / "lm_eval" / slug))
        results = simple_evaluate(model="hf", model_args=f"pretrained={path},dtype=float32", tasks=names,
                                  batch_size=8, device="cpu", limit=args.limit, log_samples=True,
                                  evaluation_tracker=tracker, apply_chat_template=True, task_manager=tasks,
                                  gen_kwargs=f"max_gen_toks={args.max_gen_toks}")
        samples = results.pop("samples")
        tracker.save_results_aggregated(results=results, samples=samples)  # dates the samples files: first
        for name in names:  # --log_samples: one samples_<task>_<time>.jsonl per task, as the command writes
            tracker.save_results_samples(task_name=name, samples=samples[name])
        seconds = time.perf_counter() - start
        target = out / "responses" / f"{slug}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        # one folder per policy, every request and wording in it, the study's task name: the crossing is kept
        check(import_outputs(["lm-eval", str(out / "lm_eval" / slug), "-o", str(target), "--policy", policy,
                              "--task", task]), "crossed-import")
        responses.append(str(target))
        print(f"{policy}: lm-eval {seconds:.1f} s -> {target}", file=sys.stderr)
    scores = out / "scores.parquet"
    check(score([*responses, "-o", str(scores), "--overwrite"]), "crossed-score")
    check(analyze([str(scores), "-o", str(out / "analysis"), "--overwrite", "--resamples", "200", "--no-figures"]),
          "crossed-analyze")
    print(out / "analysis" / "report.md")
    return 0


def check(status: int | None, command: str) -> None:
    if status not in (0, None):
        raise SystemExit(f"{command} ended with status {status}")


if __name__ == "__main__":
    raise SystemExit(main())
