"""The stages of one crossed study (paper 001 §2-§3), each reused when its config and inputs are unchanged.

1. ``initial``: the initial policy: a tiny model built and warm-started with SFT (``initial.build=warmstart``)
   or a given model (``given``: a local directory, SmolLM2's converted GGUF, or a hub name).
2. ``arms``: matched arms for every convention x seed from that policy: GRPO (``crossed-train``; arms of
   one seed are checked to differ only in the intervention) or content-matched SFT marker arms.
3. ``eval``: every policy (initial and each arm's final checkpoint) under every request and wording.
4. ``score``: every response with the fixed reader panel.
5. ``analyze``: cells, contrasts with paired-bootstrap intervals, coverage, report and figures, plus the
   arms' training curves.

Stages 3-5 are the task kind's steps (``steps.py``: answer tasks in ``answer_steps.py``, code tasks in
``code_steps.py``). What the stages hand each other is typed (``plan.py``: a ``Policy``, an ``ArmPlan``). Where
each job lives: the stage cache in ``stamps.py``, the commands' configs in ``configs.py``, the arms and their
workers in ``arms.py``, the dress rehearsal in ``prepare.py``; every path in ``crossed_rlvr.layout``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from crossed_rlvr.conf.schema import StudyConf, conf_of
from crossed_rlvr.errors import ConfigError, CrossedError
from crossed_rlvr.files import settings
from crossed_rlvr.fingerprint import Read
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.machine import torch_threads
from crossed_rlvr.study import answer_steps, code_steps  # noqa: F401  (each registers its task kind's steps)
from crossed_rlvr.study import arms as arm_jobs
from crossed_rlvr.study import prepare as dress
from crossed_rlvr.study.configs import StudyConfigs
from crossed_rlvr.study.plan import Policy, eval_fingerprint, policies_of
from crossed_rlvr.study.stamps import StageCache
from crossed_rlvr.study.steps import steps_for
from crossed_rlvr.tracking import untracked

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from rich.console import Console

STAGES = ("initial", "arms", "eval", "score", "analyze")


class ArmsNotTrained(CrossedError, FileNotFoundError):
    """The arms' final checkpoints are not there (launch scripts not run yet, or a given run without them)."""


