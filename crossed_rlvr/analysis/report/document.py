"""report.md and figures, laid out like paper 001 Tables 8-17, 19-20, 22 and Figures 1a, 1b, 2a, 2b, 3b."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from crossed_rlvr.analysis.cells import SHARED
from crossed_rlvr.analysis.report.headline import collapse_columns, collapsed_note
from crossed_rlvr.analysis.report.tables import interval, markdown_table, signed
from crossed_rlvr.eval.score.symbolic import is_symbolic_task
from crossed_rlvr.layout import AnalysisLayout
from crossed_rlvr.names import SUMMARIES
from crossed_rlvr.rewards.conventions import CONVENTIONS, MARKER_PAIR, request_order

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TEMPLATE_ORDER = {"original": 0, "para_a": 1, "para_b": 2, "rephrased": 3, "one_shot": 4}


def requests_in_order(values: Iterable[str]) -> list[str]:
    return sorted(set(values), key=lambda r: (request_order(r), r))


def _ci(row: pd.Series, digits: int = 2) -> str:
    """A contrast row's estimate and interval; ``digits``: decimals of the endpoints (headline.precision)."""
    return interval(row["estimate"], row.get("ci_low", np.nan), row.get("ci_high", np.nan), 2, digits)


def is_summary(contrasts: pd.DataFrame) -> pd.Series:
    """Seed-summary rows (``grpo/mean``, ``grpo/sd@step50``) as opposed to one seed's: their stored seed slot."""
    return contrasts["seed"].isin(SUMMARIES)


def _templates(df: pd.DataFrame) -> list[tuple[str, str]]:
    pairs = df[["task", "template"]].drop_duplicates().itertuples(index=False)
    return sorted(pairs, key=lambda p: (p[0], TEMPLATE_ORDER.get(p[1], 9), p[1]))


def _seed_label(row: pd.Series) -> str:
    return "—" if row["training_convention"] == "initial" else str(int(row["train_seed"]))


def _policy_order(cells: pd.DataFrame) -> list[str]:
    pol = cells.drop_duplicates("policy")[["policy", "training_convention", "train_seed"]]
    pol = pol.assign(seed=pol["train_seed"].fillna(-1), first=pol["policy"] != "initial")
    return list(pol.sort_values(["first", "seed", "training_convention", "policy"])["policy"])


def payload_table(cells: pd.DataFrame, task: str, template: str) -> str:
    """Tables 11 and 12: payload categories, q_c, payload and q_c rates, lost/gained and ΔP."""
    part = cells[(cells.task == task) & (cells.template == template)]
    wide = part.pivot_table(index=["policy", "request"], columns="measure", values="value", aggfunc="first")
    meta = part.drop_duplicates(["policy", "request"]).set_index(["policy", "request"])
    rows = []
    for policy in _policy_order(part):
        for request in requests_in_order(part[part.policy == policy]["request"]):
            w, m = wide.loc[(policy, request)], meta.loc[(policy, request)]
            n = int(m["n"])
            def get(k: str, w: pd.Series = w) -> float:
                return w.get(k, np.nan)

            rows.append([
                _seed_label(m), policy, request,
                *[int(get(f"count.{c}")) for c in ("requested_only", "other_only", "both", "neither")],
                round(get("extractable") * n), f"{100 * get('payload'):.2f}", f"{100 * get('extractable'):.2f}",
                "—" if np.isnan(get("lost")) else int(get("lost")),
                "—" if np.isnan(get("gained")) else int(get("gained")),
                "—" if np.isnan(get("delta_P")) else signed(get("delta_P")),
            ])
    return markdown_table(["Seed", "Policy", "Request", "Requested only", "Other only", "Both", "Neither", "q_c",
                   "Payload (%)", "q_c (%)", "Lost", "Gained", "ΔP (pp)"], rows)


