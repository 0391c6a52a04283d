"""``crossed-calibrate analyze``: human-calibrated committed-answer accuracy and gains (paper 001 App. A).

Per state: [H^L, H^U] (eq. 10) with simultaneous exact finite-population bounds. Per setting (the
trained states of one method and convention under one request and wording, against the initial
policy under the same request; seeds averaged, the shared initial entering once): the human gain's
identification range and 95% bounds, the reader-human gain gap of every stratifying reader (Table 3),
the strict reader's missed-credit and false-credit components of eq. 6 (Table 6), the sample and
populations (Table 5), and A/B agreement with the final unresolved mass (Table 7).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from crossed_rlvr.calibration.bounds import Interval, Stratum, bounds, cells, estimate, gain_range
from crossed_rlvr.calibration.sample import reader_column
from crossed_rlvr.layout import AnalysisLayout

ENDPOINTS = ("zL", "zU", "unresolved", "agreement", "fidelity")  # the declared binary endpoints (App. A)
ALPHA = 0.05


def z_values(final: dict[str, Any]) -> tuple[int, int]:
    """(z^L, z^U) of a final label: no answer is 0; unresolved counts only in z^U (eq. 10)."""
    if final.get("status") == "no_answer":
        return 0, 0
    c = final["correctness"]
    return int(c == "correct"), int(c in ("correct", "unresolved"))


def observation_table(sample: list[dict[str, Any]], final: dict[str, dict], pair_labels: dict | None = None
                      ) -> pd.DataFrame:
    """One row per sampled observation: state, stratum, weights, z^L, z^U and the reader bits of its stratum."""
    rows = []
    for r in sample:
        zl, zu = z_values(final[r["sample_id"]])
        bits = dict(p.split("=") for p in r["stratum"].split("|"))
        row = {"sample_id": r["sample_id"], "state": r["state"], "policy": r["policy"], "request": r["request"],
               "template": r["template"], "task": r["task"], "stratum": r["stratum"], "N_h": r["N_h"], "n_h": r["n_h"],
               "w": r["weight"], "zL": zl, "zU": zu, "unresolved": zu - zl,
               **{f"r_{k}": int(v) for k, v in bits.items()}}
        if pair_labels is not None:
            row.update(pair_labels.get(r["sample_id"], {}))
        rows.append(row)
    return pd.DataFrame(rows)


def strata_of(obs: pd.DataFrame) -> dict[str, list[Stratum]]:
    out: dict[str, list[Stratum]] = defaultdict(list)
    for (state, _), g in obs.groupby(["state", "stratum"], sort=True):
        ones = {e: int(g[e].sum()) for e in ENDPOINTS if e in g}
        out[state].append(Stratum(N=int(g.N_h.iloc[0]), n=int(g.n_h.iloc[0]), ones=ones))
    return dict(out)


def settings(obs: pd.DataFrame, scores: pd.DataFrame) -> list[dict[str, Any]]:
    """Trained states grouped by method, convention, request and wording, each with its initial state."""
    from crossed_rlvr.analysis.cells import policy_table

    info = policy_table(scores).set_index("policy")
    states = obs[["state", "policy", "request", "template"]].drop_duplicates()
    initial = {(r.request, r.template): r.state for r in states.itertuples() if r.policy == "initial"}
    groups: dict[tuple, list[str]] = defaultdict(list)
    seeds: dict[tuple, list[int]] = defaultdict(list)
    for r in states.itertuples():
        if r.policy == "initial" or (r.request, r.template) not in initial:
            continue
        conv = str(info.loc[r.policy, "training_convention"])
        method, ckpt = str(info.loc[r.policy, "method"]), str(info.loc[r.policy, "checkpoint"])
        key = (method, conv, ckpt, r.request, r.template)
        groups[key].append(r.state)
        seeds[key].append(int(info.loc[r.policy, "train_seed"]))
    return [{"setting": f"{m}-{c}{'@' + k if k else ''} under {q} ({t})", "trained": sorted(groups[(m, c, k, q, t)]),
             "seeds": sorted(seeds[(m, c, k, q, t)]), "initial": initial[(q, t)], "request": q, "template": t}
            for (m, c, k, q, t) in sorted(groups)]


def reader_accuracy(scores: pd.DataFrame, state: str, role: str) -> float:
    from crossed_rlvr.eval.score.symbolic import is_symbolic_task

    policy, request, template = state.split(":")
    part = scores[(scores.policy == policy) & (scores.request == request) & (scores.template == template)]
    col = reader_column(role, request, is_symbolic_task(str(part.task.iloc[0])))
    return float(part[col].astype(float).mean())


def components(obs: pd.DataFrame, state: str, scenario: str, role: str = "strict") -> tuple[float, float, float]:
    """(H, FP, FN) of one state under one resolution of the unresolved labels (z^L or z^U): FP = Pr[r=1, Z=0],
    FN = Pr[r=0, Z=1], population-weighted (eq. 6)."""
    g = obs[obs.state == state]
    N = float(g.groupby("stratum").N_h.first().sum())
    z, r = g[scenario].to_numpy(), g[f"r_{role}"].to_numpy()
    w = g.w.to_numpy()
    return float((w * z).sum() / N), float((w * (r == 1) * (z == 0)).sum() / N), float((w * (r == 0) * (z == 1)).sum() / N)


@dataclass(frozen=True)
class ReaderGap:
    """A reader's gain in a setting, and its gap to the human gain: identification range and 95% bounds."""

    gain: float
    id: tuple[float, float]
    ci: tuple[float, float]


