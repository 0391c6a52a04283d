"""The analysis of one scores table: cells, contrasts with paired-bootstrap intervals, coverage, paired
tests, lengths, sampling runs, examples and the reader audit (paper 001 §2-§3, App. B-D; paper 002 §4-§5).

Computing only: ``analysis/report/write.py`` writes what ``compute`` returns, and ``analysis/cli.py``
(``crossed-analyze``) runs both into a folder.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from crossed_rlvr.analysis.bootstrap import (
    endpoint_mc_error,
    paired_mean_intervals,
    percentile_interval,
    resample_stats,
)
from crossed_rlvr.analysis.cells import (
    SHARED,
    Group,
    add_shared_wording_cells,
    build_groups,
    derive_measures,
    policy_table,
)
from crossed_rlvr.analysis.contrasts import (
    Contrast,
    arms_by_seed,
    build_contrasts,
    evaluate,
    used_stats,
)
from crossed_rlvr.analysis.coverage import coverage_change, pass_at_k, pass_at_k_items
from crossed_rlvr.analysis.flips import changes
from crossed_rlvr.analysis.paired import paired_tests
from crossed_rlvr.errors import CrossedError
from crossed_rlvr.eval.score.checks import ScoresTableError, read_scores
from crossed_rlvr.eval.score.symbolic import is_symbolic_task
from crossed_rlvr.names import INITIAL, contrast_parts, seed_slot
from crossed_rlvr.records import OPTIONAL as DECODING  # the record contract's decoding fields

DEFAULT_RESAMPLES = 20_000  # MC error of endpoints ~0.1 pp on GSM8K-size cells; ~2 s per 22-cell study (bench_analysis)
DEFAULT_RNG_SEED = 20260919  # the study's analysis.rng_seed too: re-analysing its scores with defaults gives its intervals


class AnalysisError(CrossedError, ValueError):
    pass


def load_scores(path: str | Path) -> pd.DataFrame:
    try:
        return read_scores(path)
    except ScoresTableError as err:
        raise AnalysisError(str(err)) from None




def decoding_variants(scores: pd.DataFrame) -> pd.DataFrame:
    """A decoding sweep as one study: when a task's responses were made under more than one decoding setting,
    each setting becomes its own task, ``gsm8k [T=0.6, top-p=0.95, max 640]``, so every cell, contrast and
    table is computed per setting and reported side by side (paper 002 §4.1: decoding is part of the result)."""
    cols = [c for c in DECODING if c in scores]
    if not cols:
        return scores
    out = scores.copy()
    for task, part in scores.groupby("task", sort=False):
        combos = part[cols].drop_duplicates()
        if len(combos) < 2:
            continue
        label = part[cols].astype(object).where(part[cols].notna(), None)
        out.loc[part.index, "task"] = [
            f"{task} [T={t if t is not None else '?'}, top-p={p if p is not None else '?'}, "
            f"max {int(m) if m is not None else '?'}]"
            for t, p, m in zip(*(label[c] if c in label else [None] * len(part) for c in DECODING), strict=True)]
    return out


def cell_rows(df: pd.DataFrame, groups: list[Group]) -> pd.DataFrame:
    """cells.csv: one row per cell and measure (paper Tables 8, 11, 12)."""
    rows: list[dict[str, Any]] = []
    meta = df.groupby(["task", "template", "policy", "request"]).agg(
        n=("item_id", "size"), training_convention=("training_convention", "first"), train_seed=("train_seed", "first")
    )
    tokens_of: dict[tuple, float] = {}
    if "response_tokens" in df:
        agg = df.groupby(["task", "template", "policy", "request"])["response_tokens"].agg(["sum", "min"])
        tokens_of = {k: float(v["sum"]) for k, v in agg.iterrows() if v["min"] >= 0}
    for g in groups:
        acc_idx = [i for i, m in enumerate(g.measures) if m.startswith("acc.")]
        for c, (policy, request) in enumerate(g.cells):
            info = meta.loc[(g.task, g.template, policy, request)]
            base = {"task": g.task, "template": g.template, "policy": policy,
                    "training_convention": info["training_convention"], "train_seed": info["train_seed"],
                    "request": request, "n": int(info["n"]), "n_items": len(g.items)}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                values = np.nanmean(g.X[c], axis=1)
            for m, v in zip(g.measures, values):
                if m.startswith(("cat.", "diag.")) or m == "timeout.math_verify":
                    name = f"count.{m.split('.', 1)[1]}" if m.startswith(("cat.", "diag.")) else f"count.{m}"
                    rows.append({**base, "measure": name, "value": round(float(v) * base["n"])})
                elif not np.isnan(v):
                    rows.append({**base, "measure": m, "value": float(v)})
            tokens = tokens_of.get((g.task, g.template, policy, request))
            if tokens is not None:  # Table 19: generated work, not latency (-1 = unknown for imports)
                rows.append({**base, "measure": "output_tokens", "value": tokens})
            if g.n_samples > 1:
                counts = np.rint(g.X[c][acc_idx] * g.n_samples)
                curve = pass_at_k(counts, g.n_samples)
                for j, i in enumerate(acc_idx):
                    for k in range(1, g.n_samples + 1):
                        rows.append({**base, "measure": f"pass@{k}.{g.measures[i][4:]}", "value": float(curve[j, k - 1])})
    cells = pd.DataFrame(rows)
    # Same-item payload changes against the initial policy (Table 12), paired by (item, sample).
    key = ["task", "template", "request", "item_id", "sample_idx"]
    init = df[df["policy"] == "initial"][[*key, "requested_payload"]].rename(columns={"requested_payload": "p0"})
    extra = []
    if not init.empty:
        merged = df[df["policy"] != "initial"].merge(init, on=key, how="inner")
        for (task, template, policy, request), part in merged.groupby(["task", "template", "policy", "request"]):
            lost, gained = (changes(part["p0"], part["requested_payload"])[k] for k in ("lost", "gained"))
            info = {"task": task, "template": template, "policy": policy, "request": request}
            base = cells[(cells.task == task) & (cells.template == template) & (cells.policy == policy)
                         & (cells.request == request)].iloc[0]
            info.update(training_convention=base["training_convention"], train_seed=base["train_seed"],
                        n=int(base["n"]), n_items=int(base["n_items"]))
            extra += [{**info, "measure": "lost", "value": lost}, {**info, "measure": "gained", "value": gained},
                      {**info, "measure": "delta_P", "value": 100.0 * (gained - lost) / len(part)}]
    return pd.concat([cells, pd.DataFrame(extra)], ignore_index=True) if extra else cells


def _cell_meta(part: pd.DataFrame) -> dict[str, Any]:
    """The cells.csv key columns of a subset of one cell's rows."""
    first = part.iloc[0]
    return {"task": first["task"], "template": first["template"], "policy": first["policy"],
            "request": first["request"], "training_convention": first["training_convention"],
            "train_seed": first["train_seed"], "n": len(part), "n_items": part["item_id"].nunique()}