def crossing_gaps(cells: pd.DataFrame, task: str | None = None, template: str | None = None) -> list[str]:
    """What keeps a crossed pair (§2: arms of both conventions, same seed, each under both requests)
    from forming: one line per missing cell or arm, so an import that split the design is visible."""
    from crossed_rlvr.rewards.conventions import ARM_PARTNER, PARTNER

    part = cells if task is None else cells[(cells.task == task) & (cells.template == template)]
    cols = ["task", "template", "policy", "training_convention", "train_seed", "request"]
    have = part[cols].drop_duplicates()
    gaps: list[str] = []
    for (t, tpl), grp in have.groupby(["task", "template"], sort=True):
        arms = grp[grp.training_convention != "initial"]
        requests = set(grp.request)
        convs = set(arms.training_convention)
        if not convs:
            gaps.append(f"{t}/{tpl}: no trained arm, only the initial policy")
            continue
        for conv in sorted(convs):
            partner = ARM_PARTNER.get(conv)
            if partner is None:
                gaps.append(f"{t}/{tpl}: {conv} arms have no crossed partner convention (a single-arm design: "
                            "their gains against the initial policy are in the tables)")
                continue
            if partner not in convs:
                gaps.append(f"{t}/{tpl}: arms trained on {conv} but none on {partner}")
            own = CONVENTIONS[conv].request
            for policy, pol in arms[arms.training_convention == conv].groupby("policy"):
                missing = sorted({own, PARTNER[own]} - set(pol.request))
                if missing:
                    gaps.append(f"{t}/{tpl}: {policy} has no cell under request {', '.join(missing)}"
                                + (f" (the task holds only {', '.join(sorted(requests))})" if requests else ""))
    for policy, grp in have.groupby("policy"):  # one policy's requests split across task names
        if grp.task.nunique() > 1 and grp.groupby("task").request.nunique().max() < grp.request.nunique():
            spread = "; ".join(f"{t}: {', '.join(sorted(g.request))}" for t, g in grp.groupby("task"))
            gaps.append(f"{policy}: its requests fall under different tasks ({spread}); import them under one "
                        "task name (crossed-import --task)")
    return gaps


def interaction_table(contrasts: pd.DataFrame, task: str, template: str, cells: pd.DataFrame | None = None,
                      digits: int = 2) -> str:
    """Table 10: I_P, I_q, I_S (requested strict), I_MV per seed, with seed mean and SD."""
    part = contrasts[(contrasts.task == task) & (contrasts.template == template)
                     & contrasts.name.isin(["interaction", "interaction_sd"])]
    if part.empty:
        gaps = crossing_gaps(cells, task, template) if cells is not None else []
        return "_No policy pair with both conventions under both requests._" + "".join(
            f"\n- missing: {g}" for g in gaps)
    cols = [("payload", "I_P"), ("extractable", "I_q"), ("acc.strict", "I_S"), ("acc.math_verify", "I_MV"),
            ("acc.reward", "I_reward"), ("acc.lenient", "I_lenient")]
    rows = []
    for (policy, request), grp in part.groupby(["policy", "request"], sort=False):
        by = grp.set_index("measure")
        sd = bool((grp["seed"] == "sd").all())  # a seed s.d. row has no interval

        def cell(m: str, by: pd.DataFrame = by, sd: bool = sd) -> str:
            return signed(by.loc[m]["estimate"], sign=False) if sd else _ci(by.loc[m], digits)

        rows.append([policy, request] + [cell(m) if m in by.index else "—" for m, _ in cols])
    header, rows, notes = collapse_columns(["Seed", "Pair"] + [c for _, c in cols], rows, 2)
    return markdown_table(header, rows) + collapsed_note(notes)


def counts_table(cells: pd.DataFrame, task: str, template: str) -> str:
    """Table 8: correct counts under each request (requested strict and Math-Verify) and truncations."""
    part = cells[(cells.task == task) & (cells.template == template)]
    wide = part.pivot_table(index=["policy", "request"], columns="measure", values="value", aggfunc="first")
    meta = part.drop_duplicates(["policy", "request"]).set_index(["policy", "request"])
    requests = requests_in_order(part["request"])
    rows = []
    for policy in _policy_order(part):
        row = [policy]
        trunc, timeouts, tokens = [], [], []
        for r in requests:
            if (policy, r) not in wide.index:
                row += ["—", "—"]
                trunc.append("—")
                timeouts.append("—")
                tokens.append("—")
                continue
            n = meta.loc[(policy, r)]["n"]
            w = wide.loc[(policy, r)]
            row += [round(w.get("acc.strict", np.nan) * n), round(w.get("acc.math_verify", np.nan) * n)]
            tr = w.get("truncated", np.nan)  # NaN: finish reasons not recorded (imported outputs)
            trunc.append("n/a" if np.isnan(tr) else str(round(tr * n)))
            timeouts.append(str(int(w.get("count.timeout.math_verify", 0))))
            t = w.get("output_tokens", np.nan)
            tokens.append("n/a" if np.isnan(t) else f"{int(t):,}")
        rows.append([*row, "/".join(trunc), "/".join(timeouts), "/".join(tokens)])
    joined = "/".join(requests)
    header = ["Policy"] + [f"{r} {k}" for r in requests for k in ("S", "MV")] + [
        f"Trunc. ({joined})", f"MV timeouts ({joined})", f"Output tokens ({joined})"]
    return markdown_table(header, rows)


