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
from collections.abc import Callable

import numpy as np
from scipy.stats import norm

from crossed_rlvr.calibration import bounds as exact
from crossed_rlvr.calibration.bounds import Stratum, bounds, cells, estimate, gain_range

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
                        interval: Callable[[int, int, int, float], tuple[int, int]] = exact.successes_interval,
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
        for s, strata in states.items():
            for stratum, (_N, _n, ones_l, ones_u) in zip(strata, population[s], strict=True):
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
