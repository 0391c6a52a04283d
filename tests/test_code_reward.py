"""The execution reward of code arms (crossed_rlvr/train/code_reward.py): the strict block in the arm's delimiter,
run in the sandbox, rewarded 1 only when it passes base and plus; inside TRL's GRPO loop for both code
conventions, and as verl's reward entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossed_rlvr.rewards.code import CODE_CONVENTIONS, code_request
from crossed_rlvr.sandbox.bwrap import SandboxUnavailable
from crossed_rlvr.tasks.code import tiny_code_rows, write_code_dataset
from crossed_rlvr.train.code_reward import CodeRewardProgram, compute_score, make_trl_code_reward


@pytest.fixture(scope="module")
def tiny_code(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tinycode")
    rows = tiny_code_rows(6)
    write_code_dataset(folder / "tiny.jsonl", rows)
    return folder, rows


def test_rewards_only_a_passing_program_in_the_arms_delimiter(tiny_code):
    folder, rows = tiny_code
    body = rows[0]["canonical_solution"]  # "    return x + a"
    whole = rows[0]["prompt"] + body
    program = CodeRewardProgram(folder / "tiny.jsonl", slots=2, cache_dir=folder / "oracle")
    texts = [f"```python\n{whole}```", f"```python\n{body}```", f"[BEGIN]\n{whole}[DONE]",
             "```python\ndef f(x):\n    return x\n```", f"```python\n{whole}"]
    got = program.score_many(["fence"] * 5, texts, ["TinyCode/0"] * 5)
    # whole function; a body gets the prompt before it; wrong delimiter; wrong code; unclosed block
    assert got == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert program.score_many(["begin_done"], [f"[BEGIN]\n{whole}[DONE]"], ["TinyCode/0"]) == [1.0]
    with pytest.raises(ValueError, match="not in"):
        program.score_many(["fence"], ["x"], ["TinyCode/99"])


def test_verl_entry_reads_the_convention_and_dataset_from_the_row(tiny_code):
    folder, rows = tiny_code
    whole = rows[1]["prompt"] + rows[1]["canonical_solution"]
    info = {"convention": "begin_done", "code_dataset": str(folder / "tiny.jsonl"), "is_weight": 0.5}
    assert compute_score("tinycode", f"[BEGIN]\n{whole}[DONE]", "TinyCode/1", info) == {"score": 1.0, "acc": 1.0,
                                                                                        "is_weight": 0.5}
    with pytest.raises(ValueError, match="extra_info"):
        compute_score("tinycode", "x", "TinyCode/1", {"convention": "fence"})


def test_a_sandbox_failure_is_raised_never_rewarded_zero(tiny_code, monkeypatch):
    import crossed_rlvr.sandbox.bwrap as bwrap

    folder, rows = tiny_code
    program = CodeRewardProgram(folder / "tiny.jsonl", slots=1, cache_dir=folder / "oracle")
    program.score_many(["fence"], ["no block"], ["TinyCode/2"])  # nothing to run: no sandbox needed
    monkeypatch.setattr(bwrap, "PYTHON", "/nonexistent/python3")
    with pytest.raises(SandboxUnavailable):
        program.score_many(["fence"], [f"```python\n{rows[2]['prompt']}    return 0\n```"], ["TinyCode/2"])


@pytest.mark.parametrize("convention", list(CODE_CONVENTIONS))
@pytest.mark.long
def test_both_code_conventions_train_through_trls_grpo_loop(tiny_code, tmp_path, convention):
    """A smoke-size GRPO step of the tiny model per convention, the execution reward as TRL's reward function."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from crossed_rlvr.policies.loading import load_tokenizer
    from crossed_rlvr.policies.tiny import build_tiny_model
    from crossed_rlvr.tasks.code import question
    from tests.helpers import SMALL

    folder, rows = tiny_code
    build_tiny_model(tmp_path / "model", SMALL)
    reward = make_trl_code_reward(convention, folder / "tiny.jsonl", cache_dir=folder / "oracle")
    calls: list[int] = []

    def counted(**kw):
        out = reward(**kw)
        calls.append(len(out))
        assert set(out) <= {0.0, 1.0}
        return out

    counted.__name__ = reward.__name__
    train = Dataset.from_list([{"prompt": f"{question(r['prompt'])}\n{code_request(convention)}",
                                "reference": r["task_id"]} for r in rows[:4]])
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=16, max_steps=1, use_cpu=True, report_to=[], logging_steps=1, beta=0.0,
                      loss_type="grpo", save_strategy="no", disable_tqdm=True, seed=0)
    trainer = GRPOTrainer(model=str(tmp_path / "model"), reward_funcs=[counted], args=args, train_dataset=train,
                          processing_class=load_tokenizer(tmp_path / "model"))
    trainer.train()
    logged = [h for h in trainer.state.log_history if f"rewards/{reward.__name__}/mean" in h]
    assert calls and sum(calls) == 4 and logged


