"""Crossed interactions over training: I_P, I_S and I_MV at every validation checkpoint.

Paper 001 measures the arms at the end only (§3); validation during training stores each arm's
checkpoint ``<arm>/s<seed>@step<K>`` under both requests, so the analysis's ordinary contrasts already
hold the interaction of every checkpoint, per seed and as the seed mean, each with its paired item
bootstrap interval. This module picks them out as a table and a figure, and finds the update at which
I_P first exceeds half its final value (when the learned convention starts to override the request).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from crossed_rlvr.analysis.report.tables import interval, markdown_table
from crossed_rlvr.layout import AnalysisLayout
from crossed_rlvr.names import checkpoint_step

MEASURES = {"payload": "I_P", "acc.strict": "I_S", "acc.math_verify": "I_MV"}


def over_training_rows(contrasts: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, template, method, seed or mean, step, contrast) of the interactions of step
    checkpoints; empty when fewer than two steps were validated."""
    part = contrasts[(contrasts["name"] == "interaction") & contrasts["measure"].isin(list(MEASURES))
                     & (contrasts["seed"] != "sd")]
    steps = [checkpoint_step(str(c)) for c in part["checkpoint"].fillna("")]
    part = part.assign(step=pd.to_numeric(pd.Series(steps, index=part.index, dtype=float)))
    part = part.dropna(subset=["step"])
    if part["step"].nunique() < 2:
        return pd.DataFrame(columns=["task", "template", "method", "seed", "step", "contrast", "request",
                                     "estimate", "ci_low", "ci_high", "n_items"])
    out = part.assign(step=part["step"].astype(int), contrast=part["measure"].map(MEASURES))
    cols = ["task", "template", "method", "seed", "step", "contrast", "request", "estimate", "ci_low", "ci_high",
            "n_items"]
    return (out[cols].assign(_s=out["seed"].map(lambda s: 10**9 if s == "mean" else int(s[1:])))
            .sort_values(["task", "template", "method", "contrast", "_s", "step"]).drop(columns="_s")
            .reset_index(drop=True))


def half_final_steps(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (task, template, method, seed): I_P's final value and the first validated update at which
    I_P exceeds half of it (NaN when the final I_P is not positive)."""
    out = []
    ip = rows[rows["contrast"] == "I_P"]
    for key, unsorted in ip.groupby(["task", "template", "method", "seed"], sort=False):
        part = unsorted.sort_values("step")
        final = float(part["estimate"].iloc[-1])
        over = part[part["estimate"] > final / 2] if final > 0 else part.iloc[0:0]
        out.append({**dict(zip(["task", "template", "method", "seed"], key, strict=True)),
                    "final_step": int(part["step"].iloc[-1]), "final_I_P": final,
                    "half_step": int(over["step"].iloc[0]) if len(over) else np.nan})
    return pd.DataFrame(out)


def plot(rows: pd.DataFrame, path: Path) -> Path:
    """Three panels (I_P, I_S, I_MV) against the update: each seed thin, the seed mean thick with its
    95% paired-bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MEASURES), figsize=(4.2 * len(MEASURES), 3.6), sharex=True)
    for ax, contrast in zip(axes, MEASURES.values(), strict=True):
        part = rows[rows["contrast"] == contrast]
        for (method, seed), unsorted in part.groupby(["method", "seed"], sort=False):
            line = unsorted.sort_values("step")
            if seed == "mean":
                ax.plot(line["step"], line["estimate"], "-o", color="black", lw=2, ms=3, label=f"{method} seed mean")
                ax.fill_between(line["step"], line["ci_low"], line["ci_high"], color="black", alpha=0.15,
                                label="95% paired bootstrap")
            else:
                ax.plot(line["step"], line["estimate"], "-", lw=1, alpha=0.7, label=f"{method}/{seed}")
        ax.axhline(0, color="grey", lw=0.6)
        ax.set(title=f"{contrast} over training", xlabel="update", ylabel="pp")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _cell(row: pd.Series) -> str:
    return interval(row["estimate"], row["ci_low"], row["ci_high"], 1, 1)


def section(rows: pd.DataFrame, figure: str | None, heading: str = "##") -> str:
    """Markdown: per task/template a table (one row per seed and step, one column per contrast) and the
    half-final update of I_P per seed."""
    text = [f"{heading} Crossed interactions over training\n",
            ("Each arm validated at step 0, every N updates and at the end under both requests "
             "(`<arm>@step<K>`); interactions in percentage points with 95% paired item-bootstrap intervals, per "
             "seed and as the seed mean. I_P: requested-payload presence, I_S: strict reader, I_MV: Math-Verify.\n")]
    half = half_final_steps(rows)
    for (task, template), part in rows.groupby(["task", "template"], sort=False):
        by = part.set_index(["method", "seed", "step", "contrast"])
        lines = []
        for method, seed, step in part[["method", "seed", "step"]].drop_duplicates().itertuples(index=False):
            cells = [_cell(by.loc[(method, seed, step, c)]) if (method, seed, step, c) in by.index else "—"
                     for c in MEASURES.values()]
            lines.append([f"{method}/{seed}", str(step), *cells])
        n = int(part["n_items"].max())
        text.append(f"\n{task} / {template} ({n} validation items)\n\n"
                    + markdown_table(["arm", "update", *MEASURES.values()], lines) + "\n")
        h = half[(half["task"] == task) & (half["template"] == template)]
        if len(h):
            said = ", ".join(
                f"{r.method}/{r.seed}: update {int(r.half_step)}" if not np.isnan(r.half_step)
                else f"{r.method}/{r.seed}: never (final I_P {r.final_I_P:+.1f})" for r in h.itertuples())
            text.append(f"\nFirst validated update at which I_P exceeds half its final value: {said}.\n")
    if figure:
        text.append(f"\n![crossed interactions over training]({figure})\n")
    return "\n".join(text)


def write_over_training(contrasts: pd.DataFrame, out: Path, figure: bool = True, heading: str = "##") -> str | None:
    """``over_training.csv``, ``figures/interaction_over_training.png`` and the report section; None when the
    contrasts hold fewer than two validated steps."""
    rows = over_training_rows(contrasts)
    if rows.empty:
        return None
    files = AnalysisLayout(out)
    rows.to_csv(files.table("over_training"), index=False, float_format="%.10g")
    fig = plot(rows, files.figure("interaction_over_training")) if figure else None
    return section(rows, str(fig.relative_to(out)) if fig else None, heading)
