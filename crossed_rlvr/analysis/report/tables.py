"""The one markdown table and the one interval formatter of every report (analysis, rescore, calibration)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def markdown_table(header: list[str], rows: Iterable[Iterable[object]]) -> str:
    """A GitHub markdown table; a "|" inside a cell (a ratio's measure "acc.strict|acc.lenient") is escaped so
    it cannot split its row."""
    def cell(x: object) -> str:
        return str(x).replace("|", "\\|")

    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


def signed(v: float | None, digits: int = 2, sign: bool = True) -> str:
    """A number with its sign (``+1.25``), or "—" when there is none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def interval(estimate: float, low: float, high: float, digits: int = 2, endpoint_digits: int = 2) -> str:
    """``+12.50 [+6.25, +18.75]``: the estimate and its interval, the endpoints rounded to what the bootstrap's
    Monte Carlo error supports; "n/a" for an undefined estimate, the estimate alone when it has no interval."""
    if estimate is None or math.isnan(estimate):
        return "n/a"  # undefined: the report's "Undefined contrasts" section says why
    if low is None or math.isnan(low):
        return f"{estimate:+.{digits}f}"
    return f"{estimate:+.{digits}f} [{low:+.{endpoint_digits}f}, {high:+.{endpoint_digits}f}]"
