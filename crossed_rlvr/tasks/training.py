"""Training items of a task, disjoint from its evaluation items (paper 001 App. C.1, D.1, D.2).

One builder for every stage that trains (SFT warm start, SFT arms, GRPO arms). For the arithmetic
probe, items are generated with their own seed and every expression of the probe's dev and test
splits is excluded; for GSM8K/MATH-500 the task's train split is loaded.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from crossed_rlvr.errors import CrossedError

if TYPE_CHECKING:
    from crossed_rlvr.conf.schema import TaskConf


class TrainItemsError(CrossedError, ValueError):
    pass


# The seed of each stage's draw of training items, named once. The SFT warm start and the SFT marker arms draw
# with one; the GRPO arms with another, and the difficulty strata (train/strata.py) are estimated on exactly the
# GRPO arms' items, so the study draws them with GRPO_ITEM_SEED too. Changing one changes every study's items.
SFT_ITEM_SEED = 7
GRPO_ITEM_SEED = 101


def stratum_counts(strata: list[int], n: int | None, per_stratum: dict | None) -> dict[int, int]:
    """Items per stratum: the task's own counts (scaled down to ``n`` if smaller), else ``n`` split evenly."""
    if per_stratum:
        per = {int(k): int(v) for k, v in dict(per_stratum).items()}
        total = sum(per.values())
        if n is None or n >= total:
            return per
        scaled = {k: v * n // total for k, v in per.items()}
        largest = max(per, key=lambda k: per[k])
        scaled[largest] += n - sum(scaled.values())  # rounding goes to the largest stratum
        return scaled
    n = 4000 if n is None else n
    return {s: n // len(strata) + (1 if k < n % len(strata) else 0) for k, s in enumerate(strata)}


def train_items(task: TaskConf, n: int | None = None, seed: int = GRPO_ITEM_SEED) -> list[dict[str, Any]]:
    """Items to train on, ids ``train-<k>``; ``seed`` is added to the task's seed for arithmetic items."""
    from crossed_rlvr.tasks.build import build_items, probe_shape, required

    if task.source != "arith":
        items = build_items(dataclasses.replace(task, split="train"))
        return items[:n] if n else items
    from crossed_rlvr.tasks.arith import generate, make_splits

    strata, max_operand, ops = probe_shape(task)
    task_seed = required(task, "seed")
    probe = make_splits(required(task, "n_test"), required(task, "n_dev"), task_seed, strata, max_operand, ops)
    exclude = {it["expression"] for split in probe.values() for it in split}  # never train on probe items
    counts = stratum_counts(list(strata), n, task.train_per_stratum)
    try:
        items = generate(counts, task_seed + int(seed), exclude, max_operand, ops)
    except ValueError as err:
        raise TrainItemsError(f"task={task.name}: {err}; set task.train_per_stratum to counts that exist") from None
    for k, it in enumerate(items):
        it["item_id"] = f"train-{k}"
    return items
