"""Finite-budget coverage (paper 001 §2.4 eq. 9, App. C.3 eq. 11).

pass@k uses the unbiased estimator 1 - C(N-c, k)/C(N, k) per item (Chen et al., 2021), averaged over
items; at k = N it is the fraction of items with at least one credited response. Item-level
coverage changes between two policies are lost (initial only) and gained (trained only), tested
with the exact McNemar test on those two counts alone. A nonsignificant result is not equivalence.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binomtest


def pass_at_k_items(correct_counts: np.ndarray, n_samples: int, k: int) -> np.ndarray:
    """Per-item pass@k, 1 - C(N-c, k)/C(N, k), from credited counts c (shape (..., n_items))."""
    c = np.asarray(correct_counts, dtype=float)
    ratio = np.ones_like(c)
    for j in range(k):  # C(N-c, k)/C(N, k) = prod_{j<k} (N-c-j)/(N-j), zero once N-c < k
        ratio *= np.clip(n_samples - c - j, 0, None) / (n_samples - j)
    return 1.0 - ratio


def pass_at_k(correct_counts: np.ndarray, n_samples: int) -> np.ndarray:
    """pass@k for k = 1..N from per-item credited counts c (shape (..., n_items)) -> (..., N)."""
    c = np.asarray(correct_counts, dtype=float)
    out = np.empty((*c.shape[:-1], n_samples))
    for k in range(1, n_samples + 1):
        out[..., k - 1] = pass_at_k_items(c, n_samples, k).mean(axis=-1)
    return out


def mcnemar_exact(lost: int, gained: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts."""
    if lost + gained == 0:
        return 1.0
    return float(binomtest(min(lost, gained), lost + gained, 0.5).pvalue)


def coverage_change(initial_counts: np.ndarray, trained_counts: np.ndarray) -> tuple[int, int, float]:
    """(lost, gained, McNemar p) for solved-at-least-once sets at k = N."""
    a, b = np.asarray(initial_counts) > 0, np.asarray(trained_counts) > 0
    lost, gained = int((a & ~b).sum()), int((~a & b).sum())
    return lost, gained, mcnemar_exact(lost, gained)
