"""The study's last three stages on a code task (paper 001 App. D.3): every policy writes programs under the code
requests, each program runs in the sandbox, and the code analysis writes its tables and report.

The same run directory as every study (``eval/responses``, ``eval/scores.parquet``, ``analysis/``) and the same
stage cache: a stage runs again only when its inputs changed. The eval stage is the answer tasks' own (crossed-eval's
cells; the code kind's prompts in ``tasks/code.py``); what differs is the content of the last two: scoring runs the
programs (``eval/score/code.py``: strict and lenient readers, base and plus tests), and the analysis reports pass@k,
γ, gains, coverage and the crossed interaction of code-convention arms (``analysis/code.py``).
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from crossed_rlvr.files import settings
from crossed_rlvr.fingerprint import Read
from crossed_rlvr.study.plan import Policy
from crossed_rlvr.study.steps import StepState, StudyState, register_steps
from crossed_rlvr.task_sources import CODE
from crossed_rlvr.tasks.code import CodeDataset


def code_task(state: StepState) -> tuple[CodeDataset, dict[str, Any]]:
    """The run's code dataset and its task config (``evaluation.n_items``: the first N tasks)."""
    import dataclasses

    from crossed_rlvr.tasks.code import task_dataset

    task = state.cfg.task
    if state.cfg.evaluation.n_items is not None:
        task = dataclasses.replace(task, n_items=int(state.cfg.evaluation.n_items))
    return task_dataset(task), settings(task)


class CodeSteps:
    """Programs generated under the code requests, run in the sandbox, analysed by pass@k and crossed interaction.

    ``slots``: sandbox runs at once (default: every core this process may use); ``oracle_cache``: where the
    canonical solutions' expected outputs are kept (default: the user's cache)."""

    def __init__(self, slots: int | None = None, oracle_cache: Path | None = None) -> None:
        self.slots = slots
        self.oracle_cache = oracle_cache
        # each run's dataset, read (and its sha256 taken) once for its three steps
        self._datasets: weakref.WeakKeyDictionary[Any, tuple[CodeDataset, dict[str, Any]]] = (
            weakref.WeakKeyDictionary())

    def dataset(self, state: StepState) -> tuple[CodeDataset, dict[str, Any]]:
        if state not in self._datasets:
            self._datasets[state] = code_task(state)
        return self._datasets[state]

    def evaluate(self, study: StudyState, initial: Policy, arms: list[Policy]) -> dict[str, Any]:
        """Every policy's programs under every code request, ``evaluation.samples`` each: the cells of crossed-eval,
        as an answer task's (``answer_steps.evaluate_cells``)."""
        from crossed_rlvr.study.answer_steps import evaluate_cells

        return evaluate_cells(study, initial, arms)

    def score(self, study: StepState) -> dict[str, Any]:
        from crossed_rlvr.eval.score.scoring import score_run

        ds, _task = self.dataset(study)
        layout = study.layout.eval
        fp = {"responses": Read(str(layout.responses)), "dataset_sha256": ds.sha256}

        def run_stage() -> dict[str, Any]:
            import pyarrow.parquet as pq

            layout.scores.unlink(missing_ok=True)
            score_run(layout.root, layout.scores, self.slots, overwrite=True, oracle_cache=self.oracle_cache)
            return {"scores": str(layout.scores), "responses": pq.read_metadata(layout.scores).num_rows}

        return study.stage("score", fp, [layout.scores], run_stage)

    def analyze(self, study: StepState, arms: list[Policy]) -> dict[str, Any]:
        import pandas as pd

        from crossed_rlvr.analysis.report.code import write_code_analysis
        from crossed_rlvr.analysis.report.folder import replace_folder

        ds, _task = self.dataset(study)
        a, scores, out = study.cfg.analysis, study.layout.eval.scores, study.layout.analysis
        fp = {"scores": Read(str(scores)), "analysis": a}

        def run_stage() -> dict[str, Any]:
            def write(folder: Path) -> None:
                write_code_analysis(pd.read_parquet(scores), folder, Path(ds.path).name, int(a.resamples),
                                    int(a.rng_seed), about={"dataset": ds.path, "dataset_sha256": ds.sha256,
                                                            "tasks": list(ds.tasks)})

            replace_folder(out, write)
            return {"report": str(study.layout.report)}

        return study.stage("analyze", fp, [out], run_stage)


register_steps(CODE, CodeSteps())
