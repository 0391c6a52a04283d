"""The frozen stratified calibration sample (paper 001 App. A, "Frozen stratified sampling").

Within each model state (policy x request x template), strata are the combinations of the
correctness bits of chosen readers (strict / fallback / Math-Verify on GSM8K-like tasks, strict /
Math-Verify on MATH); each stratum gives a uniform sample without replacement, capped, and named
strata can be taken whole (a census). Every sampled observation carries its stratum's N_h, n_h and
weight w = N_h / n_h. The sample is frozen: ``calibration.json`` records the scores file's hash and
the sample file's hash, and every later command refuses either when it changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.files import atomic_write_json, atomic_write_jsonl, json_lines, sha256_file
from crossed_rlvr.layout import CalibrationLayout

GSM8K_READERS = ("strict", "fallback", "mv")
MATH_READERS = ("strict", "mv")


class CalibrationError(CrossedError, ValueError):
    """Bad calibration input; the message names the file, line or field."""


@dataclass(frozen=True)
class State:
    policy: str
    request: str
    template: str = "original"

    @classmethod
    def parse(cls, text: str) -> State:
        parts = text.split(":")
        if len(parts) not in (2, 3) or not all(parts):
            raise CalibrationError(f"--state {text!r}: expected POLICY:REQUEST[:TEMPLATE], e.g. grpo-hash/s83:hash")
        return cls(*parts)

    def key(self) -> str:
        return f"{self.policy}:{self.request}:{self.template}"


def reader_column(role: str, request: str, symbolic: bool) -> str:
    """The scores column of a stratifying reader role (strict, fallback, mv) under ``request``."""
    from crossed_rlvr.eval.score.readers import LENIENT, STRICT, SYMBOLIC_STRICT

    if role == "mv":
        return "math_verify.correct"
    if role == "strict":
        return f"{(SYMBOLIC_STRICT if symbolic else STRICT)[request]}.correct"
    if role == "fallback" and not symbolic and request in LENIENT:
        return f"{LENIENT[request]}.correct"
    raise CalibrationError(f"reader role {role!r} has no reader under request {request!r}")


def stratum_of(row: pd.Series, roles: tuple[str, ...], columns: list[str]) -> str:
    return "|".join(f"{r}={int(bool(row[c]))}" for r, c in zip(roles, columns, strict=True))


def build_sample(scores_path: Path, responses: dict[tuple, dict[str, Any]], questions: dict[tuple[str, str], str],
                 states: list[State], cap: int, seed: int, census: list[str], roles: tuple[str, ...] | None = None
                 ) -> list[dict[str, Any]]:
    """The sample rows: one per sampled observation, in a seeded anonymous order (``sample_id``)."""
    from crossed_rlvr.eval.score.symbolic import is_symbolic_task

    scores = pd.read_parquet(scores_path)
    rows: list[dict[str, Any]] = []
    seen_strata: set[str] = set()
    rng = random.Random(seed)
    for state in states:
        part = scores[(scores.policy == state.policy) & (scores.request == state.request)
                      & (scores.template == state.template)]
        if part.empty:
            have = sorted({f"{p}:{r}:{t}" for p, r, t in zip(scores.policy, scores.request, scores.template)})
            raise CalibrationError(f"{scores_path}: no responses of state {state.key()}; have {', '.join(have[:8])}")
        symbolic = is_symbolic_task(str(part.task.iloc[0]))
        state_roles = roles or (MATH_READERS if symbolic else GSM8K_READERS)
        cols = [reader_column(r, state.request, symbolic) for r in state_roles]
        strata = part.apply(stratum_of, axis=1, args=(state_roles, cols))
        seen_strata.update(strata.unique())
        for h in sorted(strata.unique()):
            members = part[strata == h].sort_values(["item_id", "sample_idx"])
            is_census = h in census
            n = len(members) if is_census else min(cap, len(members))
            chosen = sorted(rng.sample(range(len(members)), n))
            for k in chosen:
                r = members.iloc[k]
                key = (r.task, r.policy, r.request, r.template, str(r.item_id), int(r.sample_idx))
                rec = responses.get(key)
                if rec is None:
                    raise CalibrationError(f"no response record for {key} (pass the response files the scores came from)")
                question = questions.get((str(r.task), str(r.item_id)))
                if question is None:
                    raise CalibrationError(f"no question for task {r.task} item {r.item_id} (pass the item file)")
                rows.append({
                    "state": state.key(), "policy": state.policy, "request": state.request, "template": state.template,
                    "task": r.task, "item_id": str(r.item_id), "sample_idx": int(r.sample_idx), "stratum": h,
                    "N_h": len(members), "n_h": n, "weight": len(members) / n, "census": is_census,
                    "question": question, "response": rec["response"], "reference": str(r.reference),
                    "response_sha256": hashlib.sha256(rec["response"].encode("utf-8")).hexdigest(),
                    "candidates": {c.split(".")[0]: (None if pd.isna(r[c.replace(".correct", ".answer")]) else
                                                     str(r[c.replace(".correct", ".answer")])) for c in cols},
                })
    unknown = [c for c in census if c not in seen_strata]
    if unknown:  # a misspelt census would silently sample that stratum instead of taking it whole
        raise CalibrationError(f"--census {unknown[0]!r} names no stratum of the sampled states; their strata: "
                               f"{', '.join(sorted(seen_strata))}")
    order = list(range(len(rows)))
    random.Random(seed + 1).shuffle(order)  # anonymous ids: no model or stratum in the id or its order
    for sid, k in enumerate(order):
        rows[k]["sample_id"] = f"S{sid + 1:04d}"
    return sorted(rows, key=lambda x: x["sample_id"])


def write_calibration(out: Path, scores_path: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Freeze the sample: ``sample.jsonl`` and ``calibration.json`` (hashes of the scores and the sample)."""
    out.mkdir(parents=True, exist_ok=True)
    files = CalibrationLayout(out)
    if files.head.exists():
        raise CalibrationError(f"{files.head} exists: a frozen sample is never redrawn; use a new folder")
    atomic_write_jsonl(files.sample, rows)
    os.chmod(files.sample, 0o600)  # responses and references of a study not yet published
    # the scores path relative to the calibration folder: the folder can move (to an annotator's laptop)
    # with or without the scores, and every command finds them from wherever it runs
    atomic_write_json(files.head, {
        **meta, "scores": os.path.relpath(Path(scores_path).resolve(), out.resolve()),
        "scores_sha256": sha256_file(scores_path),
        "sample_sha256": sha256_file(files.sample), "n_sample": len(rows),
    })
    return out