def answer_type_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Table 17 counts per cell of a symbolic task and reference group (a nonnegative integer reference,
    read from its text, or other): digit-only first hash payload, first-hash correct, Math-Verify correct."""
    need = ("hash_digit_only", "math_first_hash.correct", "math_verify.correct")
    sym = df[df["task"].map(is_symbolic_task)]
    if sym.empty or any(c not in sym for c in need):
        return pd.DataFrame()
    ref = sym["reference"].astype(str).str.strip().str.strip("$").str.strip()
    sym = sym.assign(ref_group=np.where(ref.str.fullmatch(r"\d+"), "integer", "other"))
    rows = []
    keys = ["task", "template", "policy", "request", "ref_group"]
    for (_task, _template, _policy, _request, grp), part in sym.groupby(keys):
        base = _cell_meta(part)
        for name, col in (("digit_only_hash", "hash_digit_only"), ("hash_correct", "math_first_hash.correct"),
                          ("mv_correct", "math_verify.correct")):
            rows.append({**base, "measure": f"count.{name}|{grp}", "value": int(part[col].astype(bool).sum())})
        rows.append({**base, "measure": f"items|{grp}", "value": part["item_id"].nunique()})
    return pd.DataFrame(rows)


def stratum_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Table 20: accuracy per item stratum (fixed before generation, e.g. operations per expression), per cell,
    for the strict, lenient and Math-Verify readers."""
    if "stratum" not in df or df["stratum"].isna().all():
        return pd.DataFrame()
    rows = []
    part = df[df["stratum"].notna()]
    for (*_, stratum), cell in part.groupby(["task", "template", "policy", "request", "stratum"]):
        base = _cell_meta(cell)
        for m in ("acc.strict", "acc.lenient", "acc.math_verify"):
            if cell[m].notna().all():
                rows.append({**base, "measure": f"{m}|stratum={stratum}", "value": float(cell[m].mean())})
        rows.append({**base, "measure": f"items|stratum={stratum}", "value": cell["item_id"].nunique()})
    return pd.DataFrame(rows)


