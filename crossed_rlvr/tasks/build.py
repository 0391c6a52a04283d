"""The items of one task split, from the task's config (paper 001 §3, App. C.1).

One builder for every stage: the evaluator freezes them into the run's item file, the trainers
draw their training rows from the ``train`` split, verl's validation from ``dev``.
"""

from __future__ import annotations

from typing import Any

from crossed_rlvr.errors import CrossedError


class TaskSourceError(CrossedError, ValueError):
    pass


def build_items(task_cfg: Any) -> list[dict[str, Any]]:
    """Items of ``task_cfg.split``: generated (arithmetic probe) or loaded (GSM8K, MATH-500)."""
    if task_cfg.source == "arith":
        from crossed_rlvr.tasks.arith import make_splits

        return make_splits(task_cfg.n_test, task_cfg.n_dev, task_cfg.seed, tuple(task_cfg.get("strata") or (2, 3, 4)),
                           int(task_cfg.get("max_operand") or 30),
                           tuple(task_cfg.get("ops") or ("+", "-", "*", "/")))[task_cfg.split]
    if task_cfg.source in ("gsm8k", "math500"):
        from crossed_rlvr.tasks.splits import load_split

        return load_split(task_cfg)
    from crossed_rlvr.tasks.choice import LOADERS, load_benchmark

    if task_cfg.source in LOADERS:  # paper 000's benchmarks: test split only (they are evaluated, not trained on)
        if task_cfg.get("split", "test") != "test":
            raise TaskSourceError(f"task={task_cfg.name}: only the test split is loaded for {task_cfg.source}")
        return load_benchmark(task_cfg.source, task_cfg.get("path"), task_cfg.get("hub_config"))
    raise TaskSourceError(f"task.source={task_cfg.source!r} is unknown; expected arith, gsm8k, math500 or one of "
                          f"{', '.join(LOADERS)}")