def math_tables(cells: pd.DataFrame, contrasts: pd.DataFrame, task: str, template: str, digits: int = 2) -> str:
    """MATH500 readout in the layout of paper 001 Tables 15-17 (symbolic readers, App. B.4)."""
    part = cells[(cells.task == task) & (cells.template == template)]
    con = contrasts[(contrasts.task == task) & (contrasts.template == template) & (contrasts.name == "gain")]
    wide = part.pivot_table(index=["policy", "request"], columns="measure", values="value", aggfunc="first")
    requests = [r for r in MARKER_PAIR if r in set(part.request)]
    rows15, rows16, rows17, rows_diag = [], [], [], []
    for policy in _policy_order(part):
        row = [policy]
        for r in requests:
            w = wide.loc[(policy, r)] if (policy, r) in wide.index else pd.Series(dtype=float)
            row += [signed(100 * w.get("acc.strict", np.nan), 1, False), signed(100 * w.get("acc.math_verify", np.nan), 1,
                                                                           False)]
            if (policy, r) not in wide.index:
                continue
            gains = con[(con.policy == policy) & (con.request == r)].set_index("measure")
            changes = [_ci(gains.loc[m], digits) if m in gains.index else "—" for m in ("acc.strict", "acc.math_verify")]
            rows16.append([policy, r, signed(100 * w.get("payload", np.nan), 1, False),
                           signed(100 * w.get("extractable", np.nan), 1, False),
                           signed(100 * w.get("truncated", np.nan), 1, False), *changes])
            rows_diag.append([policy, r] + [int(w.get(f"count.{k}", 0)) for k in (
                "hash_digit_only", "both_readable", "hash_box_unequal", "box_correct_hash_wrong")])
            if r == "hash":
                for grp in ("integer", "other"):
                    if f"items|{grp}" in w.index and not np.isnan(w.get(f"items|{grp}", np.nan)):
                        label = "Nonnegative integer" if grp == "integer" else "Other"
                        rows17.append([f"{label} (n={int(w[f'items|{grp}'])})", policy]
                                      + [int(w.get(f"count.{k}|{grp}", 0)) for k in (
                                          "digit_only_hash", "hash_correct", "mv_correct")])
        rows15.append(row)
    header15 = ["Checkpoint"] + [f"{r} {k}" for r in requests for k in ("S", "MV")]
    return "\n".join([
        "\n#### Request-sensitive readout (Table 15), accuracy %\n",
        ("S: the requested convention's first payload read symbolically (Math-Verify, no numeric fallback); "
         "MV: Math-Verify on the full response.\n"), markdown_table(header15, rows15),
        "\n#### Transfer diagnostics (Table 16)\n",
        ("q^pay: a nonempty requested payload; q: its symbolic readability; changes against the same-request "
         "initial policy with paired 95% intervals.\n"),
        markdown_table(["Checkpoint", "Request", "q^pay", "q", "Trunc.", "ΔS [CI]", "ΔMV [CI]"], rows16),
        "\n#### Answer types under hash requests (Table 17), counts\n",
        markdown_table(["Reference group", "Checkpoint", "Digit-only hash", "Hash correct", "MV correct"], rows17)
        if rows17 else "_No hash-request cells._",
        "\n#### Report diagnostics (App. B.4), counts\n",
        markdown_table(["Checkpoint", "Request", "Digit-only hash", "Hash and box both readable", "…and unequal",
                "Correct box, incorrect hash"], rows_diag),
    ])


def stratum_table(cells: pd.DataFrame, task: str, template: str) -> str:
    """Table 20: Math-Verify (and strict) accuracy per item stratum, percent."""
    part = cells[(cells.task == task) & (cells.template == template) & cells.measure.str.contains(r"\|stratum=")]
    if part.empty:
        return ""
    part = part.assign(stratum=part.measure.str.split("stratum=").str[1], what=part.measure.str.split("|").str[0])
    strata = sorted(part.stratum.unique())
    n = part[part.what == "items"].drop_duplicates("stratum").set_index("stratum")["value"]
    rows = []
    for policy in _policy_order(part):
        for request in requests_in_order(part[part.policy == policy].request):
            sel = part[(part.policy == policy) & (part.request == request)]
            for m, label in (("acc.math_verify", "MV"), ("acc.strict", "S")):
                vals = sel[sel.what == m].set_index("stratum")["value"]
                rows.append([policy, request, label] + [signed(100 * vals.get(st, np.nan), 2, False) for st in strata])
    return "\n".join(["\n### Accuracy per item stratum (Table 20), percent\n",
                      markdown_table(["Policy", "Request", "Reader"] + [f"{st} ({int(n.get(st, 0))})" for st in strata], rows)])


def gains_table(contrasts: pd.DataFrame, task: str, template: str, digits: int = 2) -> str:
    """Table 9 with eq. 5 accounting: strict, lenient and MV gains and the reader-gap reduction F."""
    part = contrasts[(contrasts.task == task) & (contrasts.template == template)]
    gains = part[part.name.isin(["gain", "reader_gap_reduction"])]
    if gains.empty:
        return "_No initial policy to compare with._"
    rows = []
    for (policy, request), grp in gains.groupby(["policy", "request"], sort=False):
        by = grp.set_index("measure")
        def get(m: str, by: pd.DataFrame = by) -> str:
            return _ci(by.loc[m], digits) if m in by.index else "—"

        rows.append([policy, request, get("acc.strict"), get("acc.lenient"), get("acc.strict|acc.lenient"),
                     get("acc.math_verify"), get("acc.reward")])
    header, rows, notes = collapse_columns(
        ["Policy", "Request", "Strict gain Δ_S", "Lenient gain Δ_len", "F", "MV gain", "Reward-program gain"], rows, 2)
    return markdown_table(header, rows) + collapsed_note(notes)


