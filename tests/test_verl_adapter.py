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

from crossed_rlvr.conf.schema import TrainConf, conf_of
from crossed_rlvr.policies.loading import load_tokenizer
from crossed_rlvr.policies.tiny import build_tiny_model
from crossed_rlvr.train.checks import checked_train
from crossed_rlvr.train.run import run_train
from tests.helpers import SMALL

# the composed verl config is built once, on one worker (tests/conftest.py)
WORKER_GROUP = "verl_adapter"
SHARED_FIXTURES = ("prepared",)


def cfg_for(tmp_path, *overrides):
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_train", overrides=[
            "tracking=off", "engine=verl", "recipe=tiny", "task=arith_tiny", f"run_dir={tmp_path}/arm",
            f"model.path={tmp_path}/model", *overrides])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verl")
    build_tiny_model(tmp / "model", SMALL)
    summary = run_train(checked_train(cfg_for(tmp, "convention=boxed")))
    return tmp, summary


def test_overrides_compose_on_verl_config(prepared):
    from crossed_rlvr.train.verl_engine import compose_verl

    tmp, _summary = prepared
    overrides = (tmp / "arm" / "verl_overrides.txt").read_text().split()
    cfg = compose_verl(overrides)
    actor = cfg.actor_rollout_ref.actor
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is True
    assert actor.loss_agg_mode == "seq-mean-token-mean" and actor.use_kl_loss is False and actor.entropy_coeff == 0
    assert actor.clip_ratio_low == actor.clip_ratio_high == 0.2 and actor.optim.lr == 5e-5
    assert cfg.actor_rollout_ref.rollout.n == 8 and cfg.data.train_batch_size == 8
    assert cfg.reward.custom_reward_function.path.endswith("crossed_rlvr/train/verl_reward.py")
    assert cfg.data.filter_overlong_prompts is True
    for script in ("launch_single_node.sh", "launch_slurm_ray.sbatch"):
        text = (tmp / "arm" / script).read_text()
        assert " -m crossed_rlvr.train.verl_launch" in text and "--weighted" not in text
        assert "reward.custom_reward_function.name=compute_score" in text
        assert "verl.model_merger merge --backend fsdp" in text and "checkpoints/step-30" in text
    slurm = (tmp / "arm" / "launch_slurm_ray.sbatch").read_text()  # SLURM's warning, then the job requeues itself
    assert "#SBATCH --signal=B:USR1@300\n#SBATCH --requeue\n" in slurm
    assert slurm.index(" &\nchild=$!\nsettle\n") < slurm.index("verl.model_merger merge")
    assert cfg.trainer.save_freq == 30  # the final step is saved
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="no_such_knob"):  # refused, not silently ignored
        compose_verl([*overrides, "actor_rollout_ref.actor.no_such_knob=1"])


def test_verl_dataset_loads_our_parquet(prepared):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from crossed_rlvr.train.verl_engine import compose_verl

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


def verl_reward(prepared):
    """verl's NaiveRewardManager built from the arm's overrides; returns score(text, ref, extra_info)."""
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from crossed_rlvr.train.verl_engine import compose_verl

    tmp, _ = prepared
    cfg = compose_verl((tmp / "arm" / "verl_overrides.txt").read_text().split())
    tok = load_tokenizer(tmp / "model")
    manager = NaiveRewardManager(cfg, tok, get_custom_reward_fn(cfg))

    def score(text, ref, extra_info):
        prompt, resp = tok("q", add_special_tokens=False)["input_ids"], tok(text, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + resp])
        data = DataProto.from_dict(
            tensors={"prompts": torch.tensor([prompt]), "responses": torch.tensor([resp]), "input_ids": ids,
                     "attention_mask": torch.ones_like(ids)},
            non_tensors={"data_source": np.array(["crossed_rlvr/arith_tiny"], dtype=object),
                         "reward_model": np.array([{"ground_truth": ref}], dtype=object),
                         "extra_info": np.array([extra_info], dtype=object)})
        return manager.loop.run_until_complete(manager.run_single(data))  # the manager's own event loop

    return score


