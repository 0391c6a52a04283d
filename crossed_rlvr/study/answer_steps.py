"""The last three stages on an answer task (arithmetic, GSM8K, MATH500; paper 001 §2-§3): every policy under every
request and wording (``crossed-eval``), every response scored by the fixed reader panel, and the crossed analysis
with the arms' training curves and, for a study that validated during training, the interactions over training.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from crossed_rlvr.files import settings
from crossed_rlvr.fingerprint import Read
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.machine import torch_threads
from crossed_rlvr.numerics import recorded
from crossed_rlvr.study import arms as arm_jobs
from crossed_rlvr.study.plan import Policy, eval_fingerprint
from crossed_rlvr.study.sections import study_sections
from crossed_rlvr.study.steps import StudyState, register_steps
from crossed_rlvr.task_sources import ANSWER
from crossed_rlvr.tracking import untracked


def evaluate_cells(study: StudyState, initial: Policy, arms: list[Policy]) -> dict[str, Any]:
    """The eval stage of every task kind: ``crossed-eval``'s cells (every policy under every request and wording;
    a code task's programs under the code requests), resumed cell by cell, on Ray workers where the study says."""
    eval_cfg = study.configs.evaluation(initial, arms)
    policies = study.configs.policies(initial, arms)
    # what ran: an unset device or dtype as resolved; the policies by their weights, below
    spec = {**untracked(settings(dataclasses.replace(eval_cfg, policies=None))), "eval": eval_fingerprint(eval_cfg.eval)}
    if study.cfg.evaluation.threads is not None:  # sums in another order: other samples
        spec["threads"] = int(study.cfg.evaluation.threads)
    # each policy by its weights, not its folder: the same weights moved elsewhere are the same policy
    fp = {"eval": spec, "weights": {p.name: Read.weights(p.path) for p in policies},
          "policies": [p.identity() for p in policies]}

    responses = study.layout.eval.responses
    made_with = {**recorded(), **({"threads": spec["threads"]} if "threads" in spec else {})}

    def run() -> dict[str, Any]:
        from crossed_rlvr.eval.generate.runner import run_eval

        before = remake_if_made_otherwise(study, made_with)
        # cells whose records predate their numerics were made with what the stage recorded (eval/generate/plan.py)
        cfg = eval_cfg if before is None else dataclasses.replace(eval_cfg,
                                                                  numerics_before=before.get("numerics", "native"))
        # a cell edited or truncated by hand since: crossed-eval makes it again (each cell's record keeps its
        # file's sha256, eval/generate/plan.py), the others are reused
        with torch_threads(study.cfg.evaluation.threads):
            summary = run_eval(cfg)
        return {"cells": len(summary)}

    return study.stage("eval", fp, [responses], run)


def remake_if_made_otherwise(study: StudyState, made_with: dict[str, Any]) -> dict[str, Any] | None:
    """Remove the cells sampled under other CPU numerics or torch threads than the eval stage's now (``made_with``):
    the stage's fingerprint holds both, while a cell's settings record (eval/generate/plan.py) holds the numerics
    alone, so crossed-eval would reuse a cell made with other threads and refuse one made with other numerics (a
    study passes no ``overwrite``). What they were made with is
    ``layout.eval.made_with``, written before the first cell (so a remake that is interrupted resumes), else, for a
    folder that has none, what the eval stage's stamp recorded. Returns that record (None: neither exists)."""
    import shutil

    from crossed_rlvr.files import atomic_write_json

    ev = study.layout.eval
    if ev.made_with.exists():
        before: dict[str, Any] | None = json.loads(ev.made_with.read_text())
    else:
        stamp = study.stamps.read("eval")
        inputs = stamp.get("inputs", {}) if stamp is not None else None
        before = None if inputs is None else {
            **({"numerics": inputs["numerics"]} if "numerics" in inputs else {}),
            **({"threads": inputs["eval"]["threads"]} if "threads" in inputs.get("eval", {}) else {})}
    if before is not None and before != made_with and ev.responses.exists():
        was, now = ({"numerics": "native", **made} for made in (before, made_with))  # numerics unrecorded: native
        moved = ", ".join(f"{k}: {was.get(k)} -> {now.get(k)}" for k in sorted({*was, *now}) if was.get(k) != now.get(k))
        study.say(f"    eval: every cell made again ({moved})")
        shutil.rmtree(ev.responses)
    ev.root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(ev.made_with, made_with)
    return before


