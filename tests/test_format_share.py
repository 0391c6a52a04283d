"""The format share on a synthetic grid whose answer is known by hand (paper 000 §2)."""

import json

import numpy as np
import pandas as pd
import pytest

from crossed_rlvr.rescore.share import Outputs, comparisons, pooled, spread

N = 200
KEYS = ["ABCD"[k % 4] for k in range(N)]


def wrong(key):
    return "ABCD"[("ABCD".index(key) + 1) % 4]


def outputs(style, right, readable=N):
    """A model that states its letter as text ("The answer is X") or in a box, correct on the first ``right``
    items, and states no letter at all after the first ``readable`` items."""
    texts = []
    for k, key in enumerate(KEYS):
        letter = key if k < right else wrong(key)
        stated = f"The answer is {letter}." if style == "text" else f"\\boxed{{{letter}}}"
        texts.append(f"Reasoning.\n{stated}" if k < readable else "Reasoning, no letter given.")
    return Outputs(items=[str(k) for k in range(N)], keys=KEYS, responses=texts, kind="mc", n_options=[4] * N)


def grid():
    runs = {
        # pair 1: the RL model only moves the answer into a box: all of the reported gain is format
        ("base1", "arc", "boxed", "mc"): outputs("text", 120), ("rl1", "arc", "boxed", "mc"): outputs("box", 120),
        # pair 2: it boxes and also answers 40 more items right
        ("base2", "arc", "boxed", "mc"): outputs("text", 100), ("rl2", "arc", "boxed", "mc"): outputs("box", 140),
        # pair 3: omega reads only 30% of the RL model's outputs: not admitted
        ("base3", "arc", "boxed", "mc"): outputs("text", 100), ("rl3", "arc", "boxed", "mc"): outputs("box", 60, readable=60),
    }
    return comparisons(runs, [("base1", "rl1"), ("base2", "rl2"), ("base3", "rl3")], ["math-boxed"], resamples=500)


def test_shares_and_criteria_known_by_hand():
    table, extra = grid()
    t = table.set_index("base")
    # pair 1: boxed-only h reads nothing of the base model: g_rep = 60, omega finds 60% for both: D = 60
    assert (t.loc["base1", "g_rep"], t.loc["base1", "g_fix"], t.loc["base1", "D"]) == (60.0, 0.0, 60.0)
    assert t.loc["base1", "share"] == 1.0
    # pair 2: g_rep = 70, g_fix = 70 - 50 = 20, D = 50
    assert (t.loc["base2", "g_rep"], t.loc["base2", "g_fix"], t.loc["base2", "D"]) == (70.0, 20.0, 50.0)
    assert t.loc["base1", "admitted"] and t.loc["base2", "admitted"]
    assert t.loc["base3", "read_omega_rl"] == 30.0 and not t.loc["base3", "readable"] and not t.loc["base3", "admitted"]
    assert t.loc["base1", "omega_text_base"] == 100.0 and t.loc["base1", "omega_box_rl"] == 100.0  # Fig. 3
    result = pooled(table, extra)
    assert result["comparisons"] == 2
    assert result["share"] == pytest.approx(110 / 130)
    assert result["low"] <= result["share"] <= result["high"] and result["high"] - result["low"] < 0.2
    assert result["leave_one_pair_out_min"] == pytest.approx(50 / 70) and result["leave_one_pair_out_max"] == 1.0
    assert np.isnan(result["leave_one_benchmark_out_min"])  # one benchmark: nothing left when it is left out


def test_spread_of_harness_gains():
    table, _ = grid()
    s = spread(table)
    assert (s.spread == 0).all()  # one harness: no spread


# ---------------------------------------------------------------- inputs that used to corrupt the share
def _records(task, policy, keys, texts, request="boxed"):
    from tests.helpers import rec

    return [rec(k, policy, request, task=task, reference=key, response=text)
            for k, (key, text) in enumerate(zip(keys, texts, strict=True))]


def _write(tmp_path, records, name="r.jsonl"):
    from crossed_rlvr.records import write_responses

    write_responses(tmp_path / name, records)
    return tmp_path / name