def other_contrasts(contrasts: pd.DataFrame, digits: int = 2) -> str:
    names = ["attenuation_reward", "attenuation_convention", "preference_D", "arm_to_arm_D", "arm_to_arm_D_sd",
             "delta_P_sd", "share_F", "share_gamma0", "interaction_difference", "method_difference", "reward_difference",
             "conditional_correctness"]
    part = contrasts[contrasts.name.isin(names) | ((contrasts.name == "delta_P") & is_summary(contrasts))]
    if part.empty:
        return "_No intervention/control arms or D contrasts in this input._"
    rows, unbounded = [], 0
    d = digits
    for r in part.itertuples():
        est = "n/a" if np.isnan(r.estimate) else f"{100 * r.estimate:.1f}%" if r.unit == "ratio" else signed(
            r.estimate, sign=not r.name.endswith("_sd"))
        if r.unit == "ratio" and np.isfinite(r.ci_low) and not (r.ci_low >= RATIO_LOW and r.ci_high <= RATIO_HIGH):
            # a ratio whose denominator's draws reach 0: its interval is unbounded, and so is its estimate's meaning
            est, ci, unbounded = "unbounded", "", unbounded + 1
        else:
            ci = "" if np.isnan(r.ci_low) else (
                f"[{100 * r.ci_low:.1f}%, {100 * r.ci_high:.1f}%]" if r.unit == "ratio" else
                f"[{r.ci_low:+.{d}f}, {r.ci_high:+.{d}f}]")
        seeds = "" if not isinstance(r.seeds, str) else r.seeds
        rows.append([r.template, r.name, r.measure, r.policy, r.request, seeds, est, ci])
    note = (f"\n\n_{unbounded} ratio(s) marked unbounded: the interval leaves [{100 * RATIO_LOW:.0f}%, "
            f"{100 * RATIO_HIGH:.0f}%] because the denominator's resamples reach zero; their draws are in "
            "`contrasts.csv`._" if unbounded else "")
    return markdown_table(["Template", "Contrast", "Measure", "Policy", "Request", "Seeds", "Estimate", "95% CI"], rows) + note


RATIO_LOW, RATIO_HIGH = -1.0, 2.0  # a share outside [-100%, 200%] is not a share any more


def coverage_table(coverage: pd.DataFrame) -> str:
    if coverage.empty:
        return "_No initial policy to compare coverage with._"
    keep = coverage[coverage.measure.isin(["acc.strict", "acc.lenient", "acc.last_number", "acc.math_verify"])]
    if (keep.k == 1).all():
        return ("_One sample per item: coverage at k = 1 is each cell's accuracy (the tables above); the McNemar "
                "counts of items lost and gained are in `coverage.csv`._")
    rows = [[r.template, r.policy, r.request, r.measure[4:], r.k, f"{r.initial:.2f}", f"{r.trained:.2f}", r.lost,
             r.gained, f"{r.p_value:.3g}"] for r in keep.itertuples()]
    return markdown_table(["Template", "Policy", "Request", "Reader", "k", "Initial (%)", "Trained (%)", "Lost", "Gained",
                   "McNemar p"], rows)


SIGNIFICANCE_READERS = {"acc.strict": "S", "acc.math_verify": "MV"}


def significance_mark(p: float) -> str:
    """Paper 002's marks (§4.2, Tables 3-4): * for p < 0.01, ** for p < 0.001, on the uncorrected p-value."""
    return "" if not np.isfinite(p) else "**" if p < 0.001 else "*" if p < 0.01 else ""


