"""GRPO arms across processes with TRL on the CPU (``torchrun``, gloo): every rank generates for its own
prompts of each update, the ranks end with identical weights, rank 0 alone writes, and the two arms of a
seed still form a matched pair: the smoke study's arms, each on two processes."""

import json
from pathlib import Path

import pytest

# two training processes (tests/conftest.py: the engines group also keeps the module's arms on one worker)
pytestmark = [pytest.mark.engines]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """``crossed-study engine.nproc_per_node=2``: each GRPO arm of the smoke preset (3 updates, 4 prompts an
    update) runs through torchrun on two ranks, then is evaluated; the tests below read its arms' folders."""
    from crossed_rlvr.study.pipeline import Study
    from tests.helpers import study_cfg

    run = tmp_path_factory.mktemp("trl2") / "study"
    summary = Study(study_cfg(run, "experiment=smoke", "sft.epochs=2", "engine.nproc_per_node=2", "engine.micro_batch=8",
                              "validation.every=0", "arms.seeds=[83]", "evaluation.n_items=4",
                              "evaluation.templates=[original]")).run_all()
    return run, summary


def arm(study, conv: str) -> Path:
    return study[0] / "train" / conv / "s83"


@pytest.mark.timeout(1200)
def test_study_trains_each_arm_on_two_ranks(study):
    run, summary = study
    assert not summary["stages"]["arms"]["reused"]
    for conv in ("hash", "boxed"):
        assert json.loads((arm(study, conv) / "summary.json").read_text())["world_size"] == 2
    assert (run / "eval" / "responses" / "grpo-boxed_s83__hash__original.jsonl").exists()


def test_two_ranks_split_each_update_and_end_identical(study):
    for conv in ("hash", "boxed"):
        folder = arm(study, conv)
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["world_size"] == 2
        assert summary["ranks_disjoint_prompts"] is True and summary["prompts_per_rank"] == [2, 2]  # 4 per update
        assert summary["ranks_identical_weights"] is True
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]  # one line per update, rank 0's
        assert (folder / "checkpoints" / "step-3" / "model.safetensors").exists()
        assert not list((folder / "checkpoints").glob("*.tmp"))


def test_the_arms_of_a_seed_stay_matched_on_two_ranks(study):
    from crossed_rlvr.train.matched import compare_arms

    verdict = compare_arms(arm(study, "hash"), arm(study, "boxed"))
    assert verdict["matched"], verdict


def test_validation_during_training_is_refused_on_several_ranks(tmp_path):
    from hydra import compose, initialize_config_module

    from crossed_rlvr.errors import RecipeError
    from crossed_rlvr.train.checks import check_config

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
                            "engine": {"micro_batch": 16, "use_vllm": False, "gradient_checkpointing": False},
                            "seed": 1, "data_seed": 1})
    one, two = trl_args(cfg, 1), trl_args(cfg, 2)
    assert (one["per_device_train_batch_size"], one["gradient_accumulation_steps"]) == (16, 4)
    assert one["gradient_checkpointing"] is False  # TRL's own default is on: the engine's setting must reach it
    assert (two["per_device_train_batch_size"], two["gradient_accumulation_steps"]) == (16, 2)
    with pytest.raises(ValueError, match=r"does not split into engine.micro_batch=16 x 3 processes"):
        trl_args(cfg, 3)


@pytest.mark.timeout(600)
def test_an_arm_in_a_process_of_its_own(tiny, tmp_path):
    """What the study does on one GPU: the arm trains in a child process (the study's never holds training
    memory when vLLM starts) and its summary comes back."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from crossed_rlvr.train.worker import run_arm

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_train", overrides=[
            "tracking=off", "recipe=tiny", "recipe.updates=2", "task=arith_tiny", "convention=hash", "seed=83",
            f"run_dir={tmp_path / 'arm'}", f"model.path={tiny}"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    result = run_arm(plain, tmp_path / "arm.spec.json", 1)
    assert result["world_size"] == 1 and Path(result["final_checkpoint"]).name == "step-2"
    assert (tmp_path / "arm" / "checkpoints" / "step-2" / "model.safetensors").exists()