def test_a_key_outside_the_assumed_options_is_refused_not_misread(tmp_path, capsys):
    """MMLU-Pro keys run to J: without item files, omega would read only A-D."""
    from crossed_rlvr.rescore.cli import main

    keys = ["E", "B", "J", "A"]
    recs = _records("mmlu_pro", "initial", keys, ["The answer is E."] * 4) + \
        _records("mmlu_pro", "grpo-boxed/s83", keys, ["\\boxed{E}"] * 4)
    path = _write(tmp_path, recs)
    assert main([str(path), "--pair", "initial=grpo-boxed/s83", "-o", str(tmp_path / "out"), "--no-audit"]) == 2
    err = capsys.readouterr().err.splitlines()[0]
    assert err == ("crossed-rescore: mmlu_pro item '0': key 'E' lies outside the 4 options assumed (A-D); give the "
                   "item files (--items, or the run's items/ folder beside its responses) or --options")
    # the items file the loaders freeze says 10 options: read from the run's items/ folder beside responses/
    run = tmp_path / "run"
    (run / "responses").mkdir(parents=True)
    (run / "items").mkdir()
    (run / "items" / "mmlu_pro-test.jsonl").write_text("".join(
        json.dumps({"item_id": str(k), "task": "mmlu_pro", "question": "q", "reference": key, "n_options": 10}) + "\n"
        for k, key in enumerate(keys)))
    _write(run / "responses", recs)
    assert main([str(run / "responses"), "--pair", "initial=grpo-boxed/s83", "-o", str(tmp_path / "o2"),
                 "--no-audit", "--resamples", "200"]) == 0
    report = (tmp_path / "o2" / "report.md").read_text()
    assert "Of the outputs in which ω reads an answer, 0.0% of the base models' contain a `\\boxed{}`, against " \
           "100.0% of the RL models'" in report


def test_benchmarks_with_the_same_item_ids_pool_in_one_run(tmp_path):
    """Loaders number MMLU, AQuA-RAT, SAT-Math and BBH items by row: the record key holds the task, so
    several benchmarks are re-scored and pooled in one command."""
    from crossed_rlvr.records import read_responses
    from crossed_rlvr.rescore.cli import runs_from_records

    recs = []
    for task in ("mmlu", "aqua_rat", "sat_math"):
        keys = ["ABCD"[k % 4] for k in range(40)]
        recs += _records(task, "initial", keys, [f"The answer is {k}." for k in keys])
        recs += _records(task, "grpo-boxed/s83", keys, [f"\\boxed{{{k}}}" for k in keys])
    path = _write(tmp_path, recs)
    runs = runs_from_records(read_responses([path]).records, 4)
    table, extra = comparisons(runs, [("initial", "grpo-boxed/s83")], ["math-boxed"], resamples=300)
    assert sorted(table.benchmark) == ["aqua_rat", "mmlu", "sat_math"] and set(table["items"]) == {40}
    result = pooled(table, extra)
    assert result["comparisons"] == 3 and result["share"] == 1.0  # boxed-only h: the whole gain is format


def test_comparisons_of_one_benchmark_with_other_item_sets_share_draws_over_their_own_items():
    """Two prompts with 30 and 50 items, and a benchmark mixing letter and free-form keys (BBH as loaded):
    each comparison's interval is over exactly its items, drawn from one per-benchmark resample (case 3)."""
    from crossed_rlvr.rescore.share import RESAMPLES, bootstrap_gains

    def out(n, style, right, kind="mc", offset=0):
        keys = ["ABCD"[k % 4] for k in range(n)] if kind == "mc" else [str(k) for k in range(n)]
        texts = [(f"\\boxed{{{key}}}" if style == "box" else f"The answer is {key}.") if k < right else "none"
                 for k, key in enumerate(keys)]
        return Outputs(items=[str(k + offset) for k in range(n)], keys=keys, responses=texts, kind=kind,
                       n_options=[4] * n, benchmark="bbh")

    runs = {("b", "bbh", "boxed/original", "mc"): out(30, "text", 20), ("r", "bbh", "boxed/original", "mc"): out(30, "box", 20),
            ("b", "bbh", "hash/original", "mc"): out(50, "text", 30), ("r", "bbh", "hash/original", "mc"): out(50, "box", 30),
            ("b", "bbh", "boxed/original", "free"): out(7, "text", 3, "free", 100),
            ("r", "bbh", "boxed/original", "free"): out(7, "box", 5, "free", 100)}
    table, extra = comparisons(runs, [("b", "r")], ["math-boxed"], resamples=400)
    assert sorted(table["items"]) == [7, 30, 50]
    for r in table.itertuples():
        assert r.g_rep_low <= r.g_rep <= r.g_rep_high and len(extra["boot"][r.key][0]) == 400
    # a comparison's draws are means over its own drawn items: the same draws again from its items alone
    # within the benchmark's union, and the paper's 10,000 resamples by default
    again = bootstrap_gains(extra["per_item"], 400, 20260816)  # paper 000 App. D's pooled seed
    assert all(np.array_equal(again[k][0], extra["boot"][k][0], equal_nan=True) for k in again)
    assert RESAMPLES == 10_000
    # each comparison's interval from its own draws, seeded by its name: the same whatever else is in the run
    from crossed_rlvr.rescore.share import comparison_interval, comparison_seed

    alone, _ = comparisons({k: v for k, v in runs.items() if k[2] == "hash/original"}, [("b", "r")], ["math-boxed"],
                           resamples=400)
    both = table.set_index("key")
    for r in alone.itertuples():
        assert (r.g_rep_low, r.g_rep_high) == (both.loc[r.key, "g_rep_low"], both.loc[r.key, "g_rep_high"])
        assert (r.g_rep_low, r.g_rep_high) == comparison_interval(extra["per_item"][r.key][2], 400,
                                                                  comparison_seed(r.key))
    assert comparison_seed("a") != comparison_seed("b") and comparison_seed("a") == comparison_seed("a")


