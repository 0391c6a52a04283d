"""A kind of task is a registration, not an edit of the study: a source registered in crossed_rlvr/task_sources.py
with its own kind, and that kind's evaluate, score and analyze steps registered in study/steps.py, run through the
same pipeline, stage cache and run directory (here a toy kind whose "evaluation" counts words in each policy's
config, over a given initial policy and another study's arms)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from crossed_rlvr.conf.checks import check_command
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.policies.tiny import build_tiny_model
from crossed_rlvr.study.pipeline import Study
from crossed_rlvr.study.plan import Policy
from crossed_rlvr.study.steps import STEPS, StudyState, register_steps
from crossed_rlvr.task_sources import SOURCES, TaskSource, kind_of, register_source
from tests.helpers import SMALL, study_cfg


class ToySteps:
    """Each policy's config file read as its 'response'; the score is its size; the analysis a one-line report."""

    def evaluate(self, study: StudyState, initial: Policy, arms: list[Policy]) -> dict[str, Any]:
        out = study.layout.eval.responses
        policies = [initial, *arms]

        def run() -> dict[str, Any]:
            out.mkdir(parents=True, exist_ok=True)
            for p in policies:
                text = (Path(p.path) / "config.json").read_text()
                (out / f"{p.name.replace('/', '_')}.json").write_text(json.dumps({"policy": p.name, "seed": p.seed,
                                                                                   "words": len(text.split())}))
            return {"cells": len(policies)}

        return study.stage("eval", {"policies": [p.record() for p in policies]}, [out], run)

    def score(self, study: StudyState) -> dict[str, Any]:
        responses, scores = study.layout.eval.responses, study.layout.eval.scores

        def run() -> dict[str, Any]:
            rows = [json.loads(f.read_text()) for f in sorted(responses.glob("*.json"))]
            scores.write_text(json.dumps(rows))
            return {"responses": len(rows)}

        return study.stage("score", {"responses": study.stamps.hash(responses)}, [scores], run)

    def analyze(self, study: StudyState, arms: list[Policy]) -> dict[str, Any]:
        scores, report = study.layout.eval.scores, study.layout.report

        def run() -> dict[str, Any]:
            rows = json.loads(scores.read_text())
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(f"# toy\n\n{len(rows)} policies, {sum(r['words'] for r in rows)} words\n")
            return {"report": str(report)}

        return study.stage("analyze", {"scores": study.stamps.hash(scores)}, [report.parent], run)


@pytest.fixture
def toy_kind():
    register_source(TaskSource("toy_words", kind="toy"))
    register_steps("toy", ToySteps())
    yield
    SOURCES.pop("toy_words")
    STEPS.pop("toy")


def test_a_registered_task_kind_runs_through_the_study(tmp_path, toy_kind):
    model = build_tiny_model(tmp_path / "initial", SMALL)
    source = RunLayout(tmp_path / "trained")  # another study's arms, at their final update (arms.kind=given)
    for conv in ("hash", "boxed"):
        shutil.copytree(model, source.arm(conv, 83).checkpoint(2))
    cfg = study_cfg(tmp_path / "run", "experiment=smoke", "task.source=toy_words", "task.name=toy",
                    "initial.build=given", "model.source=local", f"model.path={model}", "arms.kind=given",
                    f"arms.from_run={source.root}", "recipe.updates=2", "arms.seeds=[83]", "tracking=off")
    check_command("crossed-study", cfg)  # the registered source passes the study's checks
    assert kind_of(cfg.task) == "toy"
    summary = Study(cfg).run_all()
    assert [name for name, t in summary["stages"].items() if not t["reused"]] == [
        "initial", "arms", "eval", "score", "analyze"]
    assert (tmp_path / "run" / "analysis" / "report.md").read_text().startswith("# toy\n\n3 policies, ")
    again = Study(cfg).run_all()  # the same stage cache as every kind: nothing redone
    assert all(t["reused"] for t in again["stages"].values())


def test_a_kind_without_steps_is_refused_by_name(tmp_path):
    register_source(TaskSource("toy_nosteps", kind="nosteps"))
    try:
        cfg = study_cfg(tmp_path / "run", "experiment=smoke", "task.source=toy_nosteps", "task.name=toy")
        with pytest.raises(ValueError, match=r"task\.source=toy_nosteps: its kind 'nosteps' registered no study steps"):
            Study(cfg)
    finally:
        SOURCES.pop("toy_nosteps")


def test_every_benchmark_loader_is_a_registered_source():
    """paper 000's benchmarks (tasks/choice.py) are sources like any other, so the config check accepts each."""
    from crossed_rlvr.tasks.choice import LOADERS

    assert set(LOADERS) <= set(SOURCES)
    assert all(SOURCES[name].items == "crossed_rlvr.tasks.build:benchmark_items" for name in LOADERS)
