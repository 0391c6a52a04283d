"""The items of one task split, from the task's config (paper 001 §3, App. C.1).

One builder for every stage: the evaluator freezes them into the run's item file, the trainers
draw their training rows from the ``train`` split, verl's validation from ``dev``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.task_sources import SOURCES, source_of

if TYPE_CHECKING:
    from omegaconf import DictConfig  # a task's config node, read by key (the schema's TaskConf, as composed)


class TaskSourceError(CrossedError, ValueError):
    pass


def arith_items(task_cfg: DictConfig) -> list[dict[str, Any]]:
    """The arithmetic probe's split, generated from its seed (task_sources: ``arith``)."""
    from crossed_rlvr.tasks.arith import make_splits

    return make_splits(task_cfg.n_test, task_cfg.n_dev, task_cfg.seed, tuple(task_cfg.get("strata") or (2, 3, 4)),
                       int(task_cfg.get("max_operand") or 30),
                       tuple(task_cfg.get("ops") or ("+", "-", "*", "/")))[task_cfg.split]


def benchmark_items(task_cfg: DictConfig) -> list[dict[str, Any]]:
    """One of paper 000's benchmarks (task_sources: ``mmlu`` ... ``bbh``): the test split only (they are evaluated,
    not trained on)."""
    from crossed_rlvr.tasks.choice import load_benchmark

    if task_cfg.split != "test":
        raise TaskSourceError(f"task={task_cfg.name}: only the test split is loaded for {task_cfg.source}")
    return load_benchmark(task_cfg.source, task_cfg.get("path"), task_cfg.get("hub_config"))


def build_items(task_cfg: DictConfig) -> list[dict[str, Any]]:
    """Items of ``task_cfg.split``, from the loader its source registered (crossed_rlvr/task_sources.py)."""
    source = source_of(task_cfg)
    if source is not None and source.items is not None:
        return source.load(task_cfg)
    known = [name for name, s in SOURCES.items() if s.items is not None]
    raise TaskSourceError(f"task.source={task_cfg.source!r} has no item loader; expected one of {', '.join(known)}")
