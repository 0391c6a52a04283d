"""The report's first screen: the answer (crossed interactions per wording, in one sentence each), the
precision of its intervals, the contents, and tables that say a thing once.

Paper 001 §3.2: I_P measures where answers are written, I_S and I_MV whether they are right; paper 002
§4 asks that a result state its precision (Monte Carlo error, what one item is worth) and its caveats.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from crossed_rlvr.analysis.cells import SHARED
from crossed_rlvr.analysis.report.tables import interval, markdown_table
from crossed_rlvr.names import SUMMARIES

HEADLINE = {"payload": "I_P", "acc.strict": "I_S", "acc.math_verify": "I_MV"}
CONTENTS = ("<!-- contents -->", "<!-- /contents -->")


# ------------------------------------------------------------------ precision
@dataclass(frozen=True)
class Precision:
    """The bootstrap's Monte Carlo error over every interval endpoint (pp; NaN without one), and the decimals
    an endpoint is printed to."""

    median: float
    p95: float
    max: float
    decimals: int


def precision(contrasts: pd.DataFrame) -> Precision:
    """The bootstrap's Monte Carlo error over every interval endpoint, and the decimals it supports."""
    err = contrasts.loc[contrasts.unit != "ratio", "mc_error"].dropna() if "mc_error" in contrasts else pd.Series()
    if err.empty:
        return Precision(median=math.nan, p95=math.nan, max=math.nan, decimals=2)
    p95 = float(np.quantile(err, 0.95))
    return Precision(median=float(err.median()), p95=p95, max=float(err.max()), decimals=endpoint_decimals(p95))


def endpoint_decimals(error: float) -> int:
    """Decimals an endpoint with this Monte Carlo error supports: the last printed digit is no finer than
    the error (0.24 pp -> 0 decimals, 0.09 -> 1, 0.004 -> 2), never more than 2."""
    if not error or not math.isfinite(error) or error <= 0:
        return 2
    return int(min(2, max(0, math.floor(-math.log10(error)))))


def precision_sentence(prec: Precision, n_resamples: int, rng_seed: int) -> str:
    if not math.isfinite(prec.median):
        return f"Intervals: {n_resamples:,} paired item-bootstrap resamples (RNG seed {rng_seed})."
    d = prec.decimals
    return (f"Intervals: {n_resamples:,} paired item-bootstrap resamples (RNG seed {rng_seed}); their Monte Carlo "
            f"error (the resamples in 10 batches) is {prec.median:.3f} pp at the median endpoint, "
            f"{prec.p95:.3f} pp at the 95th percentile and {prec.max:.3f} pp at most, so endpoints are "
            f"printed to {d} decimal{'s' if d != 1 else ''}" + (
                "" if d == 2 else " (more resamples, `--resamples`, buy more)") + ".")


# ------------------------------------------------------------------ headline
def _own(contrasts: pd.DataFrame) -> pd.DataFrame:
    return contrasts[~contrasts.template.astype(str).str.endswith(SHARED)]


class _Interval(Protocol):
    """A contrast row with its interval: a Series or an itertuples row of contrasts.csv."""

    ci_low: float
    ci_high: float


# pp: an endpoint that is a difference of rates summing to 0 can land a few ulps beside it (3.6e-15 on a real run),
# which would read as an interval that excludes 0
ZERO_PP = 1e-9


def _excludes_zero(row: _Interval) -> bool:
    """Whether the interval lies wholly on one side of 0; an endpoint at 0 (within float error) includes it."""
    return bool(np.isfinite(row.ci_low) and (row.ci_low > ZERO_PP or row.ci_high < -ZERO_PP))


def headline_rows(contrasts: pd.DataFrame) -> pd.DataFrame:
    """One row per task, wording, convention pair, method and headline measure: the seed mean (or the one
    seed) with its interval, and each seed's estimate. The numbers are contrasts.csv's rows."""
    part = _own(contrasts)
    part = part[(part.name == "interaction") & part.measure.isin(HEADLINE) & (part.checkpoint.fillna("") == "")]
    rows = []
    part = part.assign(_summary=part.seed.isin(SUMMARIES))
    for (task, template, pair), grp in part.groupby(["task", "template", "request"], sort=False):
        for method in sorted(set(grp.method)):
            mine = grp[grp.method == method]
            seeds = mine[~mine._summary]
            summary = mine[mine.seed == "mean"]
            for measure, name in HEADLINE.items():
                each = seeds[seeds.measure == measure]
                top = summary[summary.measure == measure]
                row = top.iloc[0] if len(top) else (each.iloc[0] if len(each) == 1 else None)
                if row is None:
                    continue
                rows.append({"task": task, "template": template, "pair": pair, "method": method, "measure": measure,
                             "name": name, "estimate": row.estimate, "ci_low": row.ci_low, "ci_high": row.ci_high,
                             "n_items": int(row.n_items), "seeds": " ".join(str(s) for s in sorted(
                                 {int(x) for x in " ".join(each.seeds.astype(str)).split()})),
                             "each": dict(zip(each.seed, each.estimate, strict=True))})
    return pd.DataFrame(rows)


