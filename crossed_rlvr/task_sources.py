"""The task sources (``task.source``), one registry, lm-eval style: each source declares its kind, how its items
are loaded, whether its training rows are frozen from a hub split, and the requests and wordings it is asked
under. Every stage asks this registry instead of naming sources (paper 001 §3: answer tasks are read by the
reader panel; App. D.3: code tasks are programs run in the sandbox).

It sits in the base layer, so that the config checks (``conf/``), the item loaders (``tasks/``), the trainers and
the study all read the same declaration. A kind other than ``answer`` and ``code`` comes with its own study steps
(``study/steps.py:register_steps``); a package that adds one registers its source here and its steps there.

What differs between the kinds is declared here too (:class:`TaskKind`): the conventions its arms train to, how
its prompts are written, how a cell is summed up, how its training, validation and warm-start rows are built.
Every stage asks :func:`task_kind` instead of branching on the kind, so a code cell is an ordinary cell of
``crossed-eval``'s design (resumed, spread over Ray workers, seeded by the same rule as an answer cell).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Protocol

from crossed_rlvr.rewards.code import CODE_CONVENTIONS, CODE_TEMPLATES
from crossed_rlvr.rewards.conventions import CONVENTIONS, REQUESTS, TEMPLATES

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


@dataclass(frozen=True)
class TaskKind:
    """What differs between kinds of task, behind one declaration (paper 001 §3 for answers, App. D.3 for code).

    ``hooks`` name each step's function as ``module:function`` (imported when asked, as a source's item loader is,
    so that this base module names later stages without importing them):

    - ``messages(question, request, template, system)``: the chat turns a policy is asked under;
    - ``cell_measures(records, request)``: a finished cell's own rates for the run's summary;
    - ``run_facts(task_cfg)``: what ``run.json`` records beside the item file (optional);
    - ``training_rows(cfg)``, ``validation_rows(cfg)``: a GRPO arm's stream and its crossed validation;
    - ``warmstart_rows(cfg, follow, rng)``: the warm start's supervised rows;
    - ``arm_check(cfg)``: what a GRPO arm on this kind must set (optional).
    """

    name: str
    conventions: tuple[str, ...]  # what its arms train to (and an audit's policies were trained to)
    requests: Sequence[str]  # what its warm start asks for
    templates: tuple[str, ...]  # the wordings its warm start may use
    band: bool  # whether the warm start's request-following band can measure its payloads
    audit_templates: tuple[str, ...] | None  # an audit asks every convention in these wordings; None: as configured
    hooks: Mapping[str, str] = field(default_factory=dict)

    def hook(self, step: str) -> Callable[..., Any] | None:
        """The function the kind declared for ``step``, None for an optional step it leaves out."""
        where = self.hooks.get(step)
        if where is None:
            return None
        module, _, function = where.partition(":")
        return getattr(import_module(module), function)

    def step(self, step: str) -> Callable[..., Any]:
        """The function of a step every kind declares."""
        fn = self.hook(step)
        if fn is None:
            raise ValueError(f"task kind {self.name}: declares no {step}")
        return fn


KINDS: dict[str, TaskKind] = {
    ANSWER: TaskKind(ANSWER, tuple(CONVENTIONS), REQUESTS, TEMPLATES, band=True, audit_templates=None, hooks={
        "messages": "crossed_rlvr.prompts:messages",
        "cell_measures": "crossed_rlvr.eval.generate.plan:answer_measures",
        "training_rows": "crossed_rlvr.train.recipe:answer_training_rows",
        "validation_rows": "crossed_rlvr.train.verl_engine:answer_validation_rows",
        "warmstart_rows": "crossed_rlvr.sft.run:answer_warmstart_rows"}),
    # programs under the code delimiters, read by the code readers and run in the sandbox (App. D.3)
    CODE: TaskKind(CODE, tuple(CODE_CONVENTIONS), tuple(CODE_CONVENTIONS), CODE_TEMPLATES, band=False, audit_templates=("original",), hooks={
        "messages": "crossed_rlvr.tasks.code:messages",
        "cell_measures": "crossed_rlvr.tasks.code:cell_measures",
        "run_facts": "crossed_rlvr.tasks.code:run_facts",
        "training_rows": "crossed_rlvr.train.recipe:code_training_rows",
        "validation_rows": "crossed_rlvr.train.verl_engine:code_validation_rows",
        "warmstart_rows": "crossed_rlvr.sft.run:code_warmstart_rows",
        "arm_check": "crossed_rlvr.tasks.code:arm_check"}),
}


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


def task_kind(task_cfg: TaskConf | Mapping[str, Any]) -> TaskKind:
    """What a task config's kind does differently; a kind that declared nothing here (one that brings only its own
    study steps) is checked and prompted as an answer task."""
    return KINDS.get(kind_of(task_cfg), KINDS[ANSWER])


def freezes_train_rows(task_cfg: TaskConf | Mapping[str, Any]) -> bool:
    """The source's training rows come from a hub split, frozen by content on first use."""
    source = source_of(task_cfg)
    return source is not None and source.frozen_train_rows


for _source in (
    TaskSource("arith", items="crossed_rlvr.tasks.build:arith_items"),
    TaskSource("gsm8k", items="crossed_rlvr.tasks.splits:load_split", frozen_train_rows=True),
    TaskSource("math500", items="crossed_rlvr.tasks.splits:load_split", frozen_train_rows=True),
    TaskSource("evalplus", kind=CODE, items="crossed_rlvr.tasks.code:code_items", requests=tuple(CODE_CONVENTIONS),
               templates=("original",)),
    # paper 000's benchmarks (tasks/choice.py), evaluated and re-scored, never trained on
    *(TaskSource(name, items="crossed_rlvr.tasks.build:benchmark_items")
      for name in ("mmlu", "mmlu_pro", "arc_challenge", "aqua_rat", "sat_math", "bbh")),
):
    register_source(_source)
