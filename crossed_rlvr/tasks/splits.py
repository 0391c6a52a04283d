"""Train, dev and test splits of the hub tasks (GSM8K, MATH-500): every preset gets a validation split.

GSM8K has only train and test; MATH-500 is a test set drawn from MATH's test split, whose training
problems come from MATH's train split. The ``dev`` split is a fixed seeded held-out part of the
train rows (``task.dev_items`` rows, ``task.dev_seed``), and ``train`` is the rest, so training,
validation and test items are disjoint: train and dev come from the train source, test from the
test source, and any train row whose question also appears in the test split is dropped from both.
Ids name the source row (``train-<row>``), so a dev item never collides with a test item id.

Sources: a local JSON Lines / Parquet file (``task.path`` for test, ``task.train_path`` for the train
rows), or the Hugging Face hub when those are null.

Frozen training rows (paper 001 §3, B.1, D.1: "the 7,377 frozen GSM8K training rows"): ``task.train_rows``
names a file of the training rows themselves (the source's own fields), used as the train split exactly as
it stands, and ``task.train_rows_sha256`` pins its content. A study freezes its train split into such a
file on first use (:func:`freeze_train_rows`) and hands the file and its hash to every arm, so both arms of
a pair train on rows identified by content, not by a hub revision. The paper does not say which 96 of
GSM8K's 7,473 train rows it dropped; bring its rows with ``task.train_rows=FILE``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.files import atomic_write_text, sha256_file
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.tasks.items import ItemFileError
from crossed_rlvr.tasks.loaders import (
    gsm8k_item,
    load_gsm8k,
    load_math500,
    math500_item,
    read_hub,
    read_local,
    require_fields,
)

if TYPE_CHECKING:
    from crossed_rlvr.conf.schema import TaskConf

# Hub sources of each task's training rows (MATH-500's are MATH's train split).
TRAIN_HUB = {"gsm8k": ("openai/gsm8k", "main", "train"),
             "math500": ("DigitalLearningGmbH/MATH-lighteval", "default", "train")}
SPLITS = ("train", "dev", "test")


def _norm(question: str) -> str:
    return " ".join(question.split()).lower()


def held_out(rows: list[dict[str, Any]], n_dev: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, dev): ``n_dev`` rows drawn with ``random.Random(seed)``; both keep the file order."""
    if n_dev and n_dev >= len(rows):
        raise ItemFileError(f"task.dev_items={n_dev} leaves no training rows ({len(rows)} rows in the train source)")
    chosen = set(random.Random(seed).sample(range(len(rows)), n_dev))
    return ([r for k, r in enumerate(rows) if k not in chosen], [r for k, r in enumerate(rows) if k in chosen])


CONVERT = {"gsm8k": (gsm8k_item, ("question", "answer")), "math500": (math500_item, ("problem",))}


def _source_rows(task: TaskConf) -> list[dict[str, Any]]:
    """The train source's raw rows, each with ``source_row`` (its index there) and a ``_question`` to match on."""
    train_path = task.train_path
    raw = read_local(Path(train_path)) if train_path else read_hub(*TRAIN_HUB[task.source])
    convert, required = CONVERT[task.source]
    require_fields(raw, required, str(train_path or TRAIN_HUB[task.source][0]))
    return [{**row, "source_row": k, "_question": convert(row, k)["question"]} for k, row in enumerate(raw)]


def _dev_hold_out(task: TaskConf) -> tuple[int, int]:
    """(rows held out for dev, the seed that draws them): ``task.dev_items`` (null: none) and ``task.dev_seed``,
    which the hub tasks' files set (conf/task/gsm8k.yaml)."""
    n_dev = int(task.dev_items or 0)
    if task.dev_seed is None:
        raise ItemFileError(f"task={task.name}: task.dev_seed is not set; it draws the dev rows from the train rows")
    return n_dev, int(task.dev_seed)


