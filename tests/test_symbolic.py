"""MATH500's symbolic readers (paper 001 App. B.4, D.3.1): each string the issue lists, read as the paper reads it.

Before, MATH responses went through GSM8K's numeric readers: ``\\boxed{\\frac{1}{2}}`` read as 2, ``#### \\sqrt{2}``
was no payload, ``#### 2\\sqrt{3}`` read 2, ``#### 12\\sqrt{2}`` was credited for 12, and the payload reader took
the last payload.
"""

import json

import pandas as pd
import pytest

from crossed_rlvr.analysis.report.folder import analyze
from crossed_rlvr.eval.score import score_response
from crossed_rlvr.eval.score.scoring import score_files

# response, reference, request, math_strict (answer, correct), math_verify_payload (last) correct
CASES = [
    ("so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", "boxed", ("\\frac{1}{2}", True), True),
    ("#### \\frac{1}{2}", "\\frac{1}{2}", "hash", ("\\frac{1}{2}", True), True),
    ("#### \\sqrt{2}", "\\sqrt{2}", "hash", ("\\sqrt{2}", True), True),
    ("#### x^2+1", "x^2+1", "hash", ("x^2+1", True), True),
    ("#### 2\\sqrt{3}", "2\\sqrt{3}", "hash", ("2\\sqrt{3}", True), True),
    ("#### 12\\sqrt{2}", "12", "hash", ("12\\sqrt{2}", False), False),
    ("#### 5\nso\n#### 7", "5", "hash", ("5", True), False),  # first payload is primary; last is the diagnostic
    ("#### $\\frac{3}{4}$.", "\\frac{3}{4}", "hash", ("\\frac{3}{4}", True), True),
    ("#### **(1, 2)**", "(1,2)", "hash", ("(1, 2)", True), True),
    ("\\boxed{3} then \\boxed{4}", "3", "boxed", ("3", True), False),
    ("no marker: 5", "5", "hash", (None, False), False),
    ("####\n5", "5", "hash", (None, False), False),  # an empty marker line is no payload
]


@pytest.mark.parametrize(("response", "reference", "req", "strict", "last_ok"), CASES)
def test_symbolic_payload_readers(response, reference, req, strict, last_ok):
    row = score_response(response, reference, req)
    assert (row["math_strict.answer"], row["math_strict.correct"]) == strict
    assert row["math_verify_payload.correct"] is last_ok
    assert row["math_strict.answer"] is not None or not row["math_strict.correct"]


def test_gsm8k_readers_still_read_numbers():
    row = score_response("#### 2\\sqrt{3}", "2", "hash")
    assert row["strict_first_hash.answer"] == "2"  # the frozen GSM8K reader, unchanged for GSM8K
    assert row["math_strict.correct"] is False


def test_lenient_math_reader_reads_the_last_line_then_the_last_number():
    assert score_response("work\n#### \\sqrt{2}", "\\sqrt{2}", "hash")["math_lenient.correct"] is True
    assert score_response("so the answer is 5.", "5", "hash")["math_lenient.correct"] is True
    assert score_response("a long derivation with 7 steps\nDone: 12 apples", "12", "hash")["math_lenient.correct"]


def test_table_17_diagnostics():
    row = score_response("#### 7\n\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", "hash")
    assert row["hash_digit_only"] is True and row["math_hash_box_unequal"] is True
    assert row["math_first_boxed.correct"] is True and row["math_first_hash.correct"] is False


def test_math500_study_is_read_symbolically(tmp_path):
    """crossed-score then crossed-analyze on a MATH500-shaped crossed study: strict accuracy, q^pay and q use the
    symbolic readers; the report gains the Table 15-17 section."""
    refs = ["\\frac{1}{2}", "\\sqrt{2}", "3", "x^2+1"]
    answers = {"initial": ["\\frac{1}{2}", "2", "3", "x"], "grpo-hash/s1": refs, "grpo-boxed/s1": refs}
    records = []
    for policy, vals in answers.items():
        conv = policy.split("-")[1].split("/")[0] if "/" in policy else "initial"
        for request in ("hash", "boxed"):
            for k, (ref, val) in enumerate(zip(refs, vals, strict=True)):
                # the boxed arm boxes even under the hash request; everyone else follows the request
                marker = "boxed" if conv == "boxed" else request
                text = f"Work.\n#### {val}" if marker == "hash" else f"Work. \\boxed{{{val}}}"
                records.append({"item_id": str(k), "task": "math500", "policy": policy, "training_convention": conv,
                                "train_seed": None if conv == "initial" else 1, "request": request,
                                "template": "original", "sample_idx": 0, "gen_seed": k, "prompt_sha256": "x" * 64,
                                "response": text, "finish_reason": "stop", "prompt_tokens": 5,
                                "response_tokens": 5, "reference": ref})
    (tmp_path / "resp").mkdir()
    (tmp_path / "resp" / "all.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    score_files([tmp_path / "resp"], tmp_path / "scores.parquet", workers=1)
    out = analyze(tmp_path / "scores.parquet", tmp_path / "out", n_resamples=50, figures=False)
    cells = pd.read_csv(out / "cells.csv").set_index(["policy", "request", "measure"])["value"]
    assert cells[("initial", "hash", "acc.strict")] == 0.5  # \frac{1}{2} and 3 right; "2" for \sqrt{2} is wrong
    assert cells[("initial", "hash", "payload")] == 1.0 and cells[("initial", "hash", "extractable")] == 1.0
    assert cells[("grpo-boxed/s1", "hash", "payload")] == 0.0  # boxed under the hash request: no hash payload
    assert cells[("grpo-hash/s1", "boxed", "acc.strict")] == 1.0
    report = (out / "report.md").read_text()
    assert "MATH500 readout" in report and "Answer types under hash requests" in report
    assert "| Nonnegative integer (n=1) | initial | 1 | 1 | 1 |" in report
