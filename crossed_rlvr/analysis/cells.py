"""Cells: all responses of one (policy, request, template) over one frozen item set (paper 001 §2).

From a scores table this module derives the per-response measures the analysis uses and turns
each (task, template) group into an array ``X[cell, measure, item]`` of per-item means over
samples. Every cell statistic is an item mean of that array, which is what lets the paired item
bootstrap resample items once for all cells and seeds.

Request-matched measures (§2.2): the *strict* reader follows the requested convention
(``strict_first_hash`` for hash, ``boxed_first`` for boxed, ``json_first``/``xml_first``), the
*lenient* reader keeps the strict answer and otherwise falls back to the last number
(``lenient_hash_fallback`` / ``lenient_boxed_fallback``), and *reward* is the requested
convention's training reward program (App. D.1 re-scoring).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crossed_rlvr.eval.score.payload import CATEGORIES
from crossed_rlvr.eval.score.readers import (
    LENIENT,
    STRICT,
    SYMBOLIC_LENIENT,
    SYMBOLIC_PAYLOAD,
    SYMBOLIC_STRICT,
)
from crossed_rlvr.eval.score.symbolic import is_symbolic_task
from crossed_rlvr.names import legacy_policy_parts
from crossed_rlvr.tasks.items import item_order

CELL_KEYS = ["task", "template", "policy", "request"]


def reader_names(scores: pd.DataFrame) -> list[str]:
    return [c[: -len(".correct")] for c in scores.columns if c.endswith(".correct")]




def _pick(scores: pd.DataFrame, mapping: Mapping[str, str], suffix: str,
          symbolic: Mapping[str, str] | None = None) -> pd.Series:
    """Per row, column ``<reader>.<suffix>`` of the reader ``mapping`` names for its request (``symbolic``
    for rows of a symbolic task); NaN where the request has no such reader (or the column is absent)."""
    out = pd.Series(np.nan, index=scores.index, dtype=object)
    sym = scores["task"].map(is_symbolic_task) if symbolic is not None else pd.Series(False, index=scores.index)
    for table, rows in ((mapping, ~sym), (symbolic or {}, sym)):
        for request, reader in table.items():
            mask = rows & (scores["request"] == request)
            column = reader if reader.startswith("payload") else f"{reader}.{suffix}"
            if mask.any() and column in scores:
                out[mask] = scores.loc[mask, column]
    return out


DIAGNOSTIC_MEASURES = ("diag.hash_digit_only", "diag.both_readable", "diag.hash_box_unequal",
                       "diag.box_correct_hash_wrong")


def diagnostic_measures(df: pd.DataFrame) -> dict[str, pd.Series]:
    """Per-response MATH diagnostics behind Tables 16-17 (absent from scores made before they existed)."""
    need = ["hash_digit_only", "math_hash_box_unequal", "payload_any.hash", "math_first_hash.answer",
            "math_first_boxed.answer", "math_first_hash.correct", "math_first_boxed.correct"]
    if any(c not in df for c in need):
        return {}
    both = df["math_first_hash.answer"].notna() & df["math_first_boxed.answer"].notna()
    return {
        "diag.hash_digit_only": df["hash_digit_only"].astype(float),
        "diag.both_readable": both.astype(float),
        "diag.hash_box_unequal": (both & df["math_hash_box_unequal"].astype(bool)).astype(float),
        "diag.box_correct_hash_wrong": (df["math_first_boxed.correct"].astype(bool) & df["payload_any.hash"]
                                        & ~df["math_first_hash.correct"].astype(bool)).astype(float),
    }


def symbolic_only_readers() -> set[str]:
    from crossed_rlvr.eval.score.readers import READERS

    return {name for name, r in READERS.items() if getattr(r, "symbolic_only", False)}


def derive_measures(scores: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Add the per-response 0/1 measures; returns the frame and the measure column names.

    Symbolic tasks (MATH500) use App. B.4's readers: the requested payload is any nonempty one (q^pay),
    extractability is symbolic readability of the first requested payload (q), strict is ``math_strict``
    and lenient is D.3.1's ``math_lenient``; A1 is not defined for them."""
    df = scores.copy()
    readers = reader_names(scores)
    sym = df["task"].map(is_symbolic_task)
    payload = df["requested_payload"].astype(float)
    if sym.any():
        sym_payload = _pick(df, {}, "", SYMBOLIC_PAYLOAD)
        payload = payload.where(~sym, sym_payload.astype(float))
    extractable = df["extractable"].astype(float)
    if sym.any() and "math_strict.answer" in df:
        extractable = extractable.where(~sym, df["math_strict.answer"].notna().astype(float))
    measures: dict[str, pd.Series] = {"payload": payload, "extractable": extractable}
    measures["acc.strict"] = _pick(df, STRICT, "correct", SYMBOLIC_STRICT).astype(float)
    measures["acc.lenient"] = _pick(df, LENIENT, "correct", SYMBOLIC_LENIENT).astype(float)
    reward_map = {r: f"reward_{r}" for r in STRICT}
    measures["acc.reward"] = _pick(df, reward_map, "correct").astype(float)
    only_symbolic = symbolic_only_readers()
    for name in readers:
        ok = df[f"{name}.correct"].astype(float)
        # a MATH-only reader is not scored on GSM8K-style responses: undefined there, not wrong
        measures[f"acc.{name}"] = ok.where(sym) if name in only_symbolic else ok
    # unknown where the source recorded no finish reason (imported outputs): reported as n/a, never as 0
    known = df["finish_reason"].isin(["stop", "length"])
    measures["truncated"] = (df["finish_reason"] == "length").astype(float).where(known)
    # Math-Verify ran out of time: its own outcome (Math-Verify credits nothing then), counted per cell.
    timed_out = df["timed_out"] if "timed_out" in df else pd.Series(False, index=df.index)
    measures["timeout.math_verify"] = timed_out.fillna(False).astype(float)
    for cat in CATEGORIES:
        measures[f"cat.{cat}"] = (df["category"] == cat).astype(float)
    measures.update(diagnostic_measures(df))
    # Fidelity condition A1 (§2.2): the lenient reader returns the strict answer whenever there is one.
    strict_ans, lenient_ans = _pick(df, STRICT, "answer"), _pick(df, LENIENT, "answer")
    has_pair = df["request"].isin(list(LENIENT)) & ~sym
    violation = has_pair & strict_ans.notna() & (lenient_ans != strict_ans)
    measures["a1_violation"] = violation.astype(float).where(has_pair)
    for name, series in measures.items():
        df[name] = series.values
    return df, list(measures)


