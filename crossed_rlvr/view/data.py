"""What ``crossed-view`` reads from a run folder, read once and never written: the scores table, the response
files, the frozen items and the analysis's tables.

A study's and an audit's folder hold ``eval/`` and ``analysis/``; a ``crossed-eval`` folder holds its responses,
items and (once scored) ``scores.parquet`` at its root, and ``analysis/`` when ``crossed-analyze -o`` wrote one there;
a re-scoring folder (docs/rescoring.md: imported responses in a folder, ``scores.parquet`` and ``analysis/`` beside
it) is read the same way, its responses found through the scores table's manifest.
Every number the grid shows is the analysis's own: a cell's rates are ``analysis/cells.csv``'s rows and the pair's
interactions are the report's headline rows with its intervals (paper 001 §3.2). Without an analysis folder the rates
are the same per-response measures (``derive_measures``) averaged, and no interaction is shown.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from crossed_rlvr.analysis.cells import SHARED, derive_measures
from crossed_rlvr.analysis.flips import KINDS, changes, kinds, paired
from crossed_rlvr.analysis.report.headline import headline_rows, precision
from crossed_rlvr.analysis.report.tables import interval
from crossed_rlvr.errors import CrossedError
from crossed_rlvr.eval.score.checks import ScoresTableError, read_scores
from crossed_rlvr.layout import AnalysisLayout, EvalLayout, RescoreLayout, RunLayout, ScoresFiles
from crossed_rlvr.names import INITIAL
from crossed_rlvr.rewards.conventions import CONVENTIONS, request_order
from crossed_rlvr.view.marks import segments

CELL_KEY = ("task", "template", "policy", "request")
# the grid's numbers (cells.csv's measure names, paper 001 Tables 8 and 11)
GRID_MEASURES = {"payload": "payload", "acc.strict": "strict", "acc.lenient": "lenient", "acc.math_verify": "mv"}
# what the paired view can compare: payload presence is the requested payload as ΔP counts it (analyze.cell_rows)
PAIR_MEASURES = {"payload": "requested_payload", "strict": "acc.strict", "lenient": "acc.lenient",
                 "mv": "acc.math_verify"}


class ViewError(CrossedError, ValueError):
    """A folder the viewer cannot show, said in one line."""


@dataclass(frozen=True)
class Sources:
    """The files one run folder offers the viewer."""

    root: Path
    scores: Path
    responses: tuple[Path, ...]  # the response files the scores were read from
    items: Path
    analysis: AnalysisLayout | None


def _scored_files(scores: Path, beside: Path) -> tuple[Path, ...]:
    """The response files a scores table was made from: its manifest's inputs where they still are, else every
    response file in the folder beside it (``responses/``, or any folder of ``.jsonl`` files there)."""
    try:
        inputs = json.loads(ScoresFiles(scores).manifest.read_text(encoding="utf-8")).get("inputs", [])
        listed = tuple(Path(i["path"]) for i in inputs if Path(i["path"]).is_file())
    except (OSError, ValueError, TypeError, KeyError):
        listed = ()
    if listed:
        return listed
    responses, analysis = EvalLayout(beside).responses, RunLayout(beside).analysis
    if responses.is_dir():
        return tuple(p for p in sorted(responses.iterdir()) if p.suffix == ".jsonl")
    return tuple(p for p in sorted(beside.glob("*/*")) if p.suffix == ".jsonl" and p.parent != analysis
                 and _holds_responses(p))


def _holds_responses(path: Path) -> bool:
    """Whether a JSON Lines file's first record is a response record (an analysis's examples, without a sample
    index, are not)."""
    try:
        with path.open(encoding="utf-8") as fh:
            first = json.loads(fh.readline() or "{}")
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and {"response", "item_id", "policy", "request", "sample_idx"} <= first.keys()


def find_sources(root: Path) -> Sources:
    """A study's or an audit's folder (``eval/``, ``analysis/``), or a ``crossed-eval`` or re-scoring folder
    (``scores.parquet`` at its root, the responses it was scored from, ``analysis/`` when analysed there)."""
    root = root.expanduser().resolve()
    if not root.is_dir():
        raise ViewError(f"{root}: no such folder")
    study = RunLayout(root)
    # a study's evaluation is eval/, its analysis analysis/; a crossed-eval or re-scoring folder holds both itself
    for ev, analysis in ((study.eval, study.analysis_files), (EvalLayout(root), study.analysis_files)):
        if ev.scores.is_file():
            return Sources(root, ev.scores, _scored_files(ev.scores, ev.root), ev.items_folder,
                           analysis if analysis.cells.is_file() else None)
    for ev in (study.eval, EvalLayout(root)):
        if ev.responses.is_dir():
            raise ViewError(f"{root}: responses but no scores table ({ev.scores}): score them first "
                            f"(crossed-score {ev.responses} --output {ev.scores})")
    if RescoreLayout(root).comparisons.is_file():
        raise ViewError(f"{root}: a crossed-rescore output folder holds no responses: score the responses it read "
                        f"(crossed-score RESPONSES --output FOLDER/scores.parquet) and view that folder")
    raise ViewError(f"{root}: not a run folder (a study, an audit, a crossed-eval or a re-scoring folder, with "
                    "scores.parquet)")


def _clean(value: object) -> Any:  # Any: the JSON value it returns
    """A table's value as JSON: NaN and NA as null, numpy scalars as Python's."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value


