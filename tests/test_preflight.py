"""Preflights for what only a cluster reveals: each a row, input -> the first line of the message, the
exit status, and nothing launched. Run with an empty HOME and Hugging Face cache and no wandb key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PRESET = ["experiment=qwen2.5-7b-gsm8k-crossed"]


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "HF_", "NETRC"))}
    (tmp / "home").mkdir(exist_ok=True)
    return {**env, "HOME": str(tmp / "home"), "HF_HOME": str(tmp / "hf"), "HF_HUB_OFFLINE": "1", **extra}


def fake_cache(tmp: Path, kind: str, repo: str) -> None:
    """A repository in the Hugging Face cache layout (what scan_cache_dir reads)."""
    folder = tmp / "hf" / "hub" / f"{kind}s--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text("0" * 40)
    snap = folder / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "qwen2"}))


def netrc(tmp: Path) -> dict[str, str]:
    (tmp / "home" / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password fake-key\n")
    (tmp / "home" / ".netrc").chmod(0o600)
    return {}


ROWS = [
    ("wandb online without credentials", [], lambda t: {},
     "crossed-study: tracking=online needs wandb credentials here and on every node (WANDB_API_KEY, or `wandb "
     "login`); or pass tracking=offline and `wandb sync` the run folders later", 2),
    ("tracking=offline passes to the cache check", ["tracking=offline"], lambda t: {},
     "crossed-study: model.path: the model Qwen/Qwen2.5-7B-Instruct is not in this machine's Hugging Face cache "
     "(and 1 more); download it once with `crossed-study <the same overrides> stages=fetch` (the launch runs with "
     "HF_HUB_OFFLINE=1), or point model.path at a local copy", 2),
    ("a key from `wandb login` (netrc)", [], netrc,
     "crossed-study: model.path: the model Qwen/Qwen2.5-7B-Instruct is not in this machine's Hugging Face cache", 2),
    ("the model cached, the dataset not", ["tracking=offline"],
     lambda t: fake_cache(t, "model", "Qwen/Qwen2.5-7B-Instruct") or {},
     "crossed-study: task.path: the dataset openai/gsm8k is not in this machine's Hugging Face cache; download it "
     "once", 2),
    ("stages=fetch without the network", ["tracking=offline", "stages=fetch"], lambda t: {},
     "crossed-study: model.path: could not download the model Qwen/Qwen2.5-7B-Instruct", 1),
]


@pytest.mark.parametrize(("case", "overrides", "setup", "first", "status"), ROWS, ids=[r[0] for r in ROWS])
def test_preflights_refuse_before_anything_is_launched(tmp_path, case, overrides, setup, first, status):
    (tmp_path / "home").mkdir()
    env = clean_env(tmp_path, **(setup(tmp_path) or {}))
    stages = [] if any(o.startswith("stages=") for o in overrides) else ["stages=prepare"]
    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.study.cli", *PRESET, *stages, *overrides,
                           f"run_dir={tmp_path}/run"], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == status, proc.stderr[-2000:]
    assert lines[0].startswith(first), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    run = tmp_path / "run"
    assert not run.exists() or {p.name for p in run.iterdir()} <= {"hydra", "crossed-study.log"}  # nothing ran


def test_the_launch_checks_credentials_and_the_cache_again(tmp_path, monkeypatch, capsys):
    """verl_launch's preflight, before Ray starts: the same two checks on the composed verl config."""
    from crossed_rlvr.train import verl_launch
    from crossed_rlvr.train.verl_launch import run

    monkeypatch.setattr(verl_launch, "gpu_problem", lambda: None)  # as on a GPU node: the next checks speak
    for key in [k for k in os.environ if k.startswith(("WANDB_", "NETRC"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    overrides = ["trainer.logger=[console,wandb]", "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
                 "algorithm.adv_estimator=grpo", "critic.enable=False",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
                 "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1"]
    assert run(overrides, False, None, 10, True) == 2
    assert "PREFLIGHT FAILED: tracking=online needs wandb credentials" in capsys.readouterr().out
    monkeypatch.setenv("WANDB_API_KEY", "fake")
    assert run(overrides, False, None, 10, True) == 2
    assert "PREFLIGHT FAILED: model.path: the model Qwen/Qwen2.5-7B-Instruct is not in this machine's Hugging Face " \
           "cache" in capsys.readouterr().out
    monkeypatch.setenv("WANDB_MODE", "offline")  # the launch scripts export the study's tracking mode
    fake_cache(tmp_path, "model", "Qwen/Qwen2.5-7B-Instruct")
    from crossed_rlvr.train.verl_engine import compose_verl
    from crossed_rlvr.train.verl_launch import launch_problem

    assert launch_problem(compose_verl(overrides)) is None


def test_the_launch_scripts_run_offline(tmp_path):
    from omegaconf import OmegaConf

    from crossed_rlvr.train.verl_engine import launch_env

    cfg = OmegaConf.create({"tracking": {"mode": "offline", "project": "p"}, "run_dir": str(tmp_path), "arm": "a"})
    assert launch_env(cfg)["HF_HUB_OFFLINE"] == "1"