def test_verl_reward_manager_scores_through_our_entry(prepared):
    score = verl_reward(prepared)
    cases = [("so \\boxed{7}", "7", "boxed", 1.0), ("#### 7", "7", "boxed", 0.0), ("#### 7", "7", "hash", 1.0),
             ("\\boxed{ 1,234 }", "1234", "boxed", 1.0)]
    for text, ref, conv, expected in cases:
        assert score(text, ref, {"convention": conv})["reward_score"] == expected, (text, conv)


@pytest.mark.long
def test_proposal_weights_reach_verl(tmp_path):
    """With the frozen proposal, rows carry P/Q, the reward entry passes it on, our trainer is selected."""
    from crossed_rlvr.train.verl_engine import compose_verl

    build_tiny_model(tmp_path / "model", SMALL)
    run_train(checked_train(cfg_for(tmp_path, "recipe.proposal.enabled=true", "task.train_per_stratum={1: 40, 2: 960}",
                      "recipe.proposal.target=[0.5,0.5]", "recipe.proposal.proposal=[0.2,0.8]")))
    arm = Path(tmp_path) / "arm"
    frame = pd.read_parquet(arm / "data" / "train.parquet")
    weights = [row["is_weight"] for row in frame["extra_info"]]
    assert len(set(weights)) > 1 and all(w > 0 for w in weights)  # strata are under/over-proposed
    overrides = (arm / "verl_overrides.txt").read_text().split()
    cfg = compose_verl(overrides)
    assert cfg.trainer.v1.trainer_mode == "sync"  # verl's synchronous mode; our entry installs the trainer
    for script in ("launch_single_node.sh", "launch_slurm_ray.sbatch"):
        text = (arm / script).read_text()
        assert " -m crossed_rlvr.train.verl_launch" in text and "--weighted" in text
    # Our entry is verl's own Hydra app: it composes verl's config with the same overrides (--cfg job
    # prints the composed config and stops before Ray starts).
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.train.verl_weighted", "--cfg", "job", *overrides],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "trainer_mode: sync" in proc.stdout and "adv_estimator: grpo" in proc.stdout


def test_weighted_trainer_registered_with_verl():
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    from crossed_rlvr.train.verl_weighted import TRAINER_NAME, ImportanceWeightedTrainer

    assert get_trainer_cls(TRAINER_NAME) is ImportanceWeightedTrainer
    assert issubclass(ImportanceWeightedTrainer, PPOTrainerSync)


def test_weights_from_verl_reward_manager_scale_advantages(prepared):
    """verl's reward manager output -> our weights -> jagged advantages scaled row by row."""
    from crossed_rlvr.train.verl_weighted import importance_weights, scale_advantages

    score = verl_reward(prepared)
    extra_fields = []
    for w in (0.5, 2.0, 1.25):
        result = score("#### 7", "7", {"convention": "hash", "is_weight": w})
        assert result["reward_score"] == 1.0
        extra_fields.append({"reward_extra_info": result["reward_extra_info"]})
    weights = importance_weights(extra_fields)
    assert weights.tolist() == [0.5, 2.0, 1.25]
    adv = torch.nested.as_nested_tensor([torch.full((3,), 1.0), torch.full((1,), -2.0), torch.tensor([0.5, 0.5])],
                                        layout=torch.jagged)
    scaled = scale_advantages(adv, weights).unbind()
    assert [t.tolist() for t in scaled] == [[0.5, 0.5, 0.5], [-4.0], [0.625, 0.625]]
    with pytest.raises(KeyError, match="is_weight"):
        importance_weights([{"reward_extra_info": {"acc": 1.0}}])


