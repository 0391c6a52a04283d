"""The engine-neutral GRPO recipe and the training data of one arm (paper 001 §2.1, App. D.1).

A config is checked before any model is loaded (``train.checks.check_config``, which every command and
the study run first).

Training rows are the same for both arms of a pair (same items, same order, same proposal draws);
only the request suffix of the prompt and the reward program follow the arm's convention.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossed_rlvr.conf.schema import ProposalConf, TrainConf
from crossed_rlvr.errors import RecipeError
from crossed_rlvr.files import atomic_write_jsonl
from crossed_rlvr.prompts import messages, user_content
from crossed_rlvr.rewards.conventions import get_convention
from crossed_rlvr.train.proposal import frozen_proposal


def train_items(cfg: TrainConf) -> list[dict[str, Any]]:
    """Training items for the task, disjoint from its evaluation items."""
    from crossed_rlvr.tasks.training import TrainItemsError
    from crossed_rlvr.tasks.training import train_items as build

    t = cfg.train_items
    try:
        return build(cfg.task, t.n, t.seed)
    except TrainItemsError as err:
        raise RecipeError(str(err)) from None


def stratified_items(items: list[dict[str, Any]], proposal: ProposalConf, task: str) -> list[dict[str, Any]]:
    """The training items with App. D.1's difficulty strata: from ``recipe.proposal.strata_file`` (its
    sha256 checked against ``strata_sha256`` when given), else the task's own ``stratum`` field."""
    from crossed_rlvr.files import sha256_file
    from crossed_rlvr.train.strata import StrataError, attach_strata, read_strata

    path = proposal.strata_file
    if path:
        want = proposal.strata_sha256
        try:
            if want and sha256_file(path) != want:
                raise RecipeError(f"recipe.proposal.strata_file={path} changed since its sha256 {want[:12]} was "
                                  "recorded; strata are frozen before training")
            return attach_strata(items, read_strata(Path(path)), f"recipe.proposal.strata_file={path}")
        except (StrataError, FileNotFoundError) as err:
            raise RecipeError(str(err)) from None
    if items and all(it.get("stratum") is not None for it in items):
        return items
    raise RecipeError(
        f"recipe.proposal.enabled=true needs difficulty strata of the training items, and task={task} has none. "
        "Give recipe.proposal.strata_file=PATH (JSON Lines: item_id, stratum for every training item), or let "
        "crossed-study estimate them with the initial policy (it does so before the arms train; "
        "train/strata.py, recipe.proposal.estimate_samples)")


def training_rows(cfg: TrainConf) -> list[dict[str, Any]]:
    """The arm's training stream: one row per sampled prompt, in update order.

    Without the proposal, items are shuffled with ``data_seed`` and cycled; with it, prompts are drawn
    with replacement from the frozen stratified proposal Q and carry the weight P_i/Q_i (App. D.1).
    Both arms of a pair get the same stream: only ``prompt`` and ``convention`` differ. The rows of the task's kind
    (crossed_rlvr/task_sources.py): :func:`answer_training_rows` or :func:`code_training_rows`.
    """
    from crossed_rlvr.task_sources import task_kind

    return task_kind(cfg.task).step("training_rows")(cfg)


def answer_training_rows(cfg: TrainConf) -> list[dict[str, Any]]:
    """An answer task's training stream (:func:`training_rows`)."""
    import random

    items = train_items(cfg)
    r = cfg.recipe
    n_rows = int(r.prompts_per_update) * int(r.updates)
    if r.proposal.enabled:
        items = stratified_items(items, r.proposal, cfg.task.name)
        try:
            proposal = frozen_proposal(items, list(r.proposal.target), list(r.proposal.proposal),
                                       float(r.proposal.epsilon))
        except ValueError as err:
            raise RecipeError(f"recipe.proposal: {err} (task={cfg.task.name})") from None
        draws = proposal.sample(n_rows, int(cfg.data_seed))
    else:
        order = list(range(len(items)))
        random.Random(int(cfg.data_seed)).shuffle(order)
        draws = [(order[k % len(order)], 1.0) for k in range(n_rows)]
    conv = get_convention(cfg.convention.name)
    system = cfg.model.system
    rows = []
    for step, (i, weight) in enumerate(draws):
        it = items[i]
        rows.append({
            "row": step, "item_id": it["item_id"], "question": it["question"],
            "prompt": user_content(it["question"], conv.request, cfg.template),
            "reference": str(it["reference"]), "convention": conv.name, "request": conv.request,
            "template": cfg.template, "system": system, "stratum": it.get("stratum"), "is_weight": float(weight),
        })
    return rows


def chat_prompt(row: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages a training or validation row is sampled from: the evaluation's own (``prompts.messages``
    with the model's system message), since the question, chat template and system message stay fixed and only
    the request suffix changes (paper 001 App. B.3). A code row is the code evaluation's one user turn
    (``tasks.code.messages``), which takes no system message."""
    if row.get("code_dataset"):
        return [{"role": "user", "content": row["prompt"]}]
    return messages(row["question"], row["request"], row["template"], row.get("system"))


def code_training_rows(cfg: TrainConf) -> list[dict[str, Any]]:
    """A code arm's training stream (paper 001 App. D.3): the tasks of ``task.train_path`` or the generated task's
    train split (the first
    ``train_items.n``), shuffled with ``data_seed`` and cycled like an answer task's items; the prompt asks for the
    program in the arm's delimiter and the reference is the task id, whose tests the execution reward runs."""
    import random

    from crossed_rlvr.rewards.code import code_request
    from crossed_rlvr.tasks.code import CodeDatasetError, load_code_dataset, question, train_file

    try:
        path = train_file(cfg.task)
        ds = load_code_dataset(path)
    except CodeDatasetError as err:
        raise RecipeError(f"task.train_path: {err}") from None
    ids = list(ds.tasks)[:n] if (n := cfg.train_items.n) else list(ds.tasks)
    r, conv = cfg.recipe, str(cfg.convention.name)
    order = list(range(len(ids)))
    random.Random(int(cfg.data_seed)).shuffle(order)
    rows = []
    for step in range(int(r.prompts_per_update) * int(r.updates)):
        tid = ids[order[step % len(order)]]
        q = question(ds.tasks[tid].prompt)
        rows.append({"row": step, "item_id": tid, "question": q, "prompt": f"{q}\n{code_request(conv)}",
                     "reference": tid, "convention": conv, "request": conv, "stratum": None, "is_weight": 1.0,
                     "code_dataset": str(Path(path).resolve())})
    return rows


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write_jsonl(path, rows)
