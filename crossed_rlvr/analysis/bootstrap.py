"""Paired item bootstrap (paper 001 §3 "Uncertainty and scope", App. B.2).

Item indices are resampled once per draw and shared across every cell and seed of a (task,
template) group, so contrasts between cells keep their item pairing. A draw is a vector of item
counts w (multinomial, sum n); every cell statistic under that draw is ``w @ x / n`` for the
cell's per-item means x, so all draws of all cell statistics are one matrix product
``W @ X.T / n`` computed in blocks. Intervals are percentile 95% intervals.

The intervals condition on fixed checkpoints and saved responses: they do not quantify
training-seed uncertainty.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

BLOCK = 2000


def draw_counts(n_items: int, n_resamples: int, rng_seed: int, block: int = BLOCK) -> Iterator[np.ndarray]:
    """Blocks of resampled item counts, shape (block, n_items); same seed, same draws."""
    rng = np.random.default_rng(rng_seed)
    done = 0
    while done < n_resamples:
        b = min(block, n_resamples - done)
        idx = rng.integers(0, n_items, size=(b, n_items))
        flat = (idx + (np.arange(b) * n_items)[:, None]).ravel()
        yield np.bincount(flat, minlength=b * n_items).reshape(b, n_items).astype(np.float64)
        done += b


def resample_stats(flat_means: np.ndarray, n_resamples: int, rng_seed: int) -> np.ndarray:
    """Bootstrap draws of every cell statistic: shape (n_resamples, n_stats).

    ``flat_means`` is (n_stats, n_items): per-item means of each cell statistic.
    """
    n_stats, n_items = flat_means.shape
    undefined = np.isnan(flat_means).any(axis=1)  # a statistic with an undefined item has no draws
    x = np.where(undefined[:, None], 0.0, flat_means).T
    out = np.empty((n_resamples, n_stats))
    row = 0
    for counts in draw_counts(n_items, n_resamples, rng_seed):
        out[row : row + len(counts)] = counts @ x / n_items
        row += len(counts)
    out[:, undefined] = np.nan  # never 0: contrasts that use it stay undefined in every draw
    return out


def percentile_interval(draws: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval along axis 0 (draws), ignoring NaN draws (e.g. a zero denominator)."""
    alpha = (1 - level) / 2
    with np.errstate(all="ignore"):
        lo = np.nanquantile(draws, alpha, axis=0)
        hi = np.nanquantile(draws, 1 - alpha, axis=0)
    return lo, hi
