"""Content-matched SFT pairs (paper 001 §2.4 I4, App. D.2.1).

From the same rows, two target sets: the worked solution followed by the arm's final marker. The
targets must be byte-identical except that final marker; the builder checks every row and refuses
to write anything if one differs. Training prompts carry no format instruction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.files import atomic_write_jsonl
from crossed_rlvr.rewards.conventions import get_convention


class PairMismatch(CrossedError, ValueError):
    pass


def target(item: dict[str, Any], convention: str) -> str:
    """Worked solution, a newline, then the convention's final marker carrying the reference."""
    body = str(item.get("solution", "")).rstrip()
    mark = get_convention(convention).mark(str(item["reference"]))
    return f"{body}\n{mark}" if body else mark


def build_pairs(items: list[dict[str, Any]], arm: str = "hash", control: str = "boxed"
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows for the marker arm and the control arm; raises PairMismatch naming the first bad row."""
    rows_a, rows_b = [], []
    for n, item in enumerate(items, 1):
        ta, tb = target(item, arm), target(item, control)
        ma, mb = get_convention(arm).mark(str(item["reference"])), get_convention(control).mark(str(item["reference"]))
        if not (ta.endswith(ma) and tb.endswith(mb)) or ta[: -len(ma)] != tb[: -len(mb)]:
            raise PairMismatch(f"row {n} (item {item['item_id']!r}): targets differ beyond the final marker")
        prompt = str(item["question"])
        rows_a.append({"item_id": str(item["item_id"]), "prompt": prompt, "completion": ta, "convention": arm})
        rows_b.append({"item_id": str(item["item_id"]), "prompt": prompt, "completion": tb, "convention": control})
    return rows_a, rows_b


def write_pairs(items: list[dict[str, Any]], out_a: str | Path, out_b: str | Path, arm: str = "hash",
                control: str = "boxed") -> int:
    """Build, check and write both target files (atomically); nothing is written on a mismatch."""
    rows_a, rows_b = build_pairs(items, arm, control)
    atomic_write_jsonl(out_a, rows_a)
    atomic_write_jsonl(out_b, rows_b)
    return len(rows_a)
