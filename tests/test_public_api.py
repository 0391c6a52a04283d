"""The public API (docs/api.md) as a user meets it: ``import crossed_rlvr`` lists and loads it cheaply, the TRL
example runs as a script of one's own (from its own folder, with the installed package only), and the verl
example composes with verl's own config and rewards verl's stock GSM8K rows."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import crossed_rlvr

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
API = {"reward", "get_program", "RewardProgram", "REWARD_PROGRAMS", "request_suffix", "detect", "PayloadReport",
       "READERS", "STRICT", "Reader", "Reading", "get_reader", "score_response", "make_trl_reward",
       "CrossedValidationCallback", "compute_score"}
HEAVY = ("torch", "transformers", "trl", "verl", "numpy", "pandas", "omegaconf", "math_verify")


def user_python(code_or_args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Python as a user runs it: from ``cwd``, with no PYTHONPATH (the repository is not on sys.path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *code_or_args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_import_lists_the_api_and_loads_nothing_heavy(tmp_path):
    code = ("import sys, json, crossed_rlvr as c; print(c.__all__); "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    proc = user_python(["-c", code], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed, loaded = proc.stdout.splitlines()
    assert set(ast.literal_eval(listed)) == API | {"__version__"}
    assert json.loads(loaded) == []  # each name is imported on first use


def test_every_exported_name_resolves_to_its_definition():
    from crossed_rlvr.eval.score.panel import score_response
    from crossed_rlvr.rewards.programs import reward
    from crossed_rlvr.train.validation import CrossedValidationCallback
    from crossed_rlvr.train.verl_reward import compute_score

    for name in crossed_rlvr.__all__:
        assert getattr(crossed_rlvr, name) is not None, name
    assert (crossed_rlvr.reward, crossed_rlvr.score_response, crossed_rlvr.compute_score,
            crossed_rlvr.CrossedValidationCallback) == (reward, score_response, compute_score, CrossedValidationCallback)
    assert set(dir(crossed_rlvr)) >= API
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = crossed_rlvr.no_such_name


def test_the_examples_use_the_public_api_only():
    """An example is what a user copies: it may import ``crossed_rlvr`` and the names of ``__all__`` only (an internal
    module it reached into would break it with any refactor the stability promise allows)."""
    for path in sorted(EXAMPLES.glob("*.py")):
        tree = ast.parse(path.read_text())
        aliases, used = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    assert a.name == "crossed_rlvr" or not a.name.startswith("crossed_rlvr."), (path.name, a.name)
                    aliases |= {a.asname or a.name} if a.name == "crossed_rlvr" else set()
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("crossed_rlvr"):
                assert node.module == "crossed_rlvr", (path.name, node.module)
                used |= {a.name for a in node.names}
        used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                 and n.value.id in aliases}
        assert aliases or used, f"{path.name} does not use crossed_rlvr"
        assert used <= set(crossed_rlvr.__all__), (path.name, sorted(used - set(crossed_rlvr.__all__)))


def test_trl_reward_reads_a_named_reference_column():
    """TRL hands the reward every dataset column by name: a user's final answers may sit in ``answer``."""
    from datasets import Dataset

    rows = Dataset.from_list([{"prompt": "What is 9 + 9?", "answer": "18"}, {"prompt": "What is 2 + 2?", "answer": "4"}])
    columns = {k: rows[k] for k in rows.column_names if k != "prompt"}  # as GRPOTrainer passes them
    fn = crossed_rlvr.make_trl_reward("hash", reference_column="answer")
    assert fn(prompts=rows["prompt"], completions=["so #### 18", "#### 5"], **columns) == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"'answer' column.*columns: reference"):
        fn(prompts=["p"], completions=["#### 18"], reference=["18"])


def test_crossed_metrics_per_request():
    """Payload rate (App. B.2 detector) and strict accuracy (App. C.1) under each request, on the same items."""
    from crossed_rlvr.train.validation import crossed_metrics

    out = crossed_metrics({"hash": ["#### 18", "#### **5**", "no answer"], "boxed": ["\\boxed{18}", "#### 4", "\\boxed{}"]},
                          ["18", "4", "7"])
    assert out == {"eval_crossed/hash/payload": 2 / 3, "eval_crossed/hash/strict": 1 / 3,
                   "eval_crossed/boxed/payload": 1 / 3, "eval_crossed/boxed/strict": 1 / 3}


def test_validation_callback_refuses_unknown_requests_and_an_unattached_run():
    cb = crossed_rlvr.CrossedValidationCallback([("What is 1 + 1?", "2")], ["hash"], tokenizer=None)
    with pytest.raises(RuntimeError, match=r"attach\(trainer\)"):
        cb.on_train_begin(None, type("State", (), {"global_step": 0})(), None, model=None)
    with pytest.raises(ValueError, match="latex"):
        crossed_rlvr.CrossedValidationCallback([("q", "1")], ["latex"], tokenizer=None)


