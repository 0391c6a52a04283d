"""The analysis figures (paper 001 Fig. 1a, 1b, 2a, 2b, 3b/4), one function each; ``write_figures`` draws
those the input has data for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from crossed_rlvr.analysis.report.document import (
    TEMPLATE_ORDER,
    is_summary,
    requests_in_order,
    wording_view,
)
from crossed_rlvr.analysis.report.document import save_figure as save
from crossed_rlvr.layout import AnalysisLayout
from crossed_rlvr.rewards.conventions import MARKER_PAIR


def payload_by_seed(cells: pd.DataFrame, files: AnalysisLayout) -> Path | None:
    """Fig. 1a: requested-payload presence per method and seed against the initial policy."""
    import matplotlib.pyplot as plt

    from crossed_rlvr.analysis.cells import with_policy_columns

    orig = cells[cells.template == "original"] if (cells.template == "original").any() else cells
    pay = orig[orig.measure == "payload"]
    requests = [r for r in MARKER_PAIR if r in set(pay.request)]
    trained = pay[pay.training_convention.isin(list(MARKER_PAIR))]
    if requests and not trained.empty:
        # One slot per method and seed (final policies only): GRPO and SFT arms of one seed are not merged.
        trained = with_policy_columns(trained)
        trained = trained[trained.checkpoint == ""]
        slots = sorted({(m, int(sd)) for m, sd in zip(trained.method, trained.train_seed)})
        fig, axes = plt.subplots(1, len(requests), figsize=(max(5, 1.2 * len(slots) + 2) * len(requests), 3.6),
                                 sharey=True, squeeze=False)
        for ax, req in zip(axes[0], requests):
            sub = trained[trained.request == req]
            init = pay[(pay.request == req) & (pay.policy == "initial")]["value"]
            for k, (conv, color) in enumerate([("hash", "tab:blue"), ("boxed", "tab:orange")]):
                vals = [sub[(sub.training_convention == conv) & (sub.method == m) & (sub.train_seed == sd)]["value"]
                        for m, sd in slots]
                ys = [100 * v.iloc[0] if len(v) else np.nan for v in vals]
                ax.bar(np.arange(len(slots)) + (k - 0.5) * 0.38, ys, width=0.38, color=color, label=f"{conv}-trained")
            if len(init):
                ax.axhline(100 * init.iloc[0], color="black", ls="--", lw=1, label="initial")
            ax.set_xticks(range(len(slots)), [f"{m} s{sd}" for m, sd in slots])
            ax.set_xlabel("method and training seed")
            ax.set_title(f"{req} request")
            ax.set_ylim(0, 105)
        axes[0][0].set_ylabel("requested-payload presence (%)")
        axes[0][-1].legend(loc="lower right", fontsize=8)
        fig.suptitle("Requested-payload presence per seed against the initial policy (cf. Fig. 1a)")
        return save(fig, files.figure("fig1a_payload_by_seed"))
    return None


def interactions(contrasts: pd.DataFrame, files: AnalysisLayout) -> Path | None:
    """Fig. 2a: strict vs Math-Verify crossed interactions per seed."""
    import matplotlib.pyplot as plt

    inter = contrasts[(contrasts.name == "interaction") & contrasts.measure.isin(["acc.strict", "acc.math_verify"])
                      & ~is_summary(contrasts) & (contrasts.request == "hashxboxed")]
    inter_o = inter[inter.template == "original"] if (inter.template == "original").any() else inter
    if not inter_o.empty:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        labels = sorted(inter_o.policy.unique())
        for k, (m, name, color) in enumerate([("acc.strict", "strict I_S", "tab:red"),
                                              ("acc.math_verify", "Math-Verify I_MV", "tab:green")]):
            sub = inter_o[inter_o.measure == m].set_index("policy").reindex(labels)
            x = np.arange(len(labels)) + (k - 0.5) * 0.25
            yerr = np.vstack([sub.estimate - sub.ci_low, sub.ci_high - sub.estimate])
            ax.errorbar(x, sub.estimate, yerr=np.nan_to_num(yerr), fmt="o", color=color, capsize=3, label=name)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(range(len(labels)), labels, rotation=20)
        ax.set_ylabel("interaction (pp), 95% CI")
        ax.set_title("Strict vs Math-Verify crossed interactions per seed (cf. Fig. 2a)")
        ax.legend(fontsize=8)
        return save(fig, files.figure("fig2a_interactions"))
    return None


def preference(contrasts: pd.DataFrame, files: AnalysisLayout) -> Path | None:
    """Fig. 2b: the prompted convention preference D per policy, with paired intervals."""
    import matplotlib.pyplot as plt

    pref = contrasts[(contrasts.name == "preference_D") & (contrasts.template == "original")]
    if len(pref) > 1:  # Fig. 2b: prompted convention preference D per policy, with paired intervals
        fig, ax = plt.subplots(figsize=(max(5, 0.7 * len(pref) + 2), 3.6))
        order = list(pref.policy)
        colors = ["black" if p == "initial" else ("tab:blue" if "hash" in p else "tab:orange") for p in order]
        yerr = np.vstack([pref.estimate - pref.ci_low, pref.ci_high - pref.estimate])
        ax.bar(range(len(order)), pref.estimate, color=colors, yerr=np.nan_to_num(yerr), capsize=3)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(range(len(order)), order, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("100 D = strict(hash req.) − strict(boxed req.)")
        ax.set_title("Prompted convention preference D per policy (cf. Fig. 2b)")
        return save(fig, files.figure("fig2b_preference"))
    return None


def gains_by_reader(contrasts: pd.DataFrame, files: AnalysisLayout) -> Path | None:
    """Fig. 3b / 4: gains by reader and request, on the same saved responses."""
    import matplotlib.pyplot as plt

    gains = contrasts[(contrasts.name == "gain") & contrasts.measure.isin(["acc.strict", "acc.math_verify"])
                      & (contrasts.template == "original") & ~is_summary(contrasts)]
    if not gains.empty:  # Fig. 3b / 4: gains by reader and request, same saved responses
        requests = requests_in_order(gains.request)
        fig, axes = plt.subplots(1, len(requests), figsize=(5 * len(requests), 3.6), sharey=True, squeeze=False)
        for ax, req in zip(axes[0], requests):
            sub = gains[gains.request == req]
            labels = sorted(sub.policy.unique())
            for k, (m, name, color) in enumerate([("acc.strict", "strict", "tab:red"),
                                                  ("acc.math_verify", "Math-Verify", "tab:green")]):
                part = sub[sub.measure == m].set_index("policy").reindex(labels)
                yerr = np.vstack([part.estimate - part.ci_low, part.ci_high - part.estimate])
                ax.errorbar(np.arange(len(labels)) + (k - 0.5) * 0.25, part.estimate, yerr=np.nan_to_num(yerr),
                            fmt="o", color=color, capsize=3, label=name)
            ax.axhline(0, color="black", lw=0.8)
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
            ax.set_title(f"{req} request")
        axes[0][0].set_ylabel("gain over the initial policy (pp), 95% CI")
        axes[0][-1].legend(fontsize=8)
        fig.suptitle("Gains depend on the request and the reader (cf. Fig. 3b, 4)")
        return save(fig, files.figure("fig3b_gains_by_reader"))
    return None


def templates(contrasts: pd.DataFrame, files: AnalysisLayout) -> Path | None:
    """Fig. 1b: the boxed arms' change of hash payload per wording template."""
    import matplotlib.pyplot as plt

    wording = wording_view(contrasts)
    dpb = wording[(wording.name == "delta_P") & (wording.request == "hash") & ~is_summary(wording)
                  & wording.policy.str.contains("boxed")]
    if dpb.template.nunique() > 1:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        order = sorted(dpb.template.unique(), key=lambda t: TEMPLATE_ORDER.get(t, 9))
        for policy, rows in dpb.groupby("policy"):
            sub = rows.set_index("template").reindex(order)
            ax.plot(order, sub.estimate, marker="o", label=policy)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_ylabel("ΔP_{B,h}: boxed-trained − initial hash payload (pp)")
        ax.set_title("Change per wording template (cf. Fig. 1b)")
        ax.legend(fontsize=7)
        return save(fig, files.figure("fig1b_templates"))
    return None


def write_figures(cells: pd.DataFrame, contrasts: pd.DataFrame, files: AnalysisLayout) -> list[Path]:
    """Every figure the input has data for, in the report's order, into the analysis folder's figures."""
    import matplotlib

    matplotlib.use("Agg")
    files.figures.mkdir(parents=True, exist_ok=True)
    made = [payload_by_seed(cells, files), interactions(contrasts, files), preference(contrasts, files),
            gains_by_reader(contrasts, files), templates(contrasts, files)]
    return [p for p in made if p is not None]
