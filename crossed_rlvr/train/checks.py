"""What an arm of the GRPO recipe must hold to train, checked before any model is loaded: the relations between its
settings that depend on the engine that runs it (TRL's batch, micro-batch and sampling paths; verl's LoRA, top-p and
seeds) and on the task's kind (``tasks/code.py:arm_check``). Each setting's own type, range and choices, and the
relations within one section, are the schema's (``conf/schema.py``, ``conf/ranges.py``), checked first.

crossed-train's door runs :func:`check_train` after the configs' own checks; a study runs :func:`check_config` on
every arm it plans, before any stage.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from crossed_rlvr.conf.schema import EngineConf, ModelConf, TrainConf, conf_of
from crossed_rlvr.errors import ConfigError, RecipeError
from crossed_rlvr.limits import SEED
from crossed_rlvr.task_sources import task_kind


@dataclass
class CheckedTrainConf(TrainConf):
    """A crossed-train config that passed every check of an arm: the one type ``run_train`` takes, so a config that
    skipped the checks is refused by the type checker. Made only by :func:`check_train_conf` (and, for a study's
    arm checked where it was planned, :func:`planned_arm`). Not frozen: Hydra's schemas must stay writable for
    command-line overrides, and this is the same dataclass."""


def _as_checked(conf: TrainConf) -> CheckedTrainConf:
    return CheckedTrainConf(**{f.name: getattr(conf, f.name) for f in fields(TrainConf)})


def check_train_conf(conf: TrainConf, initial_built: bool = True) -> CheckedTrainConf:
    """``conf`` checked (:func:`check_config`; a :class:`RecipeError` names the first problem) and so typed."""
    check_config(conf, initial_built)
    return _as_checked(conf)


def checked_train(cfg: object) -> CheckedTrainConf:
    """A crossed-train config as composed (a Hydra node, a dict) typed by its schema (``TrainConf``) and checked:
    crossed-train's door, and a script's or test's way to the trainer."""
    return check_train_conf(conf_of(TrainConf, cfg))


def planned_arm(arm: dict[str, Any]) -> CheckedTrainConf:
    """A study arm's crossed-train config as its plan bound it (study/plan.py ``ArmPlan.config``), typed. Its settings
    were checked once, where the study planned the arm (``check_config(..., initial_built=False)``); what binding
    adds is checked by the stages that make it (the initial policy, the frozen rows and strata), so nothing is
    checked twice."""
    return _as_checked(conf_of(TrainConf, arm))


def check_config(cfg: TrainConf, initial_built: bool = True) -> None:
    """Refuse a GRPO arm's config that cannot train, before anything is loaded: an unknown convention, a batch
    that the group size does not divide, a missing model or an engine/algorithm pair that cannot run.
    ``initial_built=False``: a study's arm planned before its initial policy exists (the initial stage checks that)."""
    conv, kind = cfg.convention.name, task_kind(cfg.task)
    arm_check = kind.hook("arm_check")  # what an arm of the task's kind must set besides (a code arm's tasks)
    if arm_check is not None:
        arm_check(cfg)
    if conv not in kind.conventions:
        raise RecipeError(f"convention={conv!r} is unknown; expected one of {', '.join(kind.conventions)}")
    from crossed_rlvr.conf.ranges import check_ranges_of

    check_ranges_of(cfg, "crossed_train")  # every number within the range its schema declares
    if cfg.engine.name == "trl":
        _trl_batch(cfg)
    _sampler(cfg)
    _prompt_once(cfg)
    if cfg.recipe.proposal.enabled and cfg.recipe.proposal.estimate_samples % 2:
        raise RecipeError(f"recipe.proposal.estimate_samples={cfg.recipe.proposal.estimate_samples}: expected an "
                          "even number (half the samples under each request)")
    if cfg.engine.name == "trl" and cfg.engine.nproc_per_node > 1 and cfg.validation.every > 0:
        raise RecipeError("validation.every > 0 runs on one process: with engine.nproc_per_node > 1 validate the "
                          "arm's checkpoints with crossed-eval, or set validation.every=0")
    if cfg.engine.name == "trl" and cfg.algorithm.name != "grpo":
        raise RecipeError("algorithm=reinforce_pp runs only with engine=verl")
    if cfg.engine.name == "verl":
        _verl_arm(cfg)
    if initial_built:
        _initial_built(cfg.model)


def _sampler(cfg: TrainConf) -> None:
    """engine.sampler=stream replaces TRL's model.generate (train/rollout.py): a TRL arm's full weights, sampled in
    its own process."""
    e = cfg.engine
    if e.sampler is None:
        return
    if e.name != "trl":
        raise RecipeError(f"engine.sampler={e.sampler} is TRL's sampling; engine={e.name} samples with its own "
                          "rollout (leave engine.sampler unset)")
    if e.use_vllm:
        raise RecipeError(f"engine.sampler={e.sampler} and engine.use_vllm=true both choose how TRL samples; set one")
    if cfg.recipe.lora.enabled:
        raise RecipeError(f"engine.sampler={e.sampler} samples a copy of the full weights; with "
                          "recipe.lora.enabled=true leave it unset")


