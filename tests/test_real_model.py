"""The real SmolLM2-135M-Instruct through every stage of the study at CI size.

Toy models hide what real ones show: the chat template, special tokens, the end-of-turn token, sampling
of a pretrained distribution. One module-scoped run (about four minutes on 2 cores): a warm start of two
steps with its sampled request-following checks, one GRPO update of each arm of one seed, and the
crossed evaluation of a handful of items, scored and analysed.
"""

import hashlib
import json

import pandas as pd
import pytest
from hydra import compose, initialize_config_module

from crossed_rlvr.study.pipeline import Study

# one worker runs the real model's study once for every test here (tests/conftest.py)
WORKER_GROUP = "real_model"
SHARED_FIXTURES = ("real",)
# the module's study takes ~6 minutes on a quiet 2-core machine and ~10 beside the exclusive chain's engines:
# more than the suite's 600 s per test, which its first test's set-up counts
pytestmark = pytest.mark.timeout(1500)

# What the tests below read, and no more: two warm-start steps of 4 items, each with its sampled check, one GRPO
# update per arm of completions cut at 32 tokens (no validation during training: none is asserted here; the
# rewards only need to come from the reward programs), 4 items crossed at the evaluation's 64. Decoding a 135M
# model is memory-bound on a CPU (~50 ms a step at any small batch), so the sampled tokens are what costs. The
# evaluation of 4 items runs serially: Ray workers would start for less work than their start-up.
SHRINK = ["experiment=real-cpu", "tracking=off", "initial.train_items=8", "sft.effective_batch=4",
          "sft.per_device_batch=4", "sft.epochs=1", "initial.band.every=1", "initial.band.n_items=2",
          "recipe.updates=1", "recipe.prompts_per_update=2", "recipe.group_size=4", "recipe.max_response_tokens=32",
          "engine.micro_batch=8",
          "arms.seeds=[83]", "arms.train_items=8", "validation.every=0", "evaluation.n_items=4",
          "evaluation.templates=[original]", "analysis.resamples=100", "eval.max_new_tokens=64",
          "distribute.workers=0"]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    run = tmp_path_factory.mktemp("real") / "study"
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_study", overrides=[f"run_dir={run}", *SHRINK])
    return run, Study(cfg).run_all()


