"""Frozen stratified prompt proposal with importance weights (paper 001 App. D.1).

Prompts are drawn with replacement from difficulty strata under a fixed proposal Q; item i in
stratum s has target mass P_i = t_s / n_s and proposal mass Q_i = (1-ε) v_s / n_s + ε P_i, and a
sampled prompt carries the weight P_i / Q_i. verl 0.9 has no prompt-sampler hook, so the stream is
drawn offline and the weight travels with each row; both engines apply it by scaling that sample's
advantage (PPO-clip is linear in a positive advantage scale, so this equals a loss weight).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Proposal:
    p: np.ndarray  # target mass per item
    q: np.ndarray  # proposal mass per item

    def sample(self, n: int, seed: int) -> list[tuple[int, float]]:
        """(item index, importance weight P_i/Q_i) for n draws with replacement."""
        idx = np.random.default_rng(seed).choice(len(self.q), size=n, replace=True, p=self.q)
        return [(int(i), float(self.p[i] / self.q[i])) for i in idx]


def frozen_proposal(items: list[dict[str, Any]], target: list[float], proposal: list[float], epsilon: float = 1e-6
                    ) -> Proposal:
    """Item-level P and Q from stratum weights; strata are the items' ``stratum`` values in sorted order."""
    strata = sorted(Counter(it["stratum"] for it in items))
    if len(strata) != len(target) or len(strata) != len(proposal):
        raise ValueError(f"{len(strata)} non-empty strata ({', '.join(map(str, strata))}) but {len(target)} target "
                         f"and {len(proposal)} proposal weights: every stratum needs training items (P_i = t_s/n_s)")
    t = np.asarray(target, float) / np.sum(target)
    v = np.asarray(proposal, float) / np.sum(proposal)
    sizes = Counter(it["stratum"] for it in items)
    k = {s: j for j, s in enumerate(strata)}
    p = np.array([t[k[it["stratum"]]] / sizes[it["stratum"]] for it in items])
    q = (1 - epsilon) * np.array([v[k[it["stratum"]]] / sizes[it["stratum"]] for it in items]) + epsilon * p
    return Proposal(p, q / q.sum())
