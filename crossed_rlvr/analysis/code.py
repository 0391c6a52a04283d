"""The crossed analysis of code tasks (paper 001 App. D.3): per policy and request, the payload rate, strict and
lenient pass@1 and pass@k (the unbiased estimator of Eq. 11), the formatting gap γ = lenient − strict pass@1;
against the initial policy, the strict and lenient gains and the pass@N coverage change with McNemar's test; and
the crossed interaction of arms trained on the two code conventions. Intervals are paired bootstraps over tasks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from crossed_rlvr.names import PolicyName, pair_name
from crossed_rlvr.rewards.code import CODE_CONVENTIONS
from crossed_rlvr.rewards.conventions import pair_label

READERS = ("strict", "lenient")


def samples_drawn(scores: pd.DataFrame) -> int:
    """The samples per task of the table's cells (the N of pass@N): the largest count in any cell."""
    return int(scores.groupby(["policy", "request", "item_id"]).size().max())


def cells(scores: pd.DataFrame, samples: int) -> pd.DataFrame:
    """Per (policy, request): payload rate, strict and lenient pass@1 (base + plus; and base alone), pass@k for
    k = 1, 2, 4, ... up to the samples drawn (Eq. 11, averaged over tasks), and γ = lenient − strict pass@1."""
    from crossed_rlvr.analysis.coverage import pass_at_k_items

    ks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64, 100, 200) if k <= samples} | {samples})
    out = []
    for (policy, request), g in scores.groupby(["policy", "request"], sort=True):
        row: dict[str, Any] = {"policy": policy, "request": request, "n_tasks": g["item_id"].nunique(),
                               "n_responses": len(g), "payload": g["requested_payload"].mean()}
        for cat in ("requested_only", "other_only", "both", "neither"):
            row[f"cat.{cat}"] = (g["category"] == cat).mean()
        per_task = g.groupby("item_id").agg(n=("sample_idx", "size"), strict=("strict.correct", "sum"),
                                            lenient=("lenient.correct", "sum"), strict_base=("strict.base", "sum"),
                                            lenient_base=("lenient.base", "sum"))
        for reader in READERS:
            for k in ks:
                row[f"{reader}.pass@{k}"] = float(np.mean(pass_at_k_items(per_task[reader], per_task["n"], k)))
            row[f"{reader}.base.pass@1"] = float(np.mean(pass_at_k_items(per_task[f"{reader}_base"], per_task["n"], 1)))
        row["gamma"] = row["lenient.pass@1"] - row["strict.pass@1"]
        out.append(row)
    return pd.DataFrame(out)


