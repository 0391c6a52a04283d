"""A reporting convention added from outside the package, as CONTRIBUTING.md's "Adding a convention" shows: lighteval's
GSM8K request (the answer on its own last line, ``ANSWER: <answer>``), one :class:`Convention` defined in this file and
registered by naming it in ``CROSSED_RLVR_CONVENTIONS``, with no package file edited. It is registered in a child
process (``python -m tests.test_new_convention``) and every process that one starts, so the suite's own processes keep the registry
as the package ships it. The child trains an arm on the new convention's reward from the smoke study's warm-started
policy (one update, crossed validation under both requests before and after it), evaluates it and the initial policy crossed under the
hash and the new request, scores every response and writes the report, then says what the engines' reward entries
and the panel make of a few responses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crossed_rlvr.rewards import text as tx
from crossed_rlvr.rewards.conventions import Convention, RewardProgram

ROOT = Path(__file__).resolve().parents[1]

# ``ANSWER:`` starting a line, then a number: the request's own ``ANSWER: $ANSWER`` is no payload
ANSWER_LINE = re.compile(r"^ANSWER:[ \t]*+(\$?-?[0-9][0-9,]*+(?:\.[0-9]++)?+)", re.M)


def _answers(text: str) -> list[str]:
    return ANSWER_LINE.findall(text) if "ANSWER:" in text else []


def _last(text: str) -> str | None:
    found = _answers(text)
    return found[-1] if found else None


CONVENTION = Convention(
    "answer_line", 'on its own last line in the form "ANSWER: $ANSWER" (without quotes)', "ANSWER: {answer}",
    "ANSWER: <number> at the start of a line",
    RewardProgram("answer_line", _answers, anchor="ANSWER:"),
    count=lambda text: len(_answers(text)), last_payload=_last,
    readers=(("answer_line_last", lambda text: tx.last_number_in(_last(text) or "")),))


def child(run_dir: Path, warm_cache: Path) -> dict:
    """Run the registered convention through a study's arms, evaluation, scoring and report, and read it back."""
    from crossed_rlvr.eval.score.panel import score_response
    from crossed_rlvr.rewards.conventions import CONVENTIONS, request_suffix
    from crossed_rlvr.study.pipeline import Study
    from crossed_rlvr.train.trl_reward import make_trl_reward
    from crossed_rlvr.train.verl_reward import compute_score
    from tests.helpers import study_cfg

    assert CONVENTIONS["answer_line"].marker_phrase == CONVENTION.marker_phrase  # registered from the environment
    summary = Study(study_cfg(run_dir, "experiment=smoke", f"initial.cache_dir={warm_cache}", "arms.seeds=[83]",
                              "arms.conventions=[answer_line]", "evaluation.requests=[hash,answer_line]",
                              "validation.requests=[hash,answer_line]", "evaluation.templates=[original]",
                              "recipe.updates=1", "evaluation.n_items=8", "tracking=off")).run_all()
    trl = make_trl_reward("answer_line")
    said = ["Work it out.\nANSWER: 18", "#### 18", "ANSWER: 17", "It is 18.\nANSWER: $ANSWER"]
    return {
        "stages": {s: t["reused"] for s, t in summary["stages"].items()},
        "suffix": request_suffix("answer_line", "para_a"),
        "trl": trl(completions=said, reference=["18"] * len(said)),
        "verl": [compute_score("arith_tiny", text, "18", {"convention": "answer_line"})["score"] for text in said],
        "verl_validation": compute_score("arith_tiny", said[0], "18", {"convention": "answer_line",
                                                                      "request": "answer_line"}),
        "rows": [score_response(text, "18", "answer_line") for text in (*said, "#### 18\nANSWER: 18")],
    }


@pytest.mark.long
def test_a_convention_registered_outside_the_package_runs_through_the_whole_study(warm_cache, tmp_path):
    import pandas as pd

    run = tmp_path / "study"
    env = {**os.environ, "CROSSED_RLVR_CONVENTIONS": "tests.test_new_convention:CONVENTION"}
    proc = subprocess.run([sys.executable, "-m", "tests.test_new_convention", str(run), str(warm_cache),
                           str(tmp_path / "out.json")],
                          capture_output=True, text=True, cwd=ROOT, env=env, check=False, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert not any(out["stages"][s] for s in ("arms", "eval", "score", "analyze"))
    assert out["suffix"] == ('Think through the problem step by step. Give the final answer on its own last line in '
                             'the form "ANSWER: $ANSWER" (without quotes).')
    # training rewards: both engines' entries read the new program (the last ANSWER: line, compared exactly)
    assert out["trl"] == out["verl"] == [1.0, 0.0, 0.0, 0.0]
    assert out["verl_validation"]["payload"] == 1.0 and out["verl_validation"]["strict"] == 1.0
    # the panel: its payload, its strict reader and its program as a reader; with no partner, any other
    # convention's payload is the other one (Table 11)
    first, hashed, wrong, template, both = out["rows"]
    assert first["requested_payload"] and first["answer_line_last.correct"] and first["reward_answer_line.correct"]
    assert first["category"] == "requested_only" and first["extractable"]
    assert hashed["category"] == "other_only" and not hashed["extractable"] and hashed["strict_first_hash.correct"]
    assert wrong["requested_payload"] and not wrong["answer_line_last.correct"]
    assert template["category"] == "neither"  # the request's own wording is no payload
    assert both["category"] == "both"
    # the study: the arm trained on the new reward, both policies under both requests, every response scored
    arm = run / "train" / "answer_line" / "s83"
    assert (arm / "checkpoints").is_dir(), sorted(p.name for p in arm.iterdir())
    scores = pd.read_parquet(run / "eval" / "scores.parquet")
    assert set(scores.policy) == {"initial", "grpo-answer_line/s83"}
    assert set(scores.request) == {"hash", "answer_line"} and set(scores.template) == {"original"}
    assert {"payload.answer_line", "answer_line_last.correct", "reward_answer_line.correct"} <= set(scores.columns)
    mine = scores[scores.request == "answer_line"]
    assert (mine["extractable"] == mine["answer_line_last.answer"].notna()).all()
    assert (mine["requested_payload"] == mine["payload.answer_line"]).all()
    cells = pd.read_csv(run / "analysis" / "cells.csv")
    assert {("initial", "answer_line"), ("grpo-answer_line/s83", "answer_line")} <= set(zip(cells.policy,
                                                                                            cells.request))
    contrasts = pd.read_csv(run / "analysis" / "contrasts.csv")
    gains = contrasts[(contrasts.name == "delta_P") & (contrasts.request == "answer_line")]
    assert set(gains.policy) >= {"grpo-answer_line/s83"}
    report = (run / "analysis" / "report.md").read_text()
    assert "answer_line" in report


if __name__ == "__main__":  # python -m tests.test_new_convention RUN WARM_CACHE OUT, from the repository's root
    result = child(Path(sys.argv[1]), Path(sys.argv[2]))
    Path(sys.argv[3]).write_text(json.dumps(result, default=str))