def _records(run):
    out = []
    for path in sorted((run / "eval" / "responses").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return out


def test_the_real_models_prompts_go_through_its_chat_template(real):
    from crossed_rlvr.policies.loading import load_tokenizer
    from crossed_rlvr.prompts import messages, render

    run, _ = real
    tok = load_tokenizer(run / "models" / "initial")
    items = {json.loads(x)["item_id"]: json.loads(x) for x in (run / "eval" / "items" / "arith_tiny-test.jsonl")
             .read_text().splitlines()}
    for rec in _records(run):
        text, _ids, sha = render(tok, messages(items[rec["item_id"]]["question"], rec["request"], rec["template"]))
        assert rec["prompt_sha256"] == sha == hashlib.sha256(text.encode()).hexdigest()
        assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")


def test_responses_end_at_the_end_of_turn_and_records_are_complete(real):
    run, _ = real
    records = _records(run)
    # 3 policies (initial, grpo-hash/s83, grpo-boxed/s83) x 2 requests x 4 items
    assert len(records) == 24
    assert {(r["policy"], r["request"]) for r in records} == {
        (p, q) for p in ("initial", "grpo-hash/s83", "grpo-boxed/s83") for q in ("hash", "boxed")}
    stopped = [r for r in records if r["finish_reason"] == "stop"]
    assert stopped, "no response ended at <|im_end|>"
    for r in records:
        assert "<|im_end|>" not in r["response"] and "<|im_start|>" not in r["response"]
        assert r["response_tokens"] <= 64 and (r["finish_reason"] == "length") == (r["response_tokens"] == 64)
    # the warm start trained on targets ending in the end-of-turn token, not the GGUF's <|im_start|> "eos"
    from crossed_rlvr.policies.loading import load_tokenizer

    assert load_tokenizer(run / "models" / "initial").eos_token == "<|im_end|>"


def test_the_warm_start_measures_request_following_by_sampling(real):
    run, _ = real
    warm = json.loads((run / "models" / "initial" / "sft_summary.json").read_text())
    assert warm["base"].endswith("smollm2-135m-instruct") and warm["steps"] == 2
    assert [c["step"] for c in warm["checks"]] == [0, 1, 2]
    assert warm["before"]["step"] == 0 and warm["after"]["step"] == 2
    assert all(0.0 <= c[r] <= 1.0 for c in warm["checks"] for r in ("hash", "boxed"))
    assert "## Warm start of the initial policy" in (run / "analysis" / "report.md").read_text()
    # the checks sample in the precision the evaluation generates in (eval.dtype=auto on this machine)
    from crossed_rlvr.machine import eval_dtype

    assert warm["band"]["bf16"] is (eval_dtype("auto") == "bfloat16")


def test_training_rewards_come_from_the_reward_programs(real):
    from crossed_rlvr.rewards.programs import reward

    run, _ = real
    for conv in ("hash", "boxed"):
        metrics = [json.loads(x) for x in (run / "train" / conv / "s83" / "metrics.jsonl").read_text().splitlines()]
        assert len(metrics) == 1 and f"rewards/{conv}_reward/mean" in metrics[0]
    scores = pd.read_parquet(run / "eval" / "scores.parquet")
    records = {(r["policy"], r["request"], r["item_id"]): r for r in _records(run)}
    assert len(scores) == len(records)
    for row in scores.to_dict("records"):
        rec = records[(row["policy"], row["request"], row["item_id"])]
        for conv in ("hash", "boxed"):
            assert row[f"reward_{conv}.correct"] == reward(conv, rec["response"], rec["reference"])


def test_the_real_model_writes_code_scored_crossed_in_the_sandbox(real, tmp_path, monkeypatch):
    """The CI-sized variant of the HumanEval run (docs/code-tasks.md: crossed-audit preset=code): the real model
    answers 3 HumanEval+ tasks under both code requests, 2 samples each; every response is a contract record, read
    by the code readers and run in the sandbox, and the cells and D.3 contrasts are written, in a code study's run
    folder, by the study's own code steps."""
    import json

    import crossed_rlvr.eval.generate.runner as runner
    from crossed_rlvr.conf.schema import AuditConf, conf_of
    from crossed_rlvr.records import read_responses
    from crossed_rlvr.study.audit import Audit

    run, _ = real
    out = tmp_path / "code"
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_audit", overrides=[
            "preset=code", f"initial={run / 'models' / 'initial'}", "evaluation.n_items=3", "evaluation.samples=2",
            "eval.max_new_tokens=96", "eval.batch_size=12", "analysis.resamples=200", f"run_dir={out}"])
    cfg = conf_of(AuditConf, cfg)  # typed as the command's door types it
    Audit(cfg).run()
    table = pd.read_csv(out / "analysis" / "cells.csv")
    files = sorted((out / "eval" / "responses").glob("*.jsonl"))  # one per policy and code request, each with its settings
    assert [f.name for f in files] == ["initial__begin_done__original.jsonl", "initial__fence__original.jsonl"]
    assert all(f.with_suffix(".meta.json").exists() for f in files)
    records = read_responses(files, prompt_names=True).records
    assert len(records) == 3 * 2 * 2 and {r["request"] for r in records} == {"fence", "begin_done"}
    assert {r["task"] for r in records} == {"humaneval_plus"}
    scores = pd.read_parquet(out / "eval" / "scores.parquet")
    assert len(scores) == len(records)
    assert (scores["lenient.correct"] >= scores["strict.correct"]).all()  # lenient finds whatever strict finds
    assert set(scores["strict.status"]) <= {"none", "pass/pass", "pass/fail", "fail/fail", "fail/pass",
                                            "timeout/fail", "timeout/timeout", "fail/timeout", "memory/fail",
                                            "fail/memory", "pass/timeout", "pass/memory"}
    assert sorted(table["request"]) == ["begin_done", "fence"]
    assert table[["payload", "strict.pass@1", "lenient.pass@1", "strict.pass@2"]].stack().between(0, 1).all()
    con = pd.read_csv(out / "analysis" / "contrasts.csv")
    assert set(con["name"]) == {"gamma"}  # one policy: no gains
    assert "## Gaps, gains and coverage" in (out / "analysis" / "report.md").read_text()
    stamps = {s: json.loads((out / "stages" / f"{s}.json").read_text()) for s in ("eval", "score", "analyze")}
    # finished stages are reused: a second run generates and runs nothing and gives the same cells
    monkeypatch.setattr(runner, "load_backend", lambda *a, **k: pytest.fail("a finished evaluation was generated again"))
    Audit(cfg).run()
    pd.testing.assert_frame_equal(table, pd.read_csv(out / "analysis" / "cells.csv"))
    assert all(json.loads((out / "stages" / f"{s}.json").read_text()) == stamps[s] for s in stamps)


