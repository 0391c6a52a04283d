"""The report's first screen: the headline equals contrasts.csv, collapsing never hides a
differing column, the stated Monte Carlo error matches a re-run with another bootstrap seed, the
protocol card is in the report and the manifest, and unbounded ratios are not printed as numbers."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from crossed_rlvr.analysis.bootstrap import endpoint_mc_error
from crossed_rlvr.analysis.report.folder import analyze
from crossed_rlvr.analysis.report.headline import collapse_columns, endpoint_decimals, headline_rows
from tests.analysis_fixtures import cell, write

# the analysed fixture is built once, on one worker (tests/conftest.py)
WORKER_GROUP = "report"
SHARED_FIXTURES = ("runs",)


def _study(rng, n=60):
    """Two seeds of hash and boxed arms: the hash arm follows the hash request, the boxed arm the boxed one."""
    def bits(p):
        return (rng.random(n) < p).astype(int).tolist()

    rows = [cell("initial", "hash", bits(0.5), bits(0.3)), cell("initial", "boxed", bits(0.5), bits(0.3))]
    for seed in (1, 2):
        rows += [cell(f"grpo-hash/s{seed}", "hash", bits(0.95), bits(0.5), seed=seed),
                 cell(f"grpo-hash/s{seed}", "boxed", bits(0.3), bits(0.3), seed=seed),
                 cell(f"grpo-boxed/s{seed}", "hash", bits(0.2), bits(0.3), seed=seed),
                 cell(f"grpo-boxed/s{seed}", "boxed", bits(0.95), bits(0.5), seed=seed)]
    return rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    path = write(tmp, _study(np.random.default_rng(0)))
    a = analyze(path, tmp / "a", n_resamples=4000, rng_seed=1, figures=False)
    b = analyze(path, tmp / "b", n_resamples=4000, rng_seed=2, figures=False)
    return a, b


def test_the_report_opens_with_the_headline_and_its_numbers_are_contrasts_csv(runs):
    a, _ = runs
    report = (a / "report.md").read_text()
    head = report[: report.index("<!-- contents -->")]
    con = pd.read_csv(a / "contrasts.csv")
    assert "training changed where answers are written (I_P " in head and "## " not in head.split("\n", 1)[1]
    rows = headline_rows(con)
    assert set(rows.name) == {"I_P", "I_S", "I_MV"}
    d = int(re.search(r"printed to (\d) decimal", head).group(1))
    for r in rows.itertuples():
        src = con[(con.name == "interaction") & (con.measure == r.measure) & (con.policy == "grpo/mean")
                  & (con.template == r.template)].iloc[0]
        assert (r.estimate, r.ci_low, r.ci_high) == (src.estimate, src.ci_low, src.ci_high)
        shown = f"{src.estimate:+.2f} [{src.ci_low:+.{d}f}, {src.ci_high:+.{d}f}]"
        assert f"| {r.name} | {shown} |" in head, shown
        for seed in (1, 2):
            one = con[(con.name == "interaction") & (con.measure == r.measure) & (con.policy == f"grpo/s{seed}")
                      & (con.template == r.template)].iloc[0]
            assert f"s{seed} {one.estimate:+.2f}" in head
    assert "60 items" in head and "one item moves a cell's rate by 1.67 pp" in head
    # the contents list every section, the protocol first
    contents = report[report.index("<!-- contents -->"): report.index("<!-- /contents -->")]
    assert contents.index("[Protocol]") < contents.index("[t · template `original`]")
    assert "[Appendix: further contrasts]" in contents and "[Reader audit]" in contents


def test_collapsing_never_hides_a_differing_column():
    header = ["Seed", "Pair", "I_P", "I_q", "I_S", "I_MV"]
    rows = [["s1", "hb", "+1", "+1", "+2", "+2"], ["s2", "hb", "+3", "+3", "+4", "+5"]]
    h, r, notes = collapse_columns(header, rows, 2)
    assert h == ["Seed", "Pair", "I_P", "I_S", "I_MV"] and notes == ["I_q = I_P"]  # I_MV differs in one row
    assert r == [["s1", "hb", "+1", "+2", "+2"], ["s2", "hb", "+3", "+4", "+5"]]
    for j in range(2, 6):  # change any one cell: its column is kept
        changed = [row[:] for row in rows]
        changed[1][j] = "+9"
        h, _, _ = collapse_columns(header, changed, 2)
        assert header[j] in h
    # key columns are never collapsed, even when equal to one another
    assert collapse_columns(["A", "B"], [["x", "x"]], 2)[0] == ["A", "B"]


def test_the_stated_monte_carlo_error_matches_another_bootstrap_seed(runs):
    a, b = runs
    ca, cb = pd.read_csv(a / "contrasts.csv"), pd.read_csv(b / "contrasts.csv")
    key = ["task", "template", "name", "measure", "policy", "request"]
    both = ca.merge(cb, on=key, suffixes=("_a", "_b")).dropna(subset=["ci_low_a", "mc_error_a", "mc_error_b"])
    both = both[both.unit_a != "ratio"]
    assert len(both) > 50
    # two runs' endpoints differ by sqrt(2) x the MC error in SD: within 4 of those in all but a few
    scale = np.sqrt(both.mc_error_a ** 2 + both.mc_error_b ** 2)
    diff = np.maximum(abs(both.ci_low_a - both.ci_low_b), abs(both.ci_high_a - both.ci_high_b))
    assert ((diff <= 4 * scale + 1e-9).mean()) >= 0.95
    # and the error is not vacuous: where it is positive, seeds really move the endpoints
    moving = both[scale > 0]
    assert len(moving) and (abs(moving.ci_low_a - moving.ci_low_b) + abs(moving.ci_high_a - moving.ci_high_b)).gt(0).any()
    # the report says it, with the decimals it supports
    head = (a / "report.md").read_text().split("<!-- contents -->")[0]
    m = re.search(r"Monte Carlo error \(the resamples in 10 batches\) is ([\d.]+) pp at the median endpoint, "
                  r"([\d.]+) pp at the 95th percentile", head)
    assert m and float(m.group(2)) == pytest.approx(np.quantile(ca.loc[ca.unit != "ratio", "mc_error"].dropna(), 0.95),
                                                     abs=5e-4)


def test_endpoint_mc_error_on_a_known_distribution():
    rng = np.random.default_rng(5)
    draws = rng.normal(size=(20000, 3))
    err = endpoint_mc_error(draws)
    # the 2.5% quantile of N(0,1) from B draws: SE = sqrt(p(1-p)/B)/phi(z) = 0.0171 at B = 20,000
    assert np.allclose(err, 0.0171, rtol=0.5)
    assert endpoint_decimals(0.24) == 0 and endpoint_decimals(0.09) == 1 and endpoint_decimals(0.04) == 1
    assert endpoint_decimals(0.004) == 2 and endpoint_decimals(float("nan")) == 2


def test_the_protocol_card_is_in_the_report_and_the_manifest(runs):
    a, _ = runs
    manifest = json.loads((a / "manifest.json").read_text())
    card = manifest["protocol"]
    assert card["training_seeds"] == [1, 2] and card["bootstrap"] == {"resamples": 4000, "rng_seed": 1}
    assert "sympy" in card["analysis_machine"]["versions"] and "latex2sympy2_extended" in card["analysis_machine"]["versions"]
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?|unknown \(.*\)", card["commit"])
    report = (a / "report.md").read_text()
    assert "## Protocol" in report and f"**Commit**: `{card['commit']}`" in report
    assert "bootstrap: 4,000 resamples, RNG seed 1" in report


def test_the_significance_table_on_a_case_with_a_known_p_value(tmp_path):
    """Two arms, one seed each, 8 items: the hash arm gains 4 items under hash (paired t over items, one-sided
    p by hand from scipy's t distribution), paper 002's uncorrected marks, Holm over the table's family beside."""
    from scipy import stats

    ini = [0, 0, 0, 0, 0, 0, 1, 1]
    hsh = [1, 1, 1, 1, 0, 0, 1, 1]
    rows = [cell("initial", "hash", ini, ini), cell("initial", "boxed", ini, ini),
            cell("grpo-hash/s1", "hash", hsh, hsh, seed=1), cell("grpo-hash/s1", "boxed", ini, ini, seed=1),
            cell("grpo-boxed/s1", "hash", ini, ini, seed=1), cell("grpo-boxed/s1", "boxed", hsh, hsh, seed=1)]
    out = analyze(write(tmp_path, rows), tmp_path / "o", n_resamples=100, figures=False)
    d = np.array(hsh) - np.array(ini)
    t = d.mean() / (d.std(ddof=1) / np.sqrt(len(d)))
    p = stats.t.sf(t, len(d) - 1)  # one-sided: trained better
    assert t == pytest.approx(np.sqrt(7)) and p == pytest.approx(0.01657, abs=1e-5)  # t = 0.5 / (0.5345 / sqrt 8)
    paired = pd.read_csv(out / "paired_tests.csv")
    sig = paired[paired.measure.isin(["acc.strict", "acc.math_verify"])]
    assert len(sig) == 8  # 2 arms x 2 requests x 2 readers
    gains = sig[sig.estimate > 0]
    assert len(gains) == 4 and np.allclose(gains.t_p_value, p)
    # Holm over 8 tests: the four equal p's at ranks 1-4 are adjusted by max((8 - k) p) over k <= rank = 8p
    from crossed_rlvr.analysis.paired import holm

    adjusted = holm(sig.t_p_value.to_numpy())
    assert np.allclose(adjusted[sig.estimate.to_numpy() > 0], min(1, 8 * p))
    assert np.allclose(holm(np.array([0.01, 0.04, 0.03, np.nan])), [0.03, 0.06, 0.06, np.nan], equal_nan=True)
    report = (out / "report.md").read_text()
    section = report[report.index("## Significance of the gains"):]
    assert "**8 tests**" in section
    line = next(x for x in section.splitlines() if x.startswith("| original | grpo-hash | hash | S |"))
    assert f"| {p:.3g} | {min(1, 8 * p):.3g} |" in line and "+50.00 |" in line  # p = 0.0166 >= 0.01: no mark
    assert "* p < 0.01, ** p < 0.001, uncorrected" in section
    from crossed_rlvr.analysis.report.document import significance_mark

    assert [significance_mark(x) for x in (0.0166, 0.01, 0.0099, 0.001, 0.00099, np.nan)] == ["", "", "*", "*", "**",
                                                                                               ""]
    assert "| 0.00 | 50.00 |" not in line and "| 25.00 | 75.00 |" in line  # initial 25%, the arm 75% (one seed)
    # the length split and the examples (no response files here: said so)
    assert "## Appendix: response length by correctness" in report
    assert "The response files behind these scores were not found" in report


def test_examples_show_the_same_item_under_both_requests_for_every_policy(tmp_path):
    import subprocess
    import sys

    from crossed_rlvr.records import write_responses
    from tests.helpers import rec

    run = tmp_path / "run" / "responses"
    run.mkdir(parents=True)
    recs = [rec(i, pol, req, response=f"{pol} says #### {i}" if req == "hash" else f"{pol} \\boxed{{{i}}}",
                reference=str(i)) for pol in ("initial", "grpo-hash/s83", "grpo-boxed/s83")
            for req in ("hash", "boxed") for i in range(10)]
    write_responses(run / "r.jsonl", recs)
    scores = tmp_path / "scores.parquet"
    subprocess.run([sys.executable, "-m", "crossed_rlvr.eval.score.scoring", str(run), "-o", str(scores), "--workers", "0"],
                   check=True, capture_output=True)
    out = analyze(scores, tmp_path / "o", n_resamples=100, figures=False)
    ex = pd.read_json(out / "examples.jsonl", lines=True)
    assert ex.item_id.nunique() == 2 and len(ex) == 2 * 3 * 2  # 2 items x 3 policies x 2 requests
    report = (out / "report.md").read_text()
    section = report[report.index("## Appendix: example responses"):]
    item = str(ex.item_id.iloc[0])
    assert f"`original` · item {item}**" in section and f"`initial says #### {item}`" in section
    assert "| initial | hash | ✓ | yes |" in section


def test_a_decoding_sweep_is_one_study_with_a_table_per_setting(tmp_path):
    """Responses carry their decoding (crossed-eval writes T, top-p and max new tokens into every record and
    crossed-score keeps them): one scores table holding two temperatures is analysed in one run, each setting
    its own set of cells, contrasts and headline rows; a non-number in a decoding column is refused."""
    rng = np.random.default_rng(3)
    frames = []
    for temp in (0.6, 1.0):
        rows = _study(rng, n=20)
        df = pd.DataFrame([r for cell_rows in rows for r in cell_rows])
        frames.append(df.assign(temperature=temp, top_p=0.95, max_new_tokens=640))
    table = pd.concat(frames, ignore_index=True)
    table["train_seed"] = table["train_seed"].astype("Int64")
    path = tmp_path / "scores.parquet"
    table.to_parquet(path, index=False)
    out = analyze(path, tmp_path / "o", n_resamples=200, figures=False)
    con = pd.read_csv(out / "contrasts.csv")
    tasks = sorted(con.task.unique())
    assert tasks == ["t [T=0.6, top-p=0.95, max 640]", "t [T=1.0, top-p=0.95, max 640]"]
    heads = headline_rows(con)
    assert sorted(heads.task.unique()) == tasks and (heads.n_items == 20).all()
    report = (out / "report.md").read_text()
    assert "## t [T=1.0, top-p=0.95, max 640] · template `original`" in report
    bad = table.astype({"temperature": str})  # written as text, one of them not a number
    bad.loc[5, "temperature"] = "hot"
    bad.to_parquet(tmp_path / "bad.parquet", index=False)
    from crossed_rlvr.analysis.analyze import AnalysisError

    # a decoding column written as text is refused by its dtype, "0.6" as much as "hot"
    with pytest.raises(AnalysisError, match=r"row 1 .*field 'temperature' is '0.6' \(str\); expected a number in "
                                            r"\[0, 10\] or null"):
        analyze(tmp_path / "bad.parquet", tmp_path / "o2", n_resamples=10, figures=False)



def test_crossed_eval_records_carry_their_decoding_and_scores_keep_it(tmp_path):
    from crossed_rlvr.eval.generate.runner import run_eval
    from crossed_rlvr.eval.score.scoring import score_files
    from crossed_rlvr.policies.tiny import build_tiny_model
    from crossed_rlvr.records import read_responses
    from tests.helpers import SMALL, cfg_for, overrides

    tiny = build_tiny_model(tmp_path / "m", SMALL)
    run_eval(cfg_for(*overrides(tmp_path / "run", tiny, n_items=3, extra=["eval.temperature=0.7"])), progress=False)
    recs = read_responses([tmp_path / "run"]).records
    assert {(r["temperature"], r["top_p"], r["max_new_tokens"]) for r in recs} == {(0.7, 0.95, 12)}
    # a second setting in its own run folder: scored together and analysed as one study
    run_eval(cfg_for(*overrides(tmp_path / "run2", tiny, n_items=3, extra=["eval.temperature=1.0"])), progress=False)
    both = score_files([tmp_path / "run" / "responses", tmp_path / "run2" / "responses"], tmp_path / "s.parquet",
                       workers=0)
    scores = pd.read_parquet(both)
    assert set(zip(scores.temperature, scores.top_p, scores.max_new_tokens)) == {(0.7, 0.95, 12), (1.0, 0.95, 12)}
    cells = pd.read_csv(analyze(both, tmp_path / "a", n_resamples=50, figures=False) / "cells.csv")
    assert sorted(cells.task.unique()) == ["arith [T=0.7, top-p=0.95, max 12]", "arith [T=1.0, top-p=0.95, max 12]"]


def test_sampling_runs_give_mean_and_sd_per_cell(tmp_path):
    """samples > 1: each sample index is a sampling run; the report gives mean ± SD across runs, by hand."""
    # 4 items x 3 samples, item-major: run 0 = [1,1,0,0] (50%), run 1 = [1,0,0,0] (25%), run 2 = [1,1,1,0] (75%)
    strict = [1, 1, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0]
    rows = [cell(p, r, strict, strict, samples=3, seed=None if p == "initial" else 1)
            for p in ("initial", "grpo-hash/s1", "grpo-boxed/s1") for r in ("hash", "boxed")]
    out = analyze(write(tmp_path, rows), tmp_path / "o", n_resamples=50, figures=False)
    runs = pd.read_csv(out / "sampling_runs.csv")
    assert len(runs) == 6 and (runs.runs == 3).all()
    assert np.allclose(runs.strict_mean, 50.0) and np.allclose(runs.strict_std, 25.0)
    assert "| original | initial | hash | 3 | 50.00 ± 25.00 | 50.00 ± 25.00 |" in (out / "report.md").read_text()
    one = analyze(write(tmp_path, [cell(p, r, [1, 0], [1, 0], seed=None if p == "initial" else 1)
                                   for p in ("initial", "grpo-hash/s1") for r in ("hash", "boxed")], "one.parquet"),
                  tmp_path / "o1", n_resamples=20, figures=False)
    assert "`evaluation.samples=30`" in (one / "report.md").read_text()


def test_an_interval_whose_end_is_zero_within_float_error_includes_zero():
    """A bootstrap endpoint that is a difference of rates summing to 0 can come out as 3.6e-15 pp: the headline
    says the interval includes 0, as it prints [+0, +23], not that the measure changed."""
    from types import SimpleNamespace

    from crossed_rlvr.analysis.report.headline import _excludes_zero

    assert not _excludes_zero(SimpleNamespace(ci_low=3.552713678800501e-15, ci_high=22.5))
    assert not _excludes_zero(SimpleNamespace(ci_low=-22.5, ci_high=-3.552713678800501e-15))
    assert _excludes_zero(SimpleNamespace(ci_low=0.25, ci_high=22.5))
    assert _excludes_zero(SimpleNamespace(ci_low=-22.5, ci_high=-0.25))
