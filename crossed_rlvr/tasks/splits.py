"""Train, dev and test splits of the hub tasks (GSM8K, MATH-500): every preset gets a validation split.

GSM8K has only train and test; MATH-500 is a test set drawn from MATH's test split, whose training
problems come from MATH's train split. The ``dev`` split is a fixed seeded held-out part of the
train rows (``task.dev_items`` rows, ``task.dev_seed``), and ``train`` is the rest, so training,
validation and test items are disjoint: train and dev come from the train source, test from the
test source, and any train row whose question also appears in the test split is dropped from both.
Ids name the source row (``train-<row>``), so a dev item never collides with a test item id.

Sources: a local JSON Lines / Parquet file (``task.path`` for test, ``task.train_path`` for the train
rows), or the Hugging Face hub when those are null.
"""

from __future__ import annotations

import random
from typing import Any

from crossed_rlvr.tasks.items import ItemFileError
from crossed_rlvr.tasks.loaders import load_gsm8k, load_math500

# Hub sources of each task's training rows (MATH-500's are MATH's train split).
TRAIN_HUB = {"gsm8k": ("openai/gsm8k", "main", "train"),
             "math500": ("DigitalLearningGmbH/MATH-lighteval", "default", "train")}
SPLITS = ("train", "dev", "test")


def _norm(question: str) -> str:
    return " ".join(question.split()).lower()


def held_out(rows: list[dict[str, Any]], n_dev: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, dev): ``n_dev`` rows drawn with ``random.Random(seed)``; both keep the file order."""
    if n_dev >= len(rows):
        raise ItemFileError(f"task.dev_items={n_dev} leaves no training rows ({len(rows)} rows in the train source)")
    chosen = set(random.Random(seed).sample(range(len(rows)), n_dev))
    return ([r for k, r in enumerate(rows) if k not in chosen], [r for k, r in enumerate(rows) if k in chosen])


def load_split(task: Any) -> list[dict[str, Any]]:
    """The items of ``task.split`` for a hub task (see the module docstring)."""
    split = str(task.get("split", "test"))
    if split not in SPLITS:
        raise ItemFileError(f"task={task.name}: split={split!r} is unknown; expected one of {', '.join(SPLITS)}")
    loader = {"gsm8k": load_gsm8k, "math500": load_math500}[task.source]
    test = loader(task.get("path"), "test")
    if split == "test":
        return test
    train_path = task.get("train_path")
    rows = loader(train_path, "train", hub=None if train_path else TRAIN_HUB[task.source])
    seen = {_norm(it["question"]) for it in test}
    rows = [{**it, "item_id": f"train-{k}", "source_row": k, "split": split}
            for k, it in enumerate(rows) if _norm(it["question"]) not in seen]
    train, dev = held_out(rows, int(task.get("dev_items", 200)), int(task.get("dev_seed", 20260919)))
    return dev if split == "dev" else train


def split_record(task: Any) -> dict[str, Any]:
    """How the task's splits were made, for the run's item manifest."""
    return {"source": task.source, "test": task.get("path") or "hub", "train": task.get("train_path") or "hub",
            "dev": {"held_out_from": "train", "n": int(task.get("dev_items", 200)),
                    "seed": int(task.get("dev_seed", 20260919))}}
