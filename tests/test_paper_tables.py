"""Response files with the counts of paper 001 Table 11 -> crossed-score -> crossed-analyze.

The analysis must reproduce Table 12's payload and q_c percentages, lost/gained and ΔP, and the
I_P and I_q columns of Table 10, to the paper's rounding (see tests/paper_tables.py for the build).
"""

import pandas as pd
import pytest

from crossed_rlvr.analysis.analyze import analyze
from crossed_rlvr.eval.records import write_responses
from crossed_rlvr.eval.scoring import score_files
from tests.paper_tables import TABLE_10, TABLE_11, TABLE_12, build_records, policy_name


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("paper")
    by_cell: dict = {}
    for r in build_records():
        by_cell.setdefault((r["policy"], r["request"]), []).append(r)
    (tmp / "responses").mkdir()
    for (policy, request), records in by_cell.items():
        write_responses(tmp / "responses" / f"{policy.replace('/', '_')}__{request}.jsonl", records)
    scores = score_files([tmp / "responses"], tmp / "scores.parquet", workers=2, progress=False)
    out = analyze(scores, tmp / "analysis", n_resamples=200, rng_seed=20260913)
    return pd.read_csv(out / "cells.csv"), pd.read_csv(out / "contrasts.csv"), scores


def test_table_11_counts(analysis):
    cells, _, _ = analysis
    for (seed, training, request), (req_only, other, both, neither, qc) in TABLE_11.items():
        sel = cells[(cells.policy == policy_name(seed, training)) & (cells.request == request)].set_index("measure")
        got = [sel.loc[f"count.{c}", "value"] for c in ("requested_only", "other_only", "both", "neither")]
        assert got == [req_only, other, both, neither]
        assert round(sel.loc["extractable", "value"] * 1319) == qc


def test_table_12_rates_and_changes(analysis):
    cells, _, _ = analysis
    for (seed, training, request), (payload, qc, lost, gained, dp) in TABLE_12.items():
        sel = cells[(cells.policy == policy_name(seed, training)) & (cells.request == request)].set_index("measure")
        assert round(100 * sel.loc["payload", "value"], 2) == payload
        assert round(100 * sel.loc["extractable", "value"], 2) == qc
        if lost is not None:
            assert (sel.loc["lost", "value"], sel.loc["gained", "value"]) == (lost, gained)
            assert round(sel.loc["delta_P", "value"], 2) == dp


def test_table_10_interactions(analysis):
    _, con, _ = analysis
    inter = con[con.name == "interaction"].set_index(["policy", "measure"])["estimate"]
    for seed, (ip, iq) in TABLE_10.items():
        assert round(inter[(f"grpo/s{seed}", "payload")], 2) == ip
        assert round(inter[(f"grpo/s{seed}", "extractable")], 2) == iq
    assert round(inter[("grpo/mean", "payload")], 2) == 47.08
    assert round(inter[("grpo/mean", "extractable")], 2) == 46.97
    sd = con[(con.name == "interaction_sd") & (con.measure == "payload")].estimate.iloc[0]
    assert round(sd, 2) == 31.10
