"""Coverage of the simultaneous bounds on a synthetic population whose truth is known (App. A check).

Draws frozen stratified samples (uniform without replacement within each stratum, one census stratum
per state) and counts how often the 95% simultaneous bounds hold the population identification ranges
of both states and of the gain, and how often every endpoint x stratum cell holds its true count at once
(``cells``: the event the union bound guarantees with probability >= 0.95). The ranges are so conservative
that they hold near 100% even for wrong methods; the cells are not, so the check can fail: without the
multiplicity correction or with Wald intervals it drops below 0.95 (``interval``, ``corrected``; the tests
run both mutations). Each share comes with its Monte Carlo standard error. Used by the tests and
``scripts/bench_calibration.py``.
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np
import pandas as pd
from scipy.stats import norm

from crossed_rlvr.calibration import bounds as exact
from crossed_rlvr.calibration.bounds import Interval, Stratum, bounds, cells, estimate, gain_range
from crossed_rlvr.rewards.conventions import MARKER_PAIR

# per state: strata (N_h, n_h, true ones of z^L, true ones of z^U); rare and common labels both, as in
# App. A's strata (most responses of a stratum agree with its readers)
POPULATION = {
    "initial": [(300, 30, 60, 75), (120, 30, 100, 104), (400, 30, 8, 12), (40, 40, 10, 12)],  # last: a census
    "trained": [(250, 30, 200, 210), (150, 30, 30, 45), (500, 30, 490, 494), (60, 20, 5, 5)],
}


@functools.lru_cache(maxsize=100_000)
def wald_interval(k: int, n: int, N: int, alpha: float) -> tuple[int, int]:
    """A mutation for the check: the normal-approximation interval with the finite-population correction."""
    if n >= N:
        return k, k
    p = k / n
    se = math.sqrt(p * (1 - p) / n * (N - n) / (N - 1))
    z = float(norm.ppf(1 - alpha / 2))
    return max(0, math.floor(N * (p - z * se))), min(N, math.ceil(N * (p + z * se)))


def coverage_simulation(draws: int = 1000, seed: int = 0,
                        interval: Interval = exact.successes_interval,
                        corrected: bool = True) -> dict[str, float]:
    """Frozen stratified samples of a synthetic two-state population whose truth is known: how often the
    simultaneous 95% bounds hold the population identification ranges of both states and of the gain, and
    how often all cells hold their true counts at once; ``<share>_mcse`` is each share's Monte Carlo error."""
    rng = np.random.default_rng(seed)
    population = POPULATION
    truth = {s: tuple(sum(h[k] for h in st) / sum(h[0] for h in st) for k in (2, 3)) for s, st in population.items()}
    true_gain = (truth["trained"][0] - truth["initial"][1], truth["trained"][1] - truth["initial"][0])
    covered = {"initial": 0, "trained": 0, "gain": 0, "all": 0, "cells": 0}

    start = time.perf_counter()
    for _ in range(draws):
        states = {}
        for s, strata in population.items():
            drawn = []
            for N, n, ones_l, ones_u in strata:
                # one uniform sample without replacement of labels (1 = correct, 2 = unresolved, 0 = other)
                labels = np.array([1] * ones_l + [2] * (ones_u - ones_l) + [0] * (N - ones_u))
                pick = labels[rng.choice(N, size=n, replace=False)]
                drawn.append(Stratum(N=N, n=n, ones={"zL": int((pick == 1).sum()), "zU": int((pick >= 1).sum())}))
            states[s] = drawn
        alpha = 0.05 / cells(states, 2) if corrected else 0.05
        ci = {s: (bounds(st, "zL", alpha, interval)[0], bounds(st, "zU", alpha, interval)[1])
              for s, st in states.items()}
        every_cell = True
        for s, sampled in states.items():
            for stratum, (_N, _n, ones_l, ones_u) in zip(sampled, population[s], strict=True):
                for endpoint, true_ones in (("zL", ones_l), ("zU", ones_u)):
                    a, b = interval(stratum.ones[endpoint], stratum.n, stratum.N, alpha)
                    every_cell &= a <= true_ones <= b
        covered["cells"] += every_cell
        ok_state = {s: ci[s][0] <= truth[s][0] and truth[s][1] <= ci[s][1] for s in states}
        g = gain_range([ci["trained"]], ci["initial"])
        ok_gain = g[0] <= true_gain[0] and true_gain[1] <= g[1]
        for s in states:
            covered[s] += ok_state[s]
        covered["gain"] += ok_gain
        covered["all"] += all(ok_state.values()) and ok_gain
    shares = {k: v / draws for k, v in covered.items()}
    mcse = {f"{k}_mcse": math.sqrt(v * (1 - v) / draws) for k, v in shares.items()}
    return {**shares, **mcse, "seconds": time.perf_counter() - start, "draws": draws}


def census_estimate_equals_truth() -> bool:
    strata = [Stratum(N=50, n=50, ones={"zL": 20, "zU": 20}), Stratum(N=30, n=30, ones={"zL": 3, "zU": 3})]
    return estimate(strata, "zL") == estimate(strata, "zU") == 23 / 80


