"""Contrasts: differences of cell statistics (paper 001 §2.1-2.4, App. B.2, D.2).

Each contrast is a linear combination of cell statistics (percentage points), or one minus a
ratio of two such combinations (attenuation ρ). Linear contrasts get their bootstrap draws from
one product with the shared draws of the cell statistics.

- ``interaction`` (eq. 1, 4): 100[(A_Hh - A_Bh) - (A_Hb - A_Bb)] per measure: I_P (payload),
  I_q (extractable), I_R for every reader (acc.*), per training seed; ``<method>/mean`` weights
  seeds equally and ``<method>/sd`` is the sample SD across seeds (descriptive, no interval).
- ``delta_P`` / ``delta_q`` / ``gain`` (Tables 8, 9, 12): trained minus initial, same request.
- ``reader_gap_reduction`` F (eq. 5): (γ0 - γRL) with γ = Acc_lenient - Acc_strict, so that
  Δ_S = F + Δ_len holds exactly.
- ``attenuation_reward`` ρ (eq. 7, I1): 1 - Δ_S(answer-only arm) / Δ_S(hash arm), hash request.
- ``attenuation_convention`` ρ (eq. 7, I2): 1 - Δ_S(boxed arm, boxed request) / Δ_S(hash arm, hash request).
- ``preference_D`` (eq. 8): Acc(π, hash request, strict) - Acc(π, boxed request, strict).
- ``arm_to_arm_D`` (§2.4, I4): [D(H) - D(0)] - [D(B) - D(0)] within a method and seed.
- ``reward_difference`` (App. D.2, matched crossed reward control): the marker pair's interaction minus
  the answer-only pair's (``answer_only_hash``/``answer_only_boxed`` arms under the hash and boxed
  requests), per seed, for the payload and strict measures.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import numpy as np
import pandas as pd
from scipy import sparse

from crossed_rlvr.analysis.cells import Group
from crossed_rlvr.errors import CrossedError
from crossed_rlvr.eval.score.readers import LENIENT
from crossed_rlvr.names import pair_name, seed_slot
from crossed_rlvr.rewards.conventions import (
    CONVENTIONS,
    CROSSED_PAIRS,
    MARKER_DROPPED,
    MARKER_PAIR,
    pair_label,
)

# (arm H, arm B, request h, request b): each matched pair crossed with its two arms' requests (eq. 1);
# the answer-only pair (App. D.2) is crossed under the hash and boxed requests like the marker pair.
PAIRS = tuple((a, b, CONVENTIONS[a].request, CONVENTIONS[b].request) for a, b in CROSSED_PAIRS)
# App. D.2's matched reward control: marker-required minus answer-only interaction, same method and seed.
REWARD_CONTROL = (pair_label(*MARKER_PAIR), pair_label("answer_only_hash", "answer_only_boxed"))


@dataclass
class Contrast:
    name: str
    measure: str
    policy: str
    request: str
    terms: dict[int, float]
    denom: dict[int, float] | None = None  # present for ratios: estimate = 1 - terms/denom
    unit: str = "pp"
    members: list[dict[int, float]] = field(default_factory=list)  # per-seed terms, for SD rows
    seeds: list[int] = field(default_factory=list)  # the training seeds this contrast pools (listed in outputs)
    # a pair's parts, stored beside its name (``policy``) so that no reader parses it back: the method (arm
    # family), the seed slot (``s83``, ``mean``, ``sd``), the checkpoint, and the conventions of its two arms
    method: str = ""
    seed_slot: str = ""
    checkpoint: str = ""
    arm_h: str = ""
    arm_b: str = ""


class ContrastExtras(TypedDict, total=False):
    """What a pair's contrast may carry beside its name and parts (``Contrast``'s fields of the same names)."""

    denom: dict[int, float] | None
    unit: str
    members: list[dict[int, float]]
    seeds: list[int]


def pair_contrast(name: str, measure: str, method: str, seed: int | str, ckpt: str, request: str,
                  terms: dict[int, float], arms: tuple[str, str] = ("", ""),
                  **more: Unpack[ContrastExtras]) -> Contrast:
    """A contrast of a pair of arms (or their seed summary): its name and its parts, made together."""
    return Contrast(name, measure, pair_name(method, seed, ckpt), request, terms, method=method,
                    seed_slot=seed_slot(seed), checkpoint=ckpt, arm_h=arms[0], arm_b=arms[1], **more)


def _lin(*parts: tuple[float, int]) -> dict[int, float]:
    out: dict[int, float] = defaultdict(float)
    for coef, idx in parts:
        out[idx] += coef
    return dict(out)


def _sub(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    return _lin(*[(c, i) for i, c in a.items()], *[(-c, i) for i, c in b.items()])


def _scale(terms: dict[int, float], k: float) -> dict[int, float]:
    return {i: c * k for i, c in terms.items()}


def _mean(terms_list: list[dict[int, float]]) -> dict[int, float]:
    out: dict[int, float] = defaultdict(float)
    for terms in terms_list:
        for i, c in terms.items():
            out[i] += c / len(terms_list)
    return dict(out)


class Terms(dict[int, float]):
    """A linear combination of cell statistics (index -> coefficient) with the arithmetic eq. 1 takes."""

    def __sub__(self, other: dict[int, float]) -> Terms:
        return Terms(_sub(self, other))

    def __rmul__(self, k: float) -> Terms:
        return Terms(_scale(self, k))


def crossed_interaction(cell: Callable[[str, str], Any], arms: tuple[str, str], requests: tuple[str, str]) -> Any:
    """The crossed interaction (paper 001 eq. 1), 100 × [(A(H, h) − A(B, h)) − (A(H, b) − A(B, b))] of a pair's
    arms H, B under their requests h, b: of cell statistics' terms (answer tasks' bootstrap) or of per-task rates
    (code tasks, App. D.3) alike."""
    (H, B), (h, b) = arms, requests
    return 100 * ((cell(H, h) - cell(B, h)) - (cell(H, b) - cell(B, b)))


class AmbiguousPolicies(CrossedError, ValueError):
    """Two policies would fill the same slot of the crossed design."""


def arms_by_seed(policies: pd.DataFrame) -> dict[tuple[str, str, int], dict[str, str]]:
    """{(method, checkpoint, seed): {convention: policy}} for trained policies.

    A policy is its own arm: checkpoints of one arm (``grpo-hash/s83@step50``, see
    :func:`crossed_rlvr.names.legacy_policy_parts`) get their own slot, and two policies that would
    share a slot are refused with both names, never silently replaced."""
    out: dict[tuple[str, str, int], dict[str, str]] = defaultdict(dict)
    for row in policies.itertuples():
        if row.training_convention == "initial":
            continue
        slot = out[(row.method, row.checkpoint, int(row.train_seed))]
        other = slot.get(row.training_convention)
        if other is not None and other != row.policy:
            at = f" at checkpoint {row.checkpoint}" if row.checkpoint else ""
            raise AmbiguousPolicies(
                f"policies {other!r} and {row.policy!r} are both {row.method} arms of convention "
                f"{row.training_convention}, seed {int(row.train_seed)}{at}; name each checkpoint "
                "<arm>/s<seed>@<checkpoint> (e.g. grpo-hash/s83@step50) so that every policy is its own arm")
        slot[row.training_convention] = row.policy
    return dict(out)


Series = dict[tuple, list[tuple[int, dict[int, float]]]]  # a key's per-seed terms, pooled over seeds later


@dataclass
class Design:
    """What every contrast family reads: the group's cell statistics, the arms by (method, checkpoint, seed), and
    the per-seed terms earlier families leave for later ones (interactions for their differences, ΔP for its
    seed mean)."""

    group: Group
    arms: dict[tuple[str, str, int], dict[str, str]]
    interactions: Series = field(default_factory=lambda: defaultdict(list))
    pair_arms: dict[str, tuple[str, str]] = field(default_factory=dict)  # a pair's label -> its two conventions
    delta_p: Series = field(default_factory=lambda: defaultdict(list))

    def A(self, policy: str, request: str, measure: str) -> int:
        return self.group.index(policy, request, measure)

    @property
    def cross_measures(self) -> list[str]:
        return ["payload", "extractable", *(m for m in self.group.measures if m.startswith("acc."))]


Family = Callable[[Design], list[Contrast]]
# The contrast families in the order their rows are written: registered by ``family``, looped over by
# ``build_contrasts`` (a later family may read what an earlier one left in the Design).
FAMILIES: list[Family] = []


def family(fn: Family) -> Family:
    FAMILIES.append(fn)
    return fn


def build_contrasts(group: Group, policies: pd.DataFrame) -> list[Contrast]:
    d = Design(group, arms_by_seed(policies[policies["policy"].isin({p for p, _ in group.cells})]))
    return [c for fn in FAMILIES for c in fn(d)]


def _pooled(name: str, measure: str, method: str, ckpt: str, request: str,
            seeds: list[tuple[int, dict[int, float]]], arms: tuple[str, str] = ("", "")) -> list[Contrast]:
    """The seed mean of per-seed terms, and their SD (descriptive, no interval) when there are several seeds."""
    members, listed = [t for _, t in seeds], [s for s, _ in seeds]
    out = [pair_contrast(name, measure, method, "mean", ckpt, request, _mean(members), arms, seeds=listed)]
    if len(members) > 1:
        out.append(pair_contrast(f"{name}_sd", measure, method, "sd", ckpt, request, {}, arms, members=members,
                                 seeds=listed))
    return out


@family
def interactions(d: Design) -> list[Contrast]:
    """Crossed interactions per seed (eq. 1, 4), kept in the Design for the differences and seed means."""
    g, out = d.group, []
    for (method, ckpt, seed), convs in sorted(d.arms.items()):
        for ah, ab, rh, rb in PAIRS:
            if ah not in convs or ab not in convs:
                continue
            H, B = convs[ah], convs[ab]
            if not all(g.has(p, r) for p in (H, B) for r in (rh, rb)):
                continue
            for m in d.cross_measures:
                def cell(policy: str, request: str, m: str = m) -> Terms:
                    return Terms({d.A(policy, request, m): 1.0})

                terms = dict(crossed_interaction(cell, (H, B), (rh, rb)))
                label = pair_label(ah, ab)
                d.pair_arms[label] = (ah, ab)
                out.append(pair_contrast("interaction", m, method, seed, ckpt, label, terms, (ah, ab), seeds=[seed]))
                d.interactions[(method, ckpt, label, m)].append((seed, terms))
    return out


@family
def interaction_differences(d: Design) -> list[Contrast]:
    """Training reward minus strict reader, with paired intervals (D.1)."""
    out = []
    for (method, ckpt, req, m), seeds in list(d.interactions.items()):
        if m != "acc.reward" or (method, ckpt, req, "acc.strict") not in d.interactions:
            continue
        strict = dict(d.interactions[(method, ckpt, req, "acc.strict")])
        for seed, terms in seeds:
            if seed in strict:
                out.append(pair_contrast("interaction_difference", "acc.reward-acc.strict", method, seed, ckpt, req,
                                         _sub(terms, strict[seed]), d.pair_arms[req], seeds=[seed]))
    return out


@family
def reward_differences(d: Design) -> list[Contrast]:
    """The marker pair's interaction minus the answer-only pair's, per seed (App. D.2)."""
    marker, answer = REWARD_CONTROL
    out = []
    for (method, ckpt, req, m), seeds in list(d.interactions.items()):
        if req != marker or m not in ("payload", "acc.strict") or (method, ckpt, answer, m) not in d.interactions:
            continue
        other = dict(d.interactions[(method, ckpt, answer, m)])
        for seed, terms in seeds:
            if seed in other:
                out.append(pair_contrast("reward_difference", m, method, seed, ckpt, f"{marker}-{MARKER_DROPPED[1]}",
                                         _sub(terms, other[seed]), d.pair_arms[marker], seeds=[seed]))
    return out


@family
def method_differences(d: Design) -> list[Contrast]:
    """Between methods of one seed, pair and checkpoint (D.2: marker-required minus answer-only reward)."""
    out = []
    methods = sorted({(method, ckpt) for method, ckpt, _, _ in d.interactions})
    for a in range(len(methods)):
        for b in range(a + 1, len(methods)):
            (m1, c1), (m2, c2) = methods[a], methods[b]
            if c1 != c2:
                continue
            for req in sorted({r for _, _, r, _ in d.interactions}):
                for m in ("payload", "acc.strict"):
                    one = dict(d.interactions.get((m1, c1, req, m), []))
                    two = dict(d.interactions.get((m2, c2, req, m), []))
                    for seed in sorted(set(one) & set(two)):
                        out.append(pair_contrast("method_difference", m, f"{m1}-{m2}", seed, c1, req,
                                                 _sub(one[seed], two[seed]), d.pair_arms[req], seeds=[seed]))
    return out


@family
def interaction_means(d: Design) -> list[Contrast]:
    """Seed mean and SD of the interactions over policies that differ in seed alone."""
    return [c for (method, ckpt, req, m), seeds in d.interactions.items()
            for c in _pooled("interaction", m, method, ckpt, req, seeds, d.pair_arms[req])]


@family
def conditional_correctness(d: Design) -> list[Contrast]:
    """u_c = Acc_strict / q_c (eq. 3), per cell: 1 - (q - A)/q."""
    out = []
    for policy, request in d.group.cells:
        q, acc = d.A(policy, request, "extractable"), d.A(policy, request, "acc.strict")
        out.append(Contrast("conditional_correctness", "acc.strict|extractable", policy, request,
                            _lin((1, q), (-1, acc)), {q: 1.0}, "ratio"))
    return out


@family
def changes_from_initial(d: Design) -> list[Contrast]:
    """Trained minus initial under the same request (ΔP, Δq, gains; Tables 8, 9, 12), and on lenient requests the
    reader-gap reduction F and the descriptive shares of the strict gain."""
    g, A = d.group, d.A
    out: list[Contrast] = []
    if not any(p == "initial" for p, _ in g.cells):
        return out
    slot_of = {p: (method, ckpt, conv, seed) for (method, ckpt, seed), convs in d.arms.items()
               for conv, p in convs.items()}
    for policy, request in g.cells:
        if policy == "initial" or not g.has("initial", request):
            continue
        for m in d.cross_measures:
            name = {"payload": "delta_P", "extractable": "delta_q"}.get(m, "gain")
            terms = _scale(_lin((1, A(policy, request, m)), (-1, A("initial", request, m))), 100)
            out.append(Contrast(name, m, policy, request, terms))
            if m == "payload" and policy in slot_of:
                method, ckpt, conv, seed = slot_of[policy]
                d.delta_p[(method, ckpt, conv, request)].append((seed, terms))
        if request in LENIENT:
            out += _reader_gap(d, policy, request)
    return out


def _reader_gap(d: Design, policy: str, request: str) -> list[Contrast]:
    """F = γ0 - γRL with γ = Acc_len - Acc_str (eq. 5); the shares of the strict gain (§3.2, D.3.1):
    F/Δ_S = 1 - Δ_len/Δ_S and γ0/Δ_S = 1 - (Δ_S - γ0)/Δ_S."""
    A = d.A
    terms = _scale(_lin(
        (1, A("initial", request, "acc.lenient")), (-1, A("initial", request, "acc.strict")),
        (-1, A(policy, request, "acc.lenient")), (1, A(policy, request, "acc.strict")),
    ), 100)
    d_s = _lin((1, A(policy, request, "acc.strict")), (-1, A("initial", request, "acc.strict")))
    d_len = _lin((1, A(policy, request, "acc.lenient")), (-1, A("initial", request, "acc.lenient")))
    gamma0 = _lin((1, A("initial", request, "acc.lenient")), (-1, A("initial", request, "acc.strict")))
    return [Contrast("reader_gap_reduction", "acc.strict|acc.lenient", policy, request, terms),
            Contrast("share_F", "acc.strict|acc.lenient", policy, request, d_len, d_s, "ratio"),
            Contrast("share_gamma0", "acc.strict|acc.lenient", policy, request, _sub(d_s, gamma0), d_s, "ratio")]


@family
def delta_p_means(d: Design) -> list[Contrast]:
    """Seed mean and SD of ΔP per arm."""
    return [c for (method, ckpt, conv, request), seeds in sorted(d.delta_p.items())
            for c in _pooled("delta_P", "payload", f"{method}-{conv}", ckpt, request, seeds, (conv, ""))]


@family
def attenuations(d: Design) -> list[Contrast]:
    """Attenuation ρ (eq. 7): of the reward (answer-only arm, I1) and of the convention (boxed arm on its own
    request, I2), against the hash arm's strict gain; per seed and as seed means."""
    g = d.group
    out: list[Contrast] = []
    if not g.has("initial", "hash"):
        return out

    def gain(policy: str, request: str) -> dict[int, float]:
        return _lin((1, d.A(policy, request, "acc.strict")), (-1, d.A("initial", request, "acc.strict")))

    by_method: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for (method, ckpt, seed), convs in sorted(d.arms.items()):
        h = convs.get("hash")
        if h is None or not g.has(h, "hash"):
            continue
        ctrl = gain(h, "hash")
        treat = convs.get(MARKER_DROPPED[1])
        if treat is not None and g.has(treat, "hash"):
            t = gain(treat, "hash")
            out.append(pair_contrast("attenuation_reward", "acc.strict", method, seed, ckpt, "hash", t,
                                     MARKER_DROPPED, denom=ctrl, unit="ratio", seeds=[seed]))
            by_method[(method, ckpt)]["reward"].append((t, ctrl, seed))
        b = convs.get("boxed")
        if b is not None and g.has(b, "boxed") and g.has("initial", "boxed"):
            t = gain(b, "boxed")
            out.append(pair_contrast("attenuation_convention", "acc.strict", method, seed, ckpt, "own", t,
                                     MARKER_PAIR, denom=ctrl, unit="ratio", seeds=[seed]))
            by_method[(method, ckpt)]["convention"].append((t, ctrl, seed))
    for (method, ckpt), kinds in by_method.items():
        for kind, pairs in kinds.items():
            t, c = _mean([p[0] for p in pairs]), _mean([p[1] for p in pairs])
            req = "hash" if kind == "reward" else "own"
            arms = MARKER_DROPPED if kind == "reward" else MARKER_PAIR
            out.append(pair_contrast(f"attenuation_{kind}", "acc.strict", method, "mean", ckpt, req, t, arms,
                                     denom=c, unit="ratio", seeds=[p[2] for p in pairs]))
    return out