@dataclass(frozen=True)
class StateBounds:
    """One state's human accuracy: its identification range [H^L, H^U], simultaneous bounds, population, sample."""

    H: tuple[float, float]
    CI: tuple[float, float]
    N: int
    n: int


def analyze_calibration(obs: pd.DataFrame, scores: pd.DataFrame, interval: Interval | None = None,
                        corrected: bool = True) -> dict[str, pd.DataFrame]:
    """Every table of App. A from the observation table. ``interval`` (a per-cell interval other than the
    exact one) and ``corrected=False`` (no 0.05/M budget) exist for the coverage check's mutations."""
    strata = strata_of(obs)
    M = cells(strata, len(ENDPOINTS))
    alpha_cell = ALPHA / M if M and corrected else ALPHA
    per_state: dict[str, StateBounds] = {}
    for state, st in strata.items():
        per_state[state] = StateBounds(H=(estimate(st, "zL"), estimate(st, "zU")),
                                       CI=(bounds(st, "zL", alpha_cell, interval)[0],
                                           bounds(st, "zU", alpha_cell, interval)[1]),
                                       N=sum(s.N for s in st), n=sum(s.n for s in st))
    table3, table6, rows = [], [], []
    for s in settings(obs, scores):
        trained, init = s["trained"], s["initial"]
        h_id = gain_range([per_state[t].H for t in trained], per_state[init].H)
        h_ci = gain_range([per_state[t].CI for t in trained], per_state[init].CI)
        roles = [c[2:] for c in obs.columns if c.startswith("r_")]
        gaps: dict[str, ReaderGap] = {}
        for role in roles:
            if obs[obs.state.isin([*trained, init])][f"r_{role}"].isna().any():
                continue
            d_e = float(np.mean([reader_accuracy(scores, t, role) for t in trained])) - reader_accuracy(scores, init, role)
            gaps[role] = ReaderGap(gain=d_e, id=(d_e - h_id[1], d_e - h_id[0]), ci=(d_e - h_ci[1], d_e - h_ci[0]))
            rows.append({"setting": s["setting"], "quantity": f"gain_{role}", "estimate_low": d_e, "estimate_high": d_e,
                         "ci_low": np.nan, "ci_high": np.nan})
            rows.append({"setting": s["setting"], "quantity": f"gap_{role}_human", "estimate_low": gaps[role].id[0],
                         "estimate_high": gaps[role].id[1], "ci_low": gaps[role].ci[0],
                         "ci_high": gaps[role].ci[1]})
        rows.append({"setting": s["setting"], "quantity": "gain_human", "estimate_low": h_id[0],
                     "estimate_high": h_id[1], "ci_low": h_ci[0], "ci_high": h_ci[1]})
        strict = gaps.get("strict", ReaderGap(gain=np.nan, id=(np.nan, np.nan), ci=(np.nan, np.nan)))
        table3.append({"setting": s["setting"], "seeds": " ".join(map(str, s["seeds"])), "strict_gain": strict.gain,
                       "human_id": h_id, "human_ci": h_ci, "gap_id": strict.id, "gap_ci": strict.ci,
                       "width": h_id[1] - h_id[0],
                       "U_trained": float(np.mean([per_state[t].H[1] - per_state[t].H[0] for t in trained])),
                       "U_initial": per_state[init].H[1] - per_state[init].H[0]})
        # eq. 6 components at the two resolutions that give the gap's endpoints (RL at z^U and initial at z^L, and
        # the reverse): FN_0 - FN_RL and FP_RL - FP_0 add up to the gap at each
        comp = []
        for rl_z, init_z in (("zU", "zL"), ("zL", "zU")):
            rl = np.mean([components(obs, t, rl_z) for t in trained], axis=0)
            i0 = components(obs, init, init_z)
            comp.append((i0[2] - rl[2], rl[1] - i0[1]))
        table6.append({"setting": s["setting"], "fn_reduction": (min(c[0] for c in comp), max(c[0] for c in comp)),
                       "fp_increase": (min(c[1] for c in comp), max(c[1] for c in comp)), "gap": strict.id,
                       "gap_by_scenario": [c[0] + c[1] for c in comp]})
    for state, v in per_state.items():
        rows.append({"setting": state, "quantity": "human_accuracy", "estimate_low": v.H[0], "estimate_high": v.H[1],
                     "ci_low": v.CI[0], "ci_high": v.CI[1]})
        for endpoint, name in (("unresolved", "unresolved_mass"), ("agreement", "correctness_agreement"),
                               ("fidelity", "strict_candidate_fidelity")):
            if endpoint in strata[state][0].ones:  # the other declared endpoints, with their own simultaneous bounds
                e, (lo, hi) = estimate(strata[state], endpoint), bounds(strata[state], endpoint, alpha_cell, interval)
                rows.append({"setting": state, "quantity": name, "estimate_low": e, "estimate_high": e,
                             "ci_low": lo, "ci_high": hi})
    table5 = pd.DataFrame([{"state": k, "population": v.N, "sample": v.n} for k, v in per_state.items()])
    table7 = []
    for state, g in obs.groupby("state", sort=True):
        N = float(g.groupby("stratum").N_h.first().sum())
        row = {"state": state, "unresolved_mass": float((g.w * g.unresolved).sum() / N)}
        for col in ("agreement", "status_agreement", "fidelity_A", "fidelity_B", "fidelity"):
            if col in g:
                row[col] = float((g.w * g[col]).sum() / N)
        table7.append(row)
    return {"table3": pd.DataFrame(table3), "table5": table5, "table6": pd.DataFrame(table6),
            "table7": pd.DataFrame(table7), "calibration": pd.DataFrame(rows), "M": pd.DataFrame([{"M": M}])}


