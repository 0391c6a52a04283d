"""The items of one task split, from the task's config (paper 001 §3, App. C.1).

One builder for every stage: the evaluator freezes them into the run's item file, the trainers
draw their training rows from the ``train`` split, verl's validation from ``dev``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.task_sources import SOURCES, source_of

if TYPE_CHECKING:
    from crossed_rlvr.conf.schema import TaskConf


class TaskSourceError(CrossedError, ValueError):
    pass


def arith_items(task_cfg: TaskConf) -> list[dict[str, Any]]:
    """The arithmetic probe's split, generated from its seed (task_sources: ``arith``)."""
    from crossed_rlvr.tasks.arith import make_splits

    strata, max_operand, ops = probe_shape(task_cfg)
    return make_splits(required(task_cfg, "n_test"), required(task_cfg, "n_dev"), required(task_cfg, "seed"),
                       strata, max_operand, ops)[task_cfg.split]


def probe_shape(task_cfg: TaskConf) -> tuple[tuple[int, ...], int, tuple[str, ...]]:
    """The arithmetic probe's strata, largest operand and operations; a task that leaves one unset (null) takes the
    probe's own (App. C.1: 2-4 operations on operands up to 30, all four operations)."""
    from crossed_rlvr.tasks.arith import MAX_OPERAND, OPS, STRATA

    return (tuple(int(s) for s in task_cfg.strata or STRATA), int(task_cfg.max_operand or MAX_OPERAND),
            tuple(task_cfg.ops or OPS))


def required(task_cfg: TaskConf, key: str) -> int:
    """An arithmetic probe's setting that has no default (its task file sets it)."""
    value = getattr(task_cfg, key)
    if value is None:
        raise TaskSourceError(f"task={task_cfg.name}: task.{key} is not set; the arithmetic probe needs it")
    return int(value)


def benchmark_items(task_cfg: TaskConf) -> list[dict[str, Any]]:
    """One of paper 000's benchmarks (task_sources: ``mmlu`` ... ``bbh``): the test split only (they are evaluated,
    not trained on)."""
    from crossed_rlvr.tasks.choice import load_benchmark

    if task_cfg.split != "test":
        raise TaskSourceError(f"task={task_cfg.name}: only the test split is loaded for {task_cfg.source}")
    return load_benchmark(task_cfg.source, task_cfg.path, task_cfg.hub_config)


def build_items(task_cfg: TaskConf) -> list[dict[str, Any]]:
    """Items of ``task_cfg.split``, from the loader its source registered (crossed_rlvr/task_sources.py)."""
    source = source_of(task_cfg)
    if source is not None and source.items is not None:
        return source.load(task_cfg)
    known = [name for name, s in SOURCES.items() if s.items is not None]
    raise TaskSourceError(f"task.source={task_cfg.source!r} has no item loader; expected one of {', '.join(known)}")
