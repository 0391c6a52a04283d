"""Content-matched SFT's pre-specified criteria, checked pass/fail (paper 001 App. D.2.1).

The paper fixes these before training the marker arm H (SFT ``####``) and its control B (SFT ``\\boxed{}``),
per training seed, with D = Acc_strict(hash request) - Acc_strict(boxed request) (eq. 8) as a proportion:

1. the hash-marker arm reverses the sign of the initial policy's D;
2. the boxed control keeps the initial sign;
3. the arm-to-arm contrast D(H) - D(B) exceeds +0.50;
4. the lenient score of the two arms differs by at most 0.05 under each request;
5. off-convention reader gaps (lenient - strict: H under boxed, B under hash) substantially exceed the
   on-convention ones (H under hash, B under boxed). "Substantially" is not quantified in the paper; ours is
   a margin of at least 0.10 between the smallest off-convention and the largest on-convention gap;
6. across seeds, the arm-to-arm contrast spreads (max - min) by at most 0.25 (the replication protocol).

The estimates are the cells' own rates, not resampled: a criterion is met or not on the observed cells.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from crossed_rlvr.analysis.cells import with_policy_columns
from crossed_rlvr.rewards.conventions import MARKER_PAIR

ARM, CONTROL = "hash", "boxed"
CONTRAST_MIN, LENIENT_MAX, GAP_MARGIN, SPREAD_MAX = 0.50, 0.05, 0.10, 0.25


def _rates(cells: pd.DataFrame) -> dict[tuple[str, str, str], float]:
    keep = cells[cells.measure.isin(["acc.strict", "acc.lenient"])]
    return {(r.policy, r.request, r.measure): float(r.value) for r in keep.itertuples()}


def sft_criteria(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, template, seed, criterion): the value, the threshold and whether it passes. Empty
    unless the cells hold the initial policy and SFT hash and boxed arms of a seed under both requests."""
    rows: list[dict] = []
    cells = with_policy_columns(cells)
    for (task, template), part in cells.groupby(["task", "template"], sort=True):
        rate = _rates(part)

        def D(policy: str, rate: dict = rate) -> float:
            return rate.get((policy, "hash", "acc.strict"), np.nan) - rate.get((policy, "boxed", "acc.strict"), np.nan)

        pols = part.drop_duplicates("policy")
        arms: dict[int, dict[str, str]] = {}
        for r in pols.itertuples():
            if r.training_convention in (ARM, CONTROL) and r.method == "sft" and not r.checkpoint:
                arms.setdefault(int(r.train_seed), {})[r.training_convention] = r.policy
        d0 = D("initial")
        contrasts = {}
        for seed, pair in sorted(arms.items()):
            if set(pair) != {ARM, CONTROL} or np.isnan(d0):
                continue
            h, b = pair[ARM], pair[CONTROL]
            dh, db = D(h), D(b)
            if np.isnan(dh) or np.isnan(db):
                continue
            contrasts[seed] = dh - db
            len_diff = max(abs(rate[(h, r, "acc.lenient")] - rate[(b, r, "acc.lenient")]) for r in MARKER_PAIR)

            def gap(p: str, r: str, rate: dict = rate) -> float:
                return rate[(p, r, "acc.lenient")] - rate[(p, r, "acc.strict")]

            margin = min(gap(h, "boxed"), gap(b, "hash")) - max(gap(h, "hash"), gap(b, "boxed"))
            checks = [
                ("hash arm reverses the sign of D", f"D(H) = {dh:+.4f}, D(π0) = {d0:+.4f}", "opposite signs",
                 bool(np.sign(dh) == -np.sign(d0) != 0)),
                ("boxed control keeps the initial sign", f"D(B) = {db:+.4f}, D(π0) = {d0:+.4f}", "same sign",
                 bool(np.sign(db) == np.sign(d0) != 0)),
                ("arm-to-arm contrast D(H) − D(B)", f"{dh - db:+.4f}", f"> {CONTRAST_MIN:+.2f}", dh - db > CONTRAST_MIN),
                ("largest lenient difference between the arms, per request", f"{len_diff:.4f}",
                 f"≤ {LENIENT_MAX:.2f}", len_diff <= LENIENT_MAX),
                ("off- minus on-convention reader gap (smallest margin)", f"{margin:+.4f}",
                 f"≥ {GAP_MARGIN:.2f} (ours)", margin >= GAP_MARGIN),
            ]
            rows += [{"task": task, "template": template, "seed": str(seed), "criterion": c, "value": v,
                      "threshold": t, "pass": bool(ok)} for c, v, t, ok in checks]
        if len(contrasts) > 1:
            spread = max(contrasts.values()) - min(contrasts.values())
            rows.append({"task": task, "template": template, "seed": " ".join(map(str, sorted(contrasts))),
                         "criterion": "cross-seed spread of the arm-to-arm contrast", "value": f"{spread:.4f}",
                         "threshold": f"≤ {SPREAD_MAX:.2f}", "pass": spread <= SPREAD_MAX})
    return pd.DataFrame(rows, columns=["task", "template", "seed", "criterion", "value", "threshold", "pass"])


def criteria_section(table: pd.DataFrame) -> str:
    """The report's table of the criteria, with a one-line verdict per task and wording."""
    if table.empty:
        return ""
    lines = ["\n## Pre-specified SFT criteria (App. D.2.1)\n",
             "Checked on the observed cells of the initial policy and the SFT marker arm H (`####`) and control B "
             "(`\\boxed{}`) of each seed; D is eq. 8 as a proportion. The off/on gap margin is ours (the paper says "
             "\"substantially\").\n"]
    for (task, template), part in table.groupby(["task", "template"], sort=True):
        ok = part["pass"].tolist()
        failed = [f"{c} (seed {s})" for c, s, p in zip(part.criterion, part.seed, ok) if not p]
        lines.append(f"**{task} · `{template}`: {sum(ok)} of {len(ok)} checks pass"
                     + (f"; failed: {'; '.join(failed)}" if failed else "") + ".**\n")
        lines.append("| Seed | Criterion | Value | Threshold | Result |\n|---|---|---|---|---|")
        lines += [f"| {s} | {c} | {v} | {t} | {'pass' if p else 'FAIL'} |"
                  for s, c, v, t, p in zip(part.seed, part.criterion, part.value, part.threshold, ok)]
        lines.append("")
    return "\n".join(lines)
