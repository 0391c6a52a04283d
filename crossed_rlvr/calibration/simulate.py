"""Coverage of the simultaneous bounds on a synthetic population whose truth is known (App. A check).

Draws frozen stratified samples (uniform without replacement within each stratum, one census stratum
per state) and counts how often the 95% simultaneous bounds hold the population identification ranges
of both states and of the gain. Used by the tests and ``scripts/bench_calibration.py``.
"""

from __future__ import annotations

import time

import numpy as np

from crossed_rlvr.calibration.bounds import Stratum, bounds, cells, estimate, gain_range


def coverage_simulation(draws: int = 1000, seed: int = 0) -> dict[str, float]:
    """Frozen stratified samples of a synthetic two-state population whose truth is known: how often the
    simultaneous 95% bounds hold the population identification ranges of both states and of the gain."""
    rng = np.random.default_rng(seed)
    # per state: strata (N_h, n_h, true ones of z^L, true ones of z^U)
    population = {
        "initial": [(300, 30, 60, 75), (120, 30, 100, 104), (40, 40, 10, 12)],  # the last stratum is a census
        "trained": [(250, 30, 200, 210), (150, 30, 30, 45), (60, 20, 5, 5)],
    }
    truth = {s: tuple(sum(h[k] for h in st) / sum(h[0] for h in st) for k in (2, 3)) for s, st in population.items()}
    true_gain = (truth["trained"][0] - truth["initial"][1], truth["trained"][1] - truth["initial"][0])
    covered = {"initial": 0, "trained": 0, "gain": 0, "all": 0}
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
        alpha = 0.05 / cells(states, 2)
        ci = {s: (bounds(st, "zL", alpha)[0], bounds(st, "zU", alpha)[1]) for s, st in states.items()}
        ok_state = {s: ci[s][0] <= truth[s][0] and truth[s][1] <= ci[s][1] for s in states}
        g = gain_range([ci["trained"]], ci["initial"])
        ok_gain = g[0] <= true_gain[0] and true_gain[1] <= g[1]
        for s in states:
            covered[s] += ok_state[s]
        covered["gain"] += ok_gain
        covered["all"] += all(ok_state.values()) and ok_gain
    return {**{k: v / draws for k, v in covered.items()}, "seconds": time.perf_counter() - start, "draws": draws}


def census_estimate_equals_truth() -> bool:
    strata = [Stratum(N=50, n=50, ones={"zL": 20, "zU": 20}), Stratum(N=30, n=30, ones={"zL": 3, "zU": 3})]
    return estimate(strata, "zL") == estimate(strata, "zU") == 23 / 80
