"""verl validation dumps (``trainer.validation_data_dir``) as response records.

One ``{step}.jsonl`` per step with ``input``, ``output``, ``gts``, ``score``, ``step``; ``--all-steps`` reads
every step, each as ``<policy>@step<K>``. The request (and wording) of each response is the request suffix
found in its prompt; dumps carry no item id, so the item id is the first 16 hex digits of the sha256 of the
prompt without that suffix, which pairs the same item across requests and policies; repeated prompts
(``val_kwargs.n > 1``) become samples 0, 1, ...
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from crossed_rlvr.eval.ingest.common import (
    find_request,
    lines,
    reference_from_target,
    request_of,
    sha256_text,
    strip_request,
)
from crossed_rlvr.files import Source
from crossed_rlvr.policies.policy import Policy
from crossed_rlvr.records import ResponseFileError, check_record


def import_verl_dump(
    path: str | Path, policy: Policy, request: str | None = None, template: str = "original", task: str = "gsm8k",
) -> list[dict[str, Any]]:
    """Response records from one verl validation dump ``{step}.jsonl``.

    A dump of validation under several requests (crossed-rlvr's val.parquet) is split by the request
    suffix found in each prompt; the item id is the hash of the prompt without that suffix, so the same
    item pairs across requests and policies."""
    path = Path(path)
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    records = []
    rows_seen: dict[Any, Source] = {}
    for row, where in lines(path):
        if not isinstance(row, dict):
            raise ResponseFileError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
        for field in ("input", "output", "gts"):
            if field not in row:
                hint = " (verl before 0.5 wrote no 'gts'; re-run validation with a newer verl)" if field == "gts" else ""
                raise ResponseFileError(f"{where}: missing field '{field}'{hint}")
            if row[field] is None:
                raise ResponseFileError(f"{where}: field '{field}' is null")
        # verl's v1 writer keys each sample by uid: a uid seen twice is a dump written or concatenated twice.
        # (The legacy writer has no uid, and equal rows are then legitimate: n > 1 greedy samples.)
        if row.get("uid") is not None:
            if row["uid"] in rows_seen:
                raise ResponseFileError(f"{where}: the same sample as at {rows_seen[row['uid']]} (uid "
                                        f"{row['uid']!r}): a dump written or concatenated twice")
            rows_seen[row["uid"]] = where
        prompt = str(row["input"])
        sha = sha256_text(prompt)
        # our val.parquet names each row's request in data_source (crossed_rlvr/<task>/<request>): it decides
        # for a prompt without a suffix, so rows of another request never fold in as extra samples
        named = _named_request(row.get("data_source"))
        if named is not None:
            suffix = find_request(prompt)
            if suffix is not None and suffix[0] != named:
                raise ResponseFileError(f"{where}: the prompt asks for {suffix[0]!r} but data_source "
                                        f"{row['data_source']!r} says {named!r}")
            if request is not None and named != request:
                raise ResponseFileError(f"{where}: data_source {row['data_source']!r} says request {named!r} but "
                                        f"--request says {request!r}")
        req, tmpl, found = request_of(prompt, request if named is None else named, template, where)
        # The item id hashes the prompt without its request suffix: one item, one id under every request.
        item = sha256_text(strip_request(prompt, found))[:16]
        key = (item, req, tmpl)
        rec = {
            "item_id": item, "task": task, **policy.facts(),
            "request": req, "template": tmpl, "sample_idx": 0, "gen_seed": None,
            "prompt_sha256": sha, "response": str(row["output"]), "finish_reason": "unknown",
            "prompt_tokens": -1, "response_tokens": -1, "reference": reference_from_target(row["gts"]),
            "finish_reason_known": False, "verl_step": row.get("step"), "verl_score": row.get("score"),
            "source": str(where),
        }
        rec["sample_idx"] = counts[key]
        counts[key] += 1
        records.append(check_record(rec, where))
    if not records:
        raise ResponseFileError(f"{path}: no rows (an empty dump is never an empty result)")
    return records


def _named_request(source: object) -> str | None:
    """The request a verl row's ``data_source`` names (``crossed_rlvr/<task>/<request>``), if any."""
    from crossed_rlvr.rewards.conventions import REQUESTS

    parts = str(source).split("/") if source else []
    return parts[2] if len(parts) == 3 and parts[0] == "crossed_rlvr" and parts[2] in REQUESTS else None


def verl_steps(folder: Path) -> list[tuple[int, Path]]:
    """The ``{step}.jsonl`` dumps of a ``validation_data_dir``, by step."""
    steps = sorted((int(p.stem), p) for p in Path(folder).glob("*.jsonl") if p.stem.isdigit())
    if not steps:
        raise ResponseFileError(f"{folder}: no {{step}}.jsonl files")
    return steps


def import_verl_steps(folder: str | Path, policy: Policy, **kw: Any) -> list[dict[str, Any]]:
    """Every step of a verl ``validation_data_dir`` (``val_before_train``, every ``test_freq`` and the end),
    each step's responses as the policy ``<policy>@step<K>``: the checkpoints of one arm, which the
    analysis pairs with the other arm's same steps (crossed validation during training)."""
    records = []
    for step, path in verl_steps(Path(folder)):
        records += import_verl_dump(path, policy=policy.at_step(step), **kw)
    return records


def verl_task(src: Path) -> str:
    """The task of a verl dump from its rows' ``data_source`` (``crossed_rlvr/<task>[/<request>]``, as our
    parquet writes it, where the dump keeps it); never a guess: readers differ by task (``\\frac12`` is
    right on MATH, unreadable on GSM8K), so a dump that does not say is refused."""
    from crossed_rlvr.conf import group_options

    tasks = group_options("task")
    files = [p for _, p in verl_steps(src)] if src.is_dir() else [src]
    for path in files:
        for row, _where in lines(path):
            source = row.get("data_source") if isinstance(row, dict) else None
            parts = str(source).split("/") if source else []
            if len(parts) >= 2 and parts[0] == "crossed_rlvr" and parts[1] in tasks:
                return parts[1]
            break
    raise ResponseFileError(f"{files[0]}: the dump does not say its task (no data_source crossed_rlvr/<task>); "
                            f"give --task (one of {', '.join(tasks)})")


def ingest(src: str | Path, *, policy: Policy, request: str | None, template: str, task: str | None,
           step: int | None = None, all_steps: bool = False) -> list[dict[str, Any]]:
    """``crossed-import verl``: one dump, a folder's last (or ``step``'s) dump, or every step (``all_steps``)."""
    src = Path(src)
    task = task or verl_task(src)
    if all_steps:
        return import_verl_steps(src, policy, request=request, template=template, task=task)
    if src.is_dir():
        steps = verl_steps(src)
        chosen = dict(steps).get(step) if step is not None else steps[-1][1]
        if chosen is None:
            raise ResponseFileError(f"{src}: no {step}.jsonl")
        src = chosen
    return import_verl_dump(src, policy, request, template, task)