class Study:
    def __init__(self, cfg: StudyConf | DictConfig, console: Console | None = None) -> None:
        self.cfg = cfg = conf_of(StudyConf, cfg)  # typed once where the study starts (a StudyConf passes as is)
        self.layout = RunLayout(Path(cfg.run_dir))
        self.run = self.layout.root
        self.console = console
        self.stage = StageCache(self.run, STAGES, self.say)
        self.stamps = self.stage.stamps
        # the wandb group of every stage's runs: tracking.group, else the run directory's name
        self.study_name = str(cfg.tracking.group or self.run.resolve().name)
        self.configs = StudyConfigs(cfg, self.layout, self.study_name, self.say)  # plans and checks the arms
        self.plans = self.configs.plans
        self.steps = steps_for(cfg.task)

    def say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text)

    def run_all(self) -> dict[str, Any]:
        self.run.mkdir(parents=True, exist_ok=True)
        self.layout.config.write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
        initial = self.initial()
        arms = self.arms(initial)
        self.evaluate(initial, arms)  # the steps of the task's kind: answers read, or programs run in the sandbox
        self.score()
        self.analyze(arms)
        summary = {"run_dir": str(self.run), "stages": self.stage.times, "report": str(self.layout.report)}
        self.layout.summary.write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def prepare(self) -> dict[str, Any]:
        return dress.prepare(self.configs, self.initial_path())

    def rehearse(self) -> dict[str, Any]:
        return dress.rehearse(self.configs, self.initial_path())

    def strata(self, ipath: str, weights: str) -> dict[str, Any] | None:
        c = self.cfg
        return arm_jobs.frozen_strata(c.recipe.proposal, lambda: arm_jobs.grpo_items(
            self.configs.train_task(), c.arms.train_items), c.eval, c.model.system, self.layout, (ipath, weights),
            self.say)

    # ------------------------------------------------------------------ 1. initial policy
    def initial_path(self) -> str:
        """Where the initial policy's weights are: the folder it is built in, or the given model's folder or hub
        name (one string, whichever it is)."""
        if self.cfg.initial.build == "warmstart":
            return str(self.layout.initial)
        from crossed_rlvr.eval.generate.plan import resolve_model_path

        return resolve_model_path(self.cfg.model)

    def initial(self) -> Policy:
        """The initial policy, its weights hashed (what the arms started from)."""
        return Policy.initial(self._initial()["path"]).hashed(self.stamps.weights)

    def _initial(self) -> dict[str, Any]:
        c = self.cfg
        path = self.initial_path()
        if c.initial.build == "given":
            fp = {"model": c.model, "path": path}
            outputs = [Path(path)] if Path(path).exists() else []
            return self.stage("initial", fp, outputs, lambda: {"path": path, "built": False})
        if c.initial.build != "warmstart":
            raise ConfigError(f"initial.build must be warmstart or given, not {c.initial.build!r}")
        # where a built policy is kept for other studies does not change it: not part of the fingerprint
        fp = {"model": c.model, "task": c.task, "sft": c.sft, "initial": dataclasses.replace(c.initial, cache_dir=None)}
        warm = {"requests": list(c.initial.requests), "templates": list(c.initial.templates),
                "seed": int(c.initial.seed), "follow_rate": float(c.initial.follow_rate)}
        if not c.model.tiny:  # a given model (SmolLM2, a hub name) is fine-tuned, not built
            from crossed_rlvr.eval.generate.plan import resolve_model_path

            warm["base"] = str(resolve_model_path(c.model))
        if int(c.initial.band.every) > 0:  # measured under the evaluation's sampling (sft/band.py)
            warm["band"] = settings(c.initial.band)
            fp["band_sampling"] = eval_fingerprint(c.eval)

        def build() -> dict[str, Any]:
            import shutil

            from crossed_rlvr.sft.run import warmstart

            shutil.rmtree(path, ignore_errors=True)  # a stale or half-written policy is rebuilt, never reused
            with torch_threads(c.initial.threads):
                result = warmstart(self.configs.warmstart(Path(path), warm))
            shutil.rmtree(self.layout.fresh, ignore_errors=True)
            return {"path": path, "built": True, **{k: v for k, v in result.items() if k != "config"}}

        if cache := c.initial.cache_dir:
            from crossed_rlvr.study.warm_cache import fetch_or_build

            # a tiny model's path is where it is built (in this run directory), not an input
            tiny = {**fp, "model": dataclasses.replace(c.model, path=None)}
            _inputs, key = self.stage.fingerprint(tiny if c.model.tiny else fp)
            return self.stage("initial", fp, [Path(path)],
                              lambda: fetch_or_build(Path(str(cache)), key, Path(path), build, self.say))
        return self.stage("initial", fp, [Path(path)], build)

    # ------------------------------------------------------------------ 2. matched arms
    def arms(self, initial: Policy) -> list[Policy]:
        """Every arm's final policy: trained here (GRPO or SFT), or another study's (``arms.kind=given``)."""
        c = self.cfg
        initial = initial.hashed(self.stamps.weights)  # the arms' configs name the weights they start from
        if c.arms.kind == "sft":
            return policies_of(self._sft_arms(initial.path))
        if c.arms.kind == "given":
            return policies_of(self._given_arms())
        if c.arms.kind != "grpo":
            raise ConfigError(f"arms.kind must be grpo, sft or given, not {c.arms.kind!r}")
        return policies_of(self._grpo_arms(initial.path, initial.weights))

    def _grpo_arms(self, ipath: str, weights: str) -> dict[str, Any]:
        c = self.cfg
        strata = self.strata(ipath, weights)
        task = self.configs.train_task()
        jobs = [(plan, plan.config(ipath, weights, task, strata)) for plan in self.plans]
        # the same configs with the initial policy as what the stage reads: its hash by the one rule, in its place
        fp: dict[str, Any] = {"configs": {
            plan.name: untracked(plan.config(ipath, Read.weights(ipath), task, strata)) for plan in self.plans}}
        final = [Path(plan.policy.path) for plan in self.plans]

        def train() -> dict[str, Any]:
            arm_jobs.recorded_finals(self.stamps, self.plans)  # arms finished before summaries held it
            stamp = self.stamps.read("arms")  # a stamp without numerics ran the machine's own (numerics.recorded)
            ran = None if stamp is None else stamp.get("inputs", {}).get("numerics", "native")
            arm_jobs.carry_over_arms(jobs, self.stamps.content(Read.weights(ipath), whole=True), ran)
            results = arm_jobs.train_arms(c, jobs)  # each config was checked when its arm was planned
            missing = [str(p) for p in final if not p.exists()]
            if missing:  # e.g. engine=verl without engine.launch: the launch scripts are ready, not run
                raise ArmsNotTrained("no final checkpoint at " + ", ".join(missing) + ". With engine=verl "
                                 "and engine.launch=false, run each arm's launch script (launch_single_node.sh or "
                                 "sbatch launch_slurm_ray.sbatch), then run the study again: finished arms are reused.")
            verdicts = arm_jobs.check_matched(self.plans)
            return {"arms": {plan.name: {**plan.policy.record(), **results[plan.name]} for plan in self.plans},
                    "matched": verdicts}

        return self.stage("arms", fp, final, train)

    def _given_arms(self) -> dict[str, Any]:
        missing = [a.path for a in self.configs.given_arms() if not Path(a.path).is_dir()]
        if missing:
            raise ArmsNotTrained(f"arms.kind=given: no checkpoint at {', '.join(missing)} (arms.from_run="
                             f"{self.cfg.arms.from_run}, recipe.updates={int(self.cfg.recipe.updates)}); train them "
                             "with that study first, or set arms.seeds/arms.conventions to the arms it has")
        arms = [a.hashed(self.stamps.weights) for a in self.configs.given_arms()]  # each a local folder
        fp = {a.name: Read.weights(a.path) for a in arms}
        return self.stage("arms", fp, [Path(a.path) for a in arms],
                          lambda: {"arms": {a.name: a.record() for a in arms}})

    def _sft_arms(self, ipath: str) -> dict[str, Any]:
        spec = self.configs.sft_arms(ipath)
        fp = {"spec": untracked(spec), "initial_weights": Read.weights(ipath)}
        final = self.configs.sft_policies()

        def train() -> dict[str, Any]:
            import shutil

            from crossed_rlvr.sft.worker import run_stage

            for p in final:
                shutil.rmtree(p.path, ignore_errors=True)
            # in a process of its own (torchrun with sft.nproc_per_node > 1): the evaluation's vLLM then
            # starts on GPU memory that training no longer holds
            run_stage(spec, self.layout.sft_spec)
            return {"arms": {p.name: p.record() for p in final}}

        return self.stage("arms", fp, [Path(p.path) for p in final], train)

    # ------------------------------------------------------------------ 3-5. the task kind's steps (study/steps.py)
    def evaluate(self, initial: Policy, arms: list[Policy]) -> dict[str, Any]:
        return self.steps.evaluate(self, initial, arms)

    def score(self) -> dict[str, Any]:
        return self.steps.score(self)

    def analyze(self, arms: list[Policy]) -> dict[str, Any]:
        return self.steps.analyze(self, arms)