def _train_dev_rows(task: TaskConf, test: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    seen = {_norm(it["question"]) for it in test}
    rows = [r for r in _source_rows(task) if _norm(r["_question"]) not in seen]
    return held_out(rows, *_dev_hold_out(task))


def _frozen_rows(task: TaskConf, test: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items of ``task.train_rows``, checked against its sha256 and kept disjoint from the test split."""
    path = Path(str(task.train_rows))
    if not path.exists():
        raise ItemFileError(f"task.train_rows={path}: no such file")
    want = task.train_rows_sha256
    if want and sha256_file(path) != want:
        raise ItemFileError(f"task.train_rows={path}: its sha256 is {sha256_file(path)[:16]}…, not the "
                            f"{str(want)[:16]}… the run was configured with (the file changed after it was frozen)")
    convert, required = CONVERT[task.source]
    seen = {_norm(it["question"]): it["item_id"] for it in test}
    rows = read_local(path)
    require_fields(rows, required, str(path))
    items = []
    for k, row in enumerate(rows):
        it = convert(row, k)
        if _norm(it["question"]) in seen:
            raise ItemFileError(f"{path}: row {k + 1} has the question of test item {seen[_norm(it['question'])]!r}; "
                                "training rows must be disjoint from the evaluation split")
        items.append({**it, "item_id": str(row.get("item_id") or f"train-{k}"), "source_row": row.get("source_row", k),
                      "split": "train"})
    return items


def load_split(task: TaskConf) -> list[dict[str, Any]]:
    """The items of ``task.split`` for a hub task (see the module docstring)."""
    split = str(task.split)
    if split not in SPLITS:
        raise ItemFileError(f"task={task.name}: split={split!r} is unknown; expected one of {', '.join(SPLITS)}")
    loader = {"gsm8k": load_gsm8k, "math500": load_math500}[task.source]
    test = loader(task.path, "test")
    if split == "test":
        return test
    if split == "train" and task.train_rows:
        return _frozen_rows(task, test)
    train, dev = _train_dev_rows(task, test)
    convert, _ = CONVERT[task.source]
    return [{**convert(r, r["source_row"]), "item_id": f"train-{r['source_row']}", "source_row": r["source_row"],
             "split": split} for r in (dev if split == "dev" else train)]


def freeze_train_rows(task: TaskConf, path: Path) -> dict[str, Any]:
    """The train split written once as a file of its raw rows (each with ``item_id`` ``train-<source row>``), and
    its sha256: reused as it stands on later runs, so the rows stay frozen even if the hub's copy changes."""
    n_dev, dev_seed = _dev_hold_out(task)
    origin = {"source": task.source, "test": task.path or "hub", "train": task.train_path or "hub",
              "dev_items": n_dev, "dev_seed": dev_seed}
    meta = RunLayout.origin_of(path)
    if path.exists() and meta.exists() and json.loads(meta.read_text()) != origin:
        was = json.loads(meta.read_text())
        changed = ", ".join(f"{k}: {was.get(k)!r} -> {v!r}" for k, v in origin.items() if was.get(k) != v)
        raise ItemFileError(f"{path}: frozen from other task settings ({changed}); the arms trained on it would no "
                            "longer match the task. Use a new run_dir, or remove the file to freeze the rows again")
    if not path.exists():
        loader = {"gsm8k": load_gsm8k, "math500": load_math500}[task.source]
        train, _ = _train_dev_rows(task, loader(task.path, "test"))
        rows = [{**{k: v for k, v in r.items() if k not in ("_question",)}, "item_id": f"train-{r['source_row']}"}
                for r in train]
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows))
        atomic_write_text(meta, json.dumps(origin, indent=2) + "\n")
    n = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {"file": str(path.resolve()), "sha256": sha256_file(path), "rows": n}


def split_record(task: TaskConf) -> dict[str, Any]:
    """How the task's splits were made, for the run's item manifest."""
    n_dev, dev_seed = _dev_hold_out(task)
    out: dict[str, Any] = {"source": task.source, "test": task.path or "hub", "train": task.train_path or "hub",
                           "dev": {"held_out_from": "train", "n": n_dev, "seed": dev_seed}}
    if task.train_rows:
        out["train_rows"] = {"file": str(task.train_rows), "sha256": task.train_rows_sha256}
    return out
