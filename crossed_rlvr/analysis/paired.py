"""Paired tests across seeds in the style of paper 002 §4.2.

Per item, accuracy is averaged over the arm's training seeds (and samples); these per-item
accuracies are aligned with the initial policy's and compared with one-sided paired tests
(trained better than initial): a paired t-test and a Wilcoxon signed-rank test.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import ttest_rel, wilcoxon


def paired_tests(trained: np.ndarray, initial: np.ndarray) -> dict[str, float]:
    """One-sided paired t and Wilcoxon tests of per-item accuracies (trained > initial)."""
    diff = trained - initial
    out = {"mean_diff": float(diff.mean()), "t": np.nan, "t_p": np.nan, "w": np.nan, "w_p": np.nan}
    if len(diff) < 2 or np.allclose(diff, diff[0]):
        # No variation: the t statistic is undefined and Wilcoxon has no nonzero difference to rank.
        if len(diff) and np.all(diff == 0):
            out.update(t_p=1.0, w_p=1.0)
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = ttest_rel(trained, initial, alternative="greater")
        out.update(t=float(t.statistic), t_p=float(t.pvalue))
        if np.any(diff != 0):
            w = wilcoxon(trained, initial, alternative="greater", zero_method="wilcox")
            out.update(w=float(w.statistic), w_p=float(w.pvalue))
    return out
