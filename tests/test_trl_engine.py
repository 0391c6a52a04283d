"""The TRL engine on the CPU: checkpoints at step 0 and the last step, per-step metrics, LoRA merged."""

import json

import pytest
import torch
from hydra import compose, initialize_config_module

from crossed_rlvr.policies.loading import load_policy
from crossed_rlvr.policies.tiny import build_tiny_model
from crossed_rlvr.train.checks import checked_train
from crossed_rlvr.train.run import run_train
from tests.helpers import SMALL


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.long
def test_trl_arm_writes_checkpoints_and_metrics(tmp_path, monkeypatch, capfd, lora):
    """Also: ``engine.attention`` is the attention the arm's model is loaded with (auto: the model's own)."""
    from transformers import AutoModelForCausalLM

    build_tiny_model(tmp_path / "model", SMALL)
    attention = "auto" if lora else "eager"
    loaded, load = [], AutoModelForCausalLM.from_pretrained
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: loaded.append(k.get("attn_implementation")) or load(*a, **k))
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_train", overrides=[
            "tracking=off", "recipe=tiny", "recipe.updates=2", "recipe.prompts_per_update=2",
            "recipe.max_response_tokens=24", "train_items.n=64", f"run_dir={tmp_path}/arm",
            f"model.path={tmp_path}/model", "convention=boxed", f"recipe.lora.enabled={lora}", "recipe.lora.r=4",
            f"engine.attention={attention}"])
    summary = run_train(checked_train(cfg))
    assert loaded == [None if lora else "eager"]
    arm = tmp_path / "arm"
    steps = [json.loads(x) for x in (arm / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    for key in ("rewards/boxed_reward/mean", "rewards/requested_payload/mean", "completions/mean_length",
                "entropy", "clip_ratio/region_mean"):
        assert key in steps[0], key
    assert summary["reward_first"] == steps[0]["rewards/boxed_reward/mean"]
    start, _ = load_policy(arm / "checkpoints" / "step-0")
    final, _ = load_policy(arm / "checkpoints" / "step-2")  # a plain HF directory, adapters merged in
    assert set(final.state_dict()) == set(start.state_dict())  # same architecture, no adapter weights left
    assert all(v.shape == start.state_dict()[k].shape and torch.isfinite(v).all() for k, v in final.state_dict().items())
    assert run_train(checked_train(cfg))["skipped"] is True  # the same config is not trained twice
    if not lora:
        reuse_takes_the_final_policy_as_it_was_made(arm, cfg, capfd)


def reuse_takes_the_final_policy_as_it_was_made(arm, cfg, capfd) -> None:
    """An arm is fresh by the one rule, as a study's stage is: its settings' fingerprint and its final policy's
    bytes. A summary from before it held them is given them at its first reuse; a final policy truncated since is
    said in one line and the arm trained again, to the same bytes."""
    from crossed_rlvr.files import tree_sha256

    path, final = arm / "summary.json", arm / "checkpoints" / "step-2"
    made = json.loads(path.read_text())
    assert made["final_sha256"] == tree_sha256(final)
    path.write_text(json.dumps({k: v for k, v in made.items() if k != "final_sha256"}))  # as written before
    assert run_train(checked_train(cfg))["skipped"] is True
    assert json.loads(path.read_text())["final_sha256"] == made["final_sha256"]
    weights = final / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    capfd.readouterr()
    again = run_train(checked_train(cfg))
    line = capfd.readouterr().err
    assert f"crossed-train: {final}: changed or removed since the arm finished" in line and "training the arm again" in line
    assert "skipped" not in again and again["final_sha256"] == made["final_sha256"] == tree_sha256(final)


@pytest.mark.parametrize("bf16", [False, True])
def test_grpo_samples_under_the_autocast_its_loss_runs_under(monkeypatch, bf16):
    """TRL samples through model.generate outside autocast; our trainer samples in the loss's precision (bfloat16
    autocast where engine.bf16 holds), and in fp32 without it."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from trl import GRPOTrainer

    from crossed_rlvr.train.trl_engine import weighted_trainer

    seen = []
    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn",
                        lambda self, *a, **k: seen.append((torch.is_autocast_enabled("cpu"),
                                                           torch.get_autocast_dtype("cpu"))) or ([], None))
    AcceleratorState._reset_state(True)  # process-wide: an earlier trainer in this worker may have set another precision
    trainer = object.__new__(weighted_trainer([]))  # the override alone: no model is needed to see its context
    trainer.use_vllm, trainer.accelerator = False, Accelerator(cpu=True, mixed_precision="bf16" if bf16 else "no")
    try:
        assert trainer._generate_single_turn([[1, 2]], None, None, 1) == ([], None)
        if bf16:
            assert seen[0] == (True, torch.bfloat16)
        else:
            assert seen[0][0] is False
        trainer.use_vllm = True  # vLLM samples in its own precision: no autocast around it
        trainer._generate_single_turn([[1, 2]], None, None, 1)
        assert seen[-1][0] is False
    finally:
        AcceleratorState._reset_state(True)  # the process-wide state: later trainers set their own precision


def test_an_arm_without_vllm_imports_trls_trainer_without_vllm():
    """TRL's trainer module imports vLLM whenever it is installed (~3 CPU-s a process); an arm that does not sample
    with it imports the trainer with vLLM hidden from TRL, and the same process then refuses ``engine.use_vllm``
    in one line instead of failing inside TRL."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from crossed_rlvr.train.trl_engine import import_trainer, weighted_trainer\n"
            "trainer = weighted_trainer([])\n"
            "from trl import GRPOTrainer\n"
            "assert issubclass(trainer, GRPOTrainer)\n"
            "print(sorted(m for m in sys.modules if m == 'vllm' or m.startswith('vllm.')))\n"
            "try:\n    import_trainer(True)\nexcept RuntimeError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "[]", lines
    assert lines[1].startswith("engine.use_vllm=true in a process that trained an arm without vLLM before"), lines