def contrasts(scores: pd.DataFrame, samples: int, resamples: int = 10_000, rng_seed: int = 0) -> pd.DataFrame:
    """Paper 001 App. D.3's quantities, per request, with paired item-bootstrap intervals over tasks:

    - ``gamma``: the formatting gap of each policy, lenient − strict pass@1 (γ₀ for the initial policy);
    - ``gain_strict`` / ``gain_lenient``: a policy's pass@1 minus the initial policy's, on the same tasks;
    - ``coverage``: the change in pass@N (N the samples drawn) against the initial policy, with the tasks lost
      and gained and the exact McNemar test on those two counts (App. C.3);
    - ``interaction_payload`` / ``interaction_strict`` / ``interaction_lenient``: the crossed interaction (paper 001
      eq. 1) of arms trained on the two code conventions (``<method>-fence/s<seed>`` and
      ``<method>-begin_done/s<seed>``, same checkpoint), 100 × [(F_f − B_f) − (F_b − B_b)] in percentage points
      per task, for the payload rate and strict and lenient pass@1.
    """
    from crossed_rlvr.analysis.bootstrap import paired_mean_intervals
    from crossed_rlvr.analysis.contrasts import crossed_interaction
    from crossed_rlvr.analysis.coverage import coverage_change, pass_at_k_items

    per = scores.groupby(["policy", "request", "item_id"]).agg(
        n=("sample_idx", "size"), strict=("strict.correct", "sum"), lenient=("lenient.correct", "sum"),
        payload=("requested_payload", "sum"))
    rows: list[dict[str, Any]] = []

    def add(name: str, policy: str, request: str, diffs: np.ndarray, **extra: Any) -> None:
        est, lo, hi = paired_mean_intervals(diffs[None, :], np.ones((1, len(diffs))), resamples, rng_seed)
        rows.append({"name": name, "policy": policy, "request": request, "estimate": float(est[0]),
                     "ci_low": float(lo[0]), "ci_high": float(hi[0]), "n_items": len(diffs),
                     "n_resamples": resamples, "rng_seed": rng_seed, **extra})

    for (policy, request), cell in per.groupby(level=["policy", "request"]):
        g = cell.droplevel(["policy", "request"])
        add("gamma", policy, request, ((g["lenient"] - g["strict"]) / g["n"]).to_numpy(float))
        if policy == "initial" or ("initial", request) not in per.index.droplevel("item_id"):
            continue
        base = per.loc[("initial", request)]
        tasks = g.index.intersection(base.index)
        for reader in READERS:
            diff = (g.loc[tasks, reader] / g.loc[tasks, "n"] - base.loc[tasks, reader] / base.loc[tasks, "n"])
            add(f"gain_{reader}", policy, request, diff.to_numpy(float))
        cov = (pass_at_k_items(g.loc[tasks, "strict"], g.loc[tasks, "n"], samples)
               - pass_at_k_items(base.loc[tasks, "strict"], base.loc[tasks, "n"], samples))
        lost, gained, p = coverage_change(base.loc[tasks, "strict"].to_numpy(), g.loc[tasks, "strict"].to_numpy())
        add("coverage", policy, request, np.asarray(cov, float), lost=lost, gained=gained, mcnemar_p=p)
    for pair, (fence, begin_done) in code_pairs(scores).items():
        cells = {(pol, req): per.loc[(pol, req)] for pol in (fence, begin_done) for req in CODE_CONVENTIONS
                 if (pol, req) in per.index.droplevel("item_id")}
        if len(cells) < 4:
            continue
        tasks = sorted(set.intersection(*(set(c.index) for c in cells.values())))
        for measure in ("payload", "strict", "lenient"):
            rate = {key: (c.loc[tasks, measure] / c.loc[tasks, "n"]).to_numpy(float) for key, c in cells.items()}

            def per_task(policy: str, request: str, rate: dict[tuple[str, str], np.ndarray] = rate) -> np.ndarray:
                return rate[(policy, request)]

            diff = crossed_interaction(per_task, (fence, begin_done), ("fence", "begin_done"))
            add(f"interaction_{measure}", pair, pair_label("fence", "begin_done"), diff)
    return pd.DataFrame(rows)


def code_pairs(scores: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """The crossed pairs among the scores' policies: {``grpo/s1``: (``grpo-fence/s1``, ``grpo-begin_done/s1``)}: the
    arms of one method, seed and checkpoint, paired as an answer task's are (``contrasts.arms_by_seed``, from the
    facts the records store; scores of records made before those were stored read them from the policy's name)."""
    from crossed_rlvr.analysis.cells import policy_table
    from crossed_rlvr.analysis.contrasts import arms_by_seed

    pol = scores.drop_duplicates("policy")
    if not {"training_convention", "train_seed"} <= set(pol):
        named = [(p, PolicyName.parse(str(p))) for p in pol["policy"]]
        pol = pd.DataFrame([{"policy": p, "training_convention": n.convention, "train_seed": n.seed,
                             "method": n.method, "checkpoint": n.checkpoint} for p, n in named if n is not None])
    arms = arms_by_seed(policy_table(pol)) if len(pol) else {}
    return {pair_name(method, seed, ckpt): (convs["fence"], convs["begin_done"])
            for (method, ckpt, seed), convs in sorted(arms.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1]))
            if set(CODE_CONVENTIONS) <= set(convs)}
