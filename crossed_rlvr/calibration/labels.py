"""Human labels of one calibration in SQLite: one writer, one transaction per label, locks per stage.

Stage 1 (blind: question and response only): answer status, supporting span, self-correction and
withdrawal flags. Stage 2 (after the annotator's Stage 1 is locked: reference and anonymous reader
candidates revealed): correctness of the locked commitment and each candidate's fidelity to it.
Adjudication: the final label of every A/B disagreement and of a fixed random review share of the
concordant items. Every row is written in its own transaction, so a killed server loses nothing.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossed_rlvr.calibration.sample import CalibrationError
from crossed_rlvr.files import json_lines
from crossed_rlvr.layout import CalibrationLayout

STATUS = ("clear", "no_answer", "ambiguous", "conflict")
CORRECTNESS = ("correct", "incorrect", "unresolved")
STAGES = ("stage1", "stage2", "adjudication")
REVIEW_SHARE = 0.10
MAX_TEXT = 20_000  # characters of a span or note: longer than any response's answer passage

SCHEMA = """
create table if not exists labels (annotator text, stage text, sample_id text, label text, at real,
                                   primary key (annotator, stage, sample_id));
create table if not exists locks (annotator text, stage text, at real, primary key (annotator, stage));
"""


class LabelError(CalibrationError):
    pass


def check_label(stage: str, label: dict[str, Any], candidates: int, where: str) -> dict[str, Any]:
    """A label's fields, checked; the message names where it came from and the field."""
    for field in ("span", "note"):
        if len(str(label.get(field, ""))) > MAX_TEXT:
            raise LabelError(f"{where}: field '{field}' holds {len(str(label[field])):,} characters; a label's text "
                             f"is at most {MAX_TEXT:,}")
    if stage == "stage1":
        if label.get("status") not in STATUS:
            raise LabelError(f"{where}: field 'status' is {label.get('status')!r}; expected one of {', '.join(STATUS)}")
        return {"status": label["status"], "span": str(label.get("span", "")),
                "self_correction": bool(label.get("self_correction", False)),
                "withdrawal": bool(label.get("withdrawal", False))}
    if label.get("correctness") not in CORRECTNESS:
        raise LabelError(f"{where}: field 'correctness' is {label.get('correctness')!r}; expected one of "
                         f"{', '.join(CORRECTNESS)}")
    out = {"correctness": label["correctness"]}
    if stage == "stage2":
        fidelity = label.get("fidelity", [])
        if isinstance(fidelity, list) and len(fidelity) == candidates and None in fidelity:
            missing = ", ".join(str(k + 1) for k, f in enumerate(fidelity) if f is None)
            raise LabelError(f"{where}: field 'fidelity': candidate {missing} not judged; judge every candidate "
                             "(equals or differs) before saving")
        if not isinstance(fidelity, list) or len(fidelity) != candidates or not all(isinstance(f, bool) for f in fidelity):
            raise LabelError(f"{where}: field 'fidelity' must be {candidates} true/false values, one per candidate")
        out["fidelity"] = fidelity
        # App. A: a reference that looks wrong is flagged, and any item may be sent to the adjudicator
        out["reference_flag"] = bool(label.get("reference_flag", False))
        out["review"] = bool(label.get("review", False))
        out["note"] = str(label.get("note", ""))
    else:
        out["status"] = label.get("status") if label.get("status") in STATUS else None
        out["note"] = str(label.get("note", ""))
    return out