def test_weighted_trainer_rewrites_advantages_in_transfer_queue(monkeypatch):
    """The override reads verl's advantages and the weights from the transfer queue and writes them back
    scaled; verl's own advantage computation (which needs a running queue) is replaced by a pass-through."""
    import sys
    import types

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from crossed_rlvr.train.verl_weighted import ImportanceWeightedTrainer

    store = {"advantages": torch.nested.as_nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged),
             "extra_fields": [{"reward_extra_info": {"is_weight": 3.0}}, {"reward_extra_info": {"is_weight": 0.5}}]}
    fake = types.ModuleType("transfer_queue")
    fake.kv_batch_get = lambda keys, partition_id, select_fields: {f: store[f] for f in select_fields}
    fake.kv_batch_put = lambda keys, partition_id, fields: store.update({k: fields[k] for k in fields.keys()})  # noqa: SIM118 (TensorDict iterates rows)
    monkeypatch.setitem(sys.modules, "transfer_queue", fake)
    monkeypatch.setattr(PPOTrainer, "_compute_advantage", lambda self, batch, metrics: batch)
    batch = type("Meta", (), {"keys": ["a_0", "a_1"], "partition_id": "train", "__len__": lambda self: 2})()
    metrics: dict = {}
    trainer = object.__new__(ImportanceWeightedTrainer)
    assert trainer._compute_advantage(batch, metrics) is batch
    assert [t.tolist() for t in store["advantages"].unbind()] == [[3.0, 3.0], [0.5, 0.5, 0.5]]
    assert metrics["crossed/is_weight_max"] == 3.0


def test_each_update_logs_the_weights_and_every_strata_share():
    """What a user reads in wandb when the proposal is on: the weights' mean, min and max, and each stratum's share
    of the batch's trajectories (the reward entry returns each training row's stratum)."""
    from crossed_rlvr.train.verl_weighted import weight_metrics

    got = weight_metrics(torch.tensor([0.5, 0.5, 2.0, 1.0]), ["s3_hard", "s3_hard", "s1_easy", "s2_medium"])
    assert got == {"crossed/is_weight_mean": 1.0, "crossed/is_weight_min": 0.5, "crossed/is_weight_max": 2.0,
                   "crossed/stratum_share/s1_easy": 0.25, "crossed/stratum_share/s2_medium": 0.25,
                   "crossed/stratum_share/s3_hard": 0.5}


def test_a_training_rows_reward_names_its_item_and_stratum_and_a_validation_rows_does_not(prepared):
    from crossed_rlvr.train.verl_reward import compute_score

    train = compute_score("d", "#### 7", "7", {"convention": "hash", "is_weight": 2.0, "item_id": "a-1",
                                               "stratum": "s1_easy"})
    assert train == {"score": 1.0, "acc": 1.0, "is_weight": 2.0, "item_id": "a-1", "stratum": "s1_easy"}
    val = compute_score("d", "#### 7", "7", {"convention": "hash", "item_id": "a-1", "request": "hash"})
    assert set(val) == {"score", "acc", "is_weight", "payload", "strict"}  # verl averages these: numbers only


def test_the_step_a_relaunch_resumed_from_goes_once_newer_steps_replace_it(tmp_path):
    """verl deletes only the steps its own process saved; the one a relaunch resumed from would stay for good."""
    from crossed_rlvr.layout import ArmLayout
    from crossed_rlvr.train.verl_weighted import stale_resume_step

    arm = ArmLayout(tmp_path)
    step = arm.verl_shards(50).parent  # verl's folder of step 50 (global_step_50), as the layout spells it
    step.mkdir(parents=True)
    assert stale_resume_step(arm, 50, 0, 1) is None  # nothing newer saved yet
    assert stale_resume_step(arm, 50, 1, 1) == step == tmp_path / "checkpoints" / "global_step_50"
    assert stale_resume_step(arm, 50, 1, 2) is None  # two kept: the resumed step is still one of them
    assert stale_resume_step(arm, 50, 2, 2) == step
    assert stale_resume_step(arm, 50, 5, None) is None  # max_actor_ckpt_to_keep unset: keep every step
    assert stale_resume_step(arm, None, 5, 1) is None  # trained from scratch
    assert stale_resume_step(arm, 40, 1, 1) is None  # not on disk


