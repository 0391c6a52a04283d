"""Paired changes between two cells that share items (paper 001 §2.1, Table 12): each response paired with the
other cell's response to the same item and sample, and the pair counted by what changed.

The analysis counts ΔP's lost and gained with :func:`changes` (the initial policy's requested payload before, the
trained policy's after); the viewer's paired view counts every kind with the same function, so its counts are the
analysis's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PAIR_KEY = ["item_id", "sample_idx"]  # a response's partner: the same item and sample in the other cell
KINDS = ("kept", "lost", "gained", "absent")  # present in both, before only, after only, in neither


def kinds(before: pd.Series | np.ndarray, after: pd.Series | np.ndarray) -> np.ndarray:
    """Each pair's kind (``KINDS``) from a 0/1 measure before and after (payload presence, or correctness)."""
    b, a = np.asarray(before, dtype=bool), np.asarray(after, dtype=bool)
    return np.select([b & a, b & ~a, ~b & a], list(KINDS[:3]), KINDS[3])


def changes(before: pd.Series | np.ndarray, after: pd.Series | np.ndarray) -> dict[str, int]:
    """How many pairs of each kind: kept, lost (before only), gained (after only), absent (in neither)."""
    found = kinds(before, after)
    return {k: int((found == k).sum()) for k in KINDS}


def paired(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """The responses of two cells joined by item and sample (those in both only), columns suffixed ``_a``/``_b``."""
    return before.merge(after, on=PAIR_KEY, how="inner", suffixes=("_a", "_b"))