@family
def preferences(d: Design) -> list[Contrast]:
    """Preference D (eq. 8) per policy, and arm-to-arm D (§2.4, I4) per seed with its seed mean and SD."""
    g, out = d.group, []

    def D(policy: str) -> dict[int, float]:
        return _scale(_lin((1, d.A(policy, "hash", "acc.strict")), (-1, d.A(policy, "boxed", "acc.strict"))), 100)

    with_both = [p for p in dict.fromkeys(p for p, _ in g.cells) if g.has(p, "hash") and g.has(p, "boxed")]
    for policy in with_both:
        out.append(Contrast("preference_D", "acc.strict", policy, "hash-boxed", D(policy)))
    arm_d: Series = defaultdict(list)
    for (method, ckpt, seed), convs in sorted(d.arms.items()):
        H, B = convs.get("hash"), convs.get("boxed")
        if H in with_both and B in with_both:
            terms = _lin(*[(c, i) for i, c in D(H).items()], *[(-c, i) for i, c in D(B).items()])
            out.append(pair_contrast("arm_to_arm_D", "acc.strict", method, seed, ckpt, "hash-boxed", terms,
                                     MARKER_PAIR, seeds=[seed]))
            arm_d[(method, ckpt)].append((seed, terms))
    for (method, ckpt), seeds in sorted(arm_d.items()):
        out += _pooled("arm_to_arm_D", "acc.strict", method, ckpt, "hash-boxed", seeds, MARKER_PAIR)
    return out


