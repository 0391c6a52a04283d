"""Crossed validation during TRL training: the arm under every request at step 0, every N updates and the
end, as ordinary response records; the same responses as crossed-eval of the saved checkpoint."""

import json
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from crossed_rlvr.eval.generate.runner import run_eval
from crossed_rlvr.policies.tiny import build_tiny_model
from crossed_rlvr.tracking import offline_runs
from crossed_rlvr.train.checks import checked_train
from crossed_rlvr.train.run import run_train
from tests.helpers import SMALL


def records(path):
    return [{k: v for k, v in json.loads(x).items() if k != "model_path"} for x in path.read_text().splitlines()]


def tiny_arm(tmp_path, *overrides):
    """A two-update arm of a fresh tiny model in ``<tmp_path>/arm``, tracked offline."""
    build_tiny_model(tmp_path / "model", SMALL)
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_train", overrides=[
            "tracking=offline", "recipe=tiny", "recipe.updates=2", "recipe.prompts_per_update=2",
            "recipe.max_response_tokens=16", "train_items.n=16", f"run_dir={tmp_path}/arm",
            f"model.path={tmp_path}/model", *overrides])


@pytest.mark.long
def test_validation_records_equal_crossed_eval_of_the_checkpoint(tmp_path):
    cfg = tiny_arm(tmp_path, "validation.every=1", "validation.n_items=3", "eval.max_new_tokens=8",
                   "eval.batch_size=2")
    run_train(checked_train(cfg))
    responses = tmp_path / "arm" / "validation" / "responses"
    names = sorted(p.name for p in responses.glob("*.jsonl"))
    assert names == sorted(f"grpo-hash_s83@step{k}__{r}__original.jsonl" for k in (0, 1, 2) for r in ("hash", "boxed"))
    step1 = records(responses / "grpo-hash_s83@step1__boxed__original.jsonl")
    assert len(step1) == 3 and {r["policy"] for r in step1} == {"grpo-hash/s83@step1"}
    assert all(r["item_id"].startswith("dev-") for r in step1)  # the dev split: not training, not test items
    # crossed-eval of the saved step-1 checkpoint, elsewhere, with the same settings: the same responses
    again = OmegaConf.create({
        # crossed-eval's model block: the arm's, less the initial weights' hash only a training config holds
        "model": {k: v for k, v in OmegaConf.to_container(cfg.model, resolve=True).items() if k != "weights_sha256"},
        "task": {**OmegaConf.to_container(cfg.task, resolve=True), "split": "dev", "n_items": 3},
        "eval": OmegaConf.to_container(cfg.eval, resolve=True), "tracking": {"mode": "off"},
        "run_dir": str(tmp_path / "again"), "requests": ["boxed"], "templates": ["original"],
        "policies": [{"name": "grpo-hash/s83@step1", "path": str(tmp_path / "arm" / "validation" / "checkpoints" / "step-1"),
                      "training_convention": "hash", "train_seed": 83}],
        "template_subset": None, "template_subset_seed": 0, "samples": 1, "overwrite": False})
    run_eval(again, progress=False)
    assert records(tmp_path / "again" / "responses" / "grpo-hash_s83@step1__boxed__original.jsonl") == step1
    # the arm's step-0 checkpoint is a copy of the initial policy's own weight files (never a link: damage to the
    # initial policy must not reach the arm), and step 0's validation policy that checkpoint, linked within the arm
    arm_step0, val_step0 = tmp_path / "arm" / "checkpoints" / "step-0", tmp_path / "arm" / "validation" / "checkpoints" / "step-0"
    initial = tmp_path / "model" / "model.safetensors"
    assert (arm_step0 / "model.safetensors").read_bytes() == initial.read_bytes()
    assert (arm_step0 / "model.safetensors").stat().st_ino != initial.stat().st_ino
    assert (val_step0 / "model.safetensors").stat().st_ino == (arm_step0 / "model.safetensors").stat().st_ino
    assert (arm_step0 / "tokenizer_config.json").is_file() and (arm_step0 / "config.json").is_file()
    # the final checkpoint is the last step's validation policy with Trainer's arguments beside it
    final, val_final = tmp_path / "arm" / "checkpoints" / "step-2", tmp_path / "arm" / "validation" / "checkpoints" / "step-2"
    assert (final / "model.safetensors").stat().st_ino == (val_final / "model.safetensors").stat().st_ino
    assert {p.name for p in final.iterdir()} == {p.name for p in val_final.iterdir()} | {"training_args.bin"}
    assert sorted(p.name for p in val_step0.iterdir()) == sorted(p.name for p in arm_step0.iterdir())
    # validation items come from the dev split, never from training or test
    items = (tmp_path / "arm" / "validation" / "items" / "arith_tiny-dev.jsonl").read_text()
    assert '"split": "dev"' in items
    # validating never changes what is trained: the same arm without validation ends in the same weights
    plain = OmegaConf.merge(cfg, {"run_dir": str(tmp_path / "plain"), "validation": {"every": 0}})
    run_train(checked_train(plain))
    weights = "checkpoints/step-2/model.safetensors"
    assert (tmp_path / "plain" / weights).read_bytes() == (tmp_path / "arm" / weights).read_bytes()

    def rollouts(run):  # what the sampled rollouts were like at each update (timings aside)
        return [{k: v for k, v in json.loads(x).items() if "time" not in k and "per_second" not in k}
                for x in (run / "metrics.jsonl").read_text().splitlines()]

    assert rollouts(tmp_path / "plain") == rollouts(tmp_path / "arm")