# Through ``analyze_calibration`` itself: one setting (a hash arm of two seeds against the initial policy
# under the hash request), each state stratified by the strict reader's verdict (strict=1 / strict=0) as
# ``sample`` stratifies; per stratum (name, N_h, n_h, ones of z^L, ones of z^U). One sampled stratum per
# state, so a state's bounds are one cell's interval and a method without the multiplicity correction
# shows (with several sampled strata, summed per-stratum bounds cover even without it). The truth is the
# population's, the bounds the analysis's own (settings, seed means, the full M of 5 endpoints).
ANALYSIS_POPULATION = {  # (policy, request): strata; the strict=1 strata are censuses
    ("initial", "hash"): [("strict=1", 40, 40, 30, 34), ("strict=0", 600, 40, 30, 30)],  # rare labels: 5%
    ("grpo-hash/s1", "hash"): [("strict=1", 60, 60, 50, 52), ("strict=0", 500, 40, 300, 300)],
    ("grpo-hash/s2", "hash"): [("strict=1", 50, 50, 44, 47), ("strict=0", 550, 40, 60, 60)],
    ("initial", "boxed"): [("strict=1", 80, 80, 70, 71), ("strict=0", 520, 40, 26, 26)],
    ("grpo-hash/s1", "boxed"): [("strict=1", 30, 30, 20, 25), ("strict=0", 600, 40, 24, 24)],
    ("grpo-hash/s2", "boxed"): [("strict=1", 45, 45, 40, 40), ("strict=0", 580, 40, 350, 350)],
}
STRICT_COLUMN = {"hash": "strict_first_hash.correct", "boxed": "boxed_first.correct"}
ANALYSIS_QUANTITIES = (*(f"{p}:{q}" for p, q in ANALYSIS_POPULATION), "gain:hash", "gain:boxed", "gap:hash",
                       "gap:boxed")


def _population_scores() -> pd.DataFrame:
    """The scores table of the populations: the strict reader's verdict on every response."""
    rows = []
    for (policy, request), strata in ANALYSIS_POPULATION.items():
        for name, N, *_ in strata:
            rows += [{"policy": policy, "training_convention": "initial" if policy == "initial" else "hash",
                      "train_seed": None if policy == "initial" else int(policy[-1]), "request": request,
                      "template": "original", "task": "gsm8k", STRICT_COLUMN[request]: name == "strict=1"}] * N
    return pd.DataFrame(rows)


def analysis_truth() -> dict[str, tuple[float, float]]:
    """Each quantity's true identification range: H per state, per request the gain (seed mean minus
    initial) and the strict reader's gain minus the human gain."""
    h = {f"{p}:{q}": (sum(s[3] for s in st) / sum(s[1] for s in st), sum(s[4] for s in st) / sum(s[1] for s in st))
         for (p, q), st in ANALYSIS_POPULATION.items()}
    strict = {f"{p}:{q}": sum(s[1] for s in st if s[0] == "strict=1") / sum(s[1] for s in st)
              for (p, q), st in ANALYSIS_POPULATION.items()}
    out = dict(h)
    for q in MARKER_PAIR:
        gain = gain_range([h[f"grpo-hash/s1:{q}"], h[f"grpo-hash/s2:{q}"]], h[f"initial:{q}"])
        d_e = (strict[f"grpo-hash/s1:{q}"] + strict[f"grpo-hash/s2:{q}"]) / 2 - strict[f"initial:{q}"]
        out[f"gain:{q}"], out[f"gap:{q}"] = gain, (d_e - gain[1], d_e - gain[0])
    return out


def analysis_coverage(draws: int = 300, seed: int = 0, interval: Interval | None = None,
                      corrected: bool = True) -> dict[str, float]:
    """How often ``analyze_calibration``'s 95% bounds hold each quantity's true range, and all of them at
    once (what simultaneous bounds promise), over frozen samples of ``ANALYSIS_POPULATION``; each share
    with its Monte Carlo standard error."""
    from crossed_rlvr.calibration.analysis import analyze_calibration

    rng = np.random.default_rng(seed)
    scores, truth = _population_scores(), analysis_truth()
    hits = dict.fromkeys((*ANALYSIS_QUANTITIES, "all"), 0)
    start = time.perf_counter()
    for _ in range(draws):
        rows = []
        for (policy, request), strata in ANALYSIS_POPULATION.items():
            state = f"{policy}:{request}:original"
            for name, N, n, ones_l, ones_u in strata:
                labels = np.array([1] * ones_l + [2] * (ones_u - ones_l) + [0] * (N - ones_u))
                for k, z in enumerate(labels[rng.choice(N, size=n, replace=False)]):
                    rows.append({"sample_id": f"{state}:{name}:{k}", "state": state, "policy": policy,
                                 "request": request, "template": "original", "task": "gsm8k", "stratum": name,
                                 "N_h": N, "n_h": n, "w": N / n, "zL": int(z == 1), "zU": int(z >= 1),
                                 "unresolved": int(z == 2), "r_strict": int(name == "strict=1")})
        t = analyze_calibration(pd.DataFrame(rows), scores, interval=interval, corrected=corrected)["calibration"]
        got = {}
        for r in t.itertuples():
            if r.quantity == "human_accuracy":
                got[r.setting.rsplit(":", 1)[0]] = (r.ci_low, r.ci_high)
            elif r.quantity in ("gain_human", "gap_strict_human"):  # setting "grpo-hash under hash (original)"
                request = r.setting.split(" under ")[1].split(" ")[0]
                got[f"{'gain' if r.quantity == 'gain_human' else 'gap'}:{request}"] = (r.ci_low, r.ci_high)
        ok = {q: got[q][0] <= truth[q][0] + 1e-12 and truth[q][1] <= got[q][1] + 1e-12 for q in ANALYSIS_QUANTITIES}
        for q, v in ok.items():
            hits[q] += v
        hits["all"] += all(ok.values())
    shares = {k: v / draws for k, v in hits.items()}
    return {**shares, **{f"{k}_mcse": math.sqrt(v * (1 - v) / draws) for k, v in shares.items()},
            "seconds": time.perf_counter() - start, "draws": draws}
