"""The study's last three stages behind one small interface (paper 001 §2-§3: every policy under every request,
every response scored by fixed readers, then the crossed analysis): a kind of task supplies its own
``evaluate``, ``score`` and ``analyze`` steps, and the pipeline runs whichever steps the task's kind registered.

Answer tasks (arithmetic, GSM8K, MATH500) register theirs in ``study/answer_steps.py``; code tasks, whose
responses are programs run in the sandbox, in ``study/code_steps.py``. A new kind (a source registered in
``crossed_rlvr/task_sources.py`` with its own ``kind``) registers its steps with :func:`register_steps` and runs
through the same pipeline, stage cache and run directory, with no edit here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from crossed_rlvr.conf.schema import StudyConf, TaskConf
from crossed_rlvr.errors import ConfigError
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.study.configs import StudyConfigs
from crossed_rlvr.study.plan import ArmPlan, Policy
from crossed_rlvr.study.stamps import StageCache, Stamps
from crossed_rlvr.task_sources import kind_of


class StepState(Protocol):
    """What every step reads of the run it belongs to: its config, folders and stage cache. A study is one; a
    command that evaluates given policies without training any (``crossed-audit``, ``study/audit.py``) is another."""

    cfg: StudyConf
    layout: RunLayout
    stamps: Stamps
    stage: StageCache
    study_name: str

    def say(self, text: str) -> None: ...


class StudyState(StepState, Protocol):
    """What a step reads of a whole study besides: the commands' configs and the arm plans (the answer steps read
    the arms' folders, verl's validation dumps and crossed-eval's config from them)."""

    configs: StudyConfigs
    plans: list[ArmPlan]


class TaskSteps(Protocol):
    """A kind of task's evaluate -> score -> analyze; each runs as a cached stage and returns the stage's info."""

    def evaluate(self, study: StudyState, initial: Policy, arms: list[Policy]) -> dict[str, Any]: ...

    def score(self, study: StudyState) -> dict[str, Any]: ...

    def analyze(self, study: StudyState, arms: list[Policy]) -> dict[str, Any]: ...


STEPS: dict[str, TaskSteps] = {}


def register_steps(kind: str, steps: TaskSteps) -> None:
    """Register the steps of a kind of task (the kind its sources declare in crossed_rlvr/task_sources.py)."""
    STEPS[kind] = steps


def steps_for(task: TaskConf | Mapping[str, Any]) -> TaskSteps:
    """The steps of a task config's kind."""
    kind = kind_of(task)
    if kind not in STEPS:
        source = task.get("source") if isinstance(task, Mapping) else task.source
        raise ConfigError(f"task.source={source}: its kind {kind!r} registered no study steps "
                          f"(registered: {', '.join(sorted(STEPS))})")
    return STEPS[kind]
