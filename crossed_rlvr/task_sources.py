"""The task sources (``task.source``), one registry, lm-eval style: each source declares its kind, how its items
are loaded, whether its training rows are frozen from a hub split, and the requests and wordings it is asked
under. Every stage asks this registry instead of naming sources (paper 001 §3: answer tasks are read by the
reader panel; App. D.3: code tasks are programs run in the sandbox).

It sits in the base layer, so that the config checks (``conf/``), the item loaders (``tasks/``), the trainers and
the study all read the same declaration. A kind other than ``answer`` and ``code`` comes with its own study steps
(``study/steps.py:register_steps``); a package that adds one registers its source here and its steps there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Protocol

from crossed_rlvr.rewards.code import CODE_CONVENTIONS
from crossed_rlvr.rewards.conventions import REQUESTS, TEMPLATES

ANSWER, CODE = "answer", "code"


class TaskConf(Protocol):
    """What a source lookup reads of a ``task`` block (conf/schema.py's ``TaskConf``; this module sits below the
    config layer, so it names the fields, not the class): the loaders themselves take the schema's class."""

    source: str
    split: str


@dataclass(frozen=True)
class TaskSource:
    """What one ``task.source`` is."""

    name: str
    kind: str = ANSWER  # the study steps and reward programs its items take
    items: str | None = None  # "module:function" loading a split's items from the task config (lazy import)
    frozen_train_rows: bool = False  # training rows cut from a hub split, frozen by content (paper 001 §3, B.1)
    requests: Sequence[str] = REQUESTS  # the requests its items may be asked under
    templates: tuple[str, ...] = TEMPLATES  # the wordings of those requests

    def load(self, task_cfg: TaskConf) -> list[dict[str, Any]]:
        """The items of ``task_cfg.split``, from the loader the source declared."""
        if self.items is None:
            raise ValueError(f"task.source={self.name}: declares no item loader")
        module, _, function = self.items.partition(":")
        return getattr(import_module(module), function)(task_cfg)


SOURCES: dict[str, TaskSource] = {}


def register_source(source: TaskSource) -> TaskSource:
    """Add (or replace) a source; returns it."""
    SOURCES[source.name] = source
    return source


def source_of(task_cfg: TaskConf | Mapping[str, Any]) -> TaskSource | None:
    """The registered source of a task config, None for a source nobody registered."""
    source = task_cfg.get("source") if isinstance(task_cfg, Mapping) else task_cfg.source
    return SOURCES.get(str(source))


def kind_of(task_cfg: TaskConf | Mapping[str, Any]) -> str:
    """The kind of a task config's items (``answer`` unless its source declares another)."""
    source = source_of(task_cfg)
    return source.kind if source is not None else ANSWER


def is_code(task_cfg: TaskConf | Mapping[str, Any]) -> bool:
    """Programs scored by execution (App. D.3), not answers read from text."""
    return kind_of(task_cfg) == CODE


def freezes_train_rows(task_cfg: TaskConf | Mapping[str, Any]) -> bool:
    """The source's training rows come from a hub split, frozen by content on first use."""
    source = source_of(task_cfg)
    return source is not None and source.frozen_train_rows


for _source in (
    TaskSource("arith", items="crossed_rlvr.tasks.build:arith_items"),
    TaskSource("gsm8k", items="crossed_rlvr.tasks.splits:load_split", frozen_train_rows=True),
    TaskSource("math500", items="crossed_rlvr.tasks.splits:load_split", frozen_train_rows=True),
    TaskSource("evalplus", kind=CODE, requests=tuple(CODE_CONVENTIONS), templates=("original",)),
    # paper 000's benchmarks (tasks/choice.py), evaluated and re-scored, never trained on
    *(TaskSource(name, items="crossed_rlvr.tasks.build:benchmark_items")
      for name in ("mmlu", "mmlu_pro", "arc_challenge", "aqua_rat", "sat_math", "bbh")),
):
    register_source(_source)
