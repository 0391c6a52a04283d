"""crossed-analyze on hand-built scores with known answers (paper 001 §2, App. B.2, C.3, D.2)."""

import json

import numpy as np
import pandas as pd
import pytest

from crossed_rlvr.analysis.analyze import PART_COLUMNS, AnalysisError, read_contrasts
from crossed_rlvr.analysis.bootstrap import resample_stats
from crossed_rlvr.analysis.cells import build_groups, derive_measures, policy_table
from crossed_rlvr.analysis.cli import main as analyze_main
from crossed_rlvr.analysis.contrasts import build_contrasts, evaluate
from crossed_rlvr.analysis.coverage import mcnemar_exact, pass_at_k
from crossed_rlvr.analysis.report.folder import analyze
from tests.analysis_fixtures import cell, write

# the analysed fixture is built once, on one worker (tests/conftest.py)
WORKER_GROUP = "analysis"
SHARED_FIXTURES = ("result",)


def study(tmp_path):
    rows = [
        cell("initial", "hash", [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], mv=[1, 1, 1, 0]),
        cell("initial", "boxed", [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]),
        cell("grpo-hash/s1", "hash", [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], seed=1),
        cell("grpo-hash/s1", "boxed", [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], seed=1),
        cell("grpo-boxed/s1", "hash", [0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], seed=1),
        cell("grpo-boxed/s1", "boxed", [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], seed=1),
        cell("grpo-answer_only/s1", "hash", [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], seed=1),
        cell("grpo-hash/s2", "hash", [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], seed=2),
        cell("grpo-hash/s2", "boxed", [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], seed=2),
        cell("grpo-boxed/s2", "hash", [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1], seed=2),
        cell("grpo-boxed/s2", "boxed", [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], seed=2),
    ]
    return write(tmp_path, rows)


def get(contrasts, name, measure, policy, request=None):
    sel = contrasts[(contrasts.name == name) & (contrasts.measure == measure) & (contrasts.policy == policy)]
    if request is not None:
        sel = sel[sel.request == request]
    assert len(sel) == 1, (name, measure, policy, request, len(sel))
    return sel.iloc[0]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("study")
    out = analyze(study(tmp), tmp / "out", n_resamples=500, rng_seed=7)
    return out, pd.read_csv(out / "cells.csv"), pd.read_csv(out / "contrasts.csv")


def test_interactions_per_seed_mean_and_sd(result):
    _, _, con = result
    assert get(con, "interaction", "payload", "grpo/s1").estimate == pytest.approx(75.0)
    assert get(con, "interaction", "acc.strict", "grpo/s1").estimate == pytest.approx(125.0)
    assert get(con, "interaction", "payload", "grpo/s2").estimate == pytest.approx(0.0)
    assert get(con, "interaction", "payload", "grpo/mean").estimate == pytest.approx(37.5)
    sd = get(con, "interaction_sd", "payload", "grpo/sd")
    assert sd.estimate == pytest.approx(np.std([75.0, 0.0], ddof=1)) and np.isnan(sd.ci_low)
    row = get(con, "interaction", "payload", "grpo/s1")
    assert row.ci_low <= row.estimate <= row.ci_high and row.n_resamples == 500 and row.rng_seed == 7


def test_gains_reader_gap_and_identity(result):
    out, _, con = result
    ds = get(con, "gain", "acc.strict", "grpo-hash/s1", "hash").estimate
    dl = get(con, "gain", "acc.lenient", "grpo-hash/s1", "hash").estimate
    f = get(con, "reader_gap_reduction", "acc.strict|acc.lenient", "grpo-hash/s1", "hash").estimate
    assert (ds, dl, f) == pytest.approx((50.0, 0.0, 50.0))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["checks"]["max_abs_identity_error"] < 1e-12
    assert manifest["checks"]["a1_max_violation_rate"] == 0.0


def test_payload_change_lost_gained(result):
    _, cells, con = result
    sel = cells[(cells.policy == "grpo-boxed/s1") & (cells.request == "hash")].set_index("measure")["value"]
    assert (sel["lost"], sel["gained"], sel["delta_P"]) == (2, 1, -25.0)
    assert sel["payload"] == 0.25 and sel["count.requested_only"] == 1 and sel["count.neither"] == 3
    assert get(con, "delta_P", "payload", "grpo-boxed/s1", "hash").estimate == pytest.approx(-25.0)


def test_attenuation_and_preference(result):
    _, _, con = result
    assert get(con, "attenuation_reward", "acc.strict", "grpo/s1").estimate == pytest.approx(0.5)
    assert get(con, "attenuation_convention", "acc.strict", "grpo/s1").estimate == pytest.approx(0.5)
    assert get(con, "preference_D", "acc.strict", "initial").estimate == pytest.approx(-50.0)
    assert get(con, "preference_D", "acc.strict", "grpo-hash/s1").estimate == pytest.approx(25.0)
    assert get(con, "arm_to_arm_D", "acc.strict", "grpo/s1").estimate == pytest.approx(125.0)