def scores_file(folder: Path, head: dict[str, Any]) -> Path:
    """The scores file of a frozen sample: recorded relative to the calibration folder (absolute in
    samples frozen before that rule)."""
    path = Path(head["scores"])
    return path if path.is_absolute() else (Path(folder) / path).resolve()


def load_calibration(folder: Path, check_scores: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The frozen header and sample; refuses a sample or scores file whose hash changed."""
    head_path, sample_path = CalibrationLayout(folder).head, CalibrationLayout(folder).sample
    if not head_path.exists():
        raise CalibrationError(f"{folder}: no {head_path.name} (run crossed-calibrate sample first)")
    head = json.loads(head_path.read_text())
    if sha256_file(sample_path) != head["sample_sha256"]:
        raise CalibrationError(f"{sample_path}: changed since it was frozen (sha256 differs from {head_path})")
    if head.get("pack"):  # a Stage 1 pack (calibration/pack.py) carries no scores, references or candidates
        if check_scores:
            raise CalibrationError(f"{folder}: a Stage 1 pack for {head['pack']['annotator']}; analyse in the "
                                   "calibration folder it was packed from, after importing its labels")
        return head, [row for row, _where in json_lines(sample_path)]
    scores = scores_file(folder, head)
    if check_scores and not scores.exists():
        raise CalibrationError(f"{scores}: no such scores file (the sample was drawn from it; {head_path} records "
                               "its path relative to the calibration folder)")
    if check_scores and sha256_file(scores) != head["scores_sha256"]:
        raise CalibrationError(f"{scores}: not the scores file this sample was drawn from (sha256 recorded in "
                               f"{head_path}: {head['scores_sha256'][:12]}...)")
    rows = [row for row, _where in json_lines(sample_path)]
    return head, rows
