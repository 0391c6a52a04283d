"""The study's last three stages on a code task (paper 001 App. D.3): every policy writes programs under the code
requests, each program runs in the sandbox, and the code analysis writes its tables and report.

The same run directory as every study (``eval/responses``, ``eval/scores.parquet``, ``analysis/``) and the same
stage cache: a stage runs again only when its inputs changed. What differs from an answer task is each stage's
content: responses are programs (``eval/generate/code.py``), scoring runs them (``eval/score/code.py``: strict
and lenient readers, base and plus tests), and the analysis reports pass@k, γ, gains, coverage and the crossed
interaction of code-convention arms (``analysis/code.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from crossed_rlvr.study.plan import Policy, plain
from crossed_rlvr.study.steps import StudyState, register_steps
from crossed_rlvr.task_sources import CODE
from crossed_rlvr.tasks.code import CodeDataset


def code_task(study: StudyState) -> tuple[CodeDataset, dict[str, Any]]:
    """The study's code dataset and its task config (``evaluation.n_items``: the first N tasks)."""
    from crossed_rlvr.tasks.code import task_dataset

    task = plain(study.cfg.task)
    if study.cfg.evaluation.n_items is not None:
        task["n_items"] = int(study.cfg.evaluation.n_items)
    return task_dataset(task), task


class CodeSteps:
    """Programs generated under the code requests, run in the sandbox, analysed by pass@k and crossed interaction."""

    def evaluate(self, study: StudyState, initial: Policy, arms: list[Policy]) -> dict[str, Any]:
        from crossed_rlvr.eval.generate.code import generate_missing
        from crossed_rlvr.eval.generate.engines import GenParams
        from crossed_rlvr.machine import torch_threads

        ds, task = code_task(study)
        c, layout = study.cfg, study.layout.eval
        policies = {p["name"]: p["path"] for p in study.configs.policies(initial, arms)}
        weights = {name: study.stamps.hash(path) if Path(path).exists() else path for name, path in policies.items()}
        requests = tuple(c.evaluation.requests)
        fp = {"task": task, "dataset_sha256": ds.sha256, "tasks": list(ds.tasks), "requests": list(requests),
              "samples": int(c.evaluation.samples), "eval": plain(c.eval), "weights": weights}

        def run_stage() -> dict[str, Any]:
            g = c.eval
            params = GenParams(float(g.temperature), float(g.top_p), int(g.max_new_tokens), int(g.context_limit))
            with torch_threads(c.evaluation.threads):
                files = generate_missing(policies, layout, ds.tasks, int(c.evaluation.samples), params,
                                         int(g.base_seed), g, str(task["name"]), requests,
                                         settings={"dataset_sha256": ds.sha256}, weights=weights)
            return {"files": len(files), "dataset_sha256": ds.sha256}

        return study.stage("eval", fp, [layout.responses], run_stage)

    def score(self, study: StudyState) -> dict[str, Any]:
        from crossed_rlvr.eval.score.code import score_code
        from crossed_rlvr.records import read_responses

        ds, _task = code_task(study)
        layout = study.layout.eval
        fp = {"responses": study.stamps.hash(layout.responses), "dataset_sha256": ds.sha256}

        def run_stage() -> dict[str, Any]:
            files = sorted(layout.responses.glob("*.jsonl"))
            records = read_responses(files, prompt_names=True).records  # code requests are prompt names to the records
            layout.scores.unlink(missing_ok=True)
            scores = score_code(records, ds, max(1, len(os.sched_getaffinity(0))), None)
            scores.to_parquet(layout.scores, index=False)
            return {"scores": str(layout.scores), "responses": len(scores)}

        return study.stage("score", fp, [layout.scores], run_stage)

    def analyze(self, study: StudyState, arms: list[Policy]) -> dict[str, Any]:
        import pandas as pd

        from crossed_rlvr.analysis.report.code import write_code_analysis
        from crossed_rlvr.analysis.report.folder import replace_folder

        ds, _task = code_task(study)
        a, scores, out = study.cfg.analysis, study.layout.eval.scores, study.layout.analysis
        fp = {"scores": study.stamps.hash(scores), "analysis": plain(a)}

        def run_stage() -> dict[str, Any]:
            def write(folder: Path) -> None:
                write_code_analysis(pd.read_parquet(scores), folder, Path(ds.path).name, int(a.resamples),
                                    int(a.rng_seed), about={"dataset": ds.path, "dataset_sha256": ds.sha256,
                                                            "tasks": list(ds.tasks)})

            replace_folder(out, write)
            return {"report": str(study.layout.report)}

        return study.stage("analyze", fp, [out], run_stage)


register_steps(CODE, CodeSteps())