# the example's command as examples/README.md and the script's docstring quote it (tests/test_quoted_commands.py
# counts it as run here)
QUOTED_EXAMPLE = ['--steps', '4', '--out', 'own-grpo']


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_trl_example_runs_as_a_users_own_script(tmp_path):
    """The example copied into a folder of its own, run as its README quotes it, trains four GRPO updates on the CPU;
    the callback's metrics reach the trainer's log at steps 0, 2 and 4, beside (not instead of) the step's own
    record."""
    shutil.copy(EXAMPLES / "trl_grpo_own_script.py", tmp_path)
    proc = user_python(["trl_grpo_own_script.py", *QUOTED_EXAMPLE], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    history = json.loads((tmp_path / "own-grpo" / "log_history.json").read_text())
    keys = [f"eval_crossed/{r}/{m}" for r in ("hash", "boxed") for m in ("payload", "strict")]
    crossed = [e for e in history if keys[0] in e]
    assert [e["step"] for e in crossed] == [0, 2, 4]
    assert all(0.0 <= e[k] <= 1.0 for e in crossed for k in keys)
    assert {e["step"] for e in history if "loss" in e} == {1, 2, 3, 4}  # the trainer's own records were all written
    assert any("rewards/hash_reward/mean" in e for e in history)
    printed = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"step"')]
    assert [p["step"] for p in printed] == [0, 2, 4]


def verl_overrides(node: dict, prefix: str = "") -> list[str]:
    """The example's own keys as command-line overrides; ``reward_kwargs`` is no key of verl's schema (verl reads it
    with ``.get``), so it is added with ``+``, and every other key must already exist in verl's config."""
    out = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out += verl_overrides(value, f"{path}.")
        else:
            plus = "+" if ".reward_kwargs." in f".{path}" else ""
            out.append(f"{plus}{path}={json.dumps(value) if isinstance(value, bool) else value}")
    return out


def example_config(*overrides: str):
    """The example composed as verl's trainer composes it (``--config-path examples --config-name verl_reward``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
            return compose(config_name="verl_reward", overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def test_verl_example_keys_are_verls_own():
    """Each key the example sets is one of verl 0.9.1's (composing it onto verl's own ppo_trainer refuses an unknown
    key, which a primary config file would add silently), and the file composes to the same values."""
    from crossed_rlvr.train.verl_engine import compose_verl

    own = {k: v for k, v in yaml.safe_load((EXAMPLES / "verl_reward.yaml").read_text()).items()
           if k not in ("hydra", "defaults")}
    overrides = verl_overrides(own)
    assert "+reward.custom_reward_function.reward_kwargs.convention=hash" in overrides
    composed, example = compose_verl(overrides), example_config()
    for section in ("reward", "algorithm", "data", "actor_rollout_ref"):
        assert composed[section] == example[section], section
    assert example.reward.custom_reward_function.name == "compute_score"
    assert example.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"


def stock_gsm8k_rows(path: Path) -> Path:
    """Two rows in the layout of verl's examples/data_preprocess/gsm8k.py (no convention anywhere in them)."""
    instruction = 'Let\'s think step by step and output the final answer after "####".'
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"{q} {instruction}"}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": a},
             "extra_info": {"split": "train", "index": i, "answer": f"... #### {a}", "question": q}}
            for i, (q, a) in enumerate([("Janet has 9 eggs and buys 9 more. How many?", "18"),
                                        ("What is 2 + 2?", "4")])]
    pd.DataFrame(rows).to_parquet(path)
    return path


def verl_reward_of(cfg, tokenizer):
    """verl's reward manager with the example's function (and its reward_kwargs), as verl's trainer builds them."""
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    return NaiveRewardManager(cfg, tokenizer, get_custom_reward_fn(cfg))


def score_row(manager, tokenizer, row: dict, response: str) -> dict:
    import numpy as np
    import torch
    from verl import DataProto

    prompt = tokenizer("q", add_special_tokens=False)["input_ids"]
    resp = tokenizer(response, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + resp])
    data = DataProto.from_dict(
        tensors={"prompts": torch.tensor([prompt]), "responses": torch.tensor([resp]), "input_ids": ids,
                 "attention_mask": torch.ones_like(ids)},
        non_tensors={k: np.array([row[k]], dtype=object) for k in ("data_source", "reward_model", "extra_info")})
    return manager.loop.run_until_complete(manager.run_single(data))


def test_verl_example_rewards_stock_gsm8k_rows(tmp_path):
    """verl's dataset reads the stock parquet; its rows reach compute_score through verl's reward manager with the
    example's reward_kwargs: a right ``#### 18`` earns 1 under convention=hash and 0 under boxed, and without a
    convention anywhere the reward stops with an error that says where to give one."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from crossed_rlvr.policies.tiny import build_tokenizer

    parquet = stock_gsm8k_rows(tmp_path / "train.parquet")
    data = [f"data.train_files={parquet}", f"data.val_files={parquet}"]
    tok = build_tokenizer()
    row = RLHFDataset(data_files=str(parquet), tokenizer=tok, config=example_config(*data).data)[0]
    assert row["data_source"] == "openai/gsm8k" and "convention" not in row["extra_info"]
    response = "9 + 9 = 18\n#### 18"
    hash_arm = verl_reward_of(example_config(*data), tok)
    assert score_row(hash_arm, tok, row, response)["reward_score"] == 1.0
    boxed = example_config(*data, "reward.custom_reward_function.reward_kwargs.convention=boxed")
    assert score_row(verl_reward_of(boxed, tok), tok, row, response)["reward_score"] == 0.0
    assert score_row(verl_reward_of(boxed, tok), tok, row, "so \\boxed{18}")["reward_score"] == 1.0
    bare = example_config(*data, "~reward.custom_reward_function.reward_kwargs")
    with pytest.raises(ValueError, match=r"no extra_info\['convention'\].*reward_kwargs\.convention"):
        score_row(verl_reward_of(bare, tok), tok, row, response)
    with pytest.raises(ValueError, match="unknown convention 'latex'"):
        crossed_rlvr.compute_score("openai/gsm8k", response, "18", dict(row["extra_info"]), convention="latex")
