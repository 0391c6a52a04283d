"""Importers: lm-eval --log_samples and verl validation dumps -> response records -> scores."""

import json

import pandas as pd
import pytest

from crossed_rlvr.eval.importers import import_lm_eval, import_verl_dump, main, reference_from_target
from crossed_rlvr.eval.records import ResponseFileError, read_responses
from crossed_rlvr.eval.scoring import score_files


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
    records = import_lm_eval(lm_eval_file(tmp_path), policy="initial")
    assert len(records) == 4  # 2 docs x 2 repeats; the second filter's lines are not read again
    assert {r["task"] for r in records} == {"gsm8k"}
    assert [r["reference"] for r in records] == ["18", "18", "1234", "1234"]
    assert [r["sample_idx"] for r in records] == [0, 1, 0, 1]
    assert records[0]["response_tokens"] == -1 and records[0]["finish_reason_known"] is False


def test_lm_eval_older_argument_layout(tmp_path):
    path = tmp_path / "samples_x.jsonl"
    path.write_text(json.dumps({"doc_id": 3, "target": "7", "arguments": [["prompt", {}]], "resps": [["#### 7"]]}) + "\n")
    (rec,) = import_lm_eval(path, policy="grpo-hash/s1", training_convention="hash", train_seed=1, task="arith")
    assert rec["item_id"] == "3" and rec["reference"] == "7" and rec["policy"] == "grpo-hash/s1"


def test_lm_eval_bad_line_is_named(tmp_path):
    path = tmp_path / "samples_x.jsonl"
    path.write_text(json.dumps({"doc_id": 1, "target": "7", "arguments": [["p", {}]], "resps": [["a"]]}) + "\n"
                    + json.dumps({"doc_id": 2, "target": "7", "resps": [["a"]]}) + "\n")
    with pytest.raises(ResponseFileError, match=r"samples_x\.jsonl:2: missing field 'arguments'|"
                                                 r"samples_x\.jsonl:2: field 'arguments'"):
        import_lm_eval(path, policy="initial")


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
    records = import_verl_dump(folder / "100.jsonl", policy="grpo-boxed/s1", training_convention="boxed", train_seed=1,
                               request="boxed")
    assert [r["sample_idx"] for r in records] == [0, 0, 0, 1, 1, 1]
    assert records[0]["item_id"] == records[3]["item_id"] != records[1]["item_id"]
    assert records[0]["verl_step"] == 100
    # Through the CLI (last step by default), then re-scored with the full panel.
    out = tmp_path / "resp" / "boxed.jsonl"
    out.parent.mkdir()
    assert main(["verl", str(folder), "-o", str(out), "--policy", "grpo-boxed/s1", "--training-convention", "boxed",
                 "--train-seed", "1", "--request", "boxed"]) == 0
    assert len(read_responses([out]).records) == 6
    assert main(["verl", str(folder), "-o", str(out), "--policy", "x"]) == 2  # never overwrites
    scores = pd.read_parquet(score_files([out], tmp_path / "s.parquet", workers=0, progress=False))
    by_ref = scores.groupby("reference")["boxed_first.correct"].mean()
    assert by_ref.to_dict() == {"5": 1.0, "6": 0.0}


def test_verl_dump_without_ground_truth(tmp_path):
    path = tmp_path / "3.jsonl"
    path.write_text(json.dumps({"input": "q", "output": "a", "score": 0.0, "step": 3}) + "\n")
    with pytest.raises(ResponseFileError, match=r"3\.jsonl:1: missing field 'gts'"):
        import_verl_dump(path, policy="initial", training_convention="initial")


def test_reference_from_target():
    assert reference_from_target("Janet...\n#### 1,234") == "1234"
    assert reference_from_target(42) == "42"
    assert reference_from_target("\\frac{1}{2}") == "\\frac{1}{2}"