class AnswerSteps:
    # ------------------------------------------------------------------ 3. crossed evaluation
    def evaluate(self, study: StudyState, initial: Policy, arms: list[Policy]) -> dict[str, Any]:
        return evaluate_cells(study, initial, arms)

    # ------------------------------------------------------------------ 4. scores
    @staticmethod
    def validation_dirs(study: StudyState) -> list[Path]:
        """Response folders of the arms' crossed validation during training: TRL writes crossed-eval cells
        (``validation.every`` > 0); verl dumps ``{step}.jsonl`` into ``validation/``, which are imported
        here, every step as ``<arm>@step<K>`` (``crossed-import verl --all-steps``)."""
        if study.cfg.arms.kind != "grpo":
            return []
        if study.cfg.engine.name == "verl":
            for plan in study.plans:
                arm_jobs.import_verl_validation(plan, study.stamps, str(study.cfg.task.name), study.say)
        dirs = [plan.layout.validation_eval.responses for plan in study.plans]
        return [d for d in dirs if d.is_dir() and any(d.glob("*.jsonl"))]

    def score(self, study: StudyState) -> dict[str, Any]:
        ev = study.layout.eval
        out, vout = ev.scores, ev.validation_scores
        vdirs = self.validation_dirs(study)
        fp: dict[str, Any] = {"responses": Read(str(ev.responses))}
        if vdirs:  # one scores table of every arm's validation steps, for the interactions over training
            fp["validation"] = {str(d.relative_to(study.layout.root)): Read(str(d)) for d in vdirs}

        def run() -> dict[str, Any]:
            from crossed_rlvr.eval.score.scoring import score_files, score_run

            out.unlink(missing_ok=True)  # the stage is stale or its output was changed: score again
            score_run(ev.root, out, overwrite=True)
            info: dict[str, Any] = {"scores": str(out)}
            vout.unlink(missing_ok=True)
            if vdirs:
                score_files(vdirs, vout, overwrite=True)
                info["validation_scores"] = str(vout)
            return info

        return study.stage("score", fp, [out, vout] if vdirs else [out], run)

    # ------------------------------------------------------------------ 5. analysis
    @staticmethod
    def arm_folders(study: StudyState, arms: list[Policy]) -> dict[str, ArmLayout]:
        """The folder of every GRPO arm (this study's, or another study's for ``arms.kind=given``); SFT arms have
        none."""
        if study.cfg.arms.kind == "grpo":
            return {plan.name: plan.layout for plan in study.plans}
        if study.cfg.arms.kind == "given":
            src = study.configs.given_source()
            return {p.name: src.arm(p.convention, int(p.seed or 0)) for p in arms}
        return {}

    def analyze(self, study: StudyState, arms: list[Policy]) -> dict[str, Any]:
        a = study.cfg.analysis
        scores, vscores, out = study.layout.eval.scores, study.layout.eval.validation_scores, study.layout.analysis
        # a GRPO arm's metrics beside its checkpoints (another study's, for arms.kind=given); SFT arms log none
        metrics = {name: arm.metrics for name, arm in self.arm_folders(study, arms).items() if arm.metrics.exists()}
        conventions = {p.name: p.convention for p in (*(plan.policy for plan in study.plans), *arms)}
        fp = {"scores": Read(str(scores)), "analysis": a,
              "metrics": {k: Read(str(v)) for k, v in metrics.items()}}
        summary = study.layout.warmstart_summary  # the warm start's figures, when built here
        warm = summary if study.cfg.initial.build == "warmstart" and summary.exists() else None
        if warm is not None:
            fp["warmstart"] = Read(str(warm))
        if vscores.exists():
            fp["validation_scores"] = Read(str(vscores))
        tracking = study.cfg.tracking

        def sections(folder: Path) -> list[str]:
            """The study's own report sections, written with the analysis (one report, one contents)."""
            return study_sections(folder, a, vscores if vscores.exists() else None, metrics, warm, conventions)

        def run() -> dict[str, Any]:
            from crossed_rlvr.analysis.report.folder import analyze
            from crossed_rlvr.tracking import enabled

            analyze(scores, out, n_resamples=int(a.resamples), rng_seed=int(a.rng_seed), overwrite=True,
                    tracking="off", sections=sections)
            if enabled(tracking):  # after the training section: the logged report is whole
                from crossed_rlvr.analysis.tracking import log_analysis

                log_analysis(out, tracking, study=study.study_name, scores=scores,
                             run_dir=study.layout.root, config=settings(study.cfg))
            return {"report": str(study.layout.report)}

        return study.stage("analyze", fp, [out], run)


register_steps(ANSWER, AnswerSteps())