def test_a_relaunch_at_another_world_size_is_refused_naming_the_saved_one(tmp_path):
    """verl loads ``model_world_size_{W}_rank_{R}.pt`` for its own W: a step saved by 2 ranks and relaunched on 1
    would crash after the workers start. The preflight says so, with the supported ways on."""
    from omegaconf import OmegaConf

    from crossed_rlvr.layout import ArmLayout
    from crossed_rlvr.train.verl_launch import launched_arm, resumed_step_gb, world_size_problem

    arm = ArmLayout(tmp_path)
    actor = arm.verl_shards(1)
    actor.mkdir(parents=True)
    for r in (0, 1):
        (actor / f"model_world_size_2_rank_{r}.pt").write_bytes(b"x" * 1000)
    arm.verl_shards(0).mkdir(parents=True)
    (arm.verl_shards(0) / "stale.pt").write_bytes(b"x" * 5000)  # an older step left on disk
    composed = OmegaConf.create({"trainer": {"resume_mode": "auto", "default_local_dir": str(arm.checkpoints),
                                             "nnodes": 1, "n_gpus_per_node": 1}})
    assert launched_arm(composed) == arm
    assert world_size_problem(arm, composed) is None  # no tracker file: verl trains from scratch
    arm.verl_latest.write_text("1")
    said = world_size_problem(arm, composed)
    assert said.startswith(f"{actor} was saved by 2 ranks (model_world_size_2_rank_*.pt) and this launch runs 1 ")
    assert "engine.n_gpus_per_node=2" in said and "verl.model_merger merge" in said and "model.path=DIR" in said
    composed.trainer.n_gpus_per_node = 2
    assert world_size_problem(arm, composed) is None
    assert resumed_step_gb(arm) == 2000 / 1e9  # the step resumed from, not the stale one beside it


def test_verl_validates_the_items_trl_validates(tmp_path):
    """verl's validation parquet holds the first validation.n_items items of the split under every request, the
    items crossed-eval takes for TRL's validation (frozen_items), so the two engines' over-training curves
    are read on the same items."""
    from crossed_rlvr.eval.generate.plan import frozen_items
    from crossed_rlvr.train.validation import validation_config
    from crossed_rlvr.train.verl_engine import validation_rows

    cfg = conf_of(TrainConf, cfg_for(tmp_path, "validation.n_items=3", "validation.requests=[hash,boxed]"))
    rows = validation_rows(cfg)
    trl_items, _, _ = frozen_items(tmp_path / "trl", validation_config(cfg, 0, tmp_path / "model").task)
    assert [r["item_id"] for r in rows] == [it["item_id"] for it in trl_items] * 2
    assert [r["request"] for r in rows] == ["hash"] * 3 + ["boxed"] * 3


def test_the_training_digest_follows_what_trains_not_where_files_are():
    """A finished arm's merge is stamped with this digest: moving the run directory or reinstalling the package
    keeps it; a changed training setting does not."""
    from crossed_rlvr.train.verl_engine import training_digest

    base = ["data.train_files=/a/train.parquet", "trainer.default_local_dir=/a/checkpoints",
            "reward.custom_reward_function.path=/venv1/verl_reward.py", "actor_rollout_ref.actor.optim.lr=5e-05",
            "+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_RUN_ID='x1'"]
    moved = ["data.train_files=/b/train.parquet", "trainer.default_local_dir=/b/checkpoints",
             "reward.custom_reward_function.path=/venv2/verl_reward.py", "actor_rollout_ref.actor.optim.lr=5e-05",
             "+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_RUN_ID='x2'"]
    assert training_digest(base) == training_digest(moved)
    assert training_digest(base) != training_digest([*base[:3], "actor_rollout_ref.actor.optim.lr=1e-05", base[4]])


def test_a_launch_of_verls_older_trainer_is_bad_input_named_in_one_line(monkeypatch, capsys):
    """``trainer.use_v1=False`` asks for a trainer the launch does not build: it exits 2 with one line naming the
    setting, before Ray or verl start (the error contract's code for bad input)."""
    import os

    from omegaconf import OmegaConf

    from crossed_rlvr.train import verl_engine, verl_launch

    monkeypatch.setattr(os, "environ", dict(os.environ))  # the launch sets verl's plugin variables: not for others
    monkeypatch.setattr(verl_engine, "validate_verl", lambda overrides: OmegaConf.create({"trainer": {"use_v1": False}}))
    monkeypatch.setattr(verl_launch, "verl_budget", lambda *a: pytest.fail("went on after a bad setting"))
    assert verl_launch.run(["trainer.use_v1=False"], weighted=False, rehearse=None, wait_limit=60, preflight=True) == 2
    out = capsys.readouterr()
    said = [line for line in (out.out + out.err).splitlines() if line]
    assert any("trainer.use_v1=False: crossed-rlvr launches verl's v1 trainer only" in line for line in said)