@pytest.mark.long
def test_validation_steps_are_scored_summarised_and_logged(tmp_path):
    """Each step scored by crossed-score in its own process: a scores file per step, the per-request
    rates in summary.jsonl (recomputed here from the scores), and the offline wandb run of the arm holding
    those scalars and a table with one row per response and one column per reader."""
    cfg = tiny_arm(tmp_path, "validation.every=2", "validation.n_items=4", "eval.max_new_tokens=24",
                   "eval.batch_size=4", "convention=boxed")
    run_train(checked_train(cfg))
    out = tmp_path / "arm" / "validation"
    summary = [json.loads(x) for x in (out / "summary.jsonl").read_text().splitlines()]
    assert [e["step"] for e in summary] == [0, 2]
    train = json.loads((tmp_path / "arm" / "summary.json").read_text())
    assert train["validation_steps"] == [0, 2] and train["validation_seconds"] > 0
    for entry in summary:
        scores = pd.read_parquet(out / "scores" / f"step-{entry['step']}.parquet")
        assert set(scores["policy"]) == {f"grpo-boxed/s83@step{entry['step']}"} and len(scores) == 8
        hash_part, boxed_part = scores[scores.request == "hash"], scores[scores.request == "boxed"]
        assert entry["hash/payload"] == hash_part["requested_payload"].mean()
        assert entry["hash/strict"] == hash_part["strict_first_hash.correct"].mean()
        assert entry["boxed/strict"] == boxed_part["boxed_first.correct"].mean()
        assert entry["boxed/lenient"] == boxed_part["lenient_boxed_fallback.correct"].mean()
        assert entry["hash/math_verify"] == hash_part["math_verify.correct"].mean()
        assert entry["hash/reward"] == hash_part["reward_boxed.correct"].mean()  # the arm's own reward program
    [run] = [r for r in offline_runs(tmp_path / "arm") if r["job_type"] == "train"]
    assert {"validation/hash/payload", "validation/boxed/strict", "validation/boxed/math_verify",
            "validation/responses/path", "validation/responses/nrows"} <= set(run["history"])
    tables = sorted(Path(run["path"]).rglob("responses_*.table.json"))
    assert len(tables) == 2
    table = json.loads(tables[-1].read_text())
    readers = {c[: -len(".correct")] for c in scores.columns if c.endswith(".correct")}
    assert readers <= set(table["columns"]) and {"response", "request", "item_id"} <= set(table["columns"])
    assert len(table["data"]) == 8
    row = dict(zip(table["columns"], table["data"][0], strict=True))
    first = scores.iloc[0]
    [text] = [r["response"] for r in records(out / "responses" / f"grpo-boxed_s83@step2__{first['request']}__original.jsonl")
              if r["item_id"] == first["item_id"]]
    assert row["item_id"] == first["item_id"] and row["response"] == text
    assert row["boxed_first"] == bool(first["boxed_first.correct"])


def test_rng_state_is_restored_after_validation_generation():
    """A generation backend may reseed the global generators (vLLM seeds torch, numpy and random when it
    starts): the callback puts them back, so the rollouts after a validation step are the ones without it."""
    import random

    import numpy as np
    import torch

    from crossed_rlvr.train.validation import restore_rng, rng_state

    state = rng_state()
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    restore_rng(state)
    torch.manual_seed(0), np.random.seed(0), random.seed(0)  # what an engine's start does
    restore_rng(state)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected
