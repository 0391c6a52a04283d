"""Importers: lm-eval --log_samples and verl validation dumps -> response records -> scores."""

import json
from pathlib import Path

import pandas as pd
import pytest

from crossed_rlvr.eval.ingest.cli import main
from crossed_rlvr.eval.ingest.common import given_policy, reference_from_target
from crossed_rlvr.eval.ingest.lm_eval import import_lm_eval
from crossed_rlvr.eval.ingest.verl import import_verl_dump, import_verl_steps
from crossed_rlvr.eval.score.scoring import score_files
from crossed_rlvr.records import ResponseFileError, read_responses


def lm_eval_file(tmp_path, name="samples_gsm8k_2026-01-01T00-00-00.jsonl", repeats=2):
    lines = []
    for doc_id, value in [(0, "18"), (1, "1,234")]:
        prompt = f"Question: doc {doc_id}\nAnswer:"
        for filt in ("strict-match", "flexible-extract"):  # one line per filter, same raw responses
            lines.append({
                "doc_id": doc_id, "doc": {"question": f"doc {doc_id}", "answer": f"work\n#### {value}"},
                "target": f"work\n#### {value}",
                "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {"until": ["Question:"]}}},
                "resps": [[f"so #### {value}" if k == 0 else f"so \\boxed{{{value}}}" for k in range(repeats)]],
                "filtered_resps": [value], "filter": filt, "metrics": ["exact_match"], "exact_match": 1.0,
            })
    path = tmp_path / name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_lm_eval_import(tmp_path):
    records = import_lm_eval(lm_eval_file(tmp_path), policy=given_policy("initial"), request="hash")
    assert len(records) == 4  # 2 docs x 2 repeats; the second filter's lines are not read again
    assert {r["task"] for r in records} == {"gsm8k"}
    assert [r["reference"] for r in records] == ["18", "18", "1234", "1234"]
    assert [r["sample_idx"] for r in records] == [0, 1, 0, 1]
    assert records[0]["response_tokens"] == -1 and records[0]["finish_reason_known"] is False
    assert records[0]["finish_reason"] == "unknown"  # never written as "stop": truncation is not known


def test_each_source_has_one_reader_behind_the_command_and_refuses_the_others_options(tmp_path, capsys):
    """crossed-import dispatches by source; a verl-only option given to lm-eval samples is an error, not ignored."""
    from crossed_rlvr.eval.ingest.cli import SOURCES

    assert sorted(SOURCES) == ["lm-eval", "verl"]
    path = lm_eval_file(tmp_path)
    assert main(["lm-eval", str(path), "-o", str(tmp_path / "a.jsonl"), "--policy", "initial", "--request", "hash",
                 "--step", "3"]) == 2
    assert "--step and --all-steps are for verl validation dumps" in capsys.readouterr().err
    assert not (tmp_path / "a.jsonl").exists()
    assert main(["lm-eval", str(path), "-o", str(tmp_path / "b.jsonl"), "--policy", "initial", "--request", "hash"]) == 0
    assert len(read_responses([tmp_path / "b.jsonl"]).records) == 4


def test_lm_eval_older_argument_layout(tmp_path):
    path = tmp_path / "samples_x.jsonl"
    path.write_text(json.dumps({"doc_id": 3, "target": "7", "arguments": [["prompt", {}]], "resps": [["#### 7"]]}) + "\n")
    (rec,) = import_lm_eval(path, policy=given_policy("grpo-hash/s1", "hash", 1), task="arith",
                            request="hash")
    assert rec["item_id"] == "3" and rec["reference"] == "7" and rec["policy"] == "grpo-hash/s1"


def test_lm_eval_bad_line_is_named(tmp_path):
    path = tmp_path / "samples_x.jsonl"
    path.write_text(json.dumps({"doc_id": 1, "target": "7", "arguments": [["p", {}]], "resps": [["a"]]}) + "\n"
                    + json.dumps({"doc_id": 2, "target": "7", "resps": [["a"]]}) + "\n")
    with pytest.raises(ResponseFileError, match=r"samples_x\.jsonl:2: missing field 'arguments'|"
                                                 r"samples_x\.jsonl:2: field 'arguments'"):
        import_lm_eval(path, policy=given_policy("initial"), request="hash")


def crossed_lm_eval_folder(tmp_path, task_names=("gsm8k_hash", "gsm8k_boxed")):
    """An lm-eval --output_path folder holding a task's hash and boxed variants (prompts carry the request)."""
    from crossed_rlvr.rewards.conventions import request_suffix

    folder = tmp_path / "lm_eval_out" / "__models__grpo-hash"
    folder.mkdir(parents=True)
    for request, name in zip(("hash", "boxed"), task_names):
        lines = [{"doc_id": d, "target": f"#### {d + 10}", "resps": [[f"#### {d + 10}"]], "filter": "none",
                  "arguments": {"gen_args_0": {"arg_0": f"What is {d} + 10?{request_suffix(request)}", "arg_1": {}}}}
                 for d in range(3)]
        (folder / f"samples_{name}_2026-01-01T00-00-00.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder.parent


def test_lm_eval_folder_keeps_the_crossing(tmp_path):
    folder = crossed_lm_eval_folder(tmp_path)
    # The file names give two task names for one policy's two requests: refused, never split silently.
    with pytest.raises(ResponseFileError, match=r"different task names .*boxed: gsm8k_boxed; hash: gsm8k_hash.*--task"):
        import_lm_eval(folder, policy=given_policy("grpo-hash/s83"))
    records = import_lm_eval(folder, policy=given_policy("grpo-hash/s83"), task="gsm8k")
    assert {(r["request"], r["item_id"]) for r in records} == {(q, str(d)) for q in ("hash", "boxed") for d in range(3)}
    # convention and seed come from the documented policy name
    assert {(r["training_convention"], r["train_seed"], r["task"]) for r in records} == {("hash", 83, "gsm8k")}
    with pytest.raises(ResponseFileError, match="prompt asks for 'boxed' but --request says 'hash'"):
        import_lm_eval(folder, policy=given_policy("initial"), task="gsm8k", request="hash")


def test_policy_identity_is_read_from_the_name_and_checked():
    from crossed_rlvr.eval.ingest.common import policy_identity

    assert policy_identity("sft-boxed/s84") == ("boxed", 84)
    assert policy_identity("initial") == ("initial", None)
    assert policy_identity("qwen-base", "initial") == ("initial", None)
    with pytest.raises(ResponseFileError, match="cannot tell its training convention"):
        policy_identity("my-model")  # would otherwise become a second 'initial'
    with pytest.raises(ResponseFileError, match="the name says training convention 'hash' but --training-convention "
                                                "says 'boxed'"):
        policy_identity("grpo-hash/s83", "boxed")
    with pytest.raises(ResponseFileError, match="the name says seed 83 but --train-seed says 84"):
        policy_identity("grpo-hash/s83", None, 84)


def test_lm_eval_0_4_0_json_array_and_folder_errors(tmp_path):
    old = tmp_path / "pretrained__model_gsm8k.jsonl"  # 0.4.0-0.4.2: one JSON array, indented
    old.write_text(json.dumps([{"doc_id": 0, "target": "#### 5", "arguments": [["q", {}]], "resps": [["#### 5"]]},
                               {"doc_id": 1, "target": "#### 6", "arguments": [["q", {}]], "resps": [["#### 7"]]}],
                              indent=2))
    records = import_lm_eval(old, policy=given_policy("initial"), request="hash", task="gsm8k")
    assert [r["reference"] for r in records] == ["5", "6"]
    with pytest.raises(ResponseFileError, match="task cannot be read from this file name; pass --task"):
        import_lm_eval(old, policy=given_policy("initial"), request="hash")
    assert len(import_lm_eval(tmp_path, policy=given_policy("initial"), request="hash", task="gsm8k")) == 2  # the folder
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ResponseFileError, match="no lm-eval samples files"):
        import_lm_eval(empty, policy=given_policy("initial"), request="hash", task="gsm8k")
    assert main(["lm-eval", str(empty), "-o", str(tmp_path / "o.jsonl"), "--policy", "initial"]) == 2


def run_shipped_tasks(model: Path, out: Path, data: dict[str, Path]) -> dict:
    """lm-eval (PyPI's, its Python API and ``hf`` model, as ``lm_eval --apply_chat_template --log_samples`` runs)
    on every shipped task, pointed at local documents; samples land in ``out/<dataset>/``, one folder per dataset."""
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    from crossed_rlvr.lm_eval_tasks import localize, parse_task_name

    names = localize(out / "tasks", data)
    tracker = EvaluationTracker(output_path=str(out / "lm_eval"))
    results = simple_evaluate(model="hf", model_args=f"pretrained={model},dtype=float32", tasks=names,
                              batch_size=24, device="cpu", limit=2, log_samples=True, evaluation_tracker=tracker,
                              apply_chat_template=True, gen_kwargs="max_gen_toks=8",  # the tiny model's budget
                              task_manager=TaskManager(include_path=str(out / "tasks"), include_defaults=False))
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)  # also dates the samples files: first
    for name in names:
        tracker.save_results_samples(task_name=name, samples=samples[name])
    for file in (out / "lm_eval").rglob("samples_*.jsonl"):
        dataset = parse_task_name(file.stem.removeprefix("samples_").rsplit("_", 1)[0])[0]
        (out / dataset).mkdir(exist_ok=True)
        file.rename(out / dataset / file.name)
    return results


def test_real_lm_eval_run_of_the_shipped_tasks_is_imported_crossed(tiny, tmp_path):
    """The shipped tasks of both datasets, requests and wordings, run by lm-eval on a tiny local model over
    generated arithmetic items (the local tasks include the shipped YAMLs and change only where documents come
    from, so their prompts, decoding and filters are what runs): each prompt is byte for byte the one crossed-eval
    renders, and crossed-import reads each dataset's folder as one crossed set whose cells carry the request and
    wording their task names say."""
    from transformers import AutoTokenizer

    from crossed_rlvr.eval.ingest.lm_eval import task_of_file
    from crossed_rlvr.lm_eval_tasks import TEMPLATES, hub_row, parse_task_name, task_config
    from crossed_rlvr.prompts import messages, render
    from crossed_rlvr.tasks.arith import generate

    items = generate({2: 2}, seed=7)
    data = {}
    for dataset in ("gsm8k", "math500"):
        data[dataset] = tmp_path / f"{dataset}.jsonl"
        data[dataset].write_text("".join(json.dumps(hub_row(it, dataset)) + "\n" for it in items))
    results = run_shipped_tasks(tiny, tmp_path, data)
    tok = AutoTokenizer.from_pretrained(tiny)
    for dataset in ("gsm8k", "math500"):
        out = tmp_path / f"{dataset}.responses.jsonl"
        assert main(["lm-eval", str(tmp_path / dataset), "-o", str(out), "--policy", "initial", "--task", dataset]) == 0
        records = read_responses([out]).records
        cells = {(r["request"], r["template"]) for r in records}
        assert cells == {(q, t) for q in ("hash", "boxed") for t in TEMPLATES}
        assert len(records) == len(cells) * len(items) and {r["task"] for r in records} == {dataset}
        for r in records:
            item = items[int(r["item_id"])]
            task = task_of_file(Path(r["source"].rsplit(":", 1)[0]))
            assert parse_task_name(task) == (dataset, r["request"], r["template"])
            assert r["prompt_sha256"] == render(tok, messages(item["question"], r["request"], r["template"]))[2]
            assert r["reference"] == item["reference"]
        for file in (tmp_path / dataset).glob("samples_*.jsonl"):
            task = task_of_file(file)
            lines = [json.loads(x) for x in file.read_text().splitlines()]
            assert {x["filter"] for x in lines} == {"hash", "boxed"}  # the shipped filters ran
            shipped = task_config(*parse_task_name(task))["generation_kwargs"]
            assert all(x["arguments"]["gen_args_0"]["arg_1"] == {**shipped, "max_gen_toks": 8} for x in lines)
            assert {"exact_match,hash", "exact_match,boxed"} <= set(results["results"][task])


def verl_dir(tmp_path):
    folder = tmp_path / "val"
    folder.mkdir()
    for step, text in [(0, "#### 5"), (100, "\\boxed{5}")]:
        rows = [{"input": f"user: q{i}\nassistant:", "output": text, "gts": str(5 + (i == 2)), "score": 1.0,
                 "step": step, "acc": 1.0} for i in (0, 1, 2, 0, 1, 2)]  # val_kwargs.n = 2
        (folder / f"{step}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return folder


def test_verl_import_and_score(tmp_path):
    folder = verl_dir(tmp_path)
    records = import_verl_dump(folder / "100.jsonl", policy=given_policy("grpo-boxed/s1", "boxed", 1),
                               request="boxed")
    assert [r["sample_idx"] for r in records] == [0, 0, 0, 1, 1, 1]
    assert records[0]["item_id"] == records[3]["item_id"] != records[1]["item_id"]
    assert records[0]["verl_step"] == 100
    assert (records[0]["method"], records[0]["checkpoint"]) == ("grpo", "")
    steps = import_verl_steps(folder, policy=given_policy("grpo-boxed/s1", "boxed", 1),
                              request="boxed", template="original", task="gsm8k")
    assert {(r["policy"], r["checkpoint"]) for r in steps} >= {("grpo-boxed/s1@step100", "step100")}
    # Through the CLI (last step by default), then re-scored with the full panel.
    out = tmp_path / "resp" / "boxed.jsonl"
    out.parent.mkdir()
    assert main(["verl", str(folder), "-o", str(out), "--policy", "grpo-boxed/s1", "--training-convention", "boxed",
                 "--train-seed", "1", "--request", "boxed", "--task", "gsm8k"]) == 0
    assert len(read_responses([out]).records) == 6
    assert main(["verl", str(folder), "-o", str(out), "--policy", "x"]) == 2  # never overwrites
    scores = pd.read_parquet(score_files([out], tmp_path / "s.parquet", workers=0, progress=False))
    by_ref = scores.groupby("reference")["boxed_first.correct"].mean()
    assert by_ref.to_dict() == {"5": 1.0, "6": 0.0}


def test_verl_dump_task_is_read_or_refused_never_guessed(tmp_path, capsys):
    """A MATH dump imported without --task was labelled gsm8k and scored strict 0.125 instead of
    1.0. The task comes from the rows' data_source (crossed_rlvr/<task>/<request>) or --task, else refusal."""
    row = {"input": "Simplify 2/4.\nPut the final answer in \\boxed{}.", "output": "\\boxed{\\frac12}",
           "gts": "\\frac{1}{2}", "score": 1.0, "step": 5}
    bare = tmp_path / "bare" / "5.jsonl"
    bare.parent.mkdir()
    bare.write_text(json.dumps(row) + "\n")
    out = tmp_path / "a.jsonl"
    assert main(["verl", str(bare.parent), "-o", str(out), "--policy", "grpo-boxed/s1", "--request", "boxed"]) == 2
    err = capsys.readouterr().err
    assert "does not say its task" in err and "give --task (one of" in err and "math500" in err
    assert not out.exists()
    said = tmp_path / "said" / "5.jsonl"
    said.parent.mkdir()
    said.write_text(json.dumps({**row, "data_source": "crossed_rlvr/math500/boxed"}) + "\n")
    assert main(["verl", str(said.parent), "-o", str(out), "--policy", "grpo-boxed/s1", "--request", "boxed"]) == 0
    assert {r["task"] for r in read_responses([out]).records} == {"math500"}


def test_verl_dump_without_ground_truth(tmp_path):
    path = tmp_path / "3.jsonl"
    path.write_text(json.dumps({"input": "q", "output": "a", "score": 0.0, "step": 3}) + "\n")
    with pytest.raises(ResponseFileError, match=r"3\.jsonl:1: missing field 'gts'"):
        import_verl_dump(path, policy=given_policy("initial", "initial"))


def test_reference_from_target():
    assert reference_from_target("Janet...\n#### 1,234") == "1234"
    assert reference_from_target(42) == "42"
    assert reference_from_target("\\frac{1}{2}") == "\\frac{1}{2}"


def test_imported_set_without_a_crossed_pair_says_what_is_missing(tmp_path, capsys):
    from crossed_rlvr.analysis.report.folder import analyze
    from crossed_rlvr.records import write_responses

    folder = crossed_lm_eval_folder(tmp_path)
    files = []
    for policy in ("initial", "grpo-hash/s83"):
        out = tmp_path / "resp" / f"{policy.replace('/', '_')}.jsonl"
        out.parent.mkdir(exist_ok=True)
        write_responses(out, import_lm_eval(folder, policy=given_policy(policy), task="gsm8k"))
        files.append(out)
    scores = score_files(files, tmp_path / "s.parquet", workers=0, progress=False)
    analyze(scores, tmp_path / "a", n_resamples=50, figures=False)
    err = capsys.readouterr().err
    assert "no crossed pair" in err and "gsm8k/original: arms trained on hash but none on boxed" in err
    report = (tmp_path / "a" / "report.md").read_text()
    assert "- missing: gsm8k/original: arms trained on hash but none on boxed" in report
    assert "| n/a/n/a |" in report  # truncation of imported responses is unknown, not 0


def _lm(doc, target="#### 5", resps=(("#### 5",),), question="What is 2+3?", suffix=None):
    from crossed_rlvr.rewards.conventions import request_suffix

    prompt = f"{question}\n{suffix or request_suffix('hash', 'original')}"
    return {"doc_id": doc, "target": target, "resps": [list(r) for r in resps][:1] if resps else [],
            "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {}}}}


# (what the file holds, the first words of the error): bad rows never become data
LM_EVAL_BAD = [
    ([_lm(0, target=None)], "samples_gsm8k.jsonl:1: field 'target' is null"),
    ([_lm(0, resps=((None,),))], "samples_gsm8k.jsonl:1: field 'resps' generation 0 is null, not text"),
    ([_lm(0, resps=((),))], "samples_gsm8k.jsonl:1: field 'resps' holds no generation for doc_id 0"),
    ([_lm(0), _lm(0, resps=(("#### 7",),))], "samples_gsm8k.jsonl:2: doc_id 0 repeated with other responses"),
    ([_lm({"a": 1})], "samples_gsm8k.jsonl:1: field 'doc_id' must be an integer or a string, got dict"),
    ([], "no samples (an empty input is never an empty result)"),
]


@pytest.mark.parametrize(("rows", "first"), LM_EVAL_BAD)
def test_bad_lm_eval_rows_are_refused_with_file_line_and_field(tmp_path, rows, first):
    path = tmp_path / "samples_gsm8k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ResponseFileError) as info:
        import_lm_eval(path, policy=given_policy("initial"))
    assert first in str(info.value), str(info.value)


def test_lm_eval_variants_pair_only_the_same_question(tmp_path):
    from crossed_rlvr.rewards.conventions import request_suffix

    folder = tmp_path / "out"
    folder.mkdir()
    hash_rows = [_lm(0, question="Q zero?"), _lm(1, question="Q one?")]
    boxed_rows = [_lm(0, question="Q one?", suffix=request_suffix("boxed", "original")),  # reversed order
                  _lm(1, question="Q zero?", suffix=request_suffix("boxed", "original"))]
    (folder / "samples_gsm8k_hash.jsonl").write_text("".join(json.dumps(r) + "\n" for r in hash_rows))
    (folder / "samples_gsm8k_boxed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in boxed_rows))
    with pytest.raises(ResponseFileError, match=r"doc_id 0 holds another question than under request"):
        import_lm_eval(folder, policy=given_policy("initial"), task="gsm8k")


VERL_BAD = [
    ('{"input": "q #### x", "output": null, "gts": "5"}\n', "5.jsonl:1: field 'output' is null"),
    ('{"input": "q", "output": "a", "gts": null}\n', "5.jsonl:1: field 'gts' is null"),
    ("7\n", "5.jsonl:1: a row must be a JSON object, got int"),
    ("", "5.jsonl: no rows"),
    ('{"input": "q", "output": "a", "gts": "5", "uid": "u1"}\n{"input": "q", "output": "b", "gts": "5", "uid": "u1"}\n',
     "5.jsonl:2: the same sample as at"),
]


@pytest.mark.parametrize(("text", "first"), VERL_BAD)
def test_bad_verl_rows_are_refused_with_file_line_and_field(tmp_path, text, first):
    path = tmp_path / "5.jsonl"
    path.write_text(text)
    with pytest.raises(ResponseFileError) as info:
        import_verl_dump(path, policy=given_policy("initial", "initial"), request="hash")
    assert first in str(info.value), str(info.value)


def test_non_utf8_bytes_and_missing_inputs_are_errors_not_tracebacks(tmp_path, capsys):
    path = tmp_path / "5.jsonl"
    path.write_bytes(b'{"input": "q", "output": "\xff\xfe", "gts": "5"}\n')
    with pytest.raises(ResponseFileError, match=r"5\.jsonl:1: not UTF-8 text"):
        import_verl_dump(path, policy=given_policy("initial", "initial"), request="hash")
    lm = tmp_path / "samples_gsm8k.jsonl"
    lm.write_bytes(b'{"doc_id": 0, "target": "\xff"}\n')
    with pytest.raises(ResponseFileError, match=r"samples_gsm8k\.jsonl:1: not UTF-8 text"):
        import_lm_eval(lm, policy=given_policy("initial"))
    assert main(["verl", str(tmp_path / "nope"), "-o", str(tmp_path / "o.jsonl"), "--policy", "initial",
                 "--task", "gsm8k"]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_an_imported_policy_named_outside_the_scheme_carries_the_method_given(tmp_path):
    """crossed-import makes the policy once from its flags: a name of the user's own with ``--method`` stores that
    method on every record and every step's checkpoint, never one read back from the name."""
    folder = verl_dir(tmp_path)
    out = tmp_path / "mine.jsonl"
    assert main(["verl", str(folder), "-o", str(out), "--policy", "my boxed run", "--training-convention", "boxed",
                 "--train-seed", "4", "--method", "ppo", "--request", "boxed", "--task", "gsm8k",
                 "--all-steps"]) == 0
    records = read_responses([out]).records
    assert {(r["policy"], r["method"], r["checkpoint"], r["train_seed"]) for r in records} == {
        ("my boxed run@step0", "ppo", "step0", 4), ("my boxed run@step100", "ppo", "step100", 4)}