def significance_table(paired: pd.DataFrame) -> str:
    """Paper 002 §4.2's table: initial accuracy, the arm's mean ± SD over seeds, the gain marked as paper 002
    marks it (one-sided paired t-test over items, uncorrected: * p < 0.01, ** p < 0.001), and, as an extra
    column, the Holm-adjusted p over every test in the table."""
    from crossed_rlvr.analysis.paired import holm

    part = paired[paired.measure.isin(SIGNIFICANCE_READERS) & ~paired.template.astype(str).str.endswith(SHARED)] \
        if len(paired) else paired
    if part.empty:
        return "_No trained arm with an initial policy under the same request._"
    part = part.assign(holm=holm(part.t_p_value.to_numpy()))
    tested = int(part.t_p_value.notna().sum())
    rows = []
    for r in part.itertuples():
        spread = "" if not np.isfinite(r.trained_sd) else f" ± {r.trained_sd:.2f}"
        rows.append([r.template, r.policy, r.request, SIGNIFICANCE_READERS[r.measure], r.n_items, r.n_seeds,
                     f"{r.initial_accuracy:.2f}", f"{r.trained_mean:.2f}{spread}",
                     signed(r.estimate) + significance_mark(r.t_p_value),
                     "—" if not np.isfinite(r.t_p_value) else f"{r.t_p_value:.3g}",
                     "—" if not np.isfinite(r.holm) else f"{r.holm:.3g}"])
    return (f"One-sided paired t-tests over items (trained better than initial; an item's accuracy is averaged "
            f"over the arm's seeds and samples), **{tested} tests**, marked as paper 002 marks them: * p < 0.01, "
            "** p < 0.001, uncorrected. The last column is the Holm-adjusted p over all of them, for a reader who "
            "wants the family corrected. A decline (paper 001's boxed arms under a hash request) is never marked: "
            "its two-sided p is in `paired_tests.csv`.\n\n" + markdown_table(
                ["Wording", "Arm", "Request", "Reader", "Items", "Seeds", "Initial (%)", "Trained mean ± SD (%)",
                 "Δ (pp)", "p (one-sided t)", "Holm p"], rows))


def sampling_table(sampling: pd.DataFrame, df: pd.DataFrame) -> str:
    """Mean ± SD across sampling runs per cell; with one run, what paper 002 §4.1 asks for instead."""
    if sampling.empty:
        n = int(df["item_id"].nunique()) if len(df) else 0
        return ("_One sample per item: no spread across sampling runs can be shown. Paper 002 §4.1 asks for many "
                f"runs on small benchmarks (here {n} items); `evaluation.samples=30` (study) or `samples=30` "
                "(crossed-eval) draws them, each with its own per-item seed, and this section then gives every "
                "cell's mean ± SD across runs; pass@k gains are in the appendix._")
    rows = [[r.template, r.policy, r.request, int(r.runs), f"{r.strict_mean:.2f} ± {r.strict_std:.2f}",
             f"{r.math_verify_mean:.2f} ± {r.math_verify_std:.2f}"] for r in sampling.itertuples()]
    return ("A run is one sample index over every item (its own per-item seeds); accuracy per run, then the "
            "mean ± SD across runs (%).\n\n" + markdown_table(["Wording", "Policy", "Request", "Runs", "Strict", "Math-Verify"],
                                                       rows))


def length_table(lengths: pd.DataFrame) -> str:
    """Response length by correctness (paper 002 §5.2): mean output tokens of correct and incorrect
    responses (the requested strict reader) per cell."""
    if lengths.empty:
        return "_Output token counts were not recorded (imported outputs)._"
    rows = [[r.template, r.policy, r.request, r.n_correct, signed(r.tokens_correct, 1, sign=False), r.n_incorrect,
             signed(r.tokens_incorrect, 1, sign=False)] for r in lengths.itertuples()]
    return markdown_table(["Wording", "Policy", "Request", "Correct", "Mean tokens", "Incorrect", "Mean tokens"], rows)


def examples_section(examples: pd.DataFrame, width: int = 240) -> str:
    """A few responses per crossed cell (paper 002 §4.1): the same items under every request, for the
    initial policy and each arm; the full texts are in ``examples.jsonl``."""
    if examples.empty:
        return "_The response files behind these scores were not found: no examples._"
    out = []
    for (template, item), grp in examples.groupby(["template", "item_id"], sort=False):
        out.append(f"\n**`{template}` · item {item}** (reference `{grp.reference.iloc[0]}`)\n")
        rows = []
        order = sorted(range(len(grp)), key=lambda k: (grp.policy.iloc[k] != "initial", grp.policy.iloc[k],
                                                        request_order(grp.request.iloc[k])))
        for r in grp.iloc[order].itertuples():
            text = r.response.replace("\n", " ⏎ ")
            text = text if len(text) <= width else text[: width - 1] + "…"
            rows.append([r.policy, r.request, "✓" if r.correct else "✗", "yes" if r.payload else "no", f"`{text}`"])
        out.append(markdown_table(["Policy", "Request", "Strict", "Payload", "Response"], rows))
    return "\n".join(out)


def wording_view(contrasts: pd.DataFrame) -> pd.DataFrame:
    """The rows that compare wordings on the same items: a template's ``@shared`` rows replace its own."""
    shared = {t[: -len(SHARED)] for t in contrasts.template.unique() if t.endswith(SHARED)}
    if not shared:
        return contrasts
    keep = contrasts[~contrasts.template.isin(shared)].copy()
    keep["template"] = keep.template.str.removesuffix(SHARED)
    return keep


