"""The stages of one crossed study (paper 001 §2-§3), each reused when its config and inputs are unchanged.

1. ``initial``: the initial policy: a tiny model built and warm-started with SFT (``initial.build=warmstart``)
   or a given model (``given``: a local directory, SmolLM2's converted GGUF, or a hub name).
2. ``arms``: matched arms for every convention x seed from that policy: GRPO (``crossed-train``; arms of
   one seed are checked to differ only in the intervention) or content-matched SFT marker arms.
3. ``eval``: every policy (initial and each arm's final checkpoint) under every request and wording.
4. ``score``: every response with the fixed reader panel.
5. ``analyze``: cells, contrasts with paired-bootstrap intervals, coverage, report and figures, plus the
   arms' training curves.

Where each job lives: the stage cache in ``stamps.py``, the commands' configs in ``configs.py``, the arms and
their workers in ``arms.py``, the dress rehearsal in ``prepare.py``; every path in ``crossed_rlvr.layout``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from crossed_rlvr.errors import ConfigError, CrossedError
from crossed_rlvr.layout import ArmLayout, RunLayout
from crossed_rlvr.machine import torch_threads
from crossed_rlvr.names import policy_name
from crossed_rlvr.study import arms as arm_jobs
from crossed_rlvr.study import code_stages
from crossed_rlvr.study import prepare as dress
from crossed_rlvr.study.configs import StudyConfigs, plain
from crossed_rlvr.study.sections import study_sections
from crossed_rlvr.study.stamps import StageCache, digest
from crossed_rlvr.tasks.code import is_code_task
from crossed_rlvr.tracking import untracked

STAGES = ("initial", "arms", "eval", "score", "analyze")


class ArmsNotTrained(CrossedError, FileNotFoundError):
    """The arms' final checkpoints are not there (launch scripts not run yet, or a given run without them)."""