def test_the_20_point_rule_is_decided_on_counts():
    """56.4% vs 76.4% of 500 outputs: a gap of exactly 20 points, readable (floats gave 20.000000000000014)."""
    from crossed_rlvr.rescore.share import readable

    assert 76.4 - 56.4 > 20  # the float trap
    assert readable(282, 382, 500) and not readable(282, 383, 500)
    assert readable(250, 350, 500) and not readable(249, 349, 500)  # 50% read is enough, 49.8% is not


def test_variants_pooling_rules_and_leave_one_out_in_the_cli(tmp_path):
    """--omega selects App. B's variant; the report has Table 9's rules and leave-one-harness/prompt-out."""
    from crossed_rlvr.rescore.cli import main

    keys = ["ABCD"[k % 4] for k in range(60)]
    recs = []
    for request in ("hash", "boxed"):
        recs += _records("mmlu", "initial", keys, [f"I think {k}" for k in keys], request)  # only permissive reads
        recs += _records("mmlu", "grpo-boxed/s83", keys, [f"\\boxed{{{k}}}" for k in keys], request)
    path = _write(tmp_path, recs)
    for variant, read_base in (("omega", 0.0), ("permissive", 100.0)):
        out = tmp_path / variant
        assert main([str(path), "--pair", "initial=grpo-boxed/s83", "-o", str(out), "--no-audit",
                     "--resamples", "200", "--omega", variant]) == 0
        table = pd.read_csv(out / "comparisons.csv")
        assert set(table.read_omega_base) == {read_base}
        report = (out / "report.md").read_text()
        assert "leave one harness out" in report and "leave one prompt out" in report
        assert "## Which comparisons enter the ratio (App. D, Table 9)" in report
        rules = pd.read_csv(out / "pooling_rules.csv")
        assert list(rules.rule) == ["significant reported gain (main)", "reported gain not zero",
                                    "every readable comparison"]
    assert "Fixed extractor: ω (permissive variant)." in (tmp_path / "permissive" / "report.md").read_text()


def test_a_pair_with_its_own_chat_templates_is_reported_but_not_pooled(tmp_path):
    """Open-Reasoner-Zero's base and RL models ship different chat templates: their prompts differ, which
    the response checks refuse elsewhere; crossed-rescore records it, reports the pair, and keeps it out of
    the pooled share and Fig. 3 (paper 000 App. A)."""
    from crossed_rlvr.rescore.cli import main

    keys = ["ABCD"[k % 4] for k in range(60)]
    recs = _records("mmlu", "initial", keys, [f"The answer is {k}." for k in keys])
    recs += _records("mmlu", "grpo-boxed/s83", keys, [f"\\boxed{{{k}}}" for k in keys])
    recs += [{**r, "policy": "orz-base", "training_convention": "boxed", "train_seed": 1,
              "prompt_sha256": "f" * 64} for r in _records("mmlu", "initial", keys, [f"The answer is {k}." for k in keys])]
    path = _write(tmp_path, recs)
    out = tmp_path / "out"
    assert main([str(path), "--pair", "initial=grpo-boxed/s83", "--pair", "orz-base=grpo-boxed/s83", "-o", str(out),
                 "--no-audit", "--resamples", "200"]) == 0
    table = pd.read_csv(out / "comparisons.csv")
    orz = table[table.base == "orz-base"]
    assert len(orz) and not orz.same_input.any() and not orz.admitted.any()
    assert table[table.base == "initial"].same_input.all()
    report = (out / "report.md").read_text()
    assert "Pairs whose two models saw different prompts" in report and "grpo-boxed/s83 / orz-base" in report
    assert json.loads((out / "pooled.json").read_text())["comparisons"] == int(table[table.base == "initial"].admitted.sum())