def template_summary(contrasts: pd.DataFrame, cells: pd.DataFrame) -> str:
    """Table 13: per wording template, method (and checkpoint) and convention pair, the mean (SD) across
    the listed seeds of ΔP_{B,h}, I_P, I_S, I_MV. Nothing else is pooled: methods and pairs get rows."""
    rows = []
    contrasts = wording_view(contrasts)
    inter = contrasts[(contrasts.name == "interaction") & ~is_summary(contrasts)]

    def summ(values: pd.Series) -> str:
        values = values.dropna()
        if values.empty:
            return "n/a"
        sd = values.std(ddof=1) if len(values) > 1 else np.nan
        return f"{values.mean():+.2f} ({'—' if np.isnan(sd) else f'{sd:.2f}'})"

    if inter.empty:
        return "_No policy pair with both conventions under both requests._"
    keyed = inter.assign(checkpoint=inter["checkpoint"].fillna(""))
    for (task, template, method, ckpt, pair, h_side, b_side), part in keyed.groupby(
            ["task", "template", "method", "checkpoint", "request", "arm_h", "arm_b"]):
        seeds = sorted({int(s) for s in " ".join(part["seeds"].astype(str)).split()})
        # ΔP_{B,h}: the boxed-side arm of this pair under the hash-side request, same method and checkpoint
        h_request = CONVENTIONS[h_side].request if h_side in CONVENTIONS else h_side
        dp = contrasts[(contrasts.task == task) & (contrasts.template == template) & (contrasts.name == "delta_P")
                       & (contrasts.request == h_request) & ~is_summary(contrasts) & (contrasts.arm_h == b_side)
                       & (contrasts.method == method) & (contrasts.checkpoint.fillna("") == ckpt)]
        label = f"{method}@{ckpt}" if ckpt else method
        rows.append([task, template, label, pair, " ".join(map(str, seeds)), summ(dp["estimate"])] + [
            summ(part[part.measure == m]["estimate"]) for m in ("payload", "acc.strict", "acc.math_verify")])
    rows.sort(key=lambda r: (r[0], TEMPLATE_ORDER.get(r[1], 9), r[2], r[3]))
    if not rows:
        return "_No policy pair with both conventions under both requests._"
    return markdown_table(["Task", "Template", "Method", "Pair", "Seeds", "ΔP_{B,h}", "I_P", "I_S", "I_MV"], rows)


def item_contrasts_table(contrasts: pd.DataFrame, digits: int = 2) -> str:
    """App. B.4 truncation sensitivity and pass@k / coverage gains, with their paired intervals."""
    part = contrasts[(contrasts.name == "gain_untruncated") | contrasts.name.str.match(r"pass@\d+_gain$")]
    if part.empty:
        return "_No trained policy with an initial policy under the same request._"
    untr = part[part.name == "gain_untruncated"]
    gains = contrasts[contrasts.name == "gain"].set_index(["task", "template", "measure", "policy", "request"])
    same = [gains.estimate.get((r.task, r.template, r.measure, r.policy, r.request)) == r.estimate
            and r.n_items == gains.n_items.get((r.task, r.template, r.measure, r.policy, r.request))
            for r in untr.itertuples()]
    note = ""
    if len(untr) and all(same):  # nothing was cut at the length limit: the section would repeat the gains
        part = part[part.name != "gain_untruncated"]
        note = "_No response was cut at the length limit: every gain over untruncated pairs equals its gain._"
        if part.empty:
            return note
    rows = [[r.template, r.name, r.measure[4:], r.policy, r.request, r.n_items, _ci(pd.Series(r._asdict()), digits)]
            for r in part.itertuples()]
    return (note + "\n\n" if note else "") + markdown_table(
        ["Template", "Contrast", "Reader", "Policy", "Request", "Items", "Estimate [95% CI] (pp)"], rows)


def undefined_table(contrasts: pd.DataFrame) -> str:
    """Every contrast without a value, and why (a statistic it needs is undefined, or a zero denominator)."""
    part = contrasts[contrasts.estimate.isna() & (contrasts.name != "interaction_sd")]
    if part.empty:
        return "_Every contrast is defined._"
    rows = [[r.template, r.name, r.measure, r.policy, r.request, r.note] for r in part.itertuples()]
    return markdown_table(["Template", "Contrast", "Measure", "Policy", "Request", "Why n/a"], rows)


