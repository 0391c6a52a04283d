"""Paired tests across seeds in the style of paper 002 §4.2.

Per item, accuracy is averaged over the arm's training seeds (and samples); these per-item
accuracies are aligned with the initial policy's and compared with paired tests, one-sided (trained
better than initial) with the two-sided p beside: a paired t-test and a Wilcoxon signed-rank test.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import ttest_rel, wilcoxon


def paired_tests(trained: np.ndarray, initial: np.ndarray) -> dict[str, float]:
    """Paired t and Wilcoxon tests of per-item accuracies: one-sided (trained > initial) p-values, and
    two-sided ones beside them, which also flag a decline (paper 001's main effect is one)."""
    diff = trained - initial
    out = {"mean_diff": float(diff.mean()) if len(diff) else np.nan, "t": np.nan, "t_p": np.nan,
           "t_p_two": np.nan, "w": np.nan, "w_p": np.nan, "w_p_two": np.nan}
    if not len(diff):
        return out
    if np.all(diff == 0):  # no difference at all: nothing to reject
        out.update(t_p=1.0, t_p_two=1.0, w_p=1.0, w_p_two=1.0)
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # t is undefined without variation in the differences; Wilcoxon ranks them all the same.
        if len(diff) >= 2 and not np.allclose(diff, diff[0]):
            t = ttest_rel(trained, initial, alternative="greater")
            out.update(t=float(t.statistic), t_p=float(t.pvalue),
                       t_p_two=float(ttest_rel(trained, initial, alternative="two-sided").pvalue))
        w = wilcoxon(diff, alternative="greater", zero_method="wilcox")
        out.update(w=float(w.statistic), w_p=float(w.pvalue),
                   w_p_two=float(wilcoxon(diff, alternative="two-sided", zero_method="wilcox").pvalue))
    return out


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (paper 002 §4.2: correct for the family tested);
    NaN p-values stay NaN and do not count. Written out: five lines, and scipy has no Holm."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out