def used_stats(contrasts: list[Contrast], n_stats: int) -> np.ndarray:
    """Boolean mask of the statistics any contrast needs (the bootstrap resamples only those)."""
    mask: np.ndarray = np.zeros(n_stats, dtype=bool)
    for c in contrasts:
        for terms in (c.terms, c.denom or {}, *c.members):
            mask[list(terms)] = True
    return mask


def _matrix(terms_list: list[dict[int, float]], n_stats: int) -> sparse.csc_matrix:
    """(n_stats, n_contrasts) coefficients; sparse: a contrast uses at most a handful of statistics."""
    rows = [i for terms in terms_list for i in terms]
    cols = [j for j, terms in enumerate(terms_list) for _ in terms]
    vals = [v for terms in terms_list for v in terms.values()]
    return sparse.csc_matrix((vals, (rows, cols)), shape=(n_stats, len(terms_list)))


def _apply(stats_t: np.ndarray, coef: sparse.csc_matrix, bad: np.ndarray | None) -> np.ndarray:
    """``(stats @ coef).T`` from ``stats_t`` (n_stats, n): a contrast that uses an undefined (NaN)
    statistic is NaN itself, and a NaN never reaches a contrast that does not use it (NaN x 0 = NaN)."""
    coef_t = coef.T.tocsr()
    if bad is None:
        return np.asarray(coef_t @ stats_t)
    values = np.asarray(coef_t @ np.where(bad, 0.0, stats_t))
    rows = bad.any(axis=1)
    uses = (abs(coef_t[:, rows]) > 0).astype(float)
    values[np.asarray(uses @ bad[rows].astype(float)) > 0] = np.nan
    return values


