"""The study's config projected into the config of each command a stage runs: the warm start (``crossed-sft``),
each arm (``crossed-train``), the SFT arms and the crossed evaluation (``crossed-eval``).

Each projection is checked against its command's schema where it is made (types, then declared ranges), so a
setting that no stage could run with fails here, naming its key, before anything is trained. The evaluation is
handed over as crossed-eval's schema (``EvalCommandConf``) and the warm start as its typed job (``SFTJob``). What a
command records or hashes as given stays a plain dict of the keys the study sets (the warm start's wandb config,
each arm's and the SFT arms' JSON spec), so a schema default added later changes no finished arm's config hash.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.conf.schema import EvalCommandConf, PolicyConf, StudyConf
from crossed_rlvr.errors import ConfigError
from crossed_rlvr.files import settings
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.study.plan import ArmPlan, Policy, arm_pairs, plan_arms, typed
from crossed_rlvr.task_sources import freezes_train_rows
from crossed_rlvr.tasks.training import SFT_ITEM_SEED

if TYPE_CHECKING:
    from crossed_rlvr.sft.run import SFTJob


class StudyConfigs:
    """The configs the stages hand to the commands, from one study config."""

    def __init__(self, cfg: StudyConf, layout: RunLayout, study_name: str, say: Callable[[str], None]) -> None:
        self.cfg, self.layout, self.study_name, self.say = cfg, layout, study_name, say
        self._frozen: dict[str, Any] | None = None
        # every GRPO arm, planned and checked once, before any stage runs
        self.plans: list[ArmPlan] = plan_arms(cfg, layout, study_name) if cfg.arms.kind == "grpo" else []

    def train_task(self) -> dict[str, Any]:
        """The task as the arms see it: a hub task's train split frozen by content on first use
        (``<run>/data/train_rows.jsonl``, paper 001 §3 "frozen training rows"), its file and sha256 part of
        every arm's config; a user's ``task.train_rows`` is used as given, pinned by its hash."""
        from crossed_rlvr.files import sha256_file
        from crossed_rlvr.tasks.splits import freeze_train_rows

        task = settings(self.cfg.task)
        if not freezes_train_rows(task):
            return task
        if task.get("train_rows"):
            path = Path(str(task["train_rows"])).resolve()
            if not path.exists():
                raise ConfigError(f"task.train_rows={task['train_rows']}: no such file")
            return {**task, "train_rows": str(path), "train_rows_sha256": task.get("train_rows_sha256")
                    or sha256_file(path)}
        if self._frozen is None:
            self._frozen = freeze_train_rows(self.cfg.task, self.layout.train_rows)  # the task as given: no rows yet
            self.say(f"    training rows frozen: {self._frozen['rows']} rows, sha256 {self._frozen['sha256'][:16]}… "
                     f"({self._frozen['file']})")
        return {**task, "train_rows": self._frozen["file"], "train_rows_sha256": self._frozen["sha256"]}

    def warmstart(self, path: Path, warm: dict[str, Any]) -> SFTJob:
        """``crossed-sft mode=warmstart``'s job: the initial policy built at ``path``. Typed from the config as given
        (the plain dict its wandb runs record and their ids are made from: the keys the study sets, no default
        added later), as crossed-sft's door types its own."""
        from crossed_rlvr.sft.run import SFTJob

        c = self.cfg
        return SFTJob.of(typed("crossed_sft", {
            "model": {**settings(c.model), "path": str(path)}, "task": settings(c.task), "sft": settings(c.sft),
            "eval": settings(c.eval),
            "run_dir": str(self.layout.root), "train_items": {"n": int(c.initial.train_items), "seed": SFT_ITEM_SEED},
            "tracking": settings(c.tracking), "study": self.study_name,
            "warmstart": warm,
        }))

    def sft_arms(self, initial_path: str) -> dict[str, Any]:
        """The SFT arms' job (``sft/worker.py``): the marker arm and its control for every seed."""
        c = self.cfg
        return {"model": {**settings(c.model), "path": initial_path}, "task": self.train_task(), "sft": settings(c.sft),
                "run_dir": str(self.layout.root), "seeds": [int(s) for s in c.arms.seeds], "arm": c.arms.sft_arm,
                "control": c.arms.sft_control, "train_items": {"n": int(c.arms.train_items), "seed": SFT_ITEM_SEED},
                "tracking": settings(c.tracking), "study": self.study_name}

    def sft_policies(self) -> list[Policy]:
        """The SFT arms' final policies: the marker arm and its control for every seed."""
        c = self.cfg
        return [Policy.trained("sft", conv, int(seed), self.layout.sft_policy(conv, int(seed)))
                for seed in c.arms.seeds for conv in (c.arms.sft_arm, c.arms.sft_control)]

    def given_source(self) -> RunLayout:
        """``arms.kind=given``: the run directory of the study that trained the arms."""
        return RunLayout(Path(str(self.cfg.arms.from_run)).expanduser().resolve())

    def given_arms(self) -> list[Policy]:
        """``arms.kind=given``: another study's GRPO arms, at its final step (B.4's transfer of GSM8K-trained
        checkpoints to MATH500 evaluates them on another task without training anything here)."""
        src = self.given_source()
        return [Policy.trained("grpo", conv, seed, src.arm(conv, seed).checkpoint(int(self.cfg.recipe.updates)))
                for conv, seed in arm_pairs(self.cfg)]

    @staticmethod
    def policies(initial: Policy, arms: list[Policy]) -> list[Policy]:
        """The initial policy, then every arm's final policy in name order: the evaluation's order."""
        return [initial, *sorted(arms, key=lambda p: p.name)]

    def evaluation(self, initial: Policy, arms: list[Policy]) -> EvalCommandConf:
        """crossed-eval's config: every policy under every request and wording, into ``<run>/eval``. Made of the
        study's typed parts, so it holds every key of the schema: the same keys the study always set, so the eval
        stage's fingerprint (its ``settings``) is the one a finished stage recorded."""
        from crossed_rlvr.conf.ranges import check_ranges_of

        c, ev = self.cfg, self.cfg.evaluation
        task = c.task if ev.n_items is None else dataclasses.replace(c.task, n_items=int(ev.n_items))
        conf = EvalCommandConf(
            model=c.model, task=task, eval=c.eval, tracking=c.tracking, study=self.study_name,
            run_dir=str(self.layout.eval.root),
            # every fact of each policy: crossed-eval reads them back whole
            policies=[PolicyConf(**p.entry()) for p in self.policies(initial, arms)],
            requests=list(ev.requests), templates=list(ev.templates), template_subset=ev.template_subset,
            template_subset_seed=int(ev.template_subset_seed), samples=int(ev.samples), overwrite=True,
            distribute=c.distribute, numerics=c.numerics)
        check_ranges_of(conf, "crossed_eval")  # the evaluation's own ranges (e.g. its subset), before any stage runs
        return conf
