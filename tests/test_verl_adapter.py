"""The verl engine adapter, checked for real on the CPU with verl 0.9.1 installed.

verl's own Hydra config composes with the generated overrides, verl's RLHFDataset loads the data
with a local tokenizer, and verl's reward manager scores sample responses through our entry.
"""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_module

from crossed_rlvr.policies.tiny import build_tiny_model
from crossed_rlvr.policies.loading import load_tokenizer
from crossed_rlvr.train.cli import run_train
from crossed_rlvr.train.recipe import RecipeError
from tests.test_generation import SMALL



def cfg_for(tmp_path, *overrides):
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_train", overrides=[
            "tracking=off", "engine=verl", "recipe=tiny", "task=arith_tiny", f"run_dir={tmp_path}/arm",
            f"model.path={tmp_path}/model", *overrides])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verl")
    build_tiny_model(tmp / "model", SMALL)
    summary = run_train(cfg_for(tmp, "convention=boxed"))
    return tmp, summary


def test_overrides_compose_on_verl_config(prepared):
    from crossed_rlvr.train.verl_engine import compose_verl

    tmp, summary = prepared
    overrides = (tmp / "arm" / "verl_overrides.txt").read_text().split()
    cfg = compose_verl(overrides)
    actor = cfg.actor_rollout_ref.actor
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is True
    assert actor.loss_agg_mode == "seq-mean-token-mean" and actor.use_kl_loss is False and actor.entropy_coeff == 0
    assert actor.clip_ratio_low == actor.clip_ratio_high == 0.2 and actor.optim.lr == 5e-5
    assert cfg.actor_rollout_ref.rollout.n == 8 and cfg.data.train_batch_size == 8
    assert cfg.reward.custom_reward_function.path.endswith("crossed_rlvr/rewards/verl_entry.py")
    assert cfg.data.filter_overlong_prompts is True
    for script in ("launch_single_node.sh", "launch_slurm_ray.sbatch"):
        text = (tmp / "arm" / script).read_text()
        assert "verl.trainer.main_ppo" in text and "reward.custom_reward_function.name=compute_score" in text
    with pytest.raises(Exception):  # a key verl does not have is refused, not silently ignored
        compose_verl([*overrides, "actor_rollout_ref.actor.no_such_knob=1"])


def test_verl_dataset_loads_our_parquet(prepared):
    from crossed_rlvr.train.verl_engine import compose_verl
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tmp, _ = prepared
    cfg = compose_verl((tmp / "arm" / "verl_overrides.txt").read_text().split())
    frame = pd.read_parquet(tmp / "arm" / "data" / "train.parquet")
    assert frame.loc[0, "extra_info"]["convention"] == "boxed"
    assert frame.loc[0, "prompt"][0]["content"].endswith("within \\boxed{}.")
    tok = load_tokenizer(tmp / "model")
    ds = RLHFDataset(data_files=str(tmp / "arm" / "data" / "train.parquet"), tokenizer=tok, config=cfg.data)
    assert len(ds) == 8 * 30
    item = ds[0]
    assert item["extra_info"]["convention"] == "boxed" and item["reward_model"]["ground_truth"] == frame.loc[
        0, "reward_model"]["ground_truth"]


def test_verl_reward_manager_scores_through_our_entry(prepared):
    from crossed_rlvr.train.verl_engine import compose_verl
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    tmp, _ = prepared
    cfg = compose_verl((tmp / "arm" / "verl_overrides.txt").read_text().split())
    tok = load_tokenizer(tmp / "model")
    compute_score = get_custom_reward_fn(cfg)
    manager = NaiveRewardManager(cfg, tok, compute_score)
    cases = [("so \\boxed{7}", "7", "boxed", 1.0), ("#### 7", "7", "boxed", 0.0), ("#### 7", "7", "hash", 1.0),
             ("\\boxed{ 1,234 }", "1234", "boxed", 1.0)]
    for text, ref, conv, expected in cases:
        prompt = tok("q", add_special_tokens=False)["input_ids"]
        resp = tok(text, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + resp])
        data = DataProto.from_dict(
            tensors={"prompts": torch.tensor([prompt]), "responses": torch.tensor([resp]), "input_ids": ids,
                     "attention_mask": torch.ones_like(ids)},
            non_tensors={"data_source": np.array(["crossed_rlvr/arith_tiny"], dtype=object),
                         "reward_model": np.array([{"ground_truth": ref}], dtype=object),
                         "extra_info": np.array([{"convention": conv}], dtype=object)},
        )
        result = manager.loop.run_until_complete(manager.run_single(data))  # the manager's own event loop
        assert result["reward_score"] == expected, (text, conv)


def test_proposal_with_verl_is_refused(tmp_path):
    build_tiny_model(tmp_path / "model", SMALL)
    with pytest.raises(RecipeError, match="not supported with engine=verl"):
        run_train(cfg_for(tmp_path, "recipe.proposal.enabled=true"))
    assert not (Path(tmp_path) / "arm" / "data" / "train.parquet").exists()
