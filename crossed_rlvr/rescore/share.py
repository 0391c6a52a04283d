"""The format share of reported gains (paper 000 §2): re-read a base and an RL model's saved outputs with
the harness extractor h and with the fixed extractor omega.

Per comparison (pair, benchmark, prompt, harness extractor): accuracies under h and omega for both
models, g_rep = acc_h(RL) - acc_h(base), g_fix = acc_omega(RL) - acc_omega(base), the format gain
D = g_rep - g_fix and its share D / g_rep, extraction rates, and the two admission criteria (g_rep's
lower 95% bound >= 2 points; omega reads >= 50% of each model's outputs, the two rates within 20
points, decided on counts). The pooled share sum(D) / sum(g_rep) over admitted comparisons has an
item-bootstrap interval (10,000 draws; items resampled within benchmark, the same draw for every
comparison of that benchmark, each comparison over exactly its own items), with leave-one-pair-out and
leave-one-benchmark-out shares.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crossed_rlvr.analysis.bootstrap import draw_counts
from crossed_rlvr.rescore import omega
from crossed_rlvr.rescore.harness import REGISTRY, correct

MIN_GAIN, MIN_READ, MAX_GAP = 2.0, 50.0, 20.0
RESAMPLES = 10_000  # item resamples per comparison, as paper 000 §2
# Paper 000 App. D: "the pooled and paired bootstraps over each benchmark's items use seed 20260816"; "each
# comparison's bootstrap ... is seeded from a fixed seed and a hash of the comparison's name". The paper does not
# give that fixed seed or the hash: ours are 20260816 and the first 8 hex digits of the name's SHA-256.
POOLED_SEED = 20260816


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
    variant: str = "omega"  # the fixed extractor's variant (App. B: strict, omega, permissive, maximal)


def answers(out: Outputs, reader: str) -> list[str | None]:
    """What ``reader`` (a harness extractor, or ``omega``) reads in each output, read once per output set
    (the comparisons and the reader audit share it)."""
    if reader not in out.answers:
        if reader == "omega":
            out.answers[reader] = [omega.mc(t, n, out.variant) if out.kind == "mc" else omega.free(t, out.variant)
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
    norm = REGISTRY[reader].normalize_key or (lambda k: k)
    return [correct(a, norm(k), out.kind) for a, k in zip(answers(out, reader), out.keys, strict=True)]


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


def _bench_seed(seed: int, bench: str) -> int:
    """A benchmark's own bootstrap stream: the same draws whatever other benchmarks are in the run."""
    return seed + int(hashlib.sha256(bench.encode()).hexdigest()[:8], 16)


def comparison_seed(name: str, seed: int = POOLED_SEED) -> int:
    """A comparison's own bootstrap seed (paper 000 App. D): its interval is reproducible on its own."""
    return seed + int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)


