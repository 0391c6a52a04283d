"""The reader-audit section of report.md: the reader pairs that disagree most, with an example of each."""

from __future__ import annotations

import pandas as pd

from crossed_rlvr.analysis.report.tables import markdown_table


def audit_section(rates: pd.DataFrame, examples: pd.DataFrame, top: int = 12) -> str:
    """The pairs that disagree most (largest rate in any cell), with one example of each kind."""
    if rates.empty:
        return "_No reader pairs._"
    worst = (rates.groupby(["reader_a", "reader_b"]).agg(max_rate=("disagreement", "max"),
                                                       mean_rate=("disagreement", "mean"),
                                                       timeouts=("timeouts", "sum"))
             .sort_values("max_rate", ascending=False).head(top).reset_index())
    rows = []
    for r in worst.itertuples():
        ex = examples[(examples.reader_a == r.reader_a) & (examples.reader_b == r.reader_b)] if len(examples) else examples
        first = ex.iloc[0] if len(ex) else None
        shown = "—" if first is None else (f"{first.get('policy', '')} {first.get('request', '')} item "
                                           f"{first.get('item_id', '')}: {first.get(f'{r.reader_a}.answer')!s:.20} vs "
                                           f"{first.get(f'{r.reader_b}.answer')!s:.20}")
        rows.append([r.reader_a, r.reader_b, f"{100 * r.max_rate:.1f}", f"{100 * r.mean_rate:.1f}", int(r.timeouts),
                     shown])
    return markdown_table(["Reader A", "Reader B", "Largest cell rate (%)", "Mean over cells (%)", "MV timeouts",
                           "Example"], rows)