def _pp(x: float) -> str:
    return "n/a" if x is None or np.isnan(x) else f"{100 * x:+.2f}"


def _range(r: tuple[float, float]) -> str:
    return f"{_pp(r[0])} – {_pp(r[1])}"


def _ci(r: tuple[float, float]) -> str:
    return f"[{_pp(r[0])}, {_pp(r[1])}]"


def report_section(t: dict[str, pd.DataFrame]) -> str:
    from crossed_rlvr.analysis.report.tables import markdown_table as table

    m = int(t["M"]["M"].iloc[0])
    parts = ["## Human calibration of committed answers (App. A)", "",
             (f"Simultaneous 95% bounds: exact hypergeometric inversion per endpoint × stratum cell, budget 0.05/{m} "
              "over the non-census cells, propagated through weighted sums and signed contrasts. ID: identification "
              "range over unresolved labels. Percentage points."), "",
             "### Strict-score gains and human-calibrated gains (Table 3)", "",
             table(["Setting", "Seeds", "Strict gain Δ_S", "Δ_H ID range", "Δ_H 95% CI", "Δ_S − Δ_H ID range",
                    "Δ_S − Δ_H 95% CI", "Width = U_RL + U_0"],
                   [[r.setting, r.seeds, _pp(r.strict_gain), _range(r.human_id), _ci(r.human_ci), _range(r.gap_id),
                     _ci(r.gap_ci), f"{100 * r.width:.2f} = {100 * r.U_trained:.2f} + {100 * r.U_initial:.2f}"]
                    for r in t["table3"].itertuples()]) if len(t["table3"]) else "_No trained state with its initial._",
             "", "### Sample and finite populations (Table 5)", "",
             table(["State", "Population", "Sample"], [[r.state, r.population, r.sample] for r in t["table5"].itertuples()]),
             "", "### Error components of the strict–human gap (Table 6, eq. 6)", "",
             table(["Setting", "Missed-correct reduction FN_0 − FN_RL", "False-credit increase FP_RL − FP_0",
                    "Strict–human gap"],
                   [[r.setting, _ci(r.fn_reduction), _ci(r.fp_increase), _ci(r.gap)] for r in t["table6"].itertuples()])
             if len(t["table6"]) else "_None._",
             "", "### Independent annotation agreement and residual uncertainty (Table 7)", "",
             table(["State", "Correctness agreement (%)", "Answer-status agreement (%)", "Final unresolved mass (%)",
                    "Strict candidate faithful: A / B / both (%)"],
                   [[r.state, f"{100 * getattr(r, 'agreement', np.nan):.2f}",
                     f"{100 * getattr(r, 'status_agreement', np.nan):.2f}", f"{100 * r.unresolved_mass:.2f}",
                     " / ".join(f"{100 * getattr(r, c, np.nan):.2f}" for c in ("fidelity_A", "fidelity_B", "fidelity"))]
                    for r in t["table7"].itertuples()]), ""]
    return "\n".join(parts)


def write_outputs(out: Path, t: dict[str, pd.DataFrame]) -> Path:
    files = AnalysisLayout(out)
    out.mkdir(parents=True, exist_ok=True)
    t["calibration"].to_csv(files.table("calibration"), index=False, float_format="%.10g")
    files.report.write_text(report_section(t))
    return files.report
