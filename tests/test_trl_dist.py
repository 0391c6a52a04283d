"""GRPO arms across processes with TRL on the CPU (``torchrun``, gloo): every rank generates for its own
prompts of each update, the ranks end with identical weights, rank 0 alone writes, and the two arms of a
seed still form a matched pair. Measured here: ~30 s an arm of 3 updates on 2 processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossed_rlvr.policies.tiny import build_tiny_model
from tests.helpers import SMALL

# two training processes (tests/conftest.py: the engines group also keeps the module's arms on one worker)
pytestmark = [pytest.mark.engines]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trl2")
    model = build_tiny_model(tmp / "model", SMALL)
    for conv in ("hash", "boxed"):
        proc = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
             "crossed_rlvr.train.cli", "tracking=off", "recipe=tiny", "recipe.updates=3", "task=arith_tiny",
             f"convention={conv}", "seed=83", f"run_dir={tmp / conv}", f"model.path={model}"],
            capture_output=True, text=True, timeout=900, check=False, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp


@pytest.mark.timeout(1200)
def test_two_ranks_split_each_update_and_end_identical(arms):
    for conv in ("hash", "boxed"):
        summary = json.loads((arms / conv / "summary.json").read_text())
        assert summary["world_size"] == 2
        assert summary["ranks_disjoint_prompts"] is True and summary["prompts_per_rank"] == [4, 4]  # 8 per update
        assert summary["ranks_identical_weights"] is True
        lines = (arms / conv / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]  # one line per update, rank 0's
        assert (arms / conv / "checkpoints" / "step-3" / "model.safetensors").exists()
        assert not list((arms / conv / "checkpoints").glob("*.tmp"))


def test_the_arms_of_a_seed_stay_matched_on_two_ranks(arms):
    from crossed_rlvr.train.matched import compare_arms

    verdict = compare_arms(arms / "hash", arms / "boxed")
    assert verdict["matched"], verdict


def test_validation_during_training_is_refused_on_several_ranks(tmp_path):
    from hydra import compose, initialize_config_module

    from crossed_rlvr.conf.checks import RecipeError, check_config

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_train", overrides=["engine.nproc_per_node=2", "validation.every=5",
                                                              f"model.path={tmp_path}", "tracking=off"])
    with pytest.raises(RecipeError, match=r"validation.every > 0 runs on one process"):
        check_config(cfg)
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_train", overrides=["engine.nproc_per_node=3", f"model.path={tmp_path}",
                                                              "tracking=off"])
    with pytest.raises(RecipeError, match=r"does not split into engine.micro_batch=16 x 3 processes"):
        check_config(cfg)


def test_the_batch_splits_over_ranks_or_is_refused():
    from omegaconf import OmegaConf

    from crossed_rlvr.train.translate import trl_args

    cfg = OmegaConf.create({"recipe": {"prompts_per_update": 8, "group_size": 8, "lr": 1e-5, "weight_decay": 0.0,
                                       "betas": [0.9, 0.999], "grad_clip": 1.0, "policy_epochs": 1,
                                       "clip_ratio": 0.2, "kl_loss": False, "loss_agg": "seq-mean-token-mean",
                                       "norm_adv_by_std": True, "entropy_coeff": 0.0, "temperature": 1.0,
                                       "top_p": 1.0, "max_response_tokens": 8, "updates": 3},
                            "engine": {"micro_batch": 16, "use_vllm": False}, "seed": 1, "data_seed": 1})
    one, two = trl_args(cfg, 1), trl_args(cfg, 2)
    assert (one["per_device_train_batch_size"], one["gradient_accumulation_steps"]) == (16, 4)
    assert (two["per_device_train_batch_size"], two["gradient_accumulation_steps"]) == (16, 2)
    with pytest.raises(ValueError, match=r"does not split into engine.micro_batch=16 x 3 processes"):
        trl_args(cfg, 3)


@pytest.mark.timeout(1200)
def test_study_trains_each_arm_on_two_ranks(tmp_path):
    """``crossed-study engine.nproc_per_node=2``: each GRPO arm runs through torchrun, then is evaluated (one update
    an arm: the ranks' split and their equal weights at the end are what is asserted; ``arms`` above checks three)."""
    from crossed_rlvr.study.pipeline import Study
    from tests.helpers import study_cfg

    run = tmp_path / "study"
    summary = Study(study_cfg(run, "experiment=smoke", "sft.epochs=2", "engine.nproc_per_node=2", "engine.micro_batch=8",
                              "validation.every=0", "recipe.updates=1",
                              "arms.seeds=[83]", "evaluation.n_items=4", "evaluation.templates=[original]")).run_all()
    assert not summary["stages"]["arms"]["reused"]
    for conv in ("hash", "boxed"):
        arm = json.loads((run / "train" / conv / "s83" / "summary.json").read_text())
        assert arm["world_size"] == 2 and arm["ranks_identical_weights"] is True
    assert (run / "eval" / "responses" / "grpo-boxed_s83__hash__original.jsonl").exists()


@pytest.mark.timeout(600)
def test_an_arm_in_a_process_of_its_own(arms, tmp_path):
    """What the study does on one GPU: the arm trains in a child process (the study's never holds training
    memory when vLLM starts) and its summary comes back."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from crossed_rlvr.train.worker import run_arm

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_train", overrides=[
            "tracking=off", "recipe=tiny", "recipe.updates=2", "task=arith_tiny", "convention=hash", "seed=83",
            f"run_dir={tmp_path / 'arm'}", f"model.path={arms / 'model'}"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    result = run_arm(plain, tmp_path / "arm.spec.json", 1)
    assert result["world_size"] == 1 and Path(result["final_checkpoint"]).name == "step-2"
    assert (tmp_path / "arm" / "checkpoints" / "step-2" / "model.safetensors").exists()
