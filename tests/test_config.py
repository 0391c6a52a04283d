"""Commands behave like the tools their users know: typed configs that fail at composition, checks
before any stage, --help per command, one run directory per multirun job, one wandb run per arm."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException

from crossed_rlvr.conf.checks import ConfigError, check_command
from crossed_rlvr.conf.schema import StudyConf, conf_of
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.policies.tiny import build_tiny_model
from crossed_rlvr.study.plan import plan_arms
from crossed_rlvr.tracking import offline_runs
from crossed_rlvr.train.checks import check_train
from tests.helpers import SMALL

BIN = Path(sys.executable).parent
COMMAND = {"crossed_train": "crossed-train", "crossed_eval": "crossed-eval", "crossed_sft": "crossed-sft",
           "crossed_study": "crossed-study"}

# (config, override, first words of the error): every one fails before any stage starts.
BAD = [
    ("crossed_train", "seed=abc", "Error merging override seed=abc"),
    ("crossed_study", "evaluation.samples=many", "Error merging override evaluation.samples=many"),
    ("crossed_eval", "eval.temperature=hot", "Error merging override eval.temperature=hot"),
    ("crossed_study", "arms.parallel=two", "Error merging override arms.parallel=two"),
    ("crossed_study", "foo=1", "Could not override 'foo'"),
    ("crossed_eval", "experiment=tiny", "Could not override 'experiment'"),
    ("crossed_study", "experiment=nope", "In 'crossed_study': Could not find 'experiment/nope'"),
    ("crossed_train", "convention=hashh", "In 'crossed_train': Could not find 'convention/hashh'"),
    ("crossed_study", "evaluation.requests=[hash,boxd]", "evaluation.requests: 'boxd' unknown"),
    ("crossed_study", "stages=some", "stages='some' is unknown"),
    ("crossed_sft", "mode=both", "mode='both' is unknown"),
    ("crossed_study", "arms.kind=ppo", "arms.kind='ppo' is unknown"),
    ("crossed_study", "recipe.group_size=1", "recipe.group_size=1: outside its range [2, 4,096] (GRPO compares"),
    ("crossed_eval", "samples=0", "samples=0: outside its range [1, 10,000]"),
    ("crossed_study", "initial.follow_rate=2", "initial.follow_rate=2.0: outside its range [0, 1]"),
    ("crossed_study", "evaluation.templates=[original,para_c]", "evaluation.templates: 'para_c' unknown"),
    ("crossed_study", "engine.micro_batch=3", "engine.micro_batch=3 does not divide"),
    ("crossed_study", "task.path=/no/such/file.jsonl", "task.path='/no/such/file.jsonl' does not exist"),
    ("crossed_eval", "policies=[{name: initial, path: ./nope}]", "policies[0].path='./nope' does not exist"),
    # ranges that used to pass the checks and fail minutes later, or silently mean "all"
    ("crossed_eval", "task.n_items=-4", "task.n_items=-4: outside its range [1, 100,000,000]"),
    ("crossed_eval", "task.n_items=0", "task.n_items=0: outside its range [1, 100,000,000]"),
    ("crossed_study", "validation.n_items=0", "validation.n_items=0: outside its range [1, 100,000,000]"),
    ("crossed_train", "recipe.updates=-2", "recipe.updates=-2: outside its range [1, 1,000,000]"),
    ("crossed_study", "recipe.prompts_per_update=0", "recipe.prompts_per_update=0: outside its range [1, 65,536]"),
    ("crossed_train", "train_items.n=0", "train_items.n=0: outside its range [1, 100,000,000]"),
    ("crossed_study", "arms.train_items=0", "arms.train_items=0: outside its range [1, 100,000,000]"),
    ("crossed_study", "tracking.mode=onlin", "tracking.mode='onlin' is unknown; expected one of off, offline, online"),
    ("crossed_eval", "tracking.mode=disabled", "tracking.mode='disabled' is unknown; expected one of off, offline"),
    ("crossed_eval", "eval=vllm", "eval.backend=vllm (crossed-eval generates with it) needs a GPU"),
    ("crossed_study", "eval=vllm", "eval.backend=vllm (the study's evaluation stage generates with it) needs a GPU"),
    # the analysis stage's bootstrap settings, checked before the first stage (no empty interval)
    ("crossed_study", "analysis.resamples=1", "analysis.resamples=1: outside its range [10, 1,000,000]"),
    ("crossed_study", "analysis.resamples=0", "analysis.resamples=0: outside its range [10, 1,000,000]"),
    ("crossed_study", "analysis.rng_seed=-1", "analysis.rng_seed=-1: outside its range [0, 2**64 - 1]"),
    # policies whose names would mix two policies' responses
    ("crossed_eval", "policies=[{name: initial, path: org/a}, {name: initial, path: org/b}]",
     "policies[1].name='initial' is also policies[0].name; every policy needs a name of its own"),
    ("crossed_eval", "policies=[{name: grpo-hash/s83, path: org/a, training_convention: boxed, train_seed: 83}]",
     "policies[0]: policy 'grpo-hash/s83' names convention 'hash' and seed 83, but its training_convention='boxed' "
     "and train_seed=83"),
    ("crossed_eval", "policies=[{name: grpo-hash/s83, path: org/a, training_convention: hash, train_seed: 99}]",
     "policies[0]: policy 'grpo-hash/s83' names convention 'hash' and seed 83, but its training_convention='hash' "
     "and train_seed=99"),
    # the warm start's request-following band
    ("crossed_study", "initial.band={low: 0.8, high: 0.3, every: 4}", "initial.band.low=0.8 must not exceed initial.band.high=0.3"),
    ("crossed_study", "initial.band={low: -0.1, every: 4}", "initial.band.low=-0.1: outside its range [0, 1]"),
    ("crossed_study", "initial.band.every=-1", "initial.band.every=-1: outside its range [0, 1,000,000]"),
    ("crossed_study", "initial.band={every: 2, n_items: 0}", "initial.band.n_items=0: outside its range [1, 100,000,000]"),
    # a rehearsal of arms the study does not train would rehearse nothing
    ("crossed_study", "rehearsal.conventions=[json]", "rehearsal.conventions: 'json' unknown; expected among hash, boxed"),
]


@pytest.mark.parametrize(("config", "override", "first"), BAD)
def test_bad_overrides_fail_at_composition_or_check(config, override, first, monkeypatch):
    # as on a machine without a GPU or vLLM's CPU build (this environment holds the CPU build, which runs eval=vllm)
    monkeypatch.setattr("crossed_rlvr.machine.cpu_build", lambda: False)
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        try:
            cfg = compose(config_name=config, overrides=[override])
        except ConfigCompositionException as err:
            message = str(err)
        else:
            with pytest.raises(ConfigError) as info:
                check_command(COMMAND[config], cfg)
                if config == "crossed_train":  # the arm's recipe: crossed-train's own check (train/checks.py)
                    check_train(cfg)
                if config == "crossed_study":  # each arm's crossed-train config: checked where the study plans it
                    plan_arms(conf_of(StudyConf, cfg), RunLayout(Path("not-written")), "check")
            message = str(info.value)
    assert message.startswith(first), message


def test_a_bad_override_exits_with_its_key_on_the_first_line(tmp_path):
    out = subprocess.run([str(BIN / "crossed-study"), "evaluation.requests=[hash,boxd]", f"run_dir={tmp_path}/s"],
                         capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == ("crossed-study: evaluation.requests: 'boxd' unknown; expected among hash, "
                                          "boxed, json, xml")
    assert not (tmp_path / "s" / "stages").exists()  # nothing ran


def test_help_lists_only_the_commands_own_groups():
    out = subprocess.run([str(BIN / "crossed-eval"), "--help"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("crossed-eval: every policy x request x wording")
    assert "  eval:\n   * cpu " in out and "vLLM on a GPU" in out  # options with one-line descriptions
    assert "experiment" not in out and "recipe:" not in out and "powered by Hydra" not in out
    study = subprocess.run([str(BIN / "crossed-study"), "--help"], capture_output=True, text=True, check=True).stdout
    assert "  experiment:\n" in study and "   * tiny " in study and "smoke" in study
    # the description and examples are the primary config's header (conf/crossed_study.yaml), written once
    assert "Examples:\n  crossed-study                                   # the tiny default\n" in study


def test_job_directories_are_named_by_the_swept_overrides(monkeypatch):
    from crossed_rlvr.command import swept_dirname

    monkeypatch.setattr(sys, "argv", ["crossed-eval", "-m", "eval.temperature=0,0.6", "model.path=/a/b",
                                      "templates=[original]"])
    assert swept_dirname(["eval.temperature=0.6", "model.path=/a/b", "templates=[original]"]) == "eval.temperature=0.6"
    monkeypatch.setattr(sys, "argv", ["crossed-train", "-m", "convention=hash,boxed", "seed=83,84", "recipe.lr=1,2"])
    assert swept_dirname(["convention=hash", "seed=83", "recipe.lr=2"], "convention", "seed") == "recipe.lr=2"


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_two_arm_sweep_gives_each_arm_its_directory_and_wandb_run(tmp_path):
    """``crossed-train -m convention=hash,boxed``: one run directory and one wandb run per arm (name = arm,
    group = the study, job type = train, the resolved config in the run config)."""
    build_tiny_model(tmp_path / "model", SMALL)
    env = {**os.environ, "WANDB_SILENT": "true"}
    cmd = [str(BIN / "crossed-train"), "-m", "convention=hash,boxed", "seed=83", "tracking=offline", "recipe=tiny",
           "recipe.updates=1", "recipe.prompts_per_update=2", "recipe.max_response_tokens=16", "train_items.n=16",
           f"model.path={tmp_path}/model", f"hydra.sweep.dir={tmp_path}/sweep", "study=sweep-test"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tmp_path, env=env)
    for conv in ("hash", "boxed"):
        job = tmp_path / "sweep" / conv / "s83"
        assert json.loads((job / "summary.json").read_text())["convention"] == conv
        assert (job / "hydra" / "config.yaml").exists()  # the job's config inside its run directory
    runs = {r["name"]: r for r in offline_runs(tmp_path / "sweep")}
    assert sorted(runs) == ["grpo-boxed/s83", "grpo-hash/s83"]
    for conv, run in (("hash", runs["grpo-hash/s83"]), ("boxed", runs["grpo-boxed/s83"])):
        other = "boxed" if conv == "hash" else "hash"
        assert run["group"] == "sweep-test" and run["job_type"] == "train"
        assert {"convention", "recipe", "model", "seed"} <= set(run["config"])
        logged = set(run["history"])
        assert any(k.startswith(f"train/rewards/{conv}_reward") for k in logged), sorted(logged)
        assert not any(f"{other}_reward" in k for k in logged)  # never the other arm's metrics


@pytest.mark.long
def test_eval_sweep_gives_every_job_its_run_directory(tmp_path):
    build_tiny_model(tmp_path / "model", SMALL)
    cmd = [str(BIN / "crossed-eval"), "-m", "eval.temperature=0,0.6", f"model.path={tmp_path}/model",
           f"run_dir={tmp_path}/temps", "task=arith_tiny", "task.n_items=2", "eval.max_new_tokens=4", "tracking=off",
           "templates=[original]"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tmp_path)
    jobs = sorted(p.name for p in (tmp_path / "temps").iterdir() if p.is_dir())
    assert jobs == ["eval.temperature=0", "eval.temperature=0.6"]
    for job in jobs:
        meta = json.loads((tmp_path / "temps" / job / "responses" / "initial__hash__original.meta.json").read_text())
        assert meta["generation"]["temperature"] == float(job.split("=")[1])
        assert (tmp_path / "temps" / job / "hydra" / "overrides.yaml").exists()


PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "crossed_rlvr" / "conf" / "experiment")
                 .glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_a_tracking_choice_on_the_command_line_beats_every_preset(preset):
    """Presets pick groups with ``override``, never by setting values, so the user's group choice wins
    (experiment=smoke tracking=offline logged nothing)."""
    for choice in ("off", "offline", "online"):
        with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
            cfg = compose(config_name="crossed_study", overrides=[f"experiment={preset}", f"tracking={choice}"])
        assert str(cfg.tracking.mode) == choice, (preset, choice, cfg.tracking.mode)


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_a_train_sweep_honours_run_dir(tmp_path):
    """``crossed-train -m ... run_dir=X``: the jobs go under X/<convention>/s<seed> (the sweep
    directory was fixed to runs/train whatever run_dir said)."""
    build_tiny_model(tmp_path / "model", SMALL)
    cmd = [str(BIN / "crossed-train"), "-m", "convention=hash,boxed", "seed=83", "tracking=off", "recipe=tiny",
           "recipe.updates=1", "recipe.prompts_per_update=2", "recipe.max_response_tokens=16", "train_items.n=16",
           f"model.path={tmp_path}/model", f"run_dir={tmp_path}/mine"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tmp_path)
    for conv in ("hash", "boxed"):
        assert json.loads((tmp_path / "mine" / conv / "s83" / "summary.json").read_text())["convention"] == conv
    assert not (tmp_path / "runs").exists()