def evaluate(contrasts: list[Contrast], stats: np.ndarray) -> np.ndarray:
    """Contrast values for stat vectors ``stats`` of shape (..., n_stats) -> (..., n_contrasts).

    A contrast is computed from the statistics it uses only: undefined stays undefined in its own
    column (NaN), never in a neighbour's."""
    shape, n_stats = stats.shape, stats.shape[-1]
    # One contiguous (n_stats, n_draws) copy shared by every product (sparse @ dense wants C order).
    stats_t = np.ascontiguousarray(stats.reshape(-1, n_stats).T)
    nan = np.isnan(stats_t)
    bad = nan if nan.any() else None
    values = _apply(stats_t, _matrix([c.terms for c in contrasts], n_stats), bad)
    is_ratio = np.array([c.denom is not None for c in contrasts], dtype=bool)
    if is_ratio.any():
        den = _apply(stats_t, _matrix([c.denom or {} for c in contrasts if c.denom is not None], n_stats), bad)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = 1.0 - values[is_ratio] / den
        values[is_ratio] = np.where(np.isfinite(ratio), ratio, np.nan)
    sd_rows = [(j, c.members) for j, c in enumerate(contrasts) if c.members]
    if sd_rows:  # every seed of every SD row in one product, then one SD per group of rows with k seeds
        per_seed = _apply(stats_t, _matrix([m for _, members in sd_rows for m in members], n_stats), bad)
        for k in sorted({len(members) for _, members in sd_rows}):
            cols: list[int] = []
            idx: list[int] = []
            offset = 0
            for j, members in sd_rows:
                if len(members) == k:
                    cols.append(j)
                    idx.extend(range(offset, offset + k))
                offset += len(members)
            block = per_seed[idx].reshape(len(cols), k, -1)
            values[cols] = block.std(axis=1, ddof=1)  # NaN when any seed's value is undefined
    return values.T.reshape(*shape[:-1], len(contrasts))
