"""The format share of reported gains (paper 000 §2): re-read a base and an RL model's saved outputs with
the harness extractor h and with the fixed extractor omega.

Per comparison (pair, benchmark, prompt, harness extractor): accuracies under h and omega for both
models, g_rep = acc_h(RL) - acc_h(base), g_fix = acc_omega(RL) - acc_omega(base), the format gain
D = g_rep - g_fix and its share D / g_rep, extraction rates, and the two admission criteria (g_rep's
lower 95% bound >= 2 points; omega reads >= 50% of each model's outputs, the two rates within 20
points). The pooled share sum(D) / sum(g_rep) over admitted comparisons has an item-bootstrap
interval (items resampled within benchmark, the same draw for every comparison of that benchmark),
with leave-one-pair-out and leave-one-benchmark-out shares.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from crossed_rlvr.rescore import omega
from crossed_rlvr.rescore.harness import REGISTRY, correct

MIN_GAIN, MIN_READ, MAX_GAP = 2.0, 50.0, 20.0


@dataclass
class Outputs:
    """One model's outputs on one benchmark under one prompt, aligned by item."""

    items: list[str]
    keys: list[str]
    responses: list[str]
    kind: str  # mc | free
    n_options: list[int]
    omega: dict[str, np.ndarray] | None = None  # omega's reading, filled on first use
    benchmark: str = ""  # for benchmark-aware extractors (Qwen2.5-Math)
    answers: dict[str, list[str | None]] = field(default_factory=dict)  # reader -> answers, filled on first use


def answers(out: Outputs, reader: str) -> list[str | None]:
    """What ``reader`` (a harness extractor, or ``omega``) reads in each output, read once per output set
    (the comparisons and the reader audit share it)."""
    if reader not in out.answers:
        if reader == "omega":
            out.answers[reader] = [omega.mc(t, n) if out.kind == "mc" else omega.free(t)
                                   for t, n in zip(out.responses, out.n_options, strict=True)]
        else:
            h = REGISTRY[reader]
            out.answers[reader] = [h.read(t, out.benchmark, k) for t, k in zip(out.responses, out.keys, strict=True)]
    return out.answers[reader]


def credited(out: Outputs, reader: str) -> list[bool]:
    """Per output, whether ``reader``'s answer is the key (omega: its letter or App. B's normalisation)."""
    if reader == "omega":
        return [w is not None and (w == k.strip() if out.kind == "mc" else omega.same(w, k))
                for w, k in zip(answers(out, "omega"), out.keys, strict=True)]
    return [correct(a, k, out.kind) for a, k in zip(answers(out, reader), out.keys, strict=True)]


def omega_matrix(out: Outputs) -> dict[str, np.ndarray]:
    """Per item: correct and extracted under omega, and where it found the answer (read once per output set)."""
    if out.omega is None:
        where = [omega.where(t, out.kind, n) or "none" for t, n in zip(out.responses, out.n_options, strict=True)]
        out.omega = {"c_w": np.array(credited(out, "omega"), float),
                     "e_w": np.array([w is not None for w in answers(out, "omega")], float), "where": np.array(where)}
    return out.omega


def read_matrix(out: Outputs, harness: str) -> dict[str, np.ndarray]:
    """Per item: correct and extracted under h, with omega's reading beside it."""
    return {"c_h": np.array(credited(out, harness), float),
            "e_h": np.array([a is not None for a in answers(out, harness)], float), **omega_matrix(out)}