def test_outputs_and_report(result):
    out, _, _ = result
    report = (out / "report.md").read_text()
    for heading in ("Requested reporting (Tables 11–12)", "Crossed interactions (Table 10)", "Table 8", "Table 9",
                    "Attenuation", "coverage", "paired t-tests over items"):
        assert heading.lower() in report.lower()
    assert (out / "figures" / "fig1a_payload_by_seed.png").stat().st_size > 1000
    assert (out / "figures" / "fig2b_preference.png").stat().st_size > 1000
    assert (out / "figures" / "fig3b_gains_by_reader.png").stat().st_size > 1000
    assert (out / "figures" / "fig2a_interactions.png").stat().st_size > 1000
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["inputs"][0]["sha256"]) == 64 and "report.md" in manifest["outputs"]


def test_same_seed_same_files(tmp_path):
    path = study(tmp_path)
    a = analyze(path, tmp_path / "a", n_resamples=300, rng_seed=3, figures=False)
    b = analyze(path, tmp_path / "b", n_resamples=300, rng_seed=3, figures=False)
    for name in ("cells.csv", "contrasts.csv", "coverage.csv", "report.md"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_refuses_to_replace_output(tmp_path, capsys):
    path = study(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert analyze_main([str(path), "-o", str(out), "--resamples", "10"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err and (out / "keep.txt").read_text() == "mine"
    with pytest.raises(AnalysisError, match="no such scores table"):
        analyze(tmp_path / "missing.parquet", tmp_path / "x")
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"policy": ["x"]}).to_parquet(bad)
    with pytest.raises(AnalysisError, match="lacks column 'task'"):
        analyze(bad, tmp_path / "y")


def test_identity_holds_on_random_data(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for policy, seed in (("initial", None), ("grpo-hash/s1", 1), ("grpo-boxed/s1", 1), ("grpo-hash/s2", 2)):
        for request in ("hash", "boxed"):
            strict = rng.random(200) < rng.random()
            lenient = strict | (rng.random(200) < 0.5)
            rows.append(cell(policy, request, rng.random(200) < 0.7, strict, lenient, seed=seed))
    path = write(tmp_path, rows)
    df, measures = derive_measures(pd.read_parquet(path))
    (group,) = build_groups(df, measures)
    contrasts = build_contrasts(group, policy_table(df))
    draws = evaluate(contrasts, resample_stats(group.flat(), 200, 1))
    index = {(c.name, c.measure, c.policy, c.request): j for j, c in enumerate(contrasts)}
    checked = 0
    for (name, _, policy, request), j in index.items():
        if name == "reader_gap_reduction":
            ds = draws[:, index[("gain", "acc.strict", policy, request)]]
            dl = draws[:, index[("gain", "acc.lenient", policy, request)]]
            assert np.max(np.abs(ds - (draws[:, j] + dl))) < 1e-12
            checked += 1
    assert checked == 6


def test_bootstrap_matches_a_per_resample_loop():
    rng = np.random.default_rng(1)
    x = rng.random((5, 50))
    fast = resample_stats(x, 300, 11)
    # The same draws, one resample at a time.
    gen = np.random.default_rng(11)
    idx = gen.integers(0, 50, size=(300, 50))
    slow = np.stack([x[:, i].mean(axis=1) for i in idx])
    assert np.allclose(fast, slow, atol=1e-12)


def test_pass_at_k_and_mcnemar():
    curve = pass_at_k(np.array([0, 1, 4]), 4)
    assert curve[0] == pytest.approx((0 + 0.25 + 1) / 3)
    assert curve[1] == pytest.approx((0 + 0.5 + 1) / 3)
    assert curve[3] == pytest.approx(2 / 3)
    # Table 22 of paper 001: lost/gained counts and exact McNemar p-values.
    assert mcnemar_exact(5, 49) == pytest.approx(3.89e-10, rel=1e-3)
    assert mcnemar_exact(10, 5) == pytest.approx(0.302, abs=5e-4)
    assert mcnemar_exact(10, 6) == pytest.approx(0.454, abs=5e-4)
    assert mcnemar_exact(10, 3) == pytest.approx(0.092, abs=5e-4)


def test_coverage_and_paired_tests_from_samples(tmp_path):
    from scipy.stats import ttest_rel, wilcoxon

    # 6 items x 4 samples; initial solves items 0-2 at least once, the trained arm items 1-5.
    init = [1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1] + [0] * 12
    trained = [0] * 4 + [1, 1, 0, 0] + [1, 0, 0, 0] + [1, 1, 1, 1] + [0, 0, 0, 1] + [1, 1, 0, 0]
    rows = [cell("initial", "hash", init, init, samples=4), cell("grpo-hash/s1", "hash", trained, trained, seed=1,
                                                                  samples=4)]
    out = analyze(write(tmp_path, rows), tmp_path / "out", n_resamples=50, figures=False)
    cov = pd.read_csv(out / "coverage.csv")
    row = cov[(cov.measure == "acc.strict")].iloc[0]
    assert (row.lost, row.gained, row.k) == (1, 3, 4)
    assert row.p_value == pytest.approx(mcnemar_exact(1, 3))
    cells = pd.read_csv(out / "cells.csv")
    p4 = cells[(cells.measure == "pass@4.strict") & (cells.policy == "initial")].value.iloc[0]
    assert p4 == pytest.approx(3 / 6)
    paired = pd.read_csv(out / "paired_tests.csv")
    prow = paired[(paired.measure == "acc.strict")].iloc[0]
    a0 = np.array(init).reshape(6, 4).mean(1)
    a1 = np.array(trained).reshape(6, 4).mean(1)
    assert prow.t_p_value == pytest.approx(ttest_rel(a1, a0, alternative="greater").pvalue)
    assert prow.wilcoxon_p_value == pytest.approx(wilcoxon(a1, a0, alternative="greater").pvalue)
    assert prow.estimate == pytest.approx(100 * (a1 - a0).mean())
    assert prow.t_p_two_sided == pytest.approx(ttest_rel(a1, a0).pvalue)
    assert prow.wilcoxon_p_two_sided == pytest.approx(wilcoxon(a1, a0).pvalue)


def test_paired_tests_flag_a_decline_and_equal_differences():
    from crossed_rlvr.analysis.paired import paired_tests

    ones, zeros = np.ones(8), np.zeros(8)
    decline = paired_tests(zeros, ones)  # every item lost: one-sided "greater" cannot see it
    assert decline["w_p"] == pytest.approx(1.0) and decline["w_p_two"] == pytest.approx(2 / 2**8)
    gain = paired_tests(ones, zeros)  # every difference equal and nonzero: Wilcoxon is defined
    assert gain["w_p"] == pytest.approx(1 / 2**8) and np.isnan(gain["t"])
    same = paired_tests(ones, ones)
    assert same["w_p"] == same["w_p_two"] == same["t_p_two"] == 1.0


@pytest.mark.long
def test_templates_figure_and_wandb_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    rows = []
    for template, shift in (("original", 0), ("para_a", 1)):
        rows += [
            cell("initial", "hash", [1, 1, 1, 0], [1, 1, 0, 0], template=template),
            cell("initial", "boxed", [1, 1, 1, 1], [1, 1, 1, 0], template=template),
            cell("grpo-hash/s1", "hash", [1, 1, 1, 1], [1, 1, 1, 0], seed=1, template=template),
            cell("grpo-hash/s1", "boxed", [1, 1, 1, 1], [1, 1, 0, 0], seed=1, template=template),
            cell("grpo-boxed/s1", "hash", [0, 0, shift, 1], [0, 0, 0, 0], seed=1, template=template),
            cell("grpo-boxed/s1", "boxed", [1, 1, 1, 1], [1, 1, 1, 1], seed=1, template=template),
        ]
    out = analyze(write(tmp_path, rows), tmp_path / "out", n_resamples=50, tracking="offline")
    assert (out / "figures" / "fig1b_templates.png").exists()
    report = (out / "report.md").read_text()
    assert "| t | para_a | grpo | hashxboxed | 1 | -25.00 (—)" in report
    assert "| t | original | grpo | hashxboxed | 1 | -50.00 (—)" in report
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].rglob("*.wandb"))


# ---------------------------------------------------------------- analysis that cannot silently lie
HB = [  # I_P = 100 [(1 - 0) - (0 - 1)] / ... per item: hash arm follows hash only, boxed arm boxed only
    cell("initial", "hash", [1, 1, 0, 0], [1, 1, 0, 0]), cell("initial", "boxed", [1, 1, 0, 0], [1, 1, 0, 0]),
    cell("grpo-hash/s1", "hash", [1, 1, 1, 1], [1, 1, 1, 1], seed=1),
    cell("grpo-hash/s1", "boxed", [0, 0, 0, 0], [0, 0, 0, 0], seed=1),
    cell("grpo-boxed/s1", "hash", [0, 0, 0, 0], [0, 0, 0, 0], seed=1),
    cell("grpo-boxed/s1", "boxed", [1, 1, 1, 1], [1, 1, 1, 1], seed=1),
]


def test_an_undefined_cell_does_not_blank_its_neighbours(tmp_path):
    """A JSON cell of the initial policy (no lenient reader, no A1) beside a hash/boxed study: I_P stays +200
    with a real interval; before, NaN x 0 turned it into NaN while the bootstrap still printed an interval."""
    out = analyze(write(tmp_path, [*HB, cell("initial", "json", [1, 0, 0, 0], [1, 0, 0, 0])]), tmp_path / "o",
                  n_resamples=200, figures=False)
    con = pd.read_csv(out / "contrasts.csv")
    row = get(con, "interaction", "payload", "grpo/s1")
    assert row.estimate == pytest.approx(200.0) and row.ci_low == row.ci_high == pytest.approx(200.0)
    assert get(con, "interaction", "acc.lenient", "grpo/s1").estimate == pytest.approx(200.0)
    # every contrast of the hash/boxed design is what it is without the JSON cell, interval included
    alone = pd.read_csv(analyze(write(tmp_path, HB, "hb.parquet"), tmp_path / "hb", n_resamples=200,
                                figures=False) / "contrasts.csv")
    key = ["name", "measure", "policy", "request"]
    both = alone.merge(con, on=key, suffixes=("", "_json"), how="left")
    for col in ("estimate", "ci_low", "ci_high"):
        assert np.allclose(both[col], both[f"{col}_json"], equal_nan=True), col


def test_json_by_xml_study_has_every_defined_contrast_finite(tmp_path):
    """Paper 001 App. D.3: JSON x XML arms. Payload, strict and reward contrasts are defined; the lenient reader
    is not (n/a with the reason), and an undefined contrast gets no interval, never a fake [0, 0]."""
    rows = [cell("initial", "json", [1, 0, 0, 0], [1, 0, 0, 0]), cell("initial", "xml", [1, 1, 0, 0], [1, 1, 0, 0]),
            cell("grpo-json/s1", "json", [1, 1, 1, 1], [1, 1, 1, 0], seed=1),
            cell("grpo-json/s1", "xml", [1, 0, 0, 0], [1, 0, 0, 0], seed=1),
            cell("grpo-xml/s1", "json", [0, 0, 0, 0], [0, 0, 0, 0], seed=1),
            cell("grpo-xml/s1", "xml", [1, 1, 1, 1], [1, 1, 1, 1], seed=1)]
    out = analyze(write(tmp_path, rows), tmp_path / "o", n_resamples=200, figures=False)
    con = pd.read_csv(out / "contrasts.csv")
    # I_P = 100 [(1 - 0) - (0.25 - 1)] = 175
    assert get(con, "interaction", "payload", "grpo/s1", "jsonxxml").estimate == pytest.approx(175.0)
    assert get(con, "interaction", "acc.strict", "grpo/s1", "jsonxxml").estimate == pytest.approx(150.0)
    assert get(con, "gain", "acc.strict", "grpo-json/s1", "json").estimate == pytest.approx(50.0)
    lenient = get(con, "interaction", "acc.lenient", "grpo/s1", "jsonxxml")
    assert np.isnan(lenient.estimate) and np.isnan(lenient.ci_low) and np.isnan(lenient.ci_high)
    assert lenient.note == "acc.lenient of grpo-json/s1 under the json request is undefined"
    defined = con[~con.measure.isin(["acc.lenient"]) & ~con.name.str.endswith("_sd") & (con.unit != "ratio")]
    assert defined.estimate.notna().all() and (defined.ci_low.notna() == (defined.n_resamples > 0)).all()
    ratios = con[(con.unit == "ratio") & con.estimate.isna()]  # u_c of a cell nothing in which is readable
    assert set(ratios.note) == {"its denominator, q_c (no response the strict reader can read), is zero"}
    report = (out / "report.md").read_text()
    assert "n/a" in report and "acc.lenient of grpo-json/s1 under the json request is undefined" in report


def test_bootstrap_keeps_undefined_statistics_undefined():
    flat = np.array([[1.0, 0.0, 1.0], [np.nan, np.nan, np.nan], [0.0, np.nan, 1.0]])
    draws = resample_stats(flat, 50, 3)
    assert np.isfinite(draws[:, 0]).all() and np.isnan(draws[:, 1:]).all()


def test_each_contrast_row_stores_its_parts(result):
    """A row's method, seed slot, checkpoint and arms are columns written where the contrast is made, so that no
    reader splits ``grpo/s1`` or ``hashxboxed`` back into them."""
    out, _, _ = result
    con = read_contrasts(out / "contrasts.csv")
    row = get(con, "interaction", "payload", "grpo/s1")
    assert (row.method, row.seed, row.checkpoint, row.arm_h, row.arm_b) == ("grpo", "s1", "", "hash", "boxed")
    sd = get(con, "interaction_sd", "payload", "grpo/sd")
    assert (sd.method, sd.seed, sd.arm_h, sd.arm_b) == ("grpo", "sd", "hash", "boxed")
    arm = get(con, "delta_P", "payload", "grpo-boxed/s2", "hash")  # one arm's row: the policy table's parts
    assert (arm.method, arm.seed, arm.checkpoint, arm.arm_h, arm.arm_b) == ("grpo", "s2", "", "boxed", "")
    first = get(con, "preference_D", "acc.strict", "initial")
    assert (first.method, first.seed, first.arm_h) == ("initial", "", "")


def test_a_contrasts_table_of_the_older_shape_reads_with_its_parts(result, tmp_path):
    """contrasts.csv as it was written before its parts were stored (no method ... arm_b columns): read, it gets
    them from its names, equal to what is stored now for every pair and every trained policy's row."""
    out, _, _ = result
    now = read_contrasts(out / "contrasts.csv")
    old = tmp_path / "contrasts.csv"
    pd.read_csv(out / "contrasts.csv").drop(columns=list(PART_COLUMNS)).to_csv(old, index=False)
    migrated = read_contrasts(old)
    assert list(migrated.columns) == list(now.columns)
    pd.testing.assert_frame_equal(migrated, now)


def test_records_of_the_older_shape_give_the_same_policy_table():
    """Scores made from records written before the policy's parts were stored (no method, checkpoint columns):
    the policy table reads the parts from the names, the same as the stored ones."""
    from crossed_rlvr.names import legacy_policy_parts

    rows = [{"policy": p, "training_convention": c, "train_seed": s,
             **dict(zip(("method", "checkpoint"), legacy_policy_parts(p, c), strict=True))}
            for p, c, s in (("initial", "initial", None), ("grpo-hash/s1", "hash", 1), ("grpo-boxed/s1@step30", "boxed", 1),
                            ("sft_boxed/s2", "boxed", 2))]
    stored = policy_table(pd.DataFrame(rows))
    older = policy_table(pd.DataFrame(rows).drop(columns=["method", "checkpoint"]))
    pd.testing.assert_frame_equal(stored, older[stored.columns])
    assert list(stored.method) == ["grpo", "grpo", "initial", "sft"]
    assert list(stored.checkpoint) == ["step30", "", "", ""]


def test_two_checkpoints_of_one_arm_are_separate_arms(tmp_path):
    """grpo-boxed/s1@step300 beside grpo-boxed/s1: its own rows, never a silent replacement (before: I_P 0.0)."""
    ckpt = [cell("grpo-hash/s1@step300", "hash", [1, 1, 0, 0], [1, 1, 0, 0], seed=1, convention="hash"),
            cell("grpo-hash/s1@step300", "boxed", [1, 1, 0, 0], [1, 1, 0, 0], seed=1, convention="hash"),
            cell("grpo-boxed/s1@step300", "hash", [1, 1, 0, 0], [1, 1, 0, 0], seed=1, convention="boxed"),
            cell("grpo-boxed/s1@step300", "boxed", [1, 1, 0, 0], [1, 1, 0, 0], seed=1, convention="boxed")]
    out = analyze(write(tmp_path, [*HB, *ckpt]), tmp_path / "o", n_resamples=100, figures=False)
    con = pd.read_csv(out / "contrasts.csv", dtype={"seeds": str})
    assert get(con, "interaction", "payload", "grpo/s1").estimate == pytest.approx(200.0)
    assert get(con, "interaction", "payload", "grpo/s1@step300").estimate == pytest.approx(0.0)
    assert get(con, "interaction", "payload", "grpo/mean").seeds == "1"
    step = get(con, "interaction", "payload", "grpo/s1@step300")
    assert (step.method, step.seed, step.checkpoint) == ("grpo", "s1", "step300")
    paired = pd.read_csv(out / "paired_tests.csv")
    assert set(paired.policy) == {"grpo-hash", "grpo-boxed", "grpo-hash@step300", "grpo-boxed@step300"}
    assert (paired.n_seeds == 1).all()


def test_two_policies_in_one_slot_are_refused_by_name(tmp_path):
    clash = [cell("grpo_boxed/s1", "hash", [0, 0, 0, 0], [0, 0, 0, 0], seed=1, convention="boxed"),
             cell("grpo_boxed/s1", "boxed", [1, 1, 1, 1], [1, 1, 1, 1], seed=1, convention="boxed")]
    with pytest.raises(ValueError, match="'grpo-boxed/s1' and 'grpo_boxed/s1' are both grpo arms of convention boxed"):
        analyze(write(tmp_path, [*HB, *clash]), tmp_path / "o", n_resamples=10, figures=False)
    assert not (tmp_path / "o").exists()  # nothing written


def test_wording_summary_never_pools_methods(tmp_path):
    """GRPO I_P = +200 and SFT 0: two rows with their seeds listed (before: '-50.00 (70.71)' as one 'seed' mean)."""
    sft = [cell("sft-hash/s1", "hash", [1, 1, 0, 0], [1, 1, 0, 0], seed=1),
           cell("sft-hash/s1", "boxed", [1, 1, 0, 0], [1, 1, 0, 0], seed=1),
           cell("sft-boxed/s1", "hash", [1, 1, 0, 0], [1, 1, 0, 0], seed=1),
           cell("sft-boxed/s1", "boxed", [1, 1, 0, 0], [1, 1, 0, 0], seed=1)]
    out = analyze(write(tmp_path, [*HB, *sft]), tmp_path / "o", n_resamples=50, figures=False)
    report = (out / "report.md").read_text()
    assert "| t | original | grpo | hashxboxed | 1 | -50.00 (—) | +200.00 (—) |" in report
    assert "| t | original | sft | hashxboxed | 1 | +0.00 (—) | +0.00 (—) |" in report


def test_remaining_paper_quantities_with_known_values(tmp_path):
    """u_c (eq. 3), F/Δ_S and γ₀/Δ_S (§3.2, D.3.1), seed mean/SD of ΔP and arm-to-arm D, I_reward − I_S (D.1)
    and method differences (D.2), each with the value worked out by hand."""
    rows = [
        cell("initial", "hash", [1, 1, 0, 0], [1, 0, 0, 0], lenient=[1, 1, 0, 0]),
        cell("initial", "boxed", [1, 1, 0, 0], [1, 1, 0, 0]),
        cell("grpo-hash/s1", "hash", [1, 1, 1, 1], [1, 1, 1, 0], lenient=[1, 1, 1, 1], seed=1),
        cell("grpo-hash/s1", "boxed", [0, 0, 0, 0], [0, 0, 0, 0], seed=1),
        cell("grpo-boxed/s1", "hash", [0, 0, 0, 0], [0, 0, 0, 0], seed=1),
        cell("grpo-boxed/s1", "boxed", [1, 1, 1, 1], [1, 1, 1, 1], seed=1),
        cell("grpo-hash/s2", "hash", [1, 1, 1, 0], [1, 1, 0, 0], seed=2),
        cell("grpo-hash/s2", "boxed", [0, 0, 0, 0], [0, 0, 0, 0], seed=2),
        cell("grpo-boxed/s2", "hash", [0, 0, 0, 0], [0, 0, 0, 0], seed=2),
        cell("grpo-boxed/s2", "boxed", [1, 1, 1, 1], [1, 1, 1, 1], seed=2),
        *[cell(f"sft-{c}/s{s}", r, [1, 1, 0, 0], [1, 1, 0, 0], seed=s) for s in (1, 2) for c in ("hash", "boxed")
          for r in ("hash", "boxed")],
    ]
    out = analyze(write(tmp_path, rows), tmp_path / "o", n_resamples=200, figures=False)
    con = pd.read_csv(out / "contrasts.csv", dtype={"seeds": str})
    # u_c = Acc_strict / q: initial hash reads 2 of 4 (payload), 1 right
    assert get(con, "conditional_correctness", "acc.strict|extractable", "initial", "hash").estimate == 0.5
    # Δ_S = 50, Δ_len = 50, γ0 = 25: F = 0, F/Δ_S = 0, γ0/Δ_S = 0.5
    assert get(con, "share_F", "acc.strict|acc.lenient", "grpo-hash/s1", "hash").estimate == pytest.approx(0.0)
    assert get(con, "share_gamma0", "acc.strict|acc.lenient", "grpo-hash/s1", "hash").estimate == pytest.approx(0.5)
    # ΔP of the hash arm under the hash request: +50 (s1), +25 (s2)
    mean = get(con, "delta_P", "payload", "grpo-hash/mean", "hash")
    assert mean.estimate == pytest.approx(37.5) and mean.seeds == "1 2" and mean.ci_low <= 37.5 <= mean.ci_high
    assert get(con, "delta_P_sd", "payload", "grpo-hash/sd", "hash").estimate == pytest.approx(
        np.std([50, 25], ddof=1))
    # arm-to-arm D: D(H) - D(B), D = 100 (Acc_hash - Acc_boxed): s1 (75 - 0) - (0 - 100) = 175, s2 150
    assert get(con, "arm_to_arm_D", "acc.strict", "grpo/mean").estimate == pytest.approx(162.5)
    assert get(con, "arm_to_arm_D_sd", "acc.strict", "grpo/sd").estimate == pytest.approx(np.std([175, 150], ddof=1))
    # the reward program reads like the strict reader in these fixtures: I_reward - I_S = 0
    assert get(con, "interaction_difference", "acc.reward-acc.strict", "grpo/s1").estimate == pytest.approx(0.0)
    # I_P(grpo, s1) = 100 [(1 - 0) - (0 - 1)] = 200; SFT arms are all alike: 0
    diff = get(con, "method_difference", "payload", "grpo-sft/s1")
    assert diff.estimate == pytest.approx(200.0) and diff.ci_low == diff.ci_high == pytest.approx(200.0)


def test_math_verify_timeouts_are_counted_per_cell(tmp_path):
    rows = [cell("initial", "hash", [1, 1, 0, 0], [1, 0, 0, 0]), cell("initial", "boxed", [1, 1, 0, 0], [1, 1, 0, 0])]
    rows[0][2]["timed_out"] = True
    out = analyze(write(tmp_path, rows), tmp_path / "o", n_resamples=10, figures=False)
    cells = pd.read_csv(out / "cells.csv")
    count = cells[(cells.measure == "count.timeout.math_verify")].set_index("request")["value"]
    assert count.to_dict() == {"hash": 1, "boxed": 0}
    tokens = cells[cells.measure == "output_tokens"].set_index("request")["value"]
    assert tokens.to_dict() == {"hash": 4, "boxed": 4}  # one token per fixture response
    report = (out / "report.md").read_text()
    assert "Math-Verify ran out of time on 1 responses" in report and "| 1/0 | 4/4 |" in report


def test_wording_summary_compares_the_same_items(tmp_path):
    """The original wording runs on all items, the paraphrase on a subset: the Table 13 summary compares both on
    the shared items (the original row is not the full-split result, as in paper 001 Table 13)."""
    def design(template, n):
        hb = [("initial", "hash", [1] * n), ("initial", "boxed", [1] * n), ("grpo-hash/s1", "hash", [1] * n),
              ("grpo-hash/s1", "boxed", [0] * n), ("grpo-boxed/s1", "boxed", [1] * n),
              # boxed arm under the hash request: follows it on items 0-1 only
              ("grpo-boxed/s1", "hash", ([1, 1] + [0] * (n - 2))[:n])]
        return [cell(p, r, pay, pay, seed=None if p == "initial" else 1, template=template) for p, r, pay in hb]

    out = analyze(write(tmp_path, design("original", 4) + design("para_a", 2)), tmp_path / "o", n_resamples=20,
                  figures=False)
    con = pd.read_csv(out / "contrasts.csv")
    full = con[(con.template == "original") & (con.name == "interaction") & (con.measure == "payload")
               & (con.policy == "grpo/s1")].estimate.iloc[0]
    shared = con[(con.template == "original@shared") & (con.name == "interaction") & (con.measure == "payload")
                 & (con.policy == "grpo/s1")]
    assert full == pytest.approx(150.0) and shared.estimate.iloc[0] == pytest.approx(100.0)
    assert shared.n_items.iloc[0] == 2
    report = (out / "report.md").read_text()
    assert "| t | original | grpo | hashxboxed | 1 | +0.00 (—) | +100.00 (—) |" in report
    # the header counts generated responses: 6 cells x 4 + 6 x 2 = 36, not the @shared re-uses as well
    assert "36 responses in 12 cells." in report


def test_truncation_sensitivity_and_pass_at_k_gains(tmp_path):
    # 4 items x 2 samples; item 3's trained responses are cut at the length limit
    init = [1, 0, 0, 0, 0, 0, 1, 1]
    trained = [1, 1, 1, 0, 0, 0, 0, 0]
    rows = [cell("initial", "hash", init, init, samples=2),
            cell("grpo-hash/s1", "hash", trained, trained, seed=1, samples=2,
                 truncated=[0, 0, 0, 0, 0, 0, 1, 0])]
    out = analyze(write(tmp_path, rows), tmp_path / "o", n_resamples=300, figures=False)
    con = pd.read_csv(out / "contrasts.csv")
    untr = get(con, "gain_untruncated", "acc.strict", "grpo-hash/s1", "hash")
    # per-item means: initial (.5, 0, 0, 1), trained (1, .5, 0, 0); item 3 dropped -> mean(.5, .5, 0) = 1/3
    assert untr.n_items == 3 and untr.estimate == pytest.approx(100 / 3)
    assert get(con, "gain", "acc.strict", "grpo-hash/s1", "hash").estimate == pytest.approx(0.0)
    cells_ = pd.read_csv(out / "cells.csv")
    p = cells_[cells_.measure == "pass@2.strict"].set_index("policy")["value"]
    cov = get(con, "pass@2_gain", "acc.strict", "grpo-hash/s1", "hash")
    assert cov.estimate == pytest.approx(100 * (p["grpo-hash/s1"] - p["initial"]))  # coverage: 2/4 vs 2/4
    assert cov.ci_low <= cov.estimate <= cov.ci_high
    assert "gain_untruncated" in (out / "report.md").read_text()


def test_crossed_analyze_defaults_to_the_studys_bootstrap_seed(tmp_path):
    """Re-analysing a study's scores with crossed-analyze's defaults gives the study's own intervals."""
    from hydra import compose, initialize_config_module

    from crossed_rlvr.analysis.analyze import DEFAULT_RNG_SEED

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_study", overrides=[f"run_dir={tmp_path}"])
    assert cfg.analysis.rng_seed == DEFAULT_RNG_SEED


def test_answer_only_crossed_control_beside_the_marker_pair(tmp_path):
    """Paper 001 App. D.2: answer-only arms trained under the hash and the boxed request give their own 2 x 2
    interaction, and the marker-required minus answer-only difference is a paired contrast per seed."""
    rows = [*HB,
            cell("grpo-answer_only_hash/s1", "hash", [1, 1, 0, 0], [1, 1, 0, 0], seed=1),
            cell("grpo-answer_only_hash/s1", "boxed", [1, 0, 0, 0], [1, 0, 0, 0], seed=1),
            cell("grpo-answer_only_boxed/s1", "hash", [1, 1, 0, 0], [1, 1, 0, 0], seed=1),
            cell("grpo-answer_only_boxed/s1", "boxed", [1, 1, 0, 0], [1, 1, 0, 0], seed=1)]
    out = analyze(write(tmp_path, rows), tmp_path / "o", n_resamples=200, figures=False)
    con = pd.read_csv(out / "contrasts.csv")
    assert get(con, "interaction", "payload", "grpo/s1", "hashxboxed").estimate == pytest.approx(200.0)
    # I_P = 100 [(0.5 - 0.5) - (0.25 - 0.5)] = 25
    pair = "answer_only_hashxanswer_only_boxed"
    assert get(con, "interaction", "payload", "grpo/s1", pair).estimate == pytest.approx(25.0)
    diff = get(con, "reward_difference", "payload", "grpo/s1", "hashxboxed-answer_only")
    assert diff.estimate == pytest.approx(175.0) and diff.ci_low <= 175.0 <= diff.ci_high
    report = (out / "report.md").read_text()
    assert "reward_difference" in report and pair in report
    # one answer-only arm without its partner of the same seed is a gap of the design, named
    half = [*HB, *rows[6:8], cell("grpo-answer_only_boxed/s2", "hash", [1, 1, 0, 0], [1, 1, 0, 0], seed=2),
            cell("grpo-answer_only_boxed/s2", "boxed", [1, 1, 0, 0], [1, 1, 0, 0], seed=2)]
    with pytest.raises(AnalysisError, match="has no answer_only_hash arm of seed 2 to cross with"):
        analyze(write(tmp_path, half, "half.parquet"), tmp_path / "h", n_resamples=50, figures=False)


def test_sft_marker_criteria_are_checked_pass_and_fail(tmp_path):
    """App. D.2.1's pre-specified criteria on hand-built cells: seed 1 meets all five, seed 2's control flips its
    sign and its lenient scores drift apart; the cross-seed spread of D(H) - D(B) is checked too."""
    from crossed_rlvr.analysis.criteria import sft_criteria

    rows = [cell("initial", "hash", [0, 0, 0, 0], [0, 0, 0, 0], lenient=[1, 1, 0, 0]),  # D(π0) = 0 - 0.5 < 0
            cell("initial", "boxed", [1, 1, 0, 0], [1, 1, 0, 0]),
            # seed 1: H follows hash only (D = +0.5), B boxed only (D = -0.5); lenient equal across arms
            cell("sft-hash/s1", "hash", [1, 1, 0, 0], [1, 1, 0, 0], seed=1),
            cell("sft-hash/s1", "boxed", [0, 0, 0, 0], [0, 0, 0, 0], lenient=[1, 1, 0, 0], seed=1),
            cell("sft-boxed/s1", "hash", [0, 0, 0, 0], [0, 0, 0, 0], lenient=[1, 1, 0, 0], seed=1),
            cell("sft-boxed/s1", "boxed", [1, 1, 0, 0], [1, 1, 0, 0], seed=1),
            # seed 2: H as before; B's D = +0.25 (keeps no sign) and lenient 0.75 vs 0.5 under hash
            cell("sft-hash/s2", "hash", [1, 1, 0, 0], [1, 1, 0, 0], seed=2),
            cell("sft-hash/s2", "boxed", [0, 0, 0, 0], [0, 0, 0, 0], lenient=[1, 1, 0, 0], seed=2),
            cell("sft-boxed/s2", "hash", [1, 1, 1, 0], [1, 1, 1, 0], seed=2),
            cell("sft-boxed/s2", "boxed", [1, 1, 0, 0], [1, 1, 0, 0], seed=2)]
    out = analyze(write(tmp_path, rows), tmp_path / "o", n_resamples=50, figures=False)
    table = sft_criteria(pd.read_csv(out / "cells.csv"))
    verdict = {(r.seed, r.criterion.split(" ")[0] + " " + r.criterion.split(" ")[1]): r.pass_ for r in
               table.rename(columns={"pass": "pass_"}).itertuples()}
    assert table[table.seed == "1"]["pass"].all() and len(table[table.seed == "1"]) == 5
    assert verdict[("2", "boxed control")] is False and verdict[("2", "largest lenient")] is False
    assert verdict[("2", "hash arm")] is True
    spread = table[table.criterion.str.startswith("cross-seed")].iloc[0]
    assert spread.seed == "1 2" and spread.value == "0.7500" and not spread["pass"]  # 1.0 vs 0.25
    report = (out / "report.md").read_text()
    assert "## Pre-specified SFT criteria (App. D.2.1)" in report and "| 1 | arm-to-arm contrast D(H) − D(B) | " \
        "+1.0000 | > +0.50 | pass |" in report
    assert (out / "sft_criteria.csv").exists()