def _key(group: tuple[object, ...]) -> tuple[str, str, str, str]:
    """A cell's key (task, template, policy, request) as text, from a groupby's key."""
    task, template, policy, request = (str(v) for v in group)
    return task, template, policy, request


class RunData:
    """One run folder's data, read at start; the response files are read a cell at a time, when asked for."""

    def __init__(self, sources: Sources) -> None:
        from crossed_rlvr.analysis.report.code import code_scores

        self.sources = sources
        if code_scores(sources.scores):  # programs run in the sandbox: statuses, pass@k and γ, not payload cells
            raise ViewError(f"{sources.scores}: a code task's scores; crossed-view shows answer tasks' runs (a code "
                            f"run's cells and gaps are in its report, {RunLayout(sources.root).report})")
        try:
            scores = read_scores(sources.scores)
        except ScoresTableError as err:
            raise ViewError(str(err)) from None
        df, _ = derive_measures(scores)
        df["item_id"] = df["item_id"].astype(str)
        self.readers = sorted(c[: -len(".correct")] for c in scores.columns if c.endswith(".correct"))
        self.payload_columns = [c for c in scores.columns if c.startswith("payload.")]
        keys = sorted(df.groupby(list(CELL_KEY)).groups,
                      key=lambda k: (k[0], k[1], k[2] != INITIAL, k[2], request_order(k[3]), k[3]))
        self.cells: list[tuple[str, str, str, str]] = [_key(k) for k in keys]
        self.cell_id = {k: i for i, k in enumerate(self.cells)}
        # items in their natural order (2 before 10), then samples
        natural = df.assign(_order=df["item_id"].str.zfill(20)).sort_values(["_order", "sample_idx"], kind="stable")
        self.rows = {self.cell_id[_key(k)]: part.drop(columns="_order")
                     for k, part in natural.groupby(list(CELL_KEY), sort=False)}
        self.cells_csv = pd.read_csv(sources.analysis.cells) if sources.analysis else None
        # read as the analysis wrote them: seeds ("83 84") and checkpoints are text, not numbers
        text = dict.fromkeys(("seeds", "seed", "checkpoint", "template", "arm_h", "arm_b"), str)
        self.contrasts = None
        if sources.analysis and sources.analysis.contrasts.is_file():
            contrasts = pd.read_csv(sources.analysis.contrasts, dtype=text)
            self.contrasts = contrasts.fillna({c: "" for c in text if c in contrasts})
        self.headline = headline_rows(self.contrasts) if self.contrasts is not None else pd.DataFrame()
        self._records: dict[int, dict[tuple[str, int], dict[str, Any]]] = {}
        self._items: dict[tuple[str, str], dict[str, Any]] | None = None
        self._read: set[Path] = set()  # response files read so far
        self._lock = threading.Lock()  # one reader of a response file at a time; later requests use its cache
        self.grid = self._grid()

    # ------------------------------------------------------------------ the grid
    def _cell_numbers(self) -> dict[tuple[str, str, str, str], dict[str, Any]]:
        """Each cell's grid numbers: cells.csv's rows, or without an analysis the same measures averaged."""
        out: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        if self.cells_csv is not None:
            c = self.cells_csv
            c = c[c["measure"].isin(GRID_MEASURES) & ~c["template"].astype(str).str.endswith(SHARED)]
            if "checkpoint" in c:
                c = c[c["checkpoint"].fillna("").astype(str) == ""]
            for r in c.itertuples(index=False):
                key = (str(r.task), str(r.template), str(r.policy), str(r.request))
                cell = out.setdefault(key, {"n": int(r.n)})
                cell[GRID_MEASURES[r.measure]] = _clean(float(r.value))
            return out
        for cid, part in self.rows.items():
            cell = {"n": len(part)}
            for measure, short in GRID_MEASURES.items():
                v = part[measure].astype(float).mean()
                cell[short] = None if math.isnan(v) else float(v)
            out[self.cells[cid]] = cell
        return out

    def _pairs(self, task: str, template: str) -> list[dict[str, Any]]:
        """The convention pairs of one task and wording, each with its interactions as the report prints them."""
        if self.contrasts is None or not {"arm_h", "arm_b"} <= set(self.contrasts.columns):
            return []
        head = self.headline
        decimals = precision(self.contrasts).decimals
        inter = self.contrasts[(self.contrasts["name"] == "interaction") & (self.contrasts["task"] == task)
                               & (self.contrasts["template"].astype(str) == template)]
        out = []
        for (pair, h, b), _ in inter.groupby(["request", "arm_h", "arm_b"], sort=False):
            rows = head[(head.task == task) & (head.template == template) & (head.pair == pair)] if len(head) else head
            out.append({"pair": pair, "requests": [h, b], "conventions": [h, b],
                        "interactions": [{"name": r.name, "method": r.method, "items": int(r.n_items),
                                          "text": interval(r.estimate, r.ci_low, r.ci_high, 2, decimals),
                                          "each": ", ".join(f"{s} {v:+.2f}" for s, v in r.each.items())}
                                         for r in rows.itertuples()]})
        return out

    def _grid(self) -> dict[str, Any]:
        numbers = self._cell_numbers()
        groups = []
        for task, template in dict.fromkeys((k[0], k[1]) for k in self.cells):
            mine = [k for k in self.cells if k[:2] == (task, template)]
            conventions = {k[2]: str(self.rows[self.cell_id[k]]["training_convention"].iloc[0]) for k in mine}
            requests = sorted({k[3] for k in mine}, key=lambda r: (request_order(r), r))
            policies = list(dict.fromkeys(k[2] for k in mine))
            pairs = self._pairs(task, template) or [{"pair": "", "requests": requests, "conventions": None,
                                                     "interactions": []}]
            for pair in pairs:
                convs = pair.pop("conventions")
                shown = [p for p in policies if convs is None or p == INITIAL or conventions[p] in convs
                         or conventions[p] == INITIAL]
                cells = {}
                for p in shown:
                    for r in pair["requests"]:
                        key = (task, template, p, r)
                        if key in self.cell_id:
                            cid = self.cell_id[key]  # n from the scores where cells.csv has no row (a sweep)
                            cells[f"{p}\t{r}"] = {"id": cid, "n": len(self.rows[cid]), **numbers.get(key, {})}
                groups.append({"task": task, "template": template, **pair, "policies": shown, "cells": cells})
        return {"root": str(self.sources.root), "analysis": self.sources.analysis is not None,
                "responses": int(sum(len(p) for p in self.rows.values())), "groups": groups,
                "cells": [dict(zip(CELL_KEY, k, strict=True), id=i) for i, k in enumerate(self.cells)]}

    # ------------------------------------------------------------------ responses
    def _response_files(self, key: tuple[str, str, str, str]) -> list[Path]:
        """The response files that may hold a cell: its own (``<policy>__<request>__<template>.jsonl``), else all
        (an imported file holds one policy's every request and wording)."""
        from crossed_rlvr.eval.generate.plan import cell_name

        own = [p for p in self.sources.responses if EvalLayout.cell_of(p.name) == cell_name(key[2], key[3], key[1])]
        return own or list(self.sources.responses)

    def records(self, cid: int) -> dict[tuple[str, int], dict[str, Any]]:
        """A cell's response records by (item id, sample); each file is read once, for every cell it holds."""
        with self._lock:
            if cid not in self._records:
                for path in self._response_files(self.cells[cid]):
                    if path in self._read:
                        continue
                    self._read.add(path)
                    with path.open(encoding="utf-8") as fh:
                        for line in fh:
                            rec = json.loads(line)
                            if not isinstance(rec, dict) or "response" not in rec:
                                continue
                            key = (str(rec.get("task")), str(rec.get("template")), str(rec.get("policy")),
                                   str(rec.get("request")))
                            if key in self.cell_id:
                                self._records.setdefault(self.cell_id[key], {})[
                                    (str(rec["item_id"]), int(rec.get("sample_idx", 0)))] = rec
                self._records.setdefault(cid, {})
            return self._records[cid]

    def item(self, task: str, item_id: str) -> dict[str, Any]:
        """The frozen item (its question), from the items folder (``<task>-<split>.jsonl``)."""
        with self._lock:
            if self._items is None:
                self._items = {}
                for path in sorted(self.sources.items.glob("*.jsonl")) if self.sources.items.is_dir() else []:
                    name = path.stem.rsplit("-", 1)[0]
                    with path.open(encoding="utf-8") as fh:
                        for line in fh:
                            it = json.loads(line)
                            self._items[(str(it.get("task", name)), str(it["item_id"]))] = it
            return self._items.get((task, item_id), {})

    def response(self, cid: int, row: pd.Series) -> dict[str, Any]:
        """One response as the page shows it: text in marked segments, item, verdicts, finish reason, tokens."""
        task, _, _, request = self.cells[cid]
        key = (str(row["item_id"]), int(row["sample_idx"]))
        rec = self.records(cid).get(key, {})
        item = self.item(task, key[0])
        text = str(rec.get("response", ""))
        conv = CONVENTIONS.get(request)
        # shown first: the request's strict and lenient readers, Math-Verify and the request's reward program
        own = ({conv.strict, conv.lenient, f"reward_{request}"} if conv is not None else set()) | {"math_verify"}
        verdicts = [{"name": r, "answer": _clean(row.get(f"{r}.answer")), "correct": _clean(row.get(f"{r}.correct")),
                     "program": r.startswith("reward_"), "request": r in own} for r in self.readers]
        # the request's own readers first, then Math-Verify, the other readers, and the reward programs last
        strict = conv.strict if conv is not None else ""
        verdicts.sort(key=lambda v: (not v["request"], v["program"], v["name"] == "math_verify", v["name"] != strict))
        return {"cell": cid, "item_id": key[0], "sample_idx": key[1],
                "question": item.get("question", rec.get("question", "")),
                "reference": _clean(row.get("reference", rec.get("reference"))), "request": request,
                "segments": segments(text, request), "found": bool(rec),
                "finish_reason": _clean(row.get("finish_reason")), "response_tokens": _clean(row.get("response_tokens")),
                "payloads": {c.split(".", 1)[1]: _clean(row[c]) for c in self.payload_columns},
                "category": _clean(row.get("category")), "verdicts": verdicts}

    def cell_page(self, cid: int, page: int, per_page: int, query: str = "") -> dict[str, Any]:
        """One page of a cell's responses; ``query``: an item id (that item's responses), else text found in the
        question or the response (case-insensitive)."""
        rows = self.rows[cid]
        if query and (rows["item_id"] == query).any():
            rows = rows[rows["item_id"] == query]
        elif query:
            q = query.casefold()
            recs = self.records(cid)
            task = self.cells[cid][0]
            hit = [q in str(recs.get((r.item_id, int(r.sample_idx)), {}).get("response", "")).casefold()
                   or q in str(self.item(task, r.item_id).get("question", "")).casefold()
                   for r in rows[["item_id", "sample_idx"]].itertuples()]
            rows = rows[np.asarray(hit, dtype=bool)]
        part = rows.iloc[page * per_page:(page + 1) * per_page]
        return {"cell": dict(zip(CELL_KEY, self.cells[cid], strict=True), id=cid), "total": len(rows),
                "page": page, "per_page": per_page, "rows": [self.response(cid, r) for _, r in part.iterrows()]}

    def one(self, cid: int, item_id: str, sample: int) -> dict[str, Any] | None:
        rows = self.rows[cid]
        hit = rows[(rows["item_id"] == item_id) & (rows["sample_idx"] == sample)]
        return None if hit.empty else {"cell": dict(zip(CELL_KEY, self.cells[cid], strict=True), id=cid),
                                       "response": self.response(cid, hit.iloc[0])}

    # ------------------------------------------------------------------ the paired view
    def pair_page(self, a: int, b: int, measure: str, kind: str, page: int, per_page: int) -> dict[str, Any]:
        """Two cells of one task item by item (the same item and sample), the count of each kind of change for
        every measure, and one page of the pairs of ``kind`` under ``measure`` (``all``: every pair)."""
        if self.cells[a][0] != self.cells[b][0]:
            raise ViewError("the two cells are of different tasks: they share no items")
        if measure not in PAIR_MEASURES or kind not in ("all", *KINDS):
            raise ViewError(f"measure {measure!r} or kind {kind!r} unknown")
        cols = ["item_id", "sample_idx", *dict.fromkeys(PAIR_MEASURES.values())]
        both = paired(self.rows[a][cols], self.rows[b][cols])
        on: dict[str, tuple[pd.Series, pd.Series]] = {}
        counts = {}
        for m, c in PAIR_MEASURES.items():
            # a measure undefined for a response (NaN: no lenient reader for its request) credits nothing
            on[m] = (both[f"{c}_a"].fillna(0).astype(bool), both[f"{c}_b"].fillna(0).astype(bool))
            counts[m] = changes(*on[m])
        found = kinds(*on[measure])
        chosen = both.assign(kind=found)
        chosen = chosen if kind == "all" else chosen[found == kind]
        part = chosen.iloc[page * per_page:(page + 1) * per_page]
        rows_a, rows_b = self.rows[a], self.rows[b]
        at_a = {k: i for i, k in enumerate(zip(rows_a["item_id"], rows_a["sample_idx"], strict=True))}
        at_b = {k: i for i, k in enumerate(zip(rows_b["item_id"], rows_b["sample_idx"], strict=True))}
        pairs = [{"item_id": r.item_id, "sample_idx": int(r.sample_idx), "kind": str(r.kind),
                  "a": self.response(a, rows_a.iloc[at_a[(r.item_id, r.sample_idx)]]),
                  "b": self.response(b, rows_b.iloc[at_b[(r.item_id, r.sample_idx)]])}
                 for r in part[["item_id", "sample_idx", "kind"]].itertuples()]
        return {"a": dict(zip(CELL_KEY, self.cells[a], strict=True), id=a),
                "b": dict(zip(CELL_KEY, self.cells[b], strict=True), id=b), "shared": len(both), "counts": counts,
                "measure": measure, "kind": kind, "total": len(chosen), "page": page, "per_page": per_page,
                "pairs": pairs}