@pytest.mark.long
def test_code_convention_arms_train_by_execution_and_are_evaluated_crossed(tmp_path):
    """``crossed-study task=code_tiny`` with arms of the two code conventions: the initial policy warm-started on
    the training functions in both delimiters; the generated task's train and test functions are disjoint; each
    arm's prompts ask for its delimiter, its reward runs its programs on the training tasks' tests in the sandbox,
    the two arms are checked matched (only the request and the reward differ), and the evaluation reports their
    crossed interaction."""
    import json

    import pandas as pd

    from crossed_rlvr.layout import SFT_SUMMARY
    from crossed_rlvr.study.pipeline import Study
    from crossed_rlvr.tasks.code import generated_split
    from tests.helpers import study_cfg

    split = generated_split(2, 6, 0)
    assert not {r["canonical_solution"] for r in split["test"]} & {r["canonical_solution"] for r in split["train"]}
    run = tmp_path / "study"
    cfg = study_cfg(run, "task=code_tiny", "task.n_test=2", "task.n_train=6", "initial.build=warmstart",
                    "initial.requests=[fence,begin_done]", "initial.templates=[original]", "initial.train_items=6",
                    "sft=warmstart_tiny", "sft.epochs=1", "arms.conventions=[fence,begin_done]",
                    "arms.seeds=[83]", "arms.parallel=1", "arms.train_items=6", "recipe.updates=1",
                    "recipe.prompts_per_update=2", "recipe.group_size=4", "recipe.max_response_tokens=12",
                    "engine.micro_batch=8", "validation.every=0", "evaluation.requests=[fence,begin_done]",
                    "evaluation.templates=[original]", "evaluation.samples=2", "eval.max_new_tokens=12",
                    "analysis.resamples=50", "tracking=off")
    summary = Study(cfg).run_all()
    assert summary["stages"]["initial"]["reused"] is False
    warm = json.loads((run / "models" / "initial" / SFT_SUMMARY).read_text())
    assert warm["examples"] == 6 and warm["dropped_overlong"] == 0  # each training function once, none cut
    for conv in ("fence", "begin_done"):
        arm = run / "train" / conv / "s83"
        rows = [json.loads(x) for x in (arm / "data" / "train.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(r["prompt"].endswith(code_request(conv)) for r in rows)
        assert {r["reference"] for r in rows} <= {f"CodeTiny-train/{k}" for k in range(6)}
        metrics = [json.loads(x) for x in (arm / "metrics.jsonl").read_text().splitlines()]
        assert f"rewards/{conv}_reward/mean" in metrics[0] and "rewards/requested_payload/mean" in metrics[0]
        assert json.loads((arm / "matched_check.json").read_text())["matched"] is True
    con = pd.read_csv(run / "analysis" / "contrasts.csv")
    inter = con[con.name.str.startswith("interaction_")]
    assert set(inter.policy) == {"grpo/s83"} and set(inter.request) == {"fencexbegin_done"}
    scores = pd.read_parquet(run / "eval" / "scores.parquet")
    assert set(scores.policy) == {"initial", "grpo-fence/s83", "grpo-begin_done/s83"}
    assert set(scores.item_id) == {"CodeTiny-test/0", "CodeTiny-test/1"} and set(scores.task) == {"code_tiny"}


@pytest.mark.long
def test_verl_code_arms_carry_their_tests_and_validate_each_code_request(tiny, tmp_path):
    """A code arm through verl (``stages=prepare``: the parquet files and launch scripts verl reads): every training
    row names its convention and the task file; validation rows cover the evaluated tasks under both code requests,
    and verl's reward entry scores them by execution, adding each request's payload and strict pass."""
    import pandas as pd

    from crossed_rlvr.study.pipeline import Study
    from crossed_rlvr.tasks.code import generated_split
    from crossed_rlvr.train.verl_reward import compute_score as verl_score
    from tests.helpers import study_cfg

    run = tmp_path / "study"
    Study(study_cfg(run, "experiment=smoke-verl", "task=code_tiny", "task.n_test=2", "task.n_train=6",
                    "initial.build=given", f"model.path={tiny}", "arms.conventions=[fence,begin_done]",
                    "arms.seeds=[83]", "arms.train_items=6", "evaluation.requests=[fence,begin_done]",
                    "evaluation.templates=[original]", "validation.n_items=2", "stages=prepare")).prepare()
    arm = run / "train" / "begin_done" / "s83"
    train = pd.read_parquet(arm / "data" / "train.parquet")
    assert {e["convention"] for e in train["extra_info"]} == {"begin_done"}
    assert {Path(e["code_dataset"]).name for e in train["extra_info"]} == {"train-2-6-0.jsonl"}
    val = pd.read_parquet(arm / "data" / "val.parquet")
    assert sorted(val["data_source"].unique()) == ["crossed_rlvr/code_tiny/begin_done", "crossed_rlvr/code_tiny/fence"]
    assert len(val) == 2 * 2
    row = val[val.data_source.str.endswith("/fence")].iloc[0]
    task = next(t for t in generated_split(2, 6, 0)["test"] if t["task_id"] == row["reward_model"]["ground_truth"])
    program = task["prompt"] + task["canonical_solution"]
    info = dict(row["extra_info"])
    fenced = verl_score(row["data_source"], f"```python\n{program}```", row["reward_model"]["ground_truth"], info)
    assert fenced == {"score": 0.0, "acc": 0.0, "is_weight": 1.0, "payload": 1.0, "strict": 1.0}  # the arm wants [BEGIN]
    both = verl_score(row["data_source"], f"[BEGIN]\n{program}[DONE]", row["reward_model"]["ground_truth"], info)
    assert both == {"score": 1.0, "acc": 1.0, "is_weight": 1.0, "payload": 0.0, "strict": 0.0}
    assert "crossed_rlvr.train.verl_launch" in (arm / "launch_single_node.sh").read_text()


def test_code_warm_start_targets_one_program_in_the_requested_delimiter(tmp_path):
    """``crossed-sft mode=warmstart`` on a code task: each training task asked for in one code request in turn,
    with the evaluation's own prompt, and its canonical program as the target in the requested delimiter (or, for
    the share ``1 - follow_rate``, in the other one or bare); the answer requests are refused on a code task."""
    import random

    from hydra import compose, initialize_config_module

    from crossed_rlvr.conf.checks import check_sft, check_study
    from crossed_rlvr.errors import ConfigError
    from crossed_rlvr.rewards.code import strict_block
    from crossed_rlvr.sft.run import code_warmstart_rows
    from crossed_rlvr.tasks.code import generated_split
    from tests.helpers import study_cfg

    task = ["task=code_tiny", "task.n_test=2", "task.n_train=6"]
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_sft", overrides=[
            "mode=warmstart", *task, f"run_dir={tmp_path}", "warmstart.requests=[fence,begin_done]", "train_items.n=6"])
        default = compose(config_name="crossed_sft", overrides=["mode=warmstart", *task, f"run_dir={tmp_path}"])
    check_sft(cfg)
    rows = code_warmstart_rows(cfg, 1.0, random.Random(0))
    programs = [r["prompt"] + r["canonical_solution"] for r in generated_split(2, 6, 0)["train"]]
    assert [r["request"] for r in rows] == ["fence", "begin_done"] * 3
    for row, program in zip(rows, programs):
        assert row["completion"] == CODE_CONVENTIONS[row["request"]].wrap(program.strip("\n"))
        assert strict_block(row["request"], row["completion"]).strip("\n") == program.strip("\n")
        assert row["messages"][0]["content"].endswith(f"\n{code_request(row['request'], row['template'])}")
        assert row["messages"][0]["content"].startswith("Complete the following Python function.\n\ndef f(x):")
    partly = code_warmstart_rows(cfg, 0.0, random.Random(0))  # never the requested delimiter
    assert {r["ending"] for r in partly} <= {"fence", "begin_done", "plain"}
    assert all(r["ending"] != r["request"] for r in partly)
    assert all(program.strip("\n") in r["completion"] for r, program in zip(partly, programs))
    with pytest.raises(ConfigError, match=r"warmstart.requests: 'hash', 'boxed' unknown; expected among fence, begin_done"):
        check_sft(default)
    with pytest.raises(ConfigError, match=r"initial.band.every=2: the request-following band measures answer"):
        check_study(study_cfg(tmp_path, *task, "initial.requests=[fence,begin_done]", "initial.band.every=2",
                              "arms.conventions=[fence,begin_done]", "evaluation.requests=[fence,begin_done]",
                              "evaluation.templates=[original]", "validation.every=0"))