class Study:
    def __init__(self, cfg: Any, console: Any = None) -> None:
        self.cfg = cfg
        self.layout = RunLayout(Path(cfg.run_dir))
        self.run = self.layout.root
        self.console = console
        self.stage = StageCache(self.run, STAGES, self.say)
        self.stamps = self.stage.stamps
        # the wandb group of every stage's runs: tracking.group, else the run directory's name
        self.study_name = str(cfg.tracking.get("group") or self.run.resolve().name)
        self.configs = StudyConfigs(cfg, self.layout, self.study_name, self.say)

    def say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text)

    def run_all(self) -> dict[str, Any]:
        self.run.mkdir(parents=True, exist_ok=True)
        self.layout.config.write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
        initial = self.initial()
        arms = self.arms(initial)
        if is_code_task(self.cfg.task):  # programs run in the sandbox (study/code_stages.py)
            code_stages.run(self, initial, arms)
        else:
            self.evaluate(initial, arms)
            self.score()
            self.analyze(arms)
        summary = {"run_dir": str(self.run), "stages": self.stage.times, "report": str(self.layout.report)}
        self.layout.summary.write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def prepare(self) -> dict[str, Any]:
        return dress.prepare(self.configs, str(self.initial_path()))

    def rehearse(self) -> dict[str, Any]:
        return dress.rehearse(self.configs, str(self.initial_path()))

    def strata(self, ipath: str, weights: str) -> dict[str, Any] | None:
        return arm_jobs.frozen_strata(self.configs, ipath, weights)

    def train_config(self, conv: str, seed: int, initial_path: str, weights: str,
                     strata: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.configs.train(conv, seed, initial_path, weights, strata)

    # ------------------------------------------------------------------ 1. initial policy
    def initial_path(self) -> Path | str:
        if self.cfg.initial.build == "warmstart":
            return self.layout.initial
        from crossed_rlvr.eval.generate.plan import resolve_model_path

        return resolve_model_path(self.cfg.model)

    def initial(self) -> dict[str, Any]:
        c = self.cfg
        path = self.initial_path()
        if c.initial.build == "given":
            fp = {"model": plain(c.model), "path": str(path)}
            outputs = [Path(path)] if Path(str(path)).exists() else []
            return self.stage("initial", fp, outputs, lambda: {"path": str(path), "built": False})
        if c.initial.build != "warmstart":
            raise ConfigError(f"initial.build must be warmstart or given, not {c.initial.build!r}")
        # where a built policy is kept for other studies does not change it: not part of the fingerprint
        fp = {"model": plain(c.model), "task": plain(c.task), "sft": plain(c.sft),
              "initial": {k: v for k, v in plain(c.initial).items() if k != "cache_dir"}}
        warm = {"requests": list(c.initial.requests), "templates": list(c.initial.templates),
                "seed": int(c.initial.seed), "follow_rate": float(c.initial.follow_rate)}
        if not c.model.get("tiny"):  # a given model (SmolLM2, a hub name) is fine-tuned, not built
            from crossed_rlvr.eval.generate.plan import resolve_model_path

            warm["base"] = str(resolve_model_path(c.model))
        if int(c.initial.band.every) > 0:  # measured under the evaluation's sampling (sft/band.py)
            warm["band"] = plain(c.initial.band)
            fp["band_sampling"] = plain(c.eval)

        def build() -> dict[str, Any]:
            import shutil

            from crossed_rlvr.sft.run import warmstart

            shutil.rmtree(path, ignore_errors=True)  # a stale or half-written policy is rebuilt, never reused
            with torch_threads(c.initial.get("threads")):
                result = warmstart(OmegaConf.create(self.configs.warmstart(Path(path), warm)))
            shutil.rmtree(self.layout.fresh, ignore_errors=True)
            return {"path": str(path), "built": True, **{k: v for k, v in result.items() if k != "config"}}

        if cache := c.initial.get("cache_dir"):
            from crossed_rlvr.study.warm_cache import fetch_or_build

            # a tiny model's path is where it is built (in this run directory), not an input
            key = digest({**fp, "model": {k: v for k, v in fp["model"].items() if k != "path"}}
                         if c.model.get("tiny") else fp)
            return self.stage("initial", fp, [Path(path)],
                              lambda: fetch_or_build(Path(str(cache)), key, Path(path), build, self.say))
        return self.stage("initial", fp, [Path(path)], build)

    # ------------------------------------------------------------------ 2. matched arms
    def arms(self, initial: dict[str, Any]) -> dict[str, Any]:
        c = self.cfg
        ipath = str(initial["path"])
        weights = self.stamps.hash(ipath) if Path(ipath).exists() else ipath
        if c.arms.kind == "sft":
            return self._sft_arms(ipath, weights)
        if c.arms.kind == "given":
            return self._given_arms()
        if c.arms.kind != "grpo":
            raise ConfigError(f"arms.kind must be grpo, sft or given, not {c.arms.kind!r}")
        strata = self.strata(ipath, weights)
        configs = {policy_name("grpo", conv, seed): self.configs.train(conv, seed, ipath, weights, strata)
                   for conv, seed in self.configs.arm_list()}
        fp: dict[str, Any] = {"configs": {name: untracked(cfg) for name, cfg in configs.items()}}
        if c.arms.get("threads") is not None and int(c.arms.parallel) == 1:  # other sums, other weights
            fp["threads"] = int(c.arms.threads)
        final = {name: self.layout.arm(cfg["convention"]["name"], cfg["seed"]).checkpoint(int(c.recipe.updates))
                 for name, cfg in configs.items()}

        def train() -> dict[str, Any]:
            from crossed_rlvr.conf.checks import check_config

            for cfg in configs.values():
                check_config(OmegaConf.create(cfg))  # every arm's config is checked before any trains
            results = arm_jobs.train_arms(c, configs)
            missing = [str(p) for p in final.values() if not p.exists()]
            if missing:  # e.g. engine=verl without engine.launch: the launch scripts are ready, not run
                raise ArmsNotTrained("no final checkpoint at " + ", ".join(missing) + ". With engine=verl "
                                 "and engine.launch=false, run each arm's launch script (launch_single_node.sh or "
                                 "sbatch launch_slurm_ray.sbatch), then run the study again: finished arms are reused.")
            verdicts = arm_jobs.check_matched(c, self.layout)
            return {"arms": {name: {"path": str(final[name]), "convention": cfg["convention"]["name"],
                                    "seed": cfg["seed"], **results[name]} for name, cfg in configs.items()},
                    "matched": verdicts}

        return self.stage("arms", fp, list(final.values()), train)

    def _given_arms(self) -> dict[str, Any]:
        arms = self.configs.given_arms()
        missing = [a["path"] for a in arms.values() if not Path(a["path"]).is_dir()]
        if missing:
            raise ArmsNotTrained(f"arms.kind=given: no checkpoint at {', '.join(missing)} (arms.from_run="
                             f"{self.cfg.arms.from_run}, recipe.updates={int(self.cfg.recipe.updates)}); train them "
                             "with that study first, or set arms.seeds/arms.conventions to the arms it has")
        fp = {name: self.stamps.hash(a["path"]) for name, a in arms.items()}
        return self.stage("arms", fp, [Path(a["path"]) for a in arms.values()], lambda: {"arms": arms})

    def _sft_arms(self, ipath: str, weights: str) -> dict[str, Any]:
        c = self.cfg
        spec = self.configs.sft_arms(ipath)
        fp = {"spec": untracked(spec), "initial_weights": weights}
        final = {(conv, int(seed)): self.layout.sft_policy(conv, int(seed))
                 for seed in c.arms.seeds for conv in (c.arms.sft_arm, c.arms.sft_control)}

        def train() -> dict[str, Any]:
            import shutil

            from crossed_rlvr.sft.worker import run_stage

            for p in final.values():
                shutil.rmtree(p, ignore_errors=True)
            # in a process of its own (torchrun with sft.nproc_per_node > 1): the evaluation's vLLM then
            # starts on GPU memory that training no longer holds
            run_stage(spec, self.layout.sft_spec)
            return {"arms": {policy_name("sft", conv, seed): {"path": str(p), "convention": conv, "seed": seed}
                             for (conv, seed), p in final.items()}}

        return self.stage("arms", fp, list(final.values()), train)

    # ------------------------------------------------------------------ 3. crossed evaluation
    def evaluate(self, initial: dict[str, Any], arms: dict[str, Any]) -> dict[str, Any]:
        eval_cfg = self.configs.evaluation(initial, arms)
        weights = {p["name"]: self.stamps.hash(p["path"]) if Path(p["path"]).exists() else p["path"]
                   for p in eval_cfg.policies}
        spec = {k: v for k, v in untracked(plain(eval_cfg)).items() if k != "policies"}
        if self.cfg.evaluation.get("threads") is not None:  # sums in another order: other samples
            spec["threads"] = int(self.cfg.evaluation.threads)
        fp = {"eval": spec, "weights": weights,
              "policies": [{k: v for k, v in p.items() if k != "path"} for p in plain(eval_cfg.policies)]}

        def run() -> dict[str, Any]:
            from crossed_rlvr.eval.generate.runner import run_eval

            with torch_threads(self.cfg.evaluation.get("threads")):
                summary = run_eval(eval_cfg)
            return {"cells": len(summary)}

        return self.stage("eval", fp, [self.layout.eval.responses], run)

    # ------------------------------------------------------------------ 4. scores
    def validation_dirs(self) -> list[Path]:
        """Response folders of the arms' crossed validation during training: TRL writes crossed-eval cells
        (``validation.every`` > 0); verl dumps ``{step}.jsonl`` into ``validation/``, which are imported
        here, every step as ``<arm>@step<K>`` (``crossed-import verl --all-steps``)."""
        if self.cfg.arms.kind != "grpo":
            return []
        arms = [self.layout.arm(conv, seed) for conv, seed in self.configs.arm_list()]
        if self.cfg.engine.name == "verl":
            for arm in arms:
                arm_jobs.import_verl_validation(arm, self.stamps, str(self.cfg.task.name), self.say)
        dirs = [arm.validation_eval.responses for arm in arms]
        return [d for d in dirs if d.is_dir() and any(d.glob("*.jsonl"))]

    def score(self) -> dict[str, Any]:
        ev = self.layout.eval
        out, vout = ev.scores, ev.validation_scores
        vdirs = self.validation_dirs()
        fp = {"responses": self.stamps.hash(ev.responses)}
        if vdirs:  # one scores table of every arm's validation steps, for the interactions over training
            fp["validation"] = {str(d.relative_to(self.run)): self.stamps.hash(d) for d in vdirs}

        def run() -> dict[str, Any]:
            from crossed_rlvr.eval.score.scoring import score_files

            out.unlink(missing_ok=True)  # the stage is stale or its output was changed: score again
            score_files([ev.root], out, overwrite=True)
            info = {"scores": str(out)}
            vout.unlink(missing_ok=True)
            if vdirs:
                score_files(vdirs, vout, overwrite=True)
                info["validation_scores"] = str(vout)
            return info

        return self.stage("score", fp, [out, vout] if vdirs else [out], run)

    # ------------------------------------------------------------------ 5. analysis
    def analyze(self, arms: dict[str, Any]) -> dict[str, Any]:
        a = self.cfg.analysis
        scores, vscores, out = self.layout.eval.scores, self.layout.eval.validation_scores, self.layout.analysis
        # a GRPO arm's metrics beside its checkpoints (another study's, for arms.kind=given); SFT arms log none
        metrics = {} if self.cfg.arms.kind == "sft" else {
            name: ArmLayout.of_checkpoint(Path(arm["path"])).metrics for name, arm in arms["arms"].items()}
        metrics = {k: v for k, v in metrics.items() if v.exists()}
        fp = {"scores": self.stamps.hash(scores), "analysis": plain(a),
              "metrics": {k: self.stamps.hash(v) for k, v in metrics.items()}}
        warm = self.layout.warmstart_summary  # the warm start's figures, when built here
        warm = warm if self.cfg.initial.build == "warmstart" and warm.exists() else None
        if warm is not None:
            fp["warmstart"] = self.stamps.hash(warm)
        if vscores.exists():
            fp["validation_scores"] = self.stamps.hash(vscores)
        tracking = plain(self.cfg.tracking)

        def sections(folder: Path) -> list[str]:
            """The study's own report sections, written with the analysis (one report, one contents)."""
            return study_sections(folder, a, vscores if vscores.exists() else None, metrics, warm)

        def run() -> dict[str, Any]:
            from crossed_rlvr.analysis.report.folder import analyze
            from crossed_rlvr.tracking import enabled

            analyze(scores, out, n_resamples=int(a.resamples), rng_seed=int(a.rng_seed), overwrite=True,
                    tracking="off", sections=sections)
            if enabled(OmegaConf.create(tracking)):  # after the training section: the logged report is whole
                from crossed_rlvr.analysis.tracking import log_analysis

                log_analysis(out, OmegaConf.create(tracking), study=self.study_name, scores=scores,
                             run_dir=self.run, config=plain(self.cfg))
            return {"report": str(self.layout.report)}

        return self.stage("analyze", fp, [out], run)