def test_crossed_audit_reports_the_crossed_interaction_of_checkpoints_given_by_folder(real, tmp_path):
    """``crossed-audit``, as a user with their own checkpoints runs it: SmolLM2-135M-Instruct's converted folder as
    the base and the study's two arms saved as plain Hugging Face folders outside any study layout, as the hash and
    boxed policies. The report gives I_P with its paired-bootstrap interval; run again, nothing is generated."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from crossed_rlvr.policies.smollm import smollm2_135m_dir
    from crossed_rlvr.study.audit import study_policies

    run, _ = real
    trained = study_policies(run)
    folders = {}
    for conv in ("hash", "boxed"):
        folders[conv] = tmp_path / f"my-{conv}-checkpoint"
        shutil.copytree(trained[f"grpo-{conv}/s83"], folders[conv])
    out = tmp_path / "audit"
    cmd = [str(Path(sys.executable).parent / "crossed-audit"), f"initial={smollm2_135m_dir()}",
           f"hash={folders['hash']}", f"boxed={folders['boxed']}", "task=arith", "task.n_items=4",
           "evaluation.templates=[original]", "eval.max_new_tokens=64", "analysis.resamples=200", f"run_dir={out}"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.strip() == str(out / "analysis" / "report.md")
    con = pd.read_csv(out / "analysis" / "contrasts.csv")
    i_p = con[(con.name == "interaction") & (con.measure == "payload") & (con.policy == "given/s0")]
    assert list(i_p.request) == ["hashxboxed"], con[con.name == "interaction"]
    assert i_p[["estimate", "ci_low", "ci_high"]].notna().all().all()
    assert (i_p.ci_low <= i_p.estimate).all() and (i_p.estimate <= i_p.ci_high).all()
    report = (out / "analysis" / "report.md").read_text()
    assert "| given/s0 | hashxboxed |" in report or "hashxboxed · given" in report
    responses = sorted((out / "eval" / "responses").glob("*.jsonl"))
    assert [f.name for f in responses] == [
        "given-boxed_s0__boxed__original.jsonl", "given-boxed_s0__hash__original.jsonl",
        "given-hash_s0__boxed__original.jsonl", "given-hash_s0__hash__original.jsonl",
        "initial__boxed__original.jsonl", "initial__hash__original.jsonl"]
    before = {f: f.stat().st_mtime_ns for f in responses}
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "eval: reused" in second.stderr and "crossed-eval" not in second.stderr.replace("eval: reused", "")
    assert {f: f.stat().st_mtime_ns for f in responses} == before
    from tests.view_fixtures import check_study_in_browser

    check_study_in_browser(out)  # crossed-view on the audit's folder: its grid, cells and pairs, as the analysis's



def test_crossed_audit_is_the_front_door_for_a_code_task_too(real, tmp_path):
    """The same command with a code task: the policies are given by the code conventions (``fence``,
    ``begin_done``), write programs under both code requests, and the code study's own steps run them in the
    sandbox and analyse them (pass@k, γ) into the same folder shape."""
    import subprocess
    import sys
    from pathlib import Path

    from crossed_rlvr.study.audit import study_policies

    run, _ = real
    base = study_policies(run)["initial"]
    out = tmp_path / "audit-code"
    cmd = [str(Path(sys.executable).parent / "crossed-audit"), f"initial={base}", f"fence={base}",
           "task=humaneval_plus", "evaluation.n_items=2", "eval.max_new_tokens=48", "analysis.resamples=100",
           f"run_dir={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(f.name for f in (out / "eval" / "responses").glob("*.jsonl")) == [
        "given-fence_s0__begin_done__original.jsonl", "given-fence_s0__fence__original.jsonl",
        "initial__begin_done__original.jsonl", "initial__fence__original.jsonl"]
    cells = pd.read_csv(out / "analysis" / "cells.csv")
    assert sorted(set(cells["request"])) == ["begin_done", "fence"] and "strict.pass@1" in cells
    assert "## Gaps, gains and coverage" in (out / "analysis" / "report.md").read_text()