@dataclass
class Group:
    """One (task, template): its items, its cells and per-item means ``X[cell, measure, item]``."""

    task: str
    template: str
    items: list[str]
    cells: list[tuple[str, str]]  # (policy, request)
    measures: list[str]
    X: np.ndarray
    n_samples: int

    def index(self, policy: str, request: str, measure: str) -> int:
        """Flat column index of a cell statistic in ``X.reshape(n_cells * n_measures, n_items)``."""
        return self.cells.index((policy, request)) * len(self.measures) + self.measures.index(measure)

    def has(self, policy: str, request: str) -> bool:
        return (policy, request) in self.cells

    def flat(self) -> np.ndarray:
        return self.X.reshape(len(self.cells) * len(self.measures), len(self.items))


def build_groups(df: pd.DataFrame, measures: list[str]) -> list[Group]:
    """Per-item means of every measure for every cell, grouped by (task, template)."""
    groups = []
    optional = {f"acc.{name}" for name in symbolic_only_readers()}
    for (task, template), part in df.groupby(["task", "template"], sort=True):
        items = sorted(part["item_id"].unique(), key=item_order)
        cells = sorted({(p, r) for p, r in zip(part["policy"], part["request"])}, key=_cell_order)
        # measures no response of this group has (a MATH-only reader on GSM8K) are left out of the group
        group_measures = [m for m in measures if part[m].notna().any() or m not in optional]
        means = part.groupby(["policy", "request", "item_id"])[group_measures].mean()
        X = np.full((len(cells), len(group_measures), len(items)), np.nan)
        for c, (policy, request) in enumerate(cells):
            block = means.loc[(policy, request)].reindex(items)
            X[c] = block.to_numpy(dtype=float).T
        n_samples = int(part.groupby(["policy", "request", "item_id"]).size().max())
        groups.append(Group(task, template, items, cells, group_measures, X, n_samples))
    return groups


SHARED = "@shared"  # suffix of a wording template restricted to the items every wording of its task has


def add_shared_wording_cells(df: pd.DataFrame) -> pd.DataFrame:
    """Wording comparisons on the same items (paper 001 Tables 13-14): where one template covers more items
    than another (the original wording on the full split, paraphrases on a subset), its cells are repeated
    on the items all templates share, as template ``<template>@shared``."""
    extra = []
    for _task, part in df.groupby("task"):
        templates = sorted(part["template"].unique())
        if len(templates) < 2:
            continue
        sets = {t: set(part.loc[part["template"] == t, "item_id"]) for t in templates}
        common = set.intersection(*sets.values())
        for t in templates:
            if common and sets[t] != common:
                sub = part[(part["template"] == t) & part["item_id"].isin(common)].copy()
                sub["template"] = f"{t}{SHARED}"
                extra.append(sub)
    return pd.concat([df, *extra], ignore_index=True) if extra else df


def _cell_order(cell: tuple[str, str]) -> tuple:
    policy, request = cell
    return (policy != "initial", policy, request)


def with_policy_columns(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells (or records) with each policy's method and checkpoint as text columns: as stored, or, for a table
    written before they were stored, read from the policy's name and convention (``policy_table``)."""
    if "method" not in cells or "checkpoint" not in cells:
        parts = policy_table(cells)[["policy", "method", "checkpoint"]]
        cells = cells.drop(columns=[c for c in ("method", "checkpoint") if c in cells]).merge(parts, on="policy",
                                                                                               how="left")
    # a column read back from CSV with every value empty is float NaN: text before it is filled
    return cells.assign(method=cells["method"].astype(object).fillna("").astype(str),
                        checkpoint=cells["checkpoint"].astype(object).fillna("").astype(str))


def policy_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per policy: training convention, seed, method (the arm family, e.g. grpo, sft) and
    checkpoint (empty for an arm's final policy)."""
    stored = "method" in df and "checkpoint" in df and df["method"].notna().all()
    cols = ["training_convention", "train_seed", *(["method", "checkpoint"] if stored else [])]
    pol = df.groupby("policy", sort=True)[cols].first().reset_index()
    if not stored:  # records written before their policy's parts were stored: read from the name
        parts = [legacy_policy_parts(p, c) for p, c in zip(pol["policy"], pol["training_convention"])]
        pol["method"] = [m for m, _ in parts]
        pol["checkpoint"] = [c for _, c in parts]
    pol["checkpoint"] = pol["checkpoint"].fillna("").astype(str)
    return pol


