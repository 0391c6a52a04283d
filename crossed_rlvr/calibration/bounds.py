"""Finite-population estimates and simultaneous bounds of committed-answer accuracy (paper 001 App. A).

Per model state, strata h have population N_h and sample n_h; a sampled observation carries
w = N_h / n_h. z^L = 1 for a definitely correct committed answer, z^U = 1 for a correct or final
UNRESOLVED one; [H^L, H^U] = [sum w z^L / N, sum w z^U / N] (eq. 10). Confidence bounds invert the
hypergeometric distribution per endpoint x stratum cell at level 0.05 / M (M non-census cells), so
that all cells hold at once (union bound); census cells are exact. The bounds propagate through
population-weighted sums and signed contrasts by taking each term's worst endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import hypergeom

# a per-cell interval: (k ones sampled, n sampled, N in the population, alpha) -> bounds on the population's ones
Interval = Callable[[int, int, int, float], tuple[int, int]]


@lru_cache(maxsize=200_000)
def successes_interval(k: int, n: int, N: int, alpha: float) -> tuple[int, int]:
    """Exact two-sided (1 - alpha) interval for the number K of ones in a population of N, from k ones in a
    uniform sample of n without replacement (each tail alpha / 2); a census (n == N) gives (k, k)."""
    if n >= N:
        return k, k
    K = np.arange(k, N - (n - k) + 1)  # the values K can take given the sample
    upper_tail = hypergeom.sf(k - 1, N, K, n)  # P(X >= k | K): small when K is too low
    lower_tail = hypergeom.cdf(k, N, K, n)  # P(X <= k | K): small when K is too high
    ok = (upper_tail > alpha / 2) & (lower_tail > alpha / 2)
    if not ok.any():  # cannot happen for alpha < 1; kept as the whole range rather than an empty one
        return int(K[0]), int(K[-1])
    return int(K[ok][0]), int(K[ok][-1])


@dataclass
class Stratum:
    N: int
    n: int
    ones: dict[str, int]  # endpoint -> sampled ones (e.g. zL, zU)

    @property
    def census(self) -> bool:
        return self.n >= self.N


def estimate(strata: list[Stratum], endpoint: str) -> float:
    """The population-weighted estimate sum_h N_h * (ones_h / n_h) / N."""
    N = sum(s.N for s in strata)
    return sum(s.N * s.ones[endpoint] / s.n for s in strata) / N


def bounds(strata: list[Stratum], endpoint: str, alpha_cell: float,
           interval: Interval | None = None) -> tuple[float, float]:
    """Lower and upper bound of the population mean of ``endpoint`` from per-stratum exact intervals
    (``interval``: another per-cell interval, for the coverage check's mutations)."""
    interval = interval or successes_interval
    N = sum(s.N for s in strata)
    lo = hi = 0
    for s in strata:
        a, b = interval(s.ones[endpoint], s.n, s.N, alpha_cell)
        lo, hi = lo + a, hi + b
    return lo / N, hi / N


def cells(states: dict[str, list[Stratum]], endpoints: int) -> int:
    """M: the number of non-census endpoint x stratum cells sharing the 0.05 budget."""
    return endpoints * sum(1 for strata in states.values() for s in strata if not s.census)


def gain_range(trained: list[tuple[float, float]], initial: tuple[float, float]) -> tuple[float, float]:
    """[mean H_RL^L - H_0^U, mean H_RL^U - H_0^L]: seeds averaged, the shared initial entering once."""
    lo = float(np.mean([t[0] for t in trained])) - initial[1]
    hi = float(np.mean([t[1] for t in trained])) - initial[0]
    return lo, hi
