"""Response files with the counts of paper 001 Table 11 -> crossed-score -> crossed-analyze.

The analysis must reproduce Table 12's payload and q_c percentages, lost/gained and ΔP, and the
I_P and I_q columns of Table 10, to the paper's rounding (see tests/paper_tables.py for the build).
"""

import pandas as pd
import pytest

from crossed_rlvr.analysis.report.folder import analyze
from crossed_rlvr.eval.score.scoring import score_files
from crossed_rlvr.records import write_responses
from tests.paper_tables import TABLE_10, TABLE_11, TABLE_12, build_records, policy_name

# the scored tables are built once, on one worker (tests/conftest.py)
WORKER_GROUP = "paper_tables"
SHARED_FIXTURES = ("analysis", "math_analysis")


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


# ---------------------------------------------------------------- MATH500 transfer (Tables 15-17)
@pytest.fixture(scope="module")
def math_analysis(tmp_path_factory):
    from tests.paper_tables_math import build_math_records

    tmp = tmp_path_factory.mktemp("math")
    (tmp / "responses").mkdir()
    write_responses(tmp / "responses" / "math500.jsonl", build_math_records())
    scores = score_files([tmp / "responses"], tmp / "scores.parquet", workers=2, progress=False)
    out = analyze(scores, tmp / "analysis", n_resamples=200, rng_seed=20260913)
    return (pd.read_csv(out / "cells.csv").set_index(["policy", "request", "measure"])["value"],
            pd.read_csv(out / "contrasts.csv"), (out / "report.md").read_text())


def test_table_15_and_16_rebuilt_from_the_papers_counts(math_analysis):
    from tests.paper_tables_math import POLICIES, TABLE_15_16, TABLE_16_CHANGES

    cells, con, _ = math_analysis
    for (ckpt, request), (s, mv, pay, q, trunc) in TABLE_15_16.items():
        policy = POLICIES[ckpt][0]
        got = [round(100 * cells[(policy, request, m)], 1) for m in
               ("acc.strict", "acc.math_verify", "payload", "extractable", "truncated")]
        assert got == [round(100 * x / 500, 1) for x in (s, mv, pay, q, trunc)], (ckpt, request)
    gains = con[con.name == "gain"].set_index(["policy", "request", "measure"])["estimate"]
    for (ckpt, request), (ds, dmv) in TABLE_16_CHANGES.items():
        policy = POLICIES[ckpt][0]
        assert round(gains[(policy, request, "acc.strict")], 1) == ds
        assert round(gains[(policy, request, "acc.math_verify")], 1) == dmv


def test_table_17_rebuilt_from_the_papers_counts(math_analysis):
    from tests.paper_tables_math import POLICIES, TABLE_17

    cells, _, report = math_analysis
    for group, by_ckpt in TABLE_17.items():
        for ckpt, counts in by_ckpt.items():
            policy = POLICIES[ckpt][0]
            got = tuple(int(cells[(policy, "hash", f"count.{k}|{group}")])
                        for k in ("digit_only_hash", "hash_correct", "mv_correct"))
            assert got == counts, (group, ckpt)
    assert "| Nonnegative integer (n=320) | initial | 191 | 178 | 246 |" in report
    assert "| Other (n=180) | grpo-hash/s83 | 159 | 13 | 88 |" in report


@pytest.mark.long
def test_table_20_operation_strata_rebuilt_from_the_papers_counts(tmp_path):
    from tests.paper_tables_math import STRATA, TABLE_20, build_stratum_records

    (tmp_path / "responses").mkdir()
    write_responses(tmp_path / "responses" / "arith.jsonl", build_stratum_records())
    scores = score_files([tmp_path / "responses"], tmp_path / "scores.parquet", workers=2, progress=False)
    out = analyze(scores, tmp_path / "analysis", n_resamples=10, figures=False)
    cells = pd.read_csv(out / "cells.csv").set_index(["policy", "measure"])["value"]
    for state, pcts in TABLE_20.items():
        policy = "initial" if state.endswith("initial") else "grpo-hash/s83"
        got = tuple(round(100 * cells[(policy, f"acc.math_verify|stratum={s}")], 2) for s, _ in STRATA)
        assert got == pcts, state
    assert "| initial | hash | MV | 99.64 | 98.75 | 95.67 |" in (out / "report.md").read_text()


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_tables_8_and_9_gsm8k_rebuilt_from_the_papers_counts(tmp_path):
    from tests.paper_tables_math import N_GSM8K, TABLE_8_GSM8K, TABLE_9_GSM8K, build_table_8_records

    (tmp_path / "responses").mkdir()
    write_responses(tmp_path / "responses" / "gsm8k.jsonl", build_table_8_records())
    scores = score_files([tmp_path / "responses"], tmp_path / "scores.parquet", workers=2, progress=False)
    out = analyze(scores, tmp_path / "analysis", n_resamples=200, figures=False)
    cells = pd.read_csv(out / "cells.csv").set_index(["policy", "request", "measure"])["value"]
    for ckpt, counts in TABLE_8_GSM8K.items():
        policy = "initial" if ckpt == "initial" else f"grpo-hash/s{ckpt}"
        got = tuple(round(cells[(policy, r, m)] * N_GSM8K) for r in ("hash", "boxed")
                    for m in ("acc.strict", "acc.math_verify"))
        got += tuple(round(cells[(policy, r, "truncated")] * N_GSM8K) for r in ("hash", "boxed"))
        assert got == counts, ckpt
    con = pd.read_csv(out / "contrasts.csv")
    gains = con[(con.name == "gain") & (con.request == "hash")].set_index(["policy", "measure"])["estimate"]
    for seed, (strict, mv) in TABLE_9_GSM8K.items():
        assert round(gains[(f"grpo-hash/s{seed}", "acc.strict")], 2) == strict
        assert round(gains[(f"grpo-hash/s{seed}", "acc.math_verify")], 2) == mv
    report = (out / "report.md").read_text()
    assert "| initial | 1025 | 1208 | 1209 | 1213 | 2/3 |" in report  # Table 8's layout
