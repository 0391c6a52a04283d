"""Value checks of a composed config, run before the first stage of any command.

The schemas (:mod:`crossed_rlvr.conf.schema`) fix each key's type and each number's range (checked by
:mod:`crossed_rlvr.conf.ranges` first); these checks fix the values that must come from a known set, and
name the key in the first line of the error. For a study, every check a later stage would make (each arm's
training config, the evaluation's requests and wordings, the GPU) runs here too, so a bad ``evaluation.*``
fails in seconds, not after training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from crossed_rlvr.conf.schema import EngineConf, ModelConf, TrainConf, conf_of
from crossed_rlvr.errors import ConfigError, CrossedError
from crossed_rlvr.limits import SEED, Choices
from crossed_rlvr.task_sources import source_of, task_kind

if TYPE_CHECKING:
    from omegaconf import DictConfig


def _get(cfg: DictConfig, key: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, throw_on_missing=False)


def _among(cfg: DictConfig, key: str, allowed: Sequence[str]) -> None:
    """A cross-field rule's set for a list setting (the requests a task's source asks under, ...), refused as a
    field's own declared choices are (``limits.Choices``)."""
    from omegaconf import OmegaConf

    value = _get(cfg, key)
    why = Choices(allowed).refusal(key, OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
    if why:
        raise ConfigError(why)


def _exists(cfg: DictConfig, key: str) -> None:
    from pathlib import Path

    value = _get(cfg, key)
    if value and not Path(str(value)).exists():
        raise ConfigError(f"{key}={value!r} does not exist")


def _model_path(key: str, path: str | None) -> None:
    """A local model directory must exist; a hub name (``org/name``) is left to the loader."""
    from pathlib import Path

    if path and not Path(path).exists() and ("/" not in path or path.startswith((".", "/"))):
        raise ConfigError(f"{key}={path!r} does not exist (and is not a hub name org/name)")


def common(cfg: DictConfig) -> None:
    """What every command checks beyond each field's declared range and choices (conf/ranges.py): the files named."""
    _exists(cfg, "task.path")
    _exists(cfg, "task.train_path")


def needs_gpu(cfg: DictConfig, what: str) -> None:
    """``eval=vllm`` runs vLLM: refuse it before any stage on a machine where it cannot start."""
    if _get(cfg, "eval.backend") != "vllm":
        return
    if (_get(cfg, "distribute.workers") or 0) > 0 and _get(cfg, "distribute.address"):
        return  # generation runs on the cluster's workers; the driver (a head node) needs no GPU
    import importlib.util

    import torch

    from crossed_rlvr.machine import cpu_build

    missing = [x for x, ok in (("a GPU (torch.cuda.is_available() is False)", torch.cuda.is_available() or cpu_build()),
                               ("the vllm package (pip install -e '.[gpu]')", importlib.util.find_spec("vllm")))
               if not ok]
    if missing:
        raise ConfigError(f"eval.backend=vllm ({what}) needs {' and '.join(missing)}; on a CPU machine use eval=cpu")


def check_distribute(cfg: DictConfig) -> None:
    """Ray workers of the crossed evaluation (eval/generate/workers.py)."""
    if _get(cfg, "distribute") is None:
        return
    if _get(cfg, "eval.backend") == "vllm" and _get(cfg, "distribute.workers") and _get(cfg, "distribute.gpus_per_worker"):
        tp, gpus = _get(cfg, "eval.tensor_parallel_size"), _get(cfg, "distribute.gpus_per_worker")
        if int(tp) != gpus:
            raise ConfigError(f"distribute.gpus_per_worker={gpus:g} but eval.tensor_parallel_size={tp}: each worker's "
                              "vLLM engine spans exactly its own GPUs")


class RecipeError(CrossedError, ValueError):
    """A GRPO recipe that cannot train (raised before any model is loaded)."""


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


def check_train(cfg: DictConfig) -> None:
    common(cfg)
    try:
        check_config(conf_of(TrainConf, cfg))
    except RecipeError as err:
        raise ConfigError(str(err)) from None


def check_eval(cfg: DictConfig) -> None:
    from crossed_rlvr.records import TRAINED
    from crossed_rlvr.rewards.conventions import REQUESTS, TEMPLATES

    common(cfg)
    needs_gpu(cfg, "crossed-eval generates with it")
    check_distribute(cfg)
    _evaluation_requests(cfg, "requests", "templates", REQUESTS, TEMPLATES)
    names: dict[str, int] = {}
    for k, pol in enumerate(cfg.policies or []):
        _model_path(f"policies[{k}].path", pol.path)
        if pol.training_convention != "initial" and pol.training_convention not in TRAINED:
            raise ConfigError(f"policies[{k}].training_convention={pol.training_convention!r} is unknown; expected "
                              f"initial or one of {', '.join(TRAINED)}")
        if (pol.training_convention == "initial") != (pol.train_seed is None):
            raise ConfigError(f"policies[{k}].train_seed must be null exactly when training_convention is initial")
        if pol.name in names:  # its cells are files named after it: a second one would take the first's
            raise ConfigError(f"policies[{k}].name={pol.name!r} is also policies[{names[pol.name]}].name; "
                              "every policy needs a name of its own")
        names[pol.name] = k
        _policy_name_agrees(f"policies[{k}]", pol.name, pol.training_convention, pol.train_seed)


def _evaluation_requests(cfg: DictConfig, requests: str, templates: str, math_requests: Sequence[str],
                         wordings: tuple[str, ...]) -> None:
    """A code task is asked for programs in the code delimiters (``fence``, ``begin_done``) in the original wording;
    every other task for answers in the answer conventions."""
    source = source_of(cfg.task)  # a source asks its items under its own requests and wordings
    _among(cfg, requests, source.requests if source is not None else math_requests)
    _among(cfg, templates, source.templates if source is not None else wordings)


def _policy_name_agrees(key: str, name: str, convention: str, seed: int | None) -> None:
    from crossed_rlvr.records import name_disagreement

    why = name_disagreement(name, convention, seed)
    if why is not None:
        raise ConfigError(f"{key}: {why}")


def check_sft(cfg: DictConfig) -> None:
    common(cfg)
    if cfg.mode == "warmstart":  # only the warm start reads them
        _warmstart_requests(cfg, "warmstart")


def _warmstart_requests(cfg: DictConfig, key: str) -> None:
    """The warm start's requests and wordings, those of the task's kind (crossed_rlvr/task_sources.py): the code
    delimiters on a code task (its targets are the training tasks' programs in them, sft/run.py), the answer
    conventions on every other task; the request-following band measures answer payloads only."""
    kind = task_kind(cfg.task)
    _among(cfg, f"{key}.requests", kind.requests)
    _among(cfg, f"{key}.templates", kind.templates)
    band = cfg[key].band
    if not kind.band and band.every > 0:
        raise ConfigError(f"{key}.band.every={band.every}: the request-following band measures answer payloads; "
                          f"on {kind.name} task {cfg.task.name} set {key}.band.every=0")


def check_study(cfg: DictConfig) -> None:
    """Every check of the study's own settings, before the first stage starts (the GPU check included); the arms'
    crossed-train configs are checked when the study plans them (``study/plan.py``), also before any stage."""
    from crossed_rlvr.rewards.conventions import CONVENTIONS, REQUESTS, TEMPLATES

    common(cfg)
    if cfg.stages == "all" and not cfg.requires_gpu:  # GPU presets: check_device
        needs_gpu(cfg, "the study's evaluation stage generates with it")
    if cfg.initial.build == "warmstart":  # only the warm start reads them
        _warmstart_requests(cfg, "initial")
    if cfg.arms.kind == "given" and not cfg.arms.get("from_run"):
        raise ConfigError("arms.kind=given evaluates the arms another study trained: name its run directory with "
                          "arms.from_run=DIR")
    # the study's GRPO arms train to its kind's conventions; SFT and given arms are named by the answer conventions
    _among(cfg, "arms.conventions", task_kind(cfg.task).conventions if cfg.arms.kind == "grpo" else tuple(CONVENTIONS))
    _among(cfg, "rehearsal.conventions", tuple(cfg.arms.conventions))
    if not cfg.arms.seeds:
        raise ConfigError("arms.seeds=[] is empty; give at least one training seed")
    check_distribute(cfg)
    _evaluation_requests(cfg, "evaluation.requests", "evaluation.templates", REQUESTS, TEMPLATES)
    if cfg.initial.build == "warmstart" and cfg.model.source == "local" and not cfg.model.get("tiny"):
        _model_path("model.path", cfg.model.path)  # a given local model to warm-start (the tiny one is built)
    if cfg.initial.build == "given" and cfg.model.source == "local":
        _model_path("model.path", cfg.model.path)
    # each arm's crossed-train config is checked where the study plans its arms (study/plan.py), once


def check_audit(cfg: DictConfig) -> None:
    """``crossed-audit``: its requests and wordings known; its policies are checked by the audit's own check."""
    from crossed_rlvr.rewards.conventions import REQUESTS, TEMPLATES

    common(cfg)
    needs_gpu(cfg, "crossed-audit generates with it")
    check_distribute(cfg)
    if task_kind(cfg.task).audit_templates is None:  # else asked under its own requests (study/audit.py)
        _evaluation_requests(cfg, "evaluation.requests", "evaluation.templates", REQUESTS, TEMPLATES)
    # the policies given: the audit's own check (study/audit.py: check_given)


CHECKS = {"crossed-train": check_train, "crossed-eval": check_eval, "crossed-sft": check_sft,
          "crossed-study": check_study, "crossed-audit": check_audit}


COMMAND_SCHEMA = {"crossed-train": "crossed_train", "crossed-eval": "crossed_eval", "crossed-sft": "crossed_sft",
                  "crossed-study": "crossed_study", "crossed-audit": "crossed_audit"}


def check_command(command: str, cfg: DictConfig) -> None:
    """Every check of a composed config, in order: ranges, relations, then the command's own value checks."""
    from crossed_rlvr.conf.ranges import check_ranges, check_relations

    check_ranges(cfg, COMMAND_SCHEMA[command])
    check_relations(cfg, COMMAND_SCHEMA[command])
    CHECKS[command](cfg)
