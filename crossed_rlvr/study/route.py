"""Where the study trains its GRPO arms, decided once where the arms are planned (study/plan.py ``plan_arms``)
and carried by each :class:`~crossed_rlvr.study.plan.ArmPlan`: the arms stage (study/arms.py) follows it and asks
nothing of the machine itself.
"""

from __future__ import annotations

from enum import StrEnum

from crossed_rlvr.conf.schema import StudyConf


class ArmRoute(StrEnum):
    """How one arm is trained."""

    # TRL in a process of its own per arm, one arm after another: torchrun over engine.nproc_per_node, or one
    # process on a GPU, so that the evaluation's vLLM later starts on memory that training no longer holds
    OWN_PROCESS = "own-process"
    # crossed-train in the study's own process: TRL on this CPU, or verl's launch scripts written (and run, with
    # engine.launch) for each arm in turn
    IN_STUDY = "in-study"
    # arms.parallel spawned worker processes side by side, one CPU thread each
    WORKERS = "workers"


def arm_route(cfg: StudyConf) -> ArmRoute:
    """The route of the study's arms: a TRL arm on several processes, or on a GPU one at a time, runs in a process
    of its own; one arm at a time otherwise runs in the study's process; ``arms.parallel`` > 1 in worker processes.
    Whether a GPU is visible is read here, once, when the arms are planned."""
    parallel = max(1, int(cfg.arms.parallel))
    if cfg.engine.name == "trl" and (int(cfg.engine.nproc_per_node or 1) > 1 or (parallel == 1 and _gpu())):
        return ArmRoute.OWN_PROCESS
    return ArmRoute.IN_STUDY if parallel == 1 else ArmRoute.WORKERS


def _gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())
