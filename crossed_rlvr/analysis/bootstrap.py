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

import warnings
from collections.abc import Iterator
from typing import Any, TypeGuard

import numpy as np

BLOCK = 2000


def check_settings(n_resamples: object, rng_seed: object) -> str | None:
    """What is wrong with the bootstrap's settings (one line naming the setting and its range), or None."""
    def whole(v: object) -> TypeGuard[int | np.integer[Any]]:
        return isinstance(v, int | np.integer) and not isinstance(v, bool)

    from crossed_rlvr.conf.schema import RESAMPLES_RANGE, SEED_RANGE  # the ranges' one owner

    (low, high), (_, max_seed) = RESAMPLES_RANGE, SEED_RANGE
    if not whole(n_resamples) or not low <= int(n_resamples) <= high:
        return (f"resamples={n_resamples!r}: the paired bootstrap needs a whole number of resamples from "
                f"{low} to {high:,} (crossed-analyze --resamples, the study's analysis.resamples)")
    if not whole(rng_seed) or not 0 <= int(rng_seed) <= max_seed:
        return (f"rng_seed={rng_seed!r}: the bootstrap's seed is a whole number from 0 to 2**64 - 1 "
                "(crossed-analyze --rng-seed, the study's analysis.rng_seed)")
    return None


def draw_counts(n_items: int, n_resamples: int, rng_seed: int, block: int = BLOCK,
                dtype: type = np.float64) -> Iterator[np.ndarray]:
    """Blocks of resampled item counts, shape (block, n_items); same seed, same draws."""
    rng = np.random.default_rng(rng_seed)
    done = 0
    while done < n_resamples:
        b = min(block, n_resamples - done)
        idx = rng.integers(0, n_items, size=(b, n_items))
        idx += (np.arange(b) * n_items)[:, None]  # in place: one draw's items get their own bin range
        yield np.bincount(idx.ravel(), minlength=b * n_items).reshape(b, n_items).astype(dtype)
        done += b


def resample_stats(flat_means: np.ndarray, n_resamples: int, rng_seed: int,
                   used: np.ndarray | None = None, samples: int = 1) -> np.ndarray:
    """Bootstrap draws of every cell statistic: shape (n_resamples, n_stats).

    ``flat_means`` is (n_stats, n_items): per-item means of each cell statistic. ``used`` (a boolean
    mask) limits the work to the statistics some contrast needs; the others are left at 0, which no
    contrast reads. A statistic with an undefined item is NaN in every draw, never 0. ``samples``: the
    samples per item, so that ``samples * flat_means`` is integral (checked; else float64 throughout).
    """
    n_stats, n_items = flat_means.shape
    undefined = np.isnan(flat_means).any(axis=1)
    cols = ~undefined if used is None else (~undefined & used)
    # Unused and undefined statistics enter as zero columns (cheaper than scattering the used ones back).
    x = np.where(cols[:, None], np.nan_to_num(flat_means), 0.0).T
    # Per-item means over k samples are multiples of 1/k: k*x is integral, so the product of integer counts
    # and k*x is exact in float32 while every partial sum stays below 2**24 (about twice as fast as float64).
    exact32 = samples * n_items * n_items < 2**24 and np.array_equal(x * samples, np.rint(x * samples))
    dtype = np.float32 if exact32 else np.float64
    xs = np.ascontiguousarray(x * samples if exact32 else x, dtype=dtype)
    part = np.empty((n_resamples, n_stats), dtype=dtype)
    row = 0
    for counts in draw_counts(n_items, n_resamples, rng_seed, dtype=dtype):
        np.matmul(counts, xs, out=part[row : row + len(counts)])
        row += len(counts)
    out = part.astype(np.float64)
    out /= n_items * samples if exact32 else n_items
    out[:, undefined] = np.nan
    return out


def paired_mean_intervals(diffs: np.ndarray, keep: np.ndarray, n_resamples: int, rng_seed: int
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Means of per-item differences over the kept items, with percentile intervals from the same item
    draws as every other contrast of the group (``rng_seed``): rows of ``diffs``/``keep`` are (n, n_items)."""
    keep = keep.astype(float)
    est = (diffs * keep).sum(axis=1) / np.where(keep.sum(axis=1) > 0, keep.sum(axis=1), np.nan)
    if not n_resamples:
        return est, np.full_like(est, np.nan), np.full_like(est, np.nan)
    num, den = (diffs * keep).T, keep.T
    draws = np.empty((n_resamples, len(diffs)))
    row = 0
    for counts in draw_counts(diffs.shape[1], n_resamples, rng_seed):
        with np.errstate(invalid="ignore", divide="ignore"):
            draws[row : row + len(counts)] = (counts @ num) / (counts @ den)
        row += len(counts)
    lo, hi = percentile_interval(draws)
    return est, lo, hi


def percentile_interval(draws: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval along axis 0 (draws); NaN draws (e.g. a zero denominator) are left out, and a
    column with no finite draw has no interval (NaN), never a fake one."""
    alpha = (1 - level) / 2
    finite = np.isfinite(draws)
    full = finite.all(axis=0)
    lo, hi = np.full(draws.shape[1:], np.nan), np.full(draws.shape[1:], np.nan)
    if full.any():  # the common case: two order statistics each by one partition (numpy's "linear" rule)
        lo[full], hi[full] = _linear_quantiles(draws[:, full], (alpha, 1 - alpha))
    part = ~full & finite.any(axis=0)
    if part.any():
        with np.errstate(all="ignore"):
            lo[part], hi[part] = np.nanquantile(np.where(finite[:, part], draws[:, part], np.nan),
                                                [alpha, 1 - alpha], axis=0)
    return lo, hi


def endpoint_mc_error(draws: np.ndarray, batches: int = 10, level: float = 0.95) -> np.ndarray:
    """Monte Carlo error of the percentile interval's endpoints (paper 002 §4: state the precision):
    the draws cut into ``batches`` equal batches, each batch's endpoints, and their SD / sqrt(batches)
    (a batch's endpoint varies ``batches`` times as much as the full run's). The larger of the two
    endpoints' errors per column, in the draws' units; NaN without enough draws."""
    n = draws.shape[0] // batches
    if n < 20:
        return np.full(draws.shape[1:], np.nan)
    ends = [percentile_interval(draws[b * n : (b + 1) * n], level) for b in range(batches)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column undefined in every batch: NaN, said so
        lo = np.nanstd(np.stack([e[0] for e in ends]), axis=0, ddof=1)
        hi = np.nanstd(np.stack([e[1] for e in ends]), axis=0, ddof=1)
    return np.fmax(lo, hi) / np.sqrt(batches)


def _linear_quantiles(x: np.ndarray, qs: tuple[float, ...]) -> list[np.ndarray]:
    """``np.quantile(x, qs, axis=0)`` (linear interpolation) from one ``np.partition`` of x."""
    n = x.shape[0]
    pos = np.asarray(qs) * (n - 1)
    below = np.floor(pos).astype(int)
    above = np.minimum(below + 1, n - 1)
    part = np.partition(x, np.unique(np.r_[below, above]), axis=0)
    return [part[b] + (p - b) * (part[a] - part[b]) for p, b, a in zip(pos, below, above)]
