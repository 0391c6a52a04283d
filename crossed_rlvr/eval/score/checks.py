"""Checks of a scores table before any number is computed from it.

``crossed-analyze``, ``crossed-calibrate`` and the validation analysis read scores tables that a user may
have made or edited elsewhere. A table is refused, with its path, row and field, when a column the
analysis needs is missing, a key is null or repeated, a request, template, finish reason or category is
outside its fixed set, or a 0/1 measure holds anything but true/false (``"True"`` as text, a null, a
number): pandas would otherwise turn such values into numbers silently (``"False"`` is truthy).
Rows are numbered from 1 in the order stored in the Parquet file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.eval.score.payload import CATEGORIES
from crossed_rlvr.eval.score.readers import LENIENT, STRICT, SYMBOLIC_LENIENT, SYMBOLIC_STRICT
from crossed_rlvr.eval.score.symbolic import is_symbolic_task
from crossed_rlvr.limits import Range
from crossed_rlvr.records import FINISH_REASONS
from crossed_rlvr.rewards.conventions import REQUESTS, TEMPLATES

KEYS = ["task", "policy", "training_convention", "request", "template", "item_id", "sample_idx"]
REQUIRED = [*KEYS, "train_seed", "finish_reason", "requested_payload", "extractable", "category"]
# the readers the analysis itself reads per request (one definition: analysis/cells.py)
SYMBOLIC = sorted({*SYMBOLIC_STRICT.values(), *SYMBOLIC_LENIENT.values()})
# text columns (dtype checked like the values): an int item id would be a second item beside the text one
TEXT = [*[k for k in KEYS if k not in ("sample_idx",)], "finish_reason", "category", "reference", "stratum"]
NULLABLE_TEXT = {"stratum"}
READ_CAP_RANGE = Range(1, 10**9)
FIXED = {"request": REQUESTS, "template": TEMPLATES, "finish_reason": FINISH_REASONS, "category": CATEGORIES}


class ScoresTableError(CrossedError, ValueError):
    """A scores table that would give wrong numbers; the message names the file, row and field."""


def read_scores(path: str | Path) -> pd.DataFrame:
    """A scores table read and checked, or ScoresTableError naming the file."""
    from crossed_rlvr.files import input_problem

    path = Path(path)
    problem = input_problem(path)
    if problem is not None:  # a folder of Parquet files would be read as one table by pyarrow
        raise ScoresTableError(f"{path}: {'no such scores table' if problem.startswith('no such') else problem}")
    try:
        df = pd.read_parquet(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a file that is not Parquet
        raise ScoresTableError(f"{path}: not a readable Parquet scores table ({err})") from None
    return check_scores(df, path)


def _show(value: object) -> str:
    """A stored value as a reader of the file would write it: null, a plain number, a quoted string."""
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return "null"
    return repr(value.item() if isinstance(value, np.generic) else value)


def _row(df: pd.DataFrame, i: int) -> str:
    r = df.iloc[i]
    return (f"row {i + 1} (policy {_show(r.get('policy'))}, request {_show(r.get('request'))}, "
            f"item {_show(r.get('item_id'))})")


def needed_readers(df: pd.DataFrame) -> dict[str, str]:
    """Reader columns the analysis reads, each with the reason it is needed."""
    need = {"math_verify": "every request"}
    sym = df["task"].map(is_symbolic_task).astype(bool)
    for request in sorted(set(df.loc[~sym, "request"].dropna()) & set(STRICT)):
        for reader in (STRICT[request], f"reward_{request}", LENIENT.get(request)):
            if reader:
                need.setdefault(reader, f"the {request} request")
    if sym.any():
        for reader in SYMBOLIC:
            need.setdefault(reader, "symbolic (MATH) items")
    return need


def bool_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c in ("requested_payload", "extractable", "timed_out", "read_truncated")
            or c.endswith(".correct") or c.startswith(("payload.", "payload_any."))]


def check_scores(df: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """``df`` unchanged when it is a scores table the analysis can use; otherwise ScoresTableError naming the first
    problem (the checks run in ``CHECKS``' order: columns and keys before the values that depend on them)."""
    where = str(path)
    for check in CHECKS:
        check(df, where)
    return df


def _fail(where: str, df: pd.DataFrame, i: int, message: str) -> None:
    raise ScoresTableError(f"{where}: {_row(df, i)}: {message}")


def check_columns(df: pd.DataFrame, where: str) -> None:
    """The required columns, at least one row, and the reader columns the analysis will read."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ScoresTableError(f"{where}: scores table lacks column '{missing[0]}' (made by crossed-score?)")
    if df.empty:
        raise ScoresTableError(f"{where}: scores table has no rows")


def check_keys(df: pd.DataFrame, where: str) -> None:
    """No null key; requests, wordings, finish reasons and categories from their fixed sets."""
    for col in [*KEYS, "finish_reason", "category"]:
        null = df[col].isna().to_numpy()
        if null.any():
            _fail(where, df, int(np.argmax(null)), f"field '{col}' is null")
    for col, allowed in FIXED.items():
        bad = ~df[col].isin(allowed).to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            _fail(where, df, i, f"field '{col}' is {_show(df[col].iloc[i])}; expected one of {', '.join(allowed)}")


def check_readers(df: pd.DataFrame, where: str) -> None:
    for reader, why in needed_readers(df).items():
        if f"{reader}.correct" not in df.columns:
            raise ScoresTableError(f"{where}: scores table lacks column '{reader}.correct', needed for {why} "
                                   "(score the responses again with crossed-score)")


def check_text(df: pd.DataFrame, where: str) -> None:
    """Text columns hold text, as the readers and the records wrote them (dtype first)."""
    for col in [c for c in TEXT if c in df]:
        values = df[col]
        nullable = col in NULLABLE_TEXT
        ok = values.map(lambda v, nullable=nullable: isinstance(v, str) or (nullable and _show(v) == "null")).to_numpy()
        if not ok.all():
            i = int(np.argmax(~ok))
            v = values.iloc[i]
            _fail(where, df, i, f"field '{col}' is {_show(v)} ({type(v).__name__}); expected text")


def check_numbers(df: pd.DataFrame, where: str) -> None:
    """Counts, seeds and decoding settings are numbers within the records' ranges."""
    from crossed_rlvr.records import NUMBER_RANGES

    for col, rng in [*NUMBER_RANGES.items(), ("read_cap_chars", READ_CAP_RANGE)]:
        if col not in df:
            continue
        values = df[col]
        null = values.isna().to_numpy()
        number = values.map(lambda v: isinstance(v, int | float | np.integer | np.floating)
                            and not isinstance(v, bool | np.bool_)).to_numpy()
        bad = ~(number | (null & (col not in ("sample_idx",))))
        whole = col not in ("temperature", "top_p")
        if not bad.any():
            num = pd.to_numeric(values.where(~null, 0), errors="coerce").astype(float).to_numpy()
            bad = ~null & ((whole & (num != np.floor(num))) | ~rng.admits(num))
        if bad.any():
            i = int(np.argmax(bad))
            v = values.iloc[i]
            kind = "a whole number" if whole else "a number"
            nullable = "" if col == "sample_idx" else " or null"
            _fail(where, df, i, f"field '{col}' is {_show(v)}{'' if _show(v) == 'null' else f' ({type(v).__name__})'}"
                                f"; expected {kind} in {rng.text()}{nullable}")


def check_bools(df: pd.DataFrame, where: str) -> None:
    for col in bool_columns(df):
        values = df[col]
        if values.dtype == bool:
            continue
        if str(values.dtype) == "boolean" and not values.isna().any():
            continue  # pandas' nullable boolean without a null: plain true/false
        ok = values.map(lambda v: isinstance(v, bool | np.bool_)).to_numpy()
        i = int(np.argmax(~ok))
        v = values.iloc[i]
        kind = "" if _show(v) == "null" else f" ({type(v).__name__})"
        _fail(where, df, i, f"field '{col}' is {_show(v)}{kind}; expected true or false")


def check_decoding(df: pd.DataFrame, where: str) -> None:
    """Optional decoding columns: numbers or null."""
    from crossed_rlvr.records import OPTIONAL

    for col in OPTIONAL:
        if col not in df:
            continue
        num = pd.to_numeric(df[col], errors="coerce")
        bad = (num.isna() & df[col].notna()).to_numpy() | df[col].map(lambda v: isinstance(v, bool)).to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            _fail(where, df, i, f"field '{col}' is {_show(df[col].iloc[i])}; expected a number or null")


def check_policies(df: pd.DataFrame, where: str) -> None:
    """Each policy's name, convention and seed agree (the analysis groups by all three), checked once per policy;
    one name never carries two conventions or seeds (two policies would pool into one)."""
    from crossed_rlvr.records import name_disagreement

    firsts = df.drop_duplicates(["policy", "training_convention", "train_seed"])
    for i, row in zip(firsts.index, firsts.itertuples(index=False)):
        seed = None if pd.isna(row.train_seed) else int(row.train_seed)
        why = name_disagreement(str(row.policy), str(row.training_convention), seed)
        if why is None and (row.training_convention == "initial") != (seed is None):
            why = "train_seed must be null exactly when training_convention is 'initial'"
        if why is not None:
            _fail(where, df, int(df.index.get_loc(i)), why)
    twice = firsts["policy"].duplicated().to_numpy()
    if twice.any():
        i = firsts.index[int(np.argmax(twice))]
        _fail(where, df, int(df.index.get_loc(i)), f"policy {_show(df.loc[i, 'policy'])} appears with more than one "
                                                   "training_convention/train_seed")


def check_unique(df: pd.DataFrame, where: str) -> None:
    """Each response once (a sweep: one response per decoding setting)."""
    from crossed_rlvr.records import OPTIONAL

    keys = KEYS + [c for c in OPTIONAL if c in df]
    dup = df.duplicated(keys, keep=False).to_numpy()
    if dup.any():
        rows = np.flatnonzero(dup)
        first = rows[0]
        same = rows[(df.iloc[rows][keys].fillna(-1) == df.iloc[first][keys].fillna(-1)).all(axis=1).to_numpy()]
        _fail(where, df, int(same[1]), f"the same response key as row {first + 1} ({', '.join(keys)}); a table holds "
                                       "each response once")


CHECKS: list[Callable[[pd.DataFrame, str], None]] = [check_columns, check_keys, check_readers, check_text,
                                                      check_numbers, check_bools, check_decoding, check_policies,
                                                      check_unique]