class LabelStore:
    """The labels of one calibration folder (``labels.sqlite``)."""

    pack: dict[str, Any] | None = None  # a Stage 1 pack's record (calibration/pack.py): Stage 1 only

    def __init__(self, folder: Path, sample: list[dict[str, Any]], seed: int) -> None:
        self.path = CalibrationLayout(folder).labels
        self.sample = {r["sample_id"]: r for r in sample}
        self.seed = seed
        if not self.path.exists():  # created private: labels name people (SQLite gives its -wal/-shm the same mode)
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("pragma journal_mode=wal")
        self.db.execute("pragma synchronous=full")
        self.db.executescript(SCHEMA)
        from crossed_rlvr.calibration.roles import load_roles

        self.roles = load_roles(folder)

    # ------------------------------------------------------------------ reading
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """An explicit transaction: under ``isolation_level=None`` sqlite3's ``with db:`` begins none, so every
        statement would commit on its own."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def order(self, annotator: str) -> list[str]:
        """The annotator's own ordering of the sample (seeded by calibration seed and name)."""
        ids = sorted(self.sample)
        random.Random(f"{self.seed}:{annotator}").shuffle(ids)
        return ids

    def labels(self, annotator: str | None = None, stage: str | None = None) -> dict[tuple[str, str, str], dict]:
        q = "select annotator, stage, sample_id, label from labels where 1=1"
        args: list[str] = []
        if annotator:
            q, args = q + " and annotator=?", [*args, annotator]
        if stage:
            q, args = q + " and stage=?", [*args, stage]
        return {(a, s, i): json.loads(x) for a, s, i, x in self.db.execute(q, args)}

    def locked(self, annotator: str, stage: str) -> bool:
        return self.db.execute("select 1 from locks where annotator=? and stage=?", (annotator, stage)).fetchone() is not None

    def permutation(self, sample_id: str) -> list[int]:
        """Position p of the page shows reader candidate ``permutation[p]`` (fixed random order per sample)."""
        order = list(range(len(self.sample[sample_id]["candidates"])))
        random.Random(f"{self.seed}:{sample_id}").shuffle(order)
        return order

    def candidates(self, sample_id: str) -> list[str | None]:
        """The reader candidates in that order (never labelled with the reader)."""
        values = list(self.sample[sample_id]["candidates"].values())
        return [values[k] for k in self.permutation(sample_id)]

    def fidelity(self, annotator: str, sample_id: str) -> dict[str, bool]:
        """An annotator's Stage 2 fidelity per reader, mapped back from the page's anonymous order."""
        label = self.labels(annotator, "stage2").get((annotator, "stage2", sample_id))
        if label is None:
            return {}
        readers = list(self.sample[sample_id]["candidates"])  # stratifying readers, strict first
        shown = {readers[k]: label["fidelity"][p] for p, k in enumerate(self.permutation(sample_id))}
        return {r: shown[r] for r in readers}

    # ------------------------------------------------------------------ writing
    def put(self, annotator: str, stage: str, sample_id: str, label: dict[str, Any], where: str = "label") -> dict:
        if not annotator:
            raise LabelError(f"{where}: no annotator name")
        if stage not in STAGES:
            raise LabelError(f"{where}: stage {stage!r} is unknown; expected one of {', '.join(STAGES)}")
        if self.pack is not None and stage != "stage1":
            raise LabelError(f"{where}: this folder is {self.pack['annotator']}'s Stage 1 pack; {stage} opens in the "
                             "calibration folder once these labels are imported there (crossed-calibrate import "
                             "cal/ FILE --lock)")
        if sample_id not in self.sample:
            raise LabelError(f"{where}: sample id {sample_id!r} is not in this calibration's frozen sample")
        if self.roles is not None and not self.roles.may(annotator, stage):
            raise LabelError(f"{where}: {annotator!r} has no {stage} role in this calibration (roles.json)")
        if self.locked(annotator, stage):  # every stage, the adjudication included
            raise LabelError(f"{where}: {annotator}'s {stage} is locked; a locked label is never replaced")
        if stage == "stage2" and not self.locked(annotator, "stage1"):
            raise LabelError(f"{where}: {annotator} must lock Stage 1 before Stage 2 reveals references")
        if stage == "stage2" and (annotator, "stage1", sample_id) not in self.labels(annotator, "stage1"):
            raise LabelError(f"{where}: {annotator} has no Stage 1 commitment for {sample_id}")
        if stage == "adjudication" and sample_id not in self.to_adjudicate():
            raise LabelError(f"{where}: {sample_id} is not in the adjudication queue (disagreements of the two "
                             "annotators and the review sample of their agreements)")
        clean = check_label(stage, label, len(self.sample[sample_id]["candidates"]), where)
        with self.transaction():  # one transaction per label
            self.db.execute("insert or replace into labels values (?, ?, ?, ?, ?)",
                            (annotator, stage, sample_id, json.dumps(clean), time.time()))
        return clean

    def lock(self, annotator: str, stage: str) -> None:
        if stage not in STAGES:  # an empty or unknown stage would lock nothing and leave a junk row
            raise LabelError(f"stage {stage!r} is unknown; expected one of {', '.join(STAGES)}")
        done = {i for (_, _, i) in self.labels(annotator, stage)}
        # the adjudicator labels the adjudication queue, the annotators the whole sample
        need = set(self.to_adjudicate()) if stage == "adjudication" else set(self.sample)
        missing = sorted(need - done)
        if missing:
            raise LabelError(f"{annotator}'s {stage} cannot be locked: {len(missing)} samples unlabelled "
                             f"(first {missing[0]})")
        with self.transaction():
            self.db.execute("insert or ignore into locks values (?, ?, ?)", (annotator, stage, time.time()))

    # ------------------------------------------------------------------ adjudication and final labels
    def annotators(self) -> list[str]:
        """Annotators who locked Stage 2: the declared pair in its order when roles are declared (roles.json),
        so another name that locks never becomes A or B; without roles, the names in sorted order."""
        locked = {a for (a, s) in self.db.execute("select annotator, stage from locks") if s == "stage2"}
        if self.roles is not None:
            return [a for a in self.roles.annotators if a in locked]
        return sorted(locked)

    def to_adjudicate(self) -> list[str]:
        """Disagreements of the first two annotators who locked Stage 2 and the items either of them asked
        to be reviewed or whose reference either flagged (App. A), then the fixed random review share of
        the remaining concordant items."""
        pair = self.annotators()[:2]
        if len(pair) < 2:
            return []
        s1, s2 = self.labels(stage="stage1"), self.labels(stage="stage2")
        disagree: list[str] = []
        agree: list[str] = []
        for sid in sorted(self.sample):
            a, b = ((s1[(x, "stage1", sid)]["status"], s2[(x, "stage2", sid)]["correctness"]) for x in pair)
            asked = any(s2[(x, "stage2", sid)].get("review") or s2[(x, "stage2", sid)].get("reference_flag")
                        for x in pair)
            (agree if a == b and not asked else disagree).append(sid)
        k = round(REVIEW_SHARE * len(agree))
        review = sorted(random.Random(f"{self.seed}:review").sample(agree, k)) if k else []
        return disagree + review

    def final(self) -> dict[str, dict[str, Any]]:
        """Final label per sample (App. A): the adjudication decides a disputed or reviewed item, else the
        concordant A/B label. The adjudicator's correctness stands as given ("unresolved" stays unresolved,
        eq. 10); the answer status is the adjudicator's when given, else the annotators' shared status, else
        the one the adjudicated correctness implies (an answer judged correct or incorrect is one that was
        given: "clear"; an unresolved one "ambiguous"). Never an annotator's name or its sort order decides.
        Two adjudications of one item that differ are refused."""
        pair = self.annotators()[:2]
        s1, s2, adj = self.labels(stage="stage1"), self.labels(stage="stage2"), self.labels(stage="adjudication")
        adjudicated: dict[str, tuple[str, dict[str, Any]]] = {}
        for (who, _, sid), lab in sorted(adj.items()):
            if sid in adjudicated and (adjudicated[sid][1]["correctness"], adjudicated[sid][1].get("status")) != \
                    (lab["correctness"], lab.get("status")):
                raise LabelError(f"sample {sid}: adjudications differ ({adjudicated[sid][0]}: "
                                 f"{adjudicated[sid][1]['correctness']}, {who}: {lab['correctness']}); keep one")
            adjudicated.setdefault(sid, (who, lab))
        out: dict[str, dict[str, Any]] = {}
        for sid in self.sample:
            statuses = {s1[(x, "stage1", sid)]["status"] for x in pair if (x, "stage1", sid) in s1}
            if sid in adjudicated:
                lab = adjudicated[sid][1]
                shared = next(iter(statuses)) if len(statuses) == 1 and len(pair) == 2 else None
                implied = "ambiguous" if lab["correctness"] == "unresolved" else "clear"
                out[sid] = {"correctness": lab["correctness"], "status": lab.get("status") or shared or implied,
                            "source": "adjudication"}
                continue
            labs = [(s1.get((x, "stage1", sid)), s2.get((x, "stage2", sid))) for x in pair]
            complete = [(a, b) for a, b in labs if a is not None and b is not None]
            if len(pair) < 2 or len(complete) < len(labs):
                raise LabelError(f"sample {sid}: no complete A/B labels; finish both stages for two annotators")
            (st_a, c_a), (st_b, c_b) = ((a["status"], b["correctness"]) for a, b in complete)
            if (st_a, c_a) != (st_b, c_b):
                raise LabelError(f"sample {sid}: A and B disagree and no adjudication was recorded")
            out[sid] = {"correctness": c_a, "status": st_a, "source": "consensus"}
        return out

    # ------------------------------------------------------------------ exchange
    def export(self, path: Path) -> int:
        rows = [{"annotator": a, "stage": s, "sample_id": i, **lab} for (a, s, i), lab in sorted(self.labels().items())]
        if path.suffix == ".csv":
            fields = sorted({k for r in rows for k in r})
            with path.open("w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=fields)
                w.writeheader()
                w.writerows([{k: _csv_cell(json.dumps(v) if isinstance(v, list) else v) for k, v in r.items()}
                             for r in rows])
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return len(rows)

    def import_labels(self, path: Path, lock: bool = False) -> int:
        """Labels made elsewhere, in the export format; all are checked before any is written."""
        if path.suffix == ".csv":
            # utf-8-sig: a spreadsheet's export starts with a byte-order mark that would rename the first column
            try:
                with path.open(newline="", encoding="utf-8-sig") as fh:
                    raw = [(n + 2, {k: _csv_value(k, v, f"{path}:{n + 2}") for k, v in row.items() if v != ""})
                           for n, row in enumerate(csv.DictReader(fh))]
            except UnicodeDecodeError as err:
                raise LabelError(f"{path}: not UTF-8 text (byte {err.start}); save the sheet as CSV UTF-8") from None
        else:
            raw = [(where.line, row) for row, where in json_lines(path, LabelError)]
        checked = []
        first: dict[tuple[str, str, str], str] = {}
        for n, row in raw:
            where = f"{path}:{n}"
            if not isinstance(row, dict):
                raise LabelError(f"{where}: a label must be a JSON object, got {type(row).__name__}")
            for field in ("annotator", "stage", "sample_id"):
                if not row.get(field):
                    raise LabelError(f"{where}: missing field '{field}'")
                if not isinstance(row[field], str):
                    raise LabelError(f"{where}: field '{field}' is {json.dumps(row[field])[:60]} "
                                     f"({type(row[field]).__name__}); expected text")
            if row["sample_id"] not in self.sample:
                raise LabelError(f"{where}: sample id {row['sample_id']!r} is not in this calibration's frozen sample")
            if row["stage"] in STAGES and self.locked(row["annotator"], row["stage"]):
                raise LabelError(f"{where}: {row['annotator']}'s {row['stage']} is locked")
            if row["stage"] not in STAGES:
                raise LabelError(f"{where}: field 'stage' is {row['stage']!r}; expected one of {', '.join(STAGES)}")
            if self.roles is not None and not self.roles.may(row["annotator"], row["stage"]):
                raise LabelError(f"{where}: {row['annotator']!r} has no {row['stage']} role in this calibration "
                                 "(roles.json)")
            key = (row["annotator"], row["stage"], row["sample_id"])
            if key in first:  # last-wins would hide which of two labels was meant
                raise LabelError(f"{where}: {key[0]}'s {key[1]} label of {key[2]} again (first at {first[key]})")
            first[key] = where
            checked.append((*key, check_label(row["stage"], row, len(self.sample[row["sample_id"]]["candidates"]),
                                              where)))
        # App. A's stage order: a Stage-2 label needs its annotator's Stage-1 commitment for the item, and Stage 1
        # locked (already, or by this import's --lock)
        stage1 = set(self.labels(stage="stage1")) | {(a, "stage1", i) for a, s, i, _ in checked if s == "stage1"}
        for a, s, i, _ in checked:
            if s != "stage2":
                continue
            if (a, "stage1", i) not in stage1:
                raise LabelError(f"{first[(a, s, i)]}: {a} has no Stage 1 commitment for {i}; Stage 2 comes after it")
            if not (self.locked(a, "stage1") or lock):
                raise LabelError(f"{first[(a, s, i)]}: {a}'s Stage 1 is not locked (lock it, or import with --lock)")
        with self.transaction():  # all rows or none, also when the process is killed midway
            for a, s, i, lab in checked:
                self.db.execute("insert or replace into labels values (?, ?, ?, ?, ?)", (a, s, i, json.dumps(lab),
                                                                                       time.time()))
        if lock:
            for a, s in sorted({(a, s) for a, s, _, _ in checked if s in ("stage1", "stage2")}):
                self.lock(a, s)
        return len(checked)


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: object) -> object:
    """A text cell a spreadsheet would run as a formula (a span such as "=1+1") gets a leading quote
    (OWASP's CSV-injection rule); import takes it off again."""
    return f"'{value}" if isinstance(value, str) and value.startswith(_FORMULA) else value


def _csv_value(key: str, value: str, where: str) -> Any:
    if value.startswith("'") and value[1:].startswith(_FORMULA):
        value = value[1:]
    if key == "fidelity":
        try:
            return json.loads(value)
        except json.JSONDecodeError as err:
            raise LabelError(f"{where}: field 'fidelity' is not valid JSON ({err.msg})") from None
    if key in ("self_correction", "withdrawal", "reference_flag", "review"):
        return value.lower() == "true"
    return value