def comparison_interval(g_items: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """The 95% item-bootstrap interval of one comparison's reported gain, from its own seeded draws."""
    if len(g_items) == 0:
        return np.nan, np.nan
    boot = np.concatenate([counts @ g_items / len(g_items) for counts in draw_counts(len(g_items), resamples, seed)])
    return float(np.nanpercentile(boot, 2.5)), float(np.nanpercentile(boot, 97.5))


def bootstrap_gains(per_item: dict[str, tuple[str, list[str], np.ndarray, np.ndarray]], resamples: int,
                    seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Paired item-bootstrap draws of g_rep and D per comparison (paper 000 §2: items resampled within
    benchmark, the two models paired). Each benchmark's items (the union over its prompts and answer
    forms) are resampled once per draw for all its comparisons; a comparison's draw is the mean over the
    drawn items it has, so comparisons with different item sets share draws without being cut or padded."""
    by_bench: dict[str, list[str]] = defaultdict(list)
    for key, (bench, *_rest) in per_item.items():
        by_bench[bench].append(key)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for bench, keys in sorted(by_bench.items()):
        union = sorted({i for k in keys for i in per_item[k][1]}, key=lambda x: (len(x), x))
        at = {item: j for j, item in enumerate(union)}
        # comparisons over the same items share one product: counts[:, items] @ [g_1, d_1, g_2, d_2, ...]
        groups: dict[tuple[int, ...], list[str]] = defaultdict(list)
        for k in keys:
            groups[tuple(at[i] for i in per_item[k][1])].append(k)
        cols = {pos: np.stack([v for k in ks for v in per_item[k][2:4]], axis=1) for pos, ks in groups.items()}
        everything = tuple(range(len(union)))
        boot = {k: (np.empty(resamples), np.empty(resamples)) for k in keys}
        block = max(1, min(2000, 5_000_000 // len(union)))  # bounded memory on 12,000-item benchmarks
        row = 0
        for counts in draw_counts(len(union), resamples, _bench_seed(seed, bench), block=block):
            for pos, ks in groups.items():
                w = counts if pos == everything else counts[:, list(pos)]
                with np.errstate(invalid="ignore", divide="ignore"):  # none of its items drawn: NaN, never 0
                    means = (w @ cols[pos]) / w.sum(axis=1)[:, None]
                for j, k in enumerate(ks):
                    boot[k][0][row:row + len(w)] = means[:, 2 * j]
                    boot[k][1][row:row + len(w)] = means[:, 2 * j + 1]
            row += len(counts)
        out.update(boot)
    return out


def readable(read_base: int, read_rl: int, n: int) -> bool:
    """Paper 000's readability rule in counts (exact, never a float comparison at the boundary): omega
    reads at least 50% of each model's n outputs and the two rates are within 20 points."""
    return (100 * read_base >= MIN_READ * n and 100 * read_rl >= MIN_READ * n
            and 100 * abs(read_base - read_rl) <= MAX_GAP * n)


def comparisons(runs: dict[tuple[str, str, str, str], Outputs], pairs: list[tuple[str, str]],
                harnesses: list[str], resamples: int = RESAMPLES, seed: int = POOLED_SEED
                ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One row per (pair, benchmark, prompt, harness); ``runs`` is keyed (model, benchmark, prompt, kind).
    Each comparison's interval (the significant-gain gate) comes from its own draws, seeded by its name; the
    pooled share's draws are shared within each benchmark, seeded from ``seed`` (paper 000 App. D)."""
    rows, per_item = [], {}
    for base, rl in pairs:
        for (model, bench, prompt, kind), out_b in sorted(runs.items()):
            if model != base or (rl, bench, prompt, kind) not in runs:
                continue
            out_r = runs[(rl, bench, prompt, kind)]
            if out_b.items != out_r.items:
                raise ValueError(f"{base} and {rl} on {bench}/{prompt}: different items; align them first")
            n = len(out_b.items)
            for name in harnesses:
                if kind not in REGISTRY[name].kinds:
                    continue
                mb, mr = read_matrix(out_b, name), read_matrix(out_r, name)
                g_items = 100 * (mr["c_h"] - mb["c_h"])
                d_items = g_items - 100 * (mr["c_w"] - mb["c_w"])
                key = f"{base}|{rl}|{bench}|{prompt}|{kind}|{name}"
                per_item[key] = (bench, list(out_b.items), g_items, d_items)
                g_rep, d = float(g_items.mean()), float(d_items.mean())
                read_b, read_r = int(mb["e_w"].sum()), int(mr["e_w"].sum())
                rows.append({
                    "key": key, "pair": f"{base} -> {rl}", "base": base, "rl": rl, "benchmark": bench,
                    "prompt": prompt, "kind": kind, "harness": name, "items": n,
                    "acc_h_base": 100 * mb["c_h"].mean(), "acc_h_rl": 100 * mr["c_h"].mean(),
                    "acc_omega_base": 100 * mb["c_w"].mean(), "acc_omega_rl": 100 * mr["c_w"].mean(),
                    "g_rep": g_rep, "g_fix": g_rep - d, "D": d, "share": d / g_rep if g_rep else np.nan,
                    "read_h_base": 100 * mb["e_h"].mean(), "read_h_rl": 100 * mr["e_h"].mean(),
                    "read_omega_base": 100 * read_b / n, "read_omega_rl": 100 * read_r / n,
                    "readable": readable(read_b, read_r, n),
                    **{f"omega_{w}_{m}": float((mm["where"] == w).mean() * 100)
                       for m, mm in (("base", mb), ("rl", mr)) for w in ("box", "text", "other", "none")},
                })
    boot = bootstrap_gains(per_item, resamples, seed)
    for r in rows:
        r["g_rep_low"], r["g_rep_high"] = comparison_interval(per_item[r["key"]][2], resamples,
                                                              comparison_seed(r["key"], seed))
        # the bound is a percentile of item means (multiples of 100/n): compared with a rounding margin
        r["significant_gain"] = r["g_rep_low"] >= MIN_GAIN - 1e-9
    table = pd.DataFrame(rows)
    if len(table):
        table["admitted"] = table.significant_gain & table.readable
    return table, {"per_item": per_item, "boot": boot}


def pooled(table: pd.DataFrame, extra: dict, resamples: int | None = None) -> dict[str, float]:
    """sum(D) / sum(g_rep) over admitted comparisons, its 95% item-bootstrap interval (each benchmark's
    items resampled once per draw for all its comparisons), and the leave-one-out extremes."""
    adm = table[table.admitted] if len(table) else table
    if adm.empty:
        return {"share": np.nan, "low": np.nan, "high": np.nan, "comparisons": 0}
    G = D = 0.0
    for k in adm.key:
        g_boot, d_boot = extra["boot"][k]
        G = G + g_boot
        D = D + d_boot
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = D / G
    out = {"share": float(adm.D.sum() / adm.g_rep.sum()), "low": float(np.nanpercentile(boot, 2.5)),
           "high": float(np.nanpercentile(boot, 97.5)), "comparisons": len(adm)}
    # App. D Table 12: leave out one pair, benchmark, harness extractor or prompt
    for col in ("pair", "benchmark", "harness", "prompt"):
        loo = [float(adm[adm[col] != v].D.sum() / adm[adm[col] != v].g_rep.sum()) for v in adm[col].unique()
               if (adm[col] != v).any()]
        out[f"leave_one_{col}_out_min"] = min(loo) if loo else np.nan
        out[f"leave_one_{col}_out_max"] = max(loo) if loo else np.nan
    return out


def pooling_rules(table: pd.DataFrame) -> pd.DataFrame:
    """App. D Table 9: the share under each rule for which comparisons enter the ratio, all among the
    comparisons that meet the extraction-rate criterion: a significant reported gain (the main result),
    any non-zero reported gain, and every comparison (reported gain of zero included)."""
    readable_rows = table[table.readable] if len(table) else table
    rules = {"significant reported gain (main)": readable_rows[readable_rows.significant_gain] if len(table) else table,
             "reported gain not zero": readable_rows[readable_rows.g_rep != 0] if len(table) else table,
             "every readable comparison": readable_rows}
    rows = []
    for rule, part in rules.items():
        g = float(part.g_rep.sum()) if len(part) else 0.0
        rows.append({"rule": rule, "comparisons": len(part), "sum_g_rep": g,
                     "sum_D": float(part.D.sum()) if len(part) else 0.0,
                     "share": float(part.D.sum()) / g if g else np.nan})
    return pd.DataFrame(rows)


def spread(table: pd.DataFrame) -> pd.DataFrame:
    """Largest minus smallest reported gain across harness extractors, per pair, benchmark and prompt (Fig. 5)."""
    g = table.groupby(["pair", "benchmark", "prompt"]).g_rep
    return (g.max() - g.min()).rename("spread").reset_index()