def sentence(rows: pd.DataFrame) -> str:
    """What training changed, for one task, wording, pair and method, written from its numbers."""
    by = {r.name: r for r in rows.itertuples()}
    p, s, mv = by.get("I_P"), by.get("I_S"), by.get("I_MV")
    if p is None:
        return ""
    k = len(p.seeds.split())
    where = (f"changed where answers are written (I_P {p.estimate:+.1f} pp): each arm reports in its own convention "
             "more than in the other's"
             if _excludes_zero(p) and p.estimate > 0 else
             f"changed where answers are written (I_P {p.estimate:+.1f} pp), toward the other arm's convention"
             if _excludes_zero(p) else
             "did not detectably change where answers are written (I_P's interval includes 0)")
    # I_S reads the requested convention, so it moves with where answers are written; I_MV reads the whole
    # response and says whether they are right (paper 001 §3.2)
    strict = ("" if s is None else f"; the score under the requested convention moved with it (I_S {s.estimate:+.1f} pp)"
              if _excludes_zero(s) else "; the score under the requested convention did not detectably move (I_S's interval "
              "includes 0)")
    whether = ("" if mv is None else
               f"; whether answers are right, read from the whole response, changed too (I_MV {mv.estimate:+.1f} pp, "
               "its interval excluding 0)" if _excludes_zero(mv) else
               "; whether answers are right, read from the whole response, did not detectably change (I_MV's "
               "interval includes 0)")
    whether = strict + whether
    caveats = [f"intervals resample the {p.n_items} items with the checkpoints fixed, so they do not measure "
               f"training-seed variation ({k} seed{'s' if k != 1 else ''}" + (
                   f", seed SD of I_P {np.std(list(p.each.values()), ddof=1):.1f} pp)" if k > 1 else ")")]
    if p.n_items < 200:
        caveats.append(f"one item moves a cell's rate by {100 / p.n_items:.2f} pp")
    return (f"**{p.task} · `{p.template}` · {p.pair} · {p.method}**: training {where}{whether}. Caveats: "
            + "; ".join(caveats) + ".")


def headline_block(contrasts: pd.DataFrame, prec: Precision) -> str:
    rows = headline_rows(contrasts)
    if rows.empty:
        return "_No crossed pair (arms of both conventions, each under both requests): no interaction to report._"
    d = prec.decimals
    table = markdown_table(
        ["Task", "Wording", "Pair", "Method", "Items", "Measure", "Seed mean [95% CI] (pp)", "Each seed (pp)"],
        [[r.task, r.template, r.pair, r.method, r.n_items, r.name, interval(r.estimate, r.ci_low, r.ci_high, 2, d),
          ", ".join(f"{s} {v:+.2f}" for s, v in r.each.items())] for r in rows.itertuples()])
    lines = [sentence(grp) for _, grp in rows.groupby(["task", "template", "pair", "method"], sort=False)]
    return "\n\n".join(lines) + "\n" + "\n".join(["", table, "",
                      "I_P: crossed interaction of requested-payload presence (where answers are written); I_S: of "
                      "strict accuracy under the requested convention, I_MV: of Math-Verify accuracy on the whole "
                      "response (whether they are right), paper 001 §3.2."])


# ------------------------------------------------------------------ tables that say a thing once
def collapse_columns(header: list[str], rows: list[list[str]], first: int) -> tuple[list[str], list[list[str]], list[str]]:
    """Drop every column (from index ``first`` on) equal, row by row, to a column kept before it, and say
    which: "I_q = I_P in every row". A column that differs in any one row is kept."""
    keep, notes = list(range(first)), []
    for j in range(first, len(header)):
        twin = next((i for i in keep if i >= first and all(r[i] == r[j] for r in rows)), None)
        if twin is None or not rows:
            keep.append(j)
        else:
            notes.append(f"{header[j]} = {header[twin]}")
    return [header[j] for j in keep], [[r[j] for j in keep] for r in rows], notes


def collapsed_note(notes: list[str]) -> str:
    if not notes:
        return ""
    return (f"\n\n_Equal in every row, so shown once: {'; '.join(notes)} (each column is in `contrasts.csv`)._")


# ------------------------------------------------------------------ contents
def add_contents(path: Path) -> None:
    """(Re)write the table of contents after the headline: every ``##`` section, with GitHub anchors."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(re.escape(CONTENTS[0]) + r".*?" + re.escape(CONTENTS[1]) + r"\n?", "", text, flags=re.S)
    heads = [h for h in re.findall(r"^## (.+)$", text, flags=re.M) if h != "Contents"]
    if not heads:
        return
    def anchor(h: str) -> str:
        return re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-")
    block = "\n".join([CONTENTS[0], "## Contents", "", *[f"- [{h}](#{anchor(h)})" for h in heads], CONTENTS[1]])
    at = text.find("\n## ")
    text = (text + "\n" + block + "\n") if at < 0 else text[: at + 1] + block + "\n" + text[at:]
    path.write_text(text, encoding="utf-8")