def _prompt_once(cfg: TrainConf) -> None:
    """engine.prompt_once replaces TRL's loss forward on one process: it needs each prompt's cache, which activation
    recomputation drops, and the unwrapped model (DDP syncs gradients only through its wrapper's forward)."""
    e = cfg.engine
    if not e.prompt_once:
        return
    if e.name != "trl":
        raise RecipeError(f"engine.prompt_once is TRL's loss forward; engine={e.name} has its own (leave it unset)")
    if e.gradient_checkpointing:
        raise RecipeError("engine.prompt_once continues each completion from its prompt's cache, which activation "
                          "recomputation drops: set engine.gradient_checkpointing=false with it")
    if e.nproc_per_node > 1:
        raise RecipeError(f"engine.prompt_once runs on one process; engine.nproc_per_node={e.nproc_per_node}")
    if cfg.recipe.lora.enabled:
        raise RecipeError("engine.prompt_once runs the full model's forward; with recipe.lora.enabled=true leave it "
                          "unset")


def _trl_batch(cfg: TrainConf) -> None:
    """TRL's batch: the micro-batch (null: the group size) divides it on every process and pairs with the group."""
    r, e = cfg.recipe, cfg.engine
    batch = r.prompts_per_update * r.group_size
    micro = e.micro_batch or r.group_size
    if batch % micro:
        raise RecipeError(f"engine.micro_batch={micro} does not divide the batch of {batch} completions "
                          f"(recipe.prompts_per_update={r.prompts_per_update} x recipe.group_size={r.group_size})")
    if e.nproc_per_node > 1 and batch % (micro * e.nproc_per_node):
        raise RecipeError(f"engine.nproc_per_node={e.nproc_per_node}: the batch of {batch} completions does not "
                          f"split into engine.micro_batch={micro} x {e.nproc_per_node} processes")
    if micro % r.group_size and r.group_size % micro:
        raise RecipeError(f"recipe.group_size={r.group_size} and engine.micro_batch={micro} must divide one another")


def _initial_built(model: ModelConf) -> None:
    from pathlib import Path

    if model.source == "local" and not (model.path and Path(model.path).exists()):
        raise RecipeError(f"model.path={model.path!r} does not exist (model={model.name}); "
                          "build the initial policy first (crossed-sft mode=warmstart) or point model.path at it")
    if model.source == "hub" and not model.path:
        raise RecipeError(f"model={model.name}: no hub name in model.path")


def rollout_replicas(engine: EngineConf) -> int:
    """The vLLM engines verl starts for one arm: each spans ``engine.rollout_tp`` GPUs of one node. verl's CPU
    route runs one rollout replica over all its ranks (train/verl_cpu.py)."""
    if engine.device == "cpu":
        return 1
    return max(1, engine.nnodes * (engine.n_gpus_per_node // engine.rollout_tp))


def rollout_seed(seed: int, engine: EngineConf) -> int:
    """verl's ``rollout.seed`` for an arm seed. verl seeds replica r's vLLM engine with rollout.seed + r, so the
    arm seed times the number of replicas gives every arm seed engine seeds of its own (seed x R .. seed x R
    + R - 1), where the arm seed itself would give seeds 83 and 84 three engine seeds in common on four
    replicas; the hash and boxed arms of one seed, laid out alike, keep the same ones (matched arms, paper 001
    App. D.1)."""
    return int(seed) * rollout_replicas(engine)


def _verl_arm(cfg: TrainConf) -> None:
    """What only a verl arm refuses: LoRA, a rollout top-p below 1 (the rollout correction of App. D.1 compares
    vLLM's log-probs, renormalised after the top-p cut, with the actor's full softmax: every importance ratio
    would be biased below 1), and an arm seed whose engine seeds pass the largest seed numpy takes."""
    r, e = cfg.recipe, cfg.engine
    if r.lora.enabled:
        raise RecipeError("recipe.lora.enabled=true runs only with engine=trl")
    if r.top_p < 1:  # a relation to the engine: the schema bounds top_p to (0, 1]
        raise RecipeError(f"recipe.top_p={r.top_p} with engine=verl: vLLM's rollout log-probs are renormalised after "
                          "the top-p cut and the actor's are not, so every importance ratio of the rollout correction "
                          "is biased below 1; set recipe.top_p=1.0 (engine=trl samples with any top_p)")
    replicas = rollout_replicas(e)
    if rollout_seed(cfg.seed, e) + replicas - 1 > SEED[1]:
        raise RecipeError(f"seed={cfg.seed} with engine=verl: its {replicas} vLLM engines are seeded seed x {replicas} "
                          f"+ replica, past {SEED[1]:,}; use a seed of at most {(SEED[1] + 1) // replicas - 1:,}")


def check_train(cfg: object) -> None:
    """crossed-train's own check of its composed config (a Hydra node; ``command.hydra_app``'s ``check``): the arm's
    recipe."""
    try:
        check_config(conf_of(TrainConf, cfg))
    except RecipeError as err:
        raise ConfigError(str(err)) from None
