"""What the study's stages hand each other (docs/architecture.md "Typed hand-offs"): a :class:`Policy` (the
initial model or an arm's final weights, with the facts the crossed design needs: ``policies/policy.py``, the one
policy of the study, crossed-eval, the importers and the analysis) and an :class:`ArmPlan` (one GRPO arm: its
policy, folder and crossed-train config), made once from the study config by :func:`plan_arms`.

Paper 001 §2: the arms of one seed differ only in their convention, so each plan is the study config projected
into one crossed-train config, checked once, where the plan is made (types, declared ranges, the relations
``train.checks.check_config`` holds), before any stage runs. The initial policy's path and hash, the frozen
training rows and the difficulty strata are known only after the first stages: :meth:`ArmPlan.config` binds
them. The arms stage's stamp stores each policy's record (:meth:`Policy.record`), which later stages read back
with :meth:`Policy.from_record`; nothing rebuilds a policy from a folder name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from crossed_rlvr.conf.schema import EvalConf, StudyConf, TrainConf, conf_of
from crossed_rlvr.errors import ConfigError
from crossed_rlvr.files import settings
from crossed_rlvr.layout import ArmLayout, RunLayout
from crossed_rlvr.policies.policy import Policy
from crossed_rlvr.study.route import ArmRoute, arm_route
from crossed_rlvr.tasks.training import GRPO_ITEM_SEED

if TYPE_CHECKING:
    from crossed_rlvr.fingerprint import Read


def eval_fingerprint(gen: EvalConf | Mapping[str, Any]) -> dict[str, Any]:
    """The ``eval`` settings as a stage's fingerprint holds them: device and dtype resolved as the evaluation
    resolves them, the device left out where it is the CPU every earlier stage ran on (eval/generate/device.py), so
    a default left unset matches what a finished stage recorded."""
    from crossed_rlvr.eval.generate.device import hashed_settings, placed

    return hashed_settings(placed(conf_of(EvalConf, gen)))  # a crossed-eval config's section (a node) typed here


def policies_of(stage_info: dict[str, Any]) -> list[Policy]:
    """The trained policies an arms stage recorded, in name order (one order always)."""
    return [Policy.from_record(name, rec) for name, rec in sorted(stage_info["arms"].items())]


@dataclass(frozen=True)
class ArmPlan:
    """One GRPO arm of the study: its final policy, its folder and its crossed-train config (checked)."""

    policy: Policy
    layout: ArmLayout
    base: dict[str, Any]  # the crossed-train config before the initial policy, rows and strata are bound
    route: ArmRoute  # where it trains (study/route.py), decided when it is planned

    @property
    def name(self) -> str:
        return self.policy.name

    def config(self, initial_path: str, weights: str | Read, task: dict[str, Any],
               strata: dict[str, Any] | None = None) -> dict[str, Any]:
        """The arm's crossed-train config with the initial policy (path and weights hash), the task as the arms
        see it (frozen training rows) and the frozen strata bound. ``model.weights_sha256`` ties a finished arm
        to the initial weights it started from, so a rebuilt initial policy retrains the arms while an
        interrupted stage reuses finished ones. ``weights`` a :class:`~crossed_rlvr.fingerprint.Read` where the arms
        stage declares what it reads (its fingerprint puts the hash in its place)."""
        recipe = dict(self.base["recipe"])
        if strata is not None:  # the frozen strata file and its hash: part of every arm's config
            recipe["proposal"] = {**recipe["proposal"], "strata_file": strata["file"], "strata_sha256": strata["sha256"]}
        return {**self.base, "model": {**self.base["model"], "path": str(initial_path), "weights_sha256": weights},
                "task": task, "recipe": recipe}


def typed(command: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` checked against ``command``'s schema (``crossed_train``, ``crossed_eval``, ``crossed_sft``): the type
    of every key the schema knows, then the ranges it declares. Keys the schema does not know pass (the study adds
    hashes and frozen files to the command's own settings). Returns ``cfg`` unchanged."""
    from omegaconf.errors import OmegaConfBaseException

    from crossed_rlvr.conf.ranges import check_ranges_of, open_schema

    try:
        OmegaConf.merge(open_schema(command), cfg)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", "") or ""
        raise ConfigError(f"{key}: {str(err).splitlines()[0]} (in the study's {command.replace('_', '-')} config)"
                          ) from None
    check_ranges_of(cfg, command)
    return cfg


def arm_pairs(cfg: StudyConf) -> list[tuple[str, int]]:
    """(convention, seed) of every GRPO arm, seed by seed."""
    return [(conv, int(seed)) for seed in cfg.arms.seeds for conv in cfg.arms.conventions]


def plan_arms(cfg: StudyConf, layout: RunLayout, study_name: str) -> list[ArmPlan]:
    """Every GRPO arm of the study, seed by seed, each crossed-train config checked here and nowhere else in the
    study: its types and ranges (the schema), then the relations between its settings (``check_config``; the
    initial policy's path is checked by the stage that makes it)."""
    from crossed_rlvr.errors import RecipeError
    from crossed_rlvr.train.checks import check_config

    plans = []
    route = arm_route(cfg)  # the machine read once, here
    for conv, seed in arm_pairs(cfg):
        arm = layout.arm(conv, seed)
        policy = Policy.trained("grpo", conv, seed, arm.checkpoint(int(cfg.recipe.updates)))
        base = typed("crossed_train", {
            "model": settings(cfg.model), "task": settings(cfg.task),
            "convention": {"name": conv}, "recipe": settings(cfg.recipe), "algorithm": settings(cfg.algorithm),
            "engine": settings(cfg.engine), "tracking": settings(cfg.tracking),
            "validation": settings(cfg.validation), "eval": settings(cfg.eval),
            "seed": seed, "data_seed": seed, "run_dir": str(arm.root), "arm": policy.name,
            "study": study_name, "overwrite": True, "template": "original",
            "train_items": {"n": int(cfg.arms.train_items), "seed": GRPO_ITEM_SEED},
            "numerics": cfg.numerics,  # what its process runs (the study's): the arm's record says so
            # an arm in the study's process trains with its threads; one in a process of its own, with that one's
            "threads": cfg.arms.threads if route is ArmRoute.IN_STUDY and cfg.engine.name == "trl" else None,
        })
        try:
            check_config(conf_of(TrainConf, base), initial_built=False)
        except RecipeError as err:
            raise ConfigError(str(err)) from None
        plans.append(ArmPlan(policy, arm, base, route))
    return plans
