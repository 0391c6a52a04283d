"""Reader audit: where two readers of the same responses disagree (paper 000 §4, paper 001 App. B.2).

For every pair of readers, and every training reward program against its matching evaluation reader,
the disagreement rate per cell and up to five examples of each kind of disagreement (A credits and B
does not, and the reverse), with what each reader read. Math-Verify timeouts are their own outcome:
a timed-out response is counted apart, not as a disagreement.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

EXAMPLES = 5


def reward_pairs(readers: list[str]) -> list[tuple[str, str]]:
    """Each training reward program against its matching evaluation reader."""
    match = {"reward_hash": "strict_first_hash", "reward_boxed": "boxed_first", "reward_json": "json_first",
             "reward_xml": "xml_first"}
    return [(r, e) for r, e in match.items() if r in readers and e in readers]


def audit(scores: pd.DataFrame, readers: list[str], cell_keys: list[str], id_keys: list[str]
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rates, examples): one row per cell and reader pair; up to five examples per pair and kind."""
    timed_out = scores["timed_out"].fillna(False).astype(bool).to_numpy() if "timed_out" in scores else None
    pairs = list(combinations(readers, 2))
    pairs += [p for p in reward_pairs(readers) if p not in pairs and p[::-1] not in pairs]
    cells = scores.groupby(cell_keys, sort=True).ngroup().to_numpy()
    cell_table = scores[cell_keys].drop_duplicates().sort_values(cell_keys).reset_index(drop=True)
    counts = np.bincount(cells, minlength=len(cell_table)).astype(float)
    rate_rows, examples = [], []
    for a, b in pairs:
        ca = scores[f"{a}.correct"].fillna(False).astype(bool).to_numpy()
        cb = scores[f"{b}.correct"].fillna(False).astype(bool).to_numpy()
        skip = timed_out if (timed_out is not None and "math_verify" in (a, b)) else np.zeros(len(ca), bool)
        a_only, b_only = ca & ~cb & ~skip, cb & ~ca & ~skip
        n_a = np.bincount(cells, weights=a_only, minlength=len(cell_table))
        n_b = np.bincount(cells, weights=b_only, minlength=len(cell_table))
        n_skip = np.bincount(cells, weights=skip, minlength=len(cell_table))
        part = cell_table.copy()
        part["reader_a"], part["reader_b"] = a, b
        part["n"] = counts
        part["a_only"], part["b_only"], part["timeouts"] = n_a, n_b, n_skip
        part["disagreement"] = (n_a + n_b) / counts
        rate_rows.append(part)
        for kind, mask in ((f"{a} credits, {b} does not", a_only), (f"{b} credits, {a} does not", b_only)):
            for i in np.flatnonzero(mask)[:EXAMPLES]:
                row = scores.iloc[i]
                examples.append({"reader_a": a, "reader_b": b, "kind": kind,
                                 **{k: row[k] for k in id_keys if k in scores},
                                 f"{a}.answer": row.get(f"{a}.answer"), f"{b}.answer": row.get(f"{b}.answer"),
                                 "reference": row.get("reference")})
    rates = pd.concat(rate_rows, ignore_index=True) if rate_rows else pd.DataFrame()
    return rates, pd.DataFrame(examples)
