"""Frozen item files (paper 001 §3: protocols frozen before generation).

An item file is JSON Lines, one item per line with at least ``item_id``, ``question`` and
``reference`` (and optionally ``solution`` for SFT targets). Its sha256 identifies the item set:
every generation records it, and a run that finds a different hash for the same item file refuses
to go on rather than mix item sets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.files import atomic_write_jsonl, json_lines
from crossed_rlvr.files import sha256_file as file_sha256

REQUIRED = ("item_id", "question", "reference")


class ItemFileError(CrossedError, ValueError):
    pass


def write_items(path: str | Path, items: list[dict[str, Any]]) -> str:
    """Write items (stable key order) atomically and return the file's sha256."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = [str(it["item_id"]) for it in items]
    if len(set(ids)) != len(ids):
        raise ItemFileError(f"{path}: duplicate item_id in the items to write")
    atomic_write_jsonl(path, [{**it, "item_id": str(it["item_id"])} for it in items], sort_keys=True)
    return file_sha256(path)


def item_order(item_id: str) -> tuple[int, int, str]:
    """Sort key for item ids: numeric ids in numeric order, then the others as strings."""
    return (0, int(item_id), "") if item_id.isdigit() else (1, 0, item_id)


def read_items(path: str | Path, expected_sha256: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """Read and check an item file; refuse it if its hash differs from ``expected_sha256``."""
    path = Path(path)
    if not path.exists():
        raise ItemFileError(f"{path}: no such item file")
    sha = file_sha256(path)
    if expected_sha256 is not None and sha != expected_sha256:
        raise ItemFileError(
            f"{path}: item file changed (sha256 {sha[:12]}…, expected {expected_sha256[:12]}…); "
            "a run must not mix item sets: restore the file or start a new run directory"
        )
    items, seen = [], set()
    for it, where in json_lines(path, ItemFileError):
        n = where.line
        if not isinstance(it, dict):
            raise ItemFileError(f"{path}:{n}: an item must be a JSON object, got {type(it).__name__}")
        for field in REQUIRED:
            if field not in it:
                raise ItemFileError(f"{path}:{n}: missing field '{field}'")
            if it[field] is None:
                raise ItemFileError(f"{path}:{n}: field '{field}' is null")
        n_options = it.get("n_options")
        if n_options is not None and (isinstance(n_options, bool) or not isinstance(n_options, int)
                                      or not 2 <= n_options <= 10):
            raise ItemFileError(f"{path}:{n}: field 'n_options' is {n_options!r}; expected an integer from 2 to 10")
        it["item_id"] = str(it["item_id"])
        if it["item_id"] in seen:
            raise ItemFileError(f"{path}:{n}: duplicate item_id {it['item_id']!r}")
        seen.add(it["item_id"])
        items.append(it)
    return items, sha