def contrast_rows(groups: list[Group], policies: pd.DataFrame, n_resamples: int, rng_seed: int
                  ) -> tuple[pd.DataFrame, dict[str, float]]:
    """contrasts.csv rows with paired-bootstrap percentile intervals, and the eq. 5 identity check."""
    rows, identity_err = [], 0.0
    for g in groups:
        contrasts = build_contrasts(g, policies)
        if not contrasts:
            continue
        flat = g.flat()
        point = flat.mean(axis=1)  # a statistic with an undefined item is undefined (NaN), never imputed
        est = evaluate(contrasts, point)
        lows = highs = mc = np.full(len(contrasts), np.nan)
        if n_resamples:
            draws = resample_stats(flat, n_resamples, rng_seed, used_stats(contrasts, len(flat)), g.n_samples)
            values = evaluate(contrasts, draws)
            lows, highs = percentile_interval(values)
            mc = endpoint_mc_error(values)
        identity_err = max(identity_err, _identity_error(contrasts, est))
        for j, c in enumerate(contrasts):
            lo, hi = (np.nan, np.nan) if c.members or np.isnan(est[j]) else (lows[j], highs[j])
            rows.append({
                "task": g.task, "template": g.template, "name": c.name, "measure": c.measure, "policy": c.policy,
                "request": c.request, "unit": c.unit, "estimate": float(est[j]), "ci_low": float(lo),
                "ci_high": float(hi), "n_resamples": 0 if c.members else n_resamples, "rng_seed": rng_seed,
                "mc_error": float(mc[j]) if not (c.members or np.isnan(est[j])) else np.nan,
                "n_items": len(g.items), "seeds": " ".join(str(x) for x in c.seeds),
                "note": undefined_reason(g, c, point) if np.isnan(est[j]) else "",
                "method": c.method, "seed": c.seed_slot, "checkpoint": c.checkpoint, "arm_h": c.arm_h,
                "arm_b": c.arm_b,
            })
    return pd.DataFrame(rows), {"max_abs_identity_error": identity_err}


PART_COLUMNS = ("method", "seed", "checkpoint", "arm_h", "arm_b")


def with_policy_parts(contrasts: pd.DataFrame, policies: pd.DataFrame) -> pd.DataFrame:
    """Every contrast row with its parts as columns: a pair's from the contrast that made it, a policy's (a gain, a
    preference, one arm's ΔP) from the policy table (its method and checkpoint, ``s<seed>``, and its training
    convention as ``arm_h``); the initial policy's method is ``initial``."""
    if contrasts.empty:
        return contrasts
    out = contrasts.copy()
    for col in PART_COLUMNS:
        out[col] = out[col].fillna("").astype(str) if col in out else ""
    table = policies.set_index("policy")
    own = (out["method"] == "") & out["policy"].isin(table.index)
    rows = table.loc[out.loc[own, "policy"]]
    out.loc[own, "method"] = rows["method"].to_numpy()
    out.loc[own, "checkpoint"] = rows["checkpoint"].to_numpy()
    out.loc[own, "seed"] = ["" if pd.isna(s) else seed_slot(int(s)) for s in rows["train_seed"]]
    out.loc[own, "arm_h"] = [c if c != INITIAL else "" for c in rows["training_convention"]]
    return out


