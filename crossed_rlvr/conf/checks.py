"""Value checks of a composed config, run before the first stage of any command.

The schemas (:mod:`crossed_rlvr.conf.schema`) fix each key's type and each number's range (checked by
:mod:`crossed_rlvr.conf.ranges` first); these checks fix the values that must come from a known set, and
name the key in the first line of the error. For a study, every check a later stage would make (the evaluation's
requests and wordings, the GPU) runs here too, so a bad ``evaluation.*`` fails in seconds, not after training; each
arm's recipe is the train layer's check (``train/checks.py``), run where crossed-train starts and where a study
plans its arms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from crossed_rlvr.conf.ranges import select
from crossed_rlvr.errors import ConfigError
from crossed_rlvr.limits import Choices
from crossed_rlvr.task_sources import source_of, task_kind

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from crossed_rlvr.conf.schema import EvalCommandConf


def _among(cfg: DictConfig, key: str, allowed: Sequence[str]) -> None:
    """A cross-field rule's set for a list setting (the requests a task's source asks under, ...), refused as a
    field's own declared choices are (``limits.Choices``)."""
    from omegaconf import OmegaConf

    value = select(cfg, key)
    why = Choices(allowed).refusal(key, OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
    if why:
        raise ConfigError(why)


def _exists(cfg: DictConfig, key: str) -> None:
    from pathlib import Path

    value = select(cfg, key)
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
    if select(cfg, "eval.backend") != "vllm":
        return
    if (select(cfg, "distribute.workers") or 0) > 0 and select(cfg, "distribute.address"):
        return  # generation runs on the cluster's workers; the driver (a head node) needs no GPU
    import importlib.util

    import torch

    from crossed_rlvr.machine import cpu_build

    missing = [x for x, ok in (("a GPU (torch.cuda.is_available() is False)", torch.cuda.is_available() or cpu_build()),
                               ("the vllm package (pip install -e '.[gpu]')", importlib.util.find_spec("vllm")))
               if not ok]
    if missing:
        raise ConfigError(f"eval.backend=vllm ({what}) needs {' and '.join(missing)}; on a CPU machine use eval=cpu")


def check_distribute(cfg: DictConfig | EvalCommandConf) -> None:
    """Ray workers of the crossed evaluation (eval/generate/workers.py), of a composed config or a typed one (read by
    attribute alike: ``run_eval`` checks again for callers that composed no command)."""
    ev, dist = cfg.eval, cfg.distribute
    if ev.backend == "vllm" and dist.workers and dist.gpus_per_worker and int(ev.tensor_parallel_size) != dist.gpus_per_worker:
        raise ConfigError(f"distribute.gpus_per_worker={dist.gpus_per_worker:g} but eval.tensor_parallel_size="
                          f"{ev.tensor_parallel_size}: each worker's vLLM engine spans exactly its own GPUs")


def check_train(cfg: DictConfig) -> None:
    """crossed-train's checks here: the files named; an arm's recipe is checked by the train layer's own check
    (``train/checks.py``), which crossed-train's door runs after these."""
    common(cfg)


def check_eval(cfg: DictConfig) -> None:
    from crossed_rlvr.records import TRAINED, name_disagreement

    common(cfg)
    needs_gpu(cfg, "crossed-eval generates with it")
    check_distribute(cfg)
    _evaluation_requests(cfg, "requests", "templates")
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
        if (why := name_disagreement(pol.name, pol.training_convention, pol.train_seed)) is not None:
            raise ConfigError(f"policies[{k}]: {why}")


def _evaluation_requests(cfg: DictConfig, requests: str, templates: str) -> None:
    """A code task is asked for programs in the code delimiters (``fence``, ``begin_done``) in the original wording;
    every other task for answers in the answer conventions."""
    from crossed_rlvr.rewards.conventions import REQUESTS, TEMPLATES

    source = source_of(cfg.task)  # a source asks its items under its own requests and wordings
    _among(cfg, requests, source.requests if source is not None else REQUESTS)
    _among(cfg, templates, source.templates if source is not None else TEMPLATES)


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
    from crossed_rlvr.rewards.conventions import CONVENTIONS

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
    _evaluation_requests(cfg, "evaluation.requests", "evaluation.templates")
    if cfg.initial.build == "warmstart" and cfg.model.source == "local" and not cfg.model.get("tiny"):
        _model_path("model.path", cfg.model.path)  # a given local model to warm-start (the tiny one is built)
    if cfg.initial.build == "given" and cfg.model.source == "local":
        _model_path("model.path", cfg.model.path)
    # each arm's crossed-train config is checked where the study plans its arms (study/plan.py), once


def check_audit(cfg: DictConfig) -> None:
    """``crossed-audit``: its requests and wordings known; its policies are checked by the audit's own check."""
    common(cfg)
    needs_gpu(cfg, "crossed-audit generates with it")
    check_distribute(cfg)
    if task_kind(cfg.task).audit_templates is None:  # else asked under its own requests (study/audit.py)
        _evaluation_requests(cfg, "evaluation.requests", "evaluation.templates")
    # the policies given: the audit's own check (study/audit.py: check_given)


CHECKS = {"crossed-train": check_train, "crossed-eval": check_eval, "crossed-sft": check_sft,
          "crossed-study": check_study, "crossed-audit": check_audit}


def check_command(command: str, cfg: DictConfig) -> None:
    """Every check of a composed config, in order: ranges, relations, then the command's own value checks."""
    from crossed_rlvr.conf.ranges import check_ranges, check_relations

    schema = command.replace("-", "_")  # crossed-study's schema is SCHEMAS["crossed_study"]
    check_ranges(cfg, schema)
    check_relations(cfg, schema)
    CHECKS[command](cfg)
