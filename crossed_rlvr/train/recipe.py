"""The engine-neutral GRPO recipe and the training data of one arm (paper 001 §2.1, App. D.1).

A config is checked before any model is loaded: an unknown convention, a batch that the group size
does not divide, a missing model or an engine/algorithm pair that cannot run fail at once with a
message that names the field.

Training rows are the same for both arms of a pair (same items, same order, same proposal draws);
only the request suffix of the prompt and the reward program follow the arm's convention.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossed_rlvr.files import atomic_write_jsonl
from crossed_rlvr.rewards.conventions import CONVENTIONS, TEMPLATES, get_convention
from crossed_rlvr.train.proposal import frozen_proposal


class RecipeError(ValueError):
    pass


def check_config(cfg: Any) -> None:
    """Refuse a config that cannot train, before anything is loaded."""
    conv = cfg.convention.name
    if conv not in CONVENTIONS:
        raise RecipeError(f"convention={conv!r} is unknown; expected one of {', '.join(CONVENTIONS)}")
    r = cfg.recipe
    for key in ("updates", "prompts_per_update", "max_response_tokens", "max_context_tokens"):
        if int(r[key]) < 1:
            raise RecipeError(f"recipe.{key}={r[key]} must be at least 1")
    if float(r.lr) <= 0:
        raise RecipeError(f"recipe.lr={r.lr} must be positive")
    batch = int(r.prompts_per_update) * int(r.group_size)
    if int(r.group_size) < 2:
        raise RecipeError(f"recipe.group_size={r.group_size}: GRPO needs at least 2 responses per prompt")
    micro = int(cfg.engine.get("micro_batch") or r.group_size)
    if cfg.engine.name == "trl" and batch % micro:
        raise RecipeError(f"engine.micro_batch={micro} does not divide the batch of {batch} completions "
                          f"(recipe.prompts_per_update={r.prompts_per_update} x recipe.group_size={r.group_size})")
    nproc = int(cfg.engine.get("nproc_per_node") or 1)
    if cfg.engine.name == "trl" and nproc > 1 and batch % (micro * nproc):
        raise RecipeError(f"engine.nproc_per_node={nproc}: the batch of {batch} completions does not split into "
                          f"engine.micro_batch={micro} x {nproc} processes")
    if cfg.engine.name == "trl" and micro % int(r.group_size) and int(r.group_size) % micro:
        raise RecipeError(f"recipe.group_size={r.group_size} and engine.micro_batch={micro} must divide one another")
    if int(r.get("save_every") or 0) < 0:
        raise RecipeError(f"recipe.save_every={r.save_every}: expected 0 (final checkpoint only) or a positive count")
    prop = r.get("proposal") or {}
    if prop.get("enabled") and (int(prop.get("estimate_samples", 4)) < 2 or int(prop.get("estimate_samples", 4)) % 2):
        raise RecipeError(f"recipe.proposal.estimate_samples={prop.get('estimate_samples')}: expected an even number "
                          ">= 2 (half the samples under each request)")
    e = cfg.engine
    if e.name == "verl":
        for key, low in (("cpus_per_node", 1), ("tq_storage_units", 1), ("wait_limit_s", 1)):
            value = e.get(key)
            if value is not None and float(value) < low:
                raise RecipeError(f"engine.{key}={value}: expected at least {low}")
    if e.name == "trl" and int(e.get("nproc_per_node") or 1) > 1 and int((cfg.get("validation") or {}).get(
            "every") or 0) > 0:
        raise RecipeError("validation.every > 0 runs on one process: with engine.nproc_per_node > 1 validate the "
                          "arm's checkpoints with crossed-eval, or set validation.every=0")
    if int(r.policy_epochs) != 1:
        raise RecipeError("recipe.policy_epochs must be 1 (one policy epoch per batch, App. D.1)")
    if cfg.engine.name not in ("trl", "verl"):
        raise RecipeError(f"engine={cfg.engine.name!r} is unknown; expected trl or verl")
    if cfg.algorithm.name not in ("grpo", "reinforce_pp"):
        raise RecipeError(f"algorithm={cfg.algorithm.name!r} is unknown; expected grpo or reinforce_pp")
    if cfg.engine.name == "trl" and cfg.algorithm.name != "grpo":
        raise RecipeError("algorithm=reinforce_pp runs only with engine=verl")
    if cfg.engine.name == "verl" and (r.get("lora") or {}).get("enabled", False):
        raise RecipeError("recipe.lora.enabled=true runs only with engine=trl")
    if cfg.template not in TEMPLATES:
        raise RecipeError(f"template={cfg.template!r} is unknown; expected one of {', '.join(TEMPLATES)}")
    if cfg.model.source == "local" and not (cfg.model.path and Path(cfg.model.path).exists()):
        raise RecipeError(f"model.path={cfg.model.path!r} does not exist (model={cfg.model.name}); "
                          "build the initial policy first (crossed-sft mode=warmstart) or point model.path at it")
    if cfg.model.source == "hub" and not cfg.model.path:
        raise RecipeError(f"model={cfg.model.name}: no hub name in model.path")


def train_items(cfg: Any) -> list[dict[str, Any]]:
    """Training items for the task, disjoint from its evaluation items."""
    from crossed_rlvr.tasks.training import TrainItemsError
    from crossed_rlvr.tasks.training import train_items as build

    t = cfg.train_items
    try:
        return build(cfg.task, t.get("n"), int(t.get("seed", 101)))
    except TrainItemsError as err:
        raise RecipeError(str(err)) from None


def stratified_items(items: list[dict[str, Any]], proposal: Any, task: str) -> list[dict[str, Any]]:
    """The training items with App. D.1's difficulty strata: from ``recipe.proposal.strata_file`` (its
    sha256 checked against ``strata_sha256`` when given), else the task's own ``stratum`` field."""
    from crossed_rlvr.train.strata import StrataError, attach_strata, file_sha256, read_strata

    path = proposal.get("strata_file")
    if path:
        want = proposal.get("strata_sha256")
        try:
            if want and file_sha256(Path(path)) != want:
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


def training_rows(cfg: Any) -> list[dict[str, Any]]:
    """The arm's training stream: one row per sampled prompt, in update order.

    Without the proposal, items are shuffled with ``data_seed`` and cycled; with it, prompts are drawn
    with replacement from the frozen stratified proposal Q and carry the weight P_i/Q_i (App. D.1).
    Both arms of a pair get the same stream: only ``prompt`` and ``convention`` differ.
    """
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
    suffix = conv.suffix(cfg.template)
    rows = []
    for step, (i, weight) in enumerate(draws):
        it = items[i]
        rows.append({
            "row": step, "item_id": it["item_id"], "question": it["question"], "prompt": f"{it['question']}\n{suffix}",
            "reference": str(it["reference"]), "convention": conv.name, "request": conv.request,
            "stratum": it.get("stratum"), "is_weight": float(weight),
        })
    return rows


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write_jsonl(path, rows)