def item_worth(cells: pd.DataFrame, task: str, template: str) -> str:
    """The items behind a template's tables, and what one of them is worth (paper 002 §1)."""
    part = cells[(cells.task == task) & (cells.template == template)].drop_duplicates(["policy", "request"])
    items = sorted({int(n) for n in part.get("n_items", part["n"])})
    if not items:
        return ""
    n = items[0]
    samples = sorted({int(r.n // max(1, r.n_items)) for r in part.itertuples()})
    return (f"_{n} items per cell" + (f" ({', '.join(map(str, items))} across cells)" if len(items) > 1 else "")
            + (f", {samples[0]} samples each" if samples and samples[0] > 1 else "")
            + f": one item moves a cell's rate by {100 / n:.2f} pp._\n")


def write_report(path: Path, cells: pd.DataFrame, contrasts: pd.DataFrame, coverage: pd.DataFrame,
                 paired: pd.DataFrame, checks: dict, figures: list[Path], n_resamples: int, rng_seed: int,
                 protocol: dict | None = None, extra_sections: list[str] | None = None) -> None:
    """report.md: the answer first (headline and precision), contents, protocol card, the paper's tables
    per task and wording, then an appendix of the longer tables (each also a CSV)."""
    from crossed_rlvr.analysis.protocol import protocol_section
    from crossed_rlvr.analysis.report.headline import headline_block, precision, precision_sentence

    prec = precision(contrasts)
    d = prec.decimals
    # the generated responses: a wording's "@shared" cells re-use its own responses on a subset, never new ones
    own = cells[~cells["template"].astype(str).str.endswith(SHARED)]
    own_cells = own.drop_duplicates(["task", "template", "policy", "request"])
    n_resp = int(own_cells["n"].sum())
    parts = [
        "# Crossed study report",
        "",
        headline_block(contrasts, prec),
        "",
        (f"{n_resp:,} responses in {len(own_cells)} cells. {precision_sentence(prec, n_resamples, rng_seed)} "
         "Intervals resample items with the item indices shared across all cells and seeds of a template; they "
         "condition on the fixed checkpoints and saved responses and do not quantify training-seed uncertainty. "
         "Seed means weight seeds equally; SDs are sample SDs."),
        "",
        (f"Checks: accounting identity Δ_S = F + Δ_len holds to {checks['max_abs_identity_error']:.1e} pp; "
         f"fidelity A1 (lenient keeps every strict answer) is violated in at most "
         f"{100 * checks.get('a1_max_violation_rate', 0):.2f}% of a cell's responses. Math-Verify ran out of time "
         f"on {checks.get('math_verify_timeouts', 0)} responses (counted per cell in the counts tables; Math-Verify "
         "credits none of them)."),
        "\n## Protocol\n",
        protocol_section(protocol or {}),
    ]
    for task, template in _templates(cells):
        parts += [
            f"\n## {task} · template `{template}`\n",
            item_worth(cells, task, template),
            "\n### Requested reporting (Tables 11–12)\n",
            ("Payload categories are independent of correctness; requested-payload presence is requested-only plus "
             "both; q_c counts responses the frozen requested-convention reader can read. Lost/gained pair each "
             "response with the initial policy's response to the same item and sample.\n"),
            payload_table(cells, task, template),
            "\n### Crossed interactions (Table 10), percentage points\n",
            interaction_table(contrasts, task, template, cells, d),
            "\n### Correct counts per cell (Table 8)\n",
            "S is the strict reader of the requested convention; MV is Math-Verify on the full response.\n",
            counts_table(cells, task, template),
            "\n### Gains against the initial policy (Table 9, eq. 5), percentage points\n",
            gains_table(contrasts, task, template, d),
        ]
        strata = stratum_table(cells, task, template)
        if strata:
            parts.append(strata)
        if is_symbolic_task(task):
            parts += ["\n### MATH500 readout (App. B.4)\n", math_tables(cells, contrasts, task, template, d)]
    parts += [
        "\n## Wording templates (Table 13): mean (SD) across the listed seeds, per method and pair\n",
        ("Every wording is compared on the same items: a template that covers more items than the others (the "
         "original wording on the whole split) enters on the items all wordings share (its `@shared` cells).\n"),
        template_summary(contrasts, cells),
        *(extra_sections or []),
        ("\n## Appendix: further contrasts\n\nAttenuation ρ (eq. 7), preference D (eq. 8) with its seed mean and SD, "
         "seed mean and SD of ΔP, shares F/Δ_S and γ₀/Δ_S (§3.2, D.3.1; descriptive ratios), I_reward − I_S (D.1), "
         "method differences (D.2), conditional correctness u_c (eq. 3).\n"), other_contrasts(contrasts, d),
        "\n## Appendix: finite-budget coverage (eq. 9, 11; Table 22)\n", coverage_table(coverage),
        ("\n## Appendix: truncation sensitivity (App. B.4) and pass@k gains\n\n`gain_untruncated` repeats a gain over "
         "the item pairs in which no response was cut at the length limit (a post-hoc sensitivity check, not a "
         "replacement); `pass@k_gain` is trained minus initial per-item pass@k (k = N: coverage).\n"),
        item_contrasts_table(contrasts, d),
        "\n## Appendix: undefined contrasts\n",
        ("A contrast is n/a when a statistic it needs is undefined (e.g. the lenient reader under a JSON request) "
         "or its denominator is zero; its neighbours keep their values.\n"), undefined_table(contrasts),
    ]
    if figures:
        parts.append("\n## Figures\n")
        parts += [f"![{f.stem}](figures/{f.name})\n" for f in figures]
    path.write_text("\n".join(parts) + "\n")


def save_figure(fig: Figure, path: Path) -> Path:
    """Lay out, save at 120 dpi and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def training_section(out: Path, metrics: dict[str, list[dict]], conventions: dict[str, str]) -> str:
    """Training curves of the arms (rewarded convention's reward and requested-payload rate per update): the
    figure, written into ``out/figures``, and the report section that shows it with a table of first/last-update
    means. ``conventions``: each arm's training convention, by name (its policy's, never read from the name)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharex=True)
    rows = []
    for name, steps in sorted(metrics.items()):
        conv = conventions.get(name, "")
        reward = np.array([m.get(f"rewards/{conv}_reward/mean", np.nan) for m in steps], dtype=float)
        payload = np.array([m.get("rewards/requested_payload/mean", np.nan) for m in steps], dtype=float)
        x = np.arange(1, len(steps) + 1)
        style = "-" if conv == "hash" else "--"
        axes[0].plot(x, reward, style, label=name, alpha=0.8)
        axes[1].plot(x, payload, style, label=name, alpha=0.8)
        k = max(1, min(5, len(steps) // 3))  # first and last k updates: single updates are noisy
        rows.append([name, str(len(steps)), f"{reward[:k].mean():.3f}", f"{reward[-k:].mean():.3f}",
                     f"{reward[-k:].mean() - reward[:k].mean():+.3f}", f"{payload[:k].mean():.3f}",
                     f"{payload[-k:].mean():.3f}"])
    axes[0].set(title="training reward (rewarded convention)", xlabel="update", ylabel="mean reward")
    axes[1].set(title="requested-payload rate in training", xlabel="update", ylabel="rate")
    axes[1].legend(fontsize=7)
    fig_file = AnalysisLayout(out).figure("training_curves")
    fig_file.parent.mkdir(parents=True, exist_ok=True)
    fig_path = save_figure(fig, fig_file)
    k_note = "first/last k updates, k = min(5, updates // 3)"
    return "\n\n## Training of the arms\n\n" + markdown_table(
        ["arm", "updates", "reward first", "reward last", "change", "payload first", "payload last"], rows) + (
        f"\n\nMeans over the {k_note}; rollouts at the recipe's temperature.\n\n"
        f"![training curves](figures/{fig_path.name})\n") + per_update_table(metrics, conventions)


def per_update_table(metrics: dict[str, list[dict]], conventions: dict[str, str], most: int = 40) -> str:
    """Each arm's training reward and requested-payload rate at every update (studies of at most ``most``
    updates: longer ones are read from the figure and ``metrics.jsonl``)."""
    names = sorted(metrics)
    updates = max((len(v) for v in metrics.values()), default=0)
    if not names or updates > most:
        return ""
    rows = []
    for k in range(updates):
        row = [str(k + 1)]
        for name in names:
            conv = conventions.get(name, "")
            m = metrics[name][k] if k < len(metrics[name]) else {}
            r, d = m.get(f"rewards/{conv}_reward/mean"), m.get("rewards/requested_payload/mean")
            row.append("n/a" if r is None else f"{r:.3f}")
            row.append("n/a" if d is None else f"{d:.3f}")
        rows.append(row)
    head = ["update"] + [f"{n} {what}" for n in names for what in ("reward", "payload")]
    return "\n### Reward and requested-payload rate per update\n\n" + markdown_table(head, rows) + "\n"


def initial_section(summary: dict) -> str:
    """The warm start of the initial policy (paper 001 §2): how long, and the request-following it reached,
    measured by sampling on dev items before and after (``sft/band.py``)."""
    checks = summary.get("checks") or []
    band = summary.get("band") or {}
    lines = ["\n\n## Warm start of the initial policy\n",
             f"Fine-tuned from `{summary.get('base', 'a fresh tiny model')}` on {summary.get('examples')} content-"
             f"matched examples: {summary.get('steps')} optimizer steps (bf16 autocast: "
             f"{'yes' if summary.get('bf16') else 'no'}, {summary.get('threads')} threads; its time is in "
             "`study_summary.json` and `models/initial/sft_summary.json`, kept out of this report so that the "
             "same seeds write the same report).\n"]
    if checks:
        requests = [k for k in checks[0] if k != "step"]
        lines.append(f"Requested-payload rate of responses sampled on {band.get('items')} dev items "
                     f"(T={band.get('temperature')}, top-p {band.get('top_p')}), the band being "
                     f"[{band.get('low')}, {band.get('high')}]: "
                     + ("reached" if summary.get("reached") else "**not reached**") + ".\n")
        rows = [[str(c["step"])] + [f"{c[r]:.2f}" for r in requests] for c in checks]
        lines.append(markdown_table(["step"] + [f"{r} request" for r in requests], rows))
    return "\n".join(lines) + "\n"