def test_six_benchmarks_as_the_loaders_freeze_them_pool_in_one_command(tmp_path):
    """MMLU, MMLU-Pro, ARC-Challenge, AQuA-RAT, SAT-Math and BBH items from the loaders (row ids 0, 1, ...
    in every benchmark), their frozen item files beside the responses, re-scored and pooled in one
    command; MMLU-Pro's key J and AQuA-RAT's E are read from the items' own option counts."""
    from crossed_rlvr.rescore.cli import main
    from crossed_rlvr.tasks.choice import load_benchmark
    from tests.task_files import BBH, ROWS

    run = tmp_path / "run"
    (run / "items").mkdir(parents=True)
    (run / "responses").mkdir()
    recs = []
    for bench, row in {**ROWS, "bbh": BBH}.items():
        src = tmp_path / f"{bench}.jsonl"
        ids = {"mmlu_pro": "question_id", "arc_challenge": "id"}  # the two with ids of their own
        src.write_text("".join(json.dumps({**row, **({ids[bench]: k} if bench in ids else {})}) + "\n"
                               for k in range(30)))
        items = load_benchmark(bench, src)
        if bench not in ids:
            assert [it["item_id"] for it in items[:2]] == ["0", "1"]  # row numbers: the same ids in each
        (run / "items" / f"{bench}-test.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
        keys = [it["reference"] for it in items]
        recs += _records(bench, "initial", keys, [f"The answer is {k}." for k in keys])
        recs += _records(bench, "grpo-boxed/s83", keys, [f"\\boxed{{{k}}}" for k in keys])
    _write(run / "responses", recs)
    out = tmp_path / "out"
    assert main([str(run / "responses"), "--pair", "initial=grpo-boxed/s83", "--harness", "math-boxed", "-o",
                 str(out), "--no-audit", "--resamples", "200"]) == 0
    table = pd.read_csv(out / "comparisons.csv")
    assert sorted(table.benchmark) == sorted([*ROWS, "bbh"])
    assert table.set_index("benchmark").kind["bbh"] == "free"  # BBH's "(A)" targets are free form (paper 000)
    assert (table.read_omega_base == 100).all() and (table.acc_omega_base == 100).all()  # J and E read too
    pooled_result = json.loads((out / "pooled.json").read_text())
    assert pooled_result["comparisons"] == 6 and pooled_result["share"] == 1.0


def test_a_plain_prompt_and_a_harness_prompt_are_names_crossed_rescore_reads(tmp_path, capsys):
    """Paper 000 re-scored outputs made under prompts other than the four requests (a "plain" prompt, the
    harnesses' own): lm-eval samples of a prompt with no request suffix import under ``--request plain`` (or
    a harness prompt's name), crossed-rescore pools them, and crossed-score refuses them with the reason
    (its readers need a requested convention)."""
    from crossed_rlvr.eval.ingest.cli import main as import_main
    from crossed_rlvr.eval.score.scoring import main as score_main
    from crossed_rlvr.rescore.cli import main

    def samples(name, answers):
        rows = [{"doc_id": k, "target": f"#### {k + 3}", "resps": [[text]],
                 "arguments": {"gen_args_0": {"arg_0": f"Question: what is {k} + 3?\nAnswer:", "arg_1": {}}}}
                for k, text in enumerate(answers)]
        path = tmp_path / f"samples_gsm8k_{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    n = 40
    base = samples("base", [f"The answer is {k + 3}." for k in range(n)])
    rl = samples("rl", [f"\\boxed{{{k + 3}}}" for k in range(n)])
    for prompt in ("plain", "gsm8k-cot"):
        for policy, src in (("initial", base), ("grpo-boxed/s83", rl)):
            out = tmp_path / prompt / f"{policy.replace('/', '-')}.jsonl"
            out.parent.mkdir(exist_ok=True)
            assert import_main(["lm-eval", str(src), "--policy", policy, "--request", prompt, "--task", "gsm8k",
                                "-o", str(out)]) == 0
    first = tmp_path / "plain" / "initial.jsonl"
    assert {json.loads(line)["request"] for line in first.read_text().splitlines()} == {"plain"}
    assert import_main(["lm-eval", str(base), "--policy", "initial", "--request", "Plain Prompt", "--task", "gsm8k",
                        "-o", str(tmp_path / "bad.jsonl")]) == 2
    assert "field 'request' is 'Plain Prompt'" in capsys.readouterr().err
    res = tmp_path / "share"
    assert main([str(tmp_path / "plain"), str(tmp_path / "gsm8k-cot"), "--pair", "initial=grpo-boxed/s83",
                 "--harness", "math-boxed", "-o", str(res), "--no-audit", "--resamples", "200"]) == 0
    table = pd.read_csv(res / "comparisons.csv")
    assert sorted(table.prompt) == ["gsm8k-cot/original", "plain/original"]
    assert (table.acc_omega_base == 100).all() and (table.g_fix == 0).all()
    # the base model's answers are right but unboxed: the harness's whole gain is format
    assert (table.g_rep == 100).all() and (table.share == 1).all()
    capsys.readouterr()
    assert score_main([str(first), "-o", str(tmp_path / "s.parquet"), "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "field 'request' is 'plain'" in err and "crossed-rescore" in err, err