def read_contrasts(path: str | Path) -> pd.DataFrame:
    """A contrasts.csv, its parts' columns as text; a table written before the parts were stored gets them from
    its names (``names.contrast_parts``), so its readers read one shape."""
    table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    if all(col in table for col in PART_COLUMNS):
        return table.assign(**{col: table[col].astype(object).fillna("").astype(str) for col in PART_COLUMNS})
    parts = pd.DataFrame([contrast_parts(str(n), str(p), str(r))
                          for n, p, r in zip(table["name"], table["policy"], table["request"])],
                         index=table.index, columns=list(PART_COLUMNS))
    return pd.concat([table.drop(columns=[c for c in PART_COLUMNS if c in table]), parts], axis=1)


def undefined_reason(g: Group, c: Contrast, point: np.ndarray) -> str:
    """Why a contrast has no value: the first statistic it needs that is undefined, or its denominator."""
    for terms in (c.terms, *(c.members or []), c.denom or {}):
        for i in sorted(terms):
            if terms[i] != 0 and np.isnan(point[i]):
                policy, request = g.cells[i // len(g.measures)]
                measure = g.measures[i % len(g.measures)]
                return f"{measure} of {policy} under the {request} request is undefined"
    if c.denom:
        what = {"conditional_correctness": "q_c (no response the strict reader can read)",
                "share_F": "the strict gain Δ_S", "share_gamma0": "the strict gain Δ_S"}.get(
            c.name, "the control arm's strict gain")
        return f"its denominator, {what}, is zero"
    return "undefined"


def _identity_error(contrasts: list[Contrast], est: np.ndarray) -> float:
    """Largest |Δ_S - (F + Δ_len)| over policies (eq. 5); zero up to rounding by construction."""
    val = {(c.name, c.measure, c.policy, c.request): est[j] for j, c in enumerate(contrasts)}
    err = 0.0
    for (name, _, policy, request), f in val.items():
        if name == "reader_gap_reduction":
            ds = val[("gain", "acc.strict", policy, request)]
            dl = val[("gain", "acc.lenient", policy, request)]
            if np.isfinite(ds - (f + dl)):
                err = max(err, abs(ds - (f + dl)))
    return float(err)


def item_contrast_rows(groups: list[Group], n_resamples: int, rng_seed: int) -> pd.DataFrame:
    """Gains that need item-level masks or transforms, with paired intervals from the same item draws:

    - ``gain_untruncated`` (App. B.4 sensitivity): the strict and Math-Verify gains over the items where
      neither response (no sample of either) was cut at the length limit;
    - ``pass@k_gain`` for k = 1 and k = N (coverage, eq. 9, 11): per-item unbiased pass@k, trained minus
      initial."""
    rows = []
    for g in groups:
        specs, diffs, keeps = [], [], []
        t = g.measures.index("truncated")
        for policy, request in g.cells:
            if policy == "initial" or not g.has("initial", request):
                continue
            c0, c1 = g.cells.index(("initial", request)), g.cells.index((policy, request))
            untruncated = (g.X[c0, t] == 0) & (g.X[c1, t] == 0)
            # no finish reasons (imported outputs): the untruncated repeat is undefined, not "all truncated"
            trunc_known = not (np.isnan(g.X[c0, t]).any() or np.isnan(g.X[c1, t]).any())
            for m in ("acc.strict", "acc.math_verify"):
                if m not in g.measures:
                    continue
                i = g.measures.index(m)
                d = g.X[c1, i] - g.X[c0, i]
                if np.isnan(d).any():
                    continue
                if trunc_known:
                    specs.append(("gain_untruncated", m, policy, request))
                    diffs.append(100 * d)
                    keeps.append(untruncated)
                if g.n_samples > 1:
                    n0, n1 = np.rint(g.X[c0, i] * g.n_samples), np.rint(g.X[c1, i] * g.n_samples)
                    for k in sorted({1, g.n_samples}):
                        specs.append((f"pass@{k}_gain", m, policy, request))
                        diffs.append(100 * (pass_at_k_items(n1, g.n_samples, k) - pass_at_k_items(n0, g.n_samples, k)))
                        keeps.append(np.ones(len(g.items), dtype=bool))
        if not specs:
            continue
        est, lo, hi = paired_mean_intervals(np.array(diffs), np.array(keeps), n_resamples, rng_seed)
        for (name, m, policy, request), e, a, b, keep in zip(specs, est, lo, hi, keeps, strict=True):
            rows.append({"task": g.task, "template": g.template, "name": name, "measure": m, "policy": policy,
                         "request": request, "unit": "pp", "estimate": float(e), "ci_low": float(a),
                         "ci_high": float(b), "n_resamples": n_resamples, "rng_seed": rng_seed,
                         "n_items": int(keep.sum()), "seeds": "",
                         "note": "" if keep.sum() else "every item pair holds a truncated response"})
    return pd.DataFrame(rows)


def coverage_rows(groups: list[Group]) -> pd.DataFrame:
    """Item coverage at k = N against the initial policy, with exact McNemar tests (App. C.3)."""
    rows = []
    for g in groups:
        for policy, request in g.cells:
            if policy == "initial" or not g.has("initial", request):
                continue
            c0, c1 = g.cells.index(("initial", request)), g.cells.index((policy, request))
            for i, m in enumerate(g.measures):
                if not m.startswith("acc.") or np.isnan(g.X[c1, i]).any() or np.isnan(g.X[c0, i]).any():
                    continue
                n0, n1 = np.rint(g.X[c0, i] * g.n_samples), np.rint(g.X[c1, i] * g.n_samples)
                lost, gained, p = coverage_change(n0, n1)
                rows.append({"task": g.task, "template": g.template, "name": "coverage", "measure": m,
                             "policy": policy, "request": request, "unit": "pp", "k": g.n_samples,
                             "initial": 100 * float((n0 > 0).mean()), "trained": 100 * float((n1 > 0).mean()),
                             "estimate": 100.0 * (gained - lost) / len(g.items), "lost": lost, "gained": gained,
                             "p_value": p, "n_items": len(g.items)})
    return pd.DataFrame(rows)


def paired_test_rows(groups: list[Group], policies: pd.DataFrame) -> pd.DataFrame:
    """Per arm (method and convention, pooled over seeds): one-sided paired t and Wilcoxon (paper 002 §4.2)."""
    rows = []
    arms = arms_by_seed(policies)
    by_arm: dict[str, list[str]] = {}
    for (method, ckpt, _seed), convs in sorted(arms.items()):
        for conv, policy in convs.items():  # seeds of one arm and checkpoint are pooled, nothing else
            by_arm.setdefault(f"{method}-{conv}" + (f"@{ckpt}" if ckpt else ""), []).append(policy)
    for g in groups:
        for arm, members in by_arm.items():
            for request in sorted({r for _, r in g.cells}):
                present = [p for p in members if g.has(p, request)]
                if not present or not g.has("initial", request):
                    continue
                for i, m in enumerate(g.measures):
                    if not m.startswith("acc."):
                        continue
                    trained = np.mean([g.X[g.cells.index((p, request)), i] for p in present], axis=0)
                    initial = g.X[g.cells.index(("initial", request)), i]
                    if np.isnan(trained).any() or np.isnan(initial).any():
                        continue
                    res = paired_tests(trained, initial)
                    per_seed = [100 * float(np.mean(g.X[g.cells.index((p, request)), i])) for p in present]
                    rows.append({"task": g.task, "template": g.template, "name": "paired_tests", "measure": m,
                                 "policy": arm, "request": request, "unit": "pp", "n_seeds": len(present),
                                 "initial_accuracy": 100 * float(initial.mean()),
                                 "trained_mean": float(np.mean(per_seed)),
                                 "trained_sd": float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else np.nan,
                                 "estimate": 100 * res["mean_diff"], "t_statistic": res["t"], "t_p_value": res["t_p"],
                                 "t_p_two_sided": res["t_p_two"], "wilcoxon_statistic": res["w"],
                                 "wilcoxon_p_value": res["w_p"], "wilcoxon_p_two_sided": res["w_p_two"],
                                 "n_items": len(g.items)})
    return pd.DataFrame(rows)


def length_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Mean output tokens of correct and incorrect responses (requested strict reader) per cell (paper 002
    §5.2); empty when token counts were not recorded (imported outputs write -1)."""
    own = df[~df["template"].str.endswith(SHARED) & (df["response_tokens"] >= 0)]
    if own.empty:
        return pd.DataFrame()
    ok = own["acc.strict"].astype(float) == 1
    return (own.assign(ok=ok, tok=own["response_tokens"].astype(float))
            .groupby(["task", "template", "policy", "request"], sort=False)
            .apply(lambda g: pd.Series({"n_correct": int(g.ok.sum()), "tokens_correct": g.tok[g.ok].mean(),
                                        "n_incorrect": int((~g.ok).sum()), "tokens_incorrect": g.tok[~g.ok].mean()}),
                   include_groups=False).reset_index()
            .astype({"n_correct": int, "n_incorrect": int}))


def sampling_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Cells with several samples per item (paper 002 §4.1): each sample index is one sampling run over all
    items; accuracy (strict, Math-Verify) per run, then mean and SD across runs."""
    own = df[~df["template"].str.endswith(SHARED)]
    keys = ["task", "template", "policy", "request"]
    runs = own.groupby(keys)["sample_idx"].nunique()
    many = runs[runs > 1].index
    if not len(many):
        return pd.DataFrame()
    part = own.set_index(keys).loc[many].reset_index()
    per_run = part.groupby([*keys, "sample_idx"])[["acc.strict", "acc.math_verify"]].mean().mul(100)
    out = per_run.groupby(keys).agg(["mean", "std", "count"])
    out.columns = [f"{m.split('.')[1]}_{stat}" for m, stat in out.columns]
    return out.reset_index().rename(columns={"strict_count": "runs"}).drop(columns="math_verify_count")


def example_rows(df: pd.DataFrame, inputs: list[Path], per_template: int = 2, rng_seed: int = DEFAULT_RNG_SEED
                 ) -> pd.DataFrame:
    """``per_template`` items per wording (seeded choice) with every policy's first response under every
    request, its strict correctness and payload, read back from the scored response files."""
    from crossed_rlvr.records import ResponseFileError, read_responses

    files = [f for f in inputs if f.exists()]
    if not files:
        return pd.DataFrame()
    try:
        records = read_responses(files).records
    except ResponseFileError:
        return pd.DataFrame()  # the files changed since scoring: no examples rather than wrong ones
    text = {(r["task"], r["template"], r["policy"], r["request"], r["item_id"]): r["response"] for r in records
            if r["sample_idx"] == 0}
    own = df[~df["template"].str.endswith(SHARED) & (df["sample_idx"] == 0)]
    rng = np.random.default_rng(rng_seed)
    rows = []
    for (task, template), part in own.groupby(["task", "template"], sort=False):
        items = sorted(part["item_id"].unique(), key=lambda x: (len(x), x))
        chosen = sorted(rng.choice(items, size=min(per_template, len(items)), replace=False), key=lambda x: (len(x), x))
        for item in chosen:
            for r in part[part["item_id"] == item].itertuples():
                key = (task, template, r.policy, r.request, item)
                if key in text:
                    rows.append({"task": task, "template": template, "item_id": item, "policy": r.policy,
                                 "request": r.request, "reference": r.reference,
                                 "correct": bool(part.loc[r.Index, "acc.strict"] == 1),
                                 "payload": bool(part.loc[r.Index, "payload"] == 1),
                                 "response": text[key]})
    return pd.DataFrame(rows)


@dataclass
class Analysis:
    """Everything the analysis computed from one scores table; ``analysis/report`` writes it out."""

    scores_path: Path
    scores: pd.DataFrame          # the table as read (decoding variants split into tasks)
    df: pd.DataFrame              # with derived measures and the shared-wording cells
    cells: pd.DataFrame
    contrasts: pd.DataFrame
    coverage: pd.DataFrame
    paired: pd.DataFrame
    checks: dict[str, Any]
    lengths: pd.DataFrame
    sampling: pd.DataFrame
    examples: pd.DataFrame
    audit_rates: pd.DataFrame
    audit_examples: pd.DataFrame
    protocol: dict[str, Any]
    n_resamples: int
    rng_seed: int


def compute(scores_path: str | Path, n_resamples: int = DEFAULT_RESAMPLES, rng_seed: int = DEFAULT_RNG_SEED,
            allow_partial: bool = False) -> Analysis:
    """Cells, contrasts with paired-bootstrap intervals, coverage, paired tests, lengths, sampling runs,
    example responses, the reader audit and the protocol card of one scores table (nothing is written).

    A partial design (:mod:`crossed_rlvr.analysis.design`) is refused, or with ``allow_partial`` its
    incomplete policies are left out and listed in ``protocol['left_out']``."""
    from crossed_rlvr.analysis.audit import audit
    from crossed_rlvr.analysis.bootstrap import check_settings
    from crossed_rlvr.analysis.cells import reader_names
    from crossed_rlvr.analysis.protocol import collect, response_files

    wrong = check_settings(n_resamples, rng_seed)
    if wrong:  # before any work: an empty interval would flip the headline ("includes 0")
        raise AnalysisError(wrong)
    scores = decoding_variants(load_scores(scores_path))
    from crossed_rlvr.analysis.design import complete_part, design_gaps

    left_out: list[str] = []
    gaps = design_gaps(scores)
    if gaps and not allow_partial:
        more = f" (and {len(gaps) - 1} more gap{'s' if len(gaps) > 2 else ''})" if len(gaps) > 1 else ""
        raise AnalysisError(f"{scores_path}: partial design: {gaps[0].line()}{more}; pass --allow-partial to "
                            "analyse only the complete policies")
    if gaps:
        scores, removed = complete_part(scores)
        left_out = [g.line() for g in removed]
        if scores.empty:
            raise AnalysisError(f"{scores_path}: partial design: no policy is complete ({left_out[0]})")
    df, measures = derive_measures(scores)
    df = add_shared_wording_cells(df)
    groups = build_groups(df, measures)
    policies = policy_table(df)

    cells = cell_rows(df, groups)
    own = df[~df["template"].str.endswith(SHARED)]
    extra = [t for t in (answer_type_rows(own), stratum_rows(own)) if not t.empty]
    if extra:
        cells = pd.concat([cells, *extra], ignore_index=True)
    contrasts, checks = contrast_rows(groups, policies, n_resamples, rng_seed)
    contrasts = pd.concat([contrasts, item_contrast_rows(groups, n_resamples, rng_seed)], ignore_index=True)
    contrasts = with_policy_parts(contrasts, policies)
    # each cell's policy's parts, beside its name (the report's figures and criteria read them)
    cells = cells.merge(policies[["policy", "method", "checkpoint"]], on="policy", how="left")
    a1 = cells[cells.measure == "a1_violation"]
    checks["a1_max_violation_rate"] = float(a1["value"].max()) if len(a1) else 0.0
    checks["math_verify_timeouts"] = int(cells.loc[cells.measure == "count.timeout.math_verify", "value"].sum())
    rates, audit_examples = audit(scores, reader_names(scores), ["task", "template", "policy", "request"],
                                  ["task", "policy", "request", "template", "item_id", "sample_idx"])
    return Analysis(
        scores_path=Path(scores_path), scores=scores, df=df, cells=cells, contrasts=contrasts,
        coverage=coverage_rows(groups), paired=paired_test_rows(groups, policies), checks=checks,
        lengths=length_rows(df), sampling=sampling_rows(df),
        examples=example_rows(df, response_files(scores_path), rng_seed=rng_seed),
        audit_rates=rates, audit_examples=audit_examples,
        protocol={**collect(scores_path, scores, n_resamples, rng_seed), "left_out": left_out},
        n_resamples=n_resamples, rng_seed=rng_seed)