def comparisons(runs: dict[tuple[str, str, str, str], Outputs], pairs: list[tuple[str, str]],
                harnesses: list[str], resamples: int = 2000, seed: int = 20260930
                ) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """One row per (pair, benchmark, prompt, harness); ``runs`` is keyed (model, benchmark, prompt, kind)."""
    rows, per_item = [], {}
    rng = np.random.default_rng(seed)
    draws: dict[str, np.ndarray] = {}
    for base, rl in pairs:
        for (model, bench, prompt, kind), out_b in sorted(runs.items()):
            if model != base or (rl, bench, prompt, kind) not in runs:
                continue
            out_r = runs[(rl, bench, prompt, kind)]
            if out_b.items != out_r.items:
                raise ValueError(f"{base} and {rl} on {bench}/{prompt}: different items; align them first")
            n = len(out_b.items)
            if bench not in draws:  # one draw of items per benchmark, shared by its comparisons
                draws[bench] = rng.integers(0, n, size=(resamples, n))
            for name in harnesses:
                if kind not in REGISTRY[name].kinds:
                    continue
                mb, mr = read_matrix(out_b, name), read_matrix(out_r, name)
                g_items = 100 * (mr["c_h"] - mb["c_h"])
                d_items = g_items - 100 * (mr["c_w"] - mb["c_w"])
                g_boot = g_items[draws[bench]].mean(axis=1)
                key = f"{base}|{rl}|{bench}|{prompt}|{name}"
                per_item[key] = np.stack([g_items, d_items])
                g_rep, d = float(g_items.mean()), float(d_items.mean())
                read_b, read_r = 100 * mb["e_w"].mean(), 100 * mr["e_w"].mean()
                lo = float(np.percentile(g_boot, 2.5))
                rows.append({
                    "pair": f"{base} -> {rl}", "base": base, "rl": rl, "benchmark": bench, "prompt": prompt,
                    "kind": kind, "harness": name, "items": n,
                    "acc_h_base": 100 * mb["c_h"].mean(), "acc_h_rl": 100 * mr["c_h"].mean(),
                    "acc_omega_base": 100 * mb["c_w"].mean(), "acc_omega_rl": 100 * mr["c_w"].mean(),
                    "g_rep": g_rep, "g_rep_low": lo, "g_rep_high": float(np.percentile(g_boot, 97.5)),
                    "g_fix": g_rep - d, "D": d, "share": d / g_rep if g_rep else np.nan,
                    "read_h_base": 100 * mb["e_h"].mean(), "read_h_rl": 100 * mr["e_h"].mean(),
                    "read_omega_base": read_b, "read_omega_rl": read_r,
                    "significant_gain": lo >= MIN_GAIN,
                    "readable": min(read_b, read_r) >= MIN_READ and abs(read_b - read_r) <= MAX_GAP,
                    **{f"omega_{w}_{m}": float((mm["where"] == w).mean() * 100)
                       for m, mm in (("base", mb), ("rl", mr)) for w in ("box", "text", "other", "none")},
                })
    table = pd.DataFrame(rows)
    if len(table):
        table["admitted"] = table.significant_gain & table.readable
    return table, {"per_item": per_item, "draws": draws}


def pooled(table: pd.DataFrame, extra: dict, resamples: int | None = None) -> dict[str, float]:
    """sum(D) / sum(g_rep) over admitted comparisons, its 95% item-bootstrap interval, and the
    leave-one-out extremes."""
    adm = table[table.admitted] if len(table) else table
    if adm.empty:
        return {"share": np.nan, "low": np.nan, "high": np.nan, "comparisons": 0}
    keys = [f"{r.base}|{r.rl}|{r.benchmark}|{r.prompt}|{r.harness}" for r in adm.itertuples()]
    G = D = 0.0
    for k, bench in zip(keys, adm.benchmark, strict=True):
        g_items, d_items = extra["per_item"][k]
        idx = extra["draws"][bench]
        G = G + g_items[idx].mean(axis=1)
        D = D + d_items[idx].mean(axis=1)
    boot = D / G
    out = {"share": float(adm.D.sum() / adm.g_rep.sum()), "low": float(np.percentile(boot, 2.5)),
           "high": float(np.percentile(boot, 97.5)), "comparisons": len(adm)}
    for col in ("pair", "benchmark"):
        loo = [float(adm[adm[col] != v].D.sum() / adm[adm[col] != v].g_rep.sum()) for v in adm[col].unique()
               if (adm[col] != v).any()]
        out[f"leave_one_{col}_out_min"] = min(loo) if loo else np.nan
        out[f"leave_one_{col}_out_max"] = max(loo) if loo else np.nan
    return out


def spread(table: pd.DataFrame) -> pd.DataFrame:
    """Largest minus smallest reported gain across harness extractors, per pair, benchmark and prompt (Fig. 5)."""
    g = table.groupby(["pair", "benchmark", "prompt"]).g_rep
    return (g.max() - g.min()).rename("spread").reset_index()
