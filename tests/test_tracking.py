"""wandb runs never share an id across starts: a stage redone, or run again with other settings,
is a new run; only a verl arm relaunched onto its own checkpoint with the same settings resumes its run."""

import json
import time

from omegaconf import OmegaConf

from crossed_rlvr.tracking import LEDGER, claim_run_id, offline_runs, start_run

OFFLINE = OmegaConf.create({"mode": "offline", "project": "crossed-rlvr-test", "entity": None, "group": None,
                            "tags": []})


def _log_run(run_dir, config, value):
    run = start_run(OFFLINE, name="analysis", job_type="analysis", run_dir=run_dir, config=config, study="t")
    run.log({"metric": value})
    run.finish()
    return run.id


def test_each_start_is_its_own_offline_run(tmp_path):
    ids = [_log_run(tmp_path, {"analysis": {"resamples": 200}}, 1.0),
           _log_run(tmp_path, {"analysis": {"resamples": 300}}, 2.0),   # other settings
           _log_run(tmp_path, {"analysis": {"resamples": 300}}, 3.0)]   # the same stage redone
    assert len(set(ids)) == 3
    # wandb-core writes each run's log from its own process and can still be flushing it when finish() returns
    # on a loaded machine: read once every run's first record is there (a few seconds at most)
    deadline = time.monotonic() + 30
    runs = offline_runs(tmp_path)
    while not all("id" in r and r["history"] for r in runs) and time.monotonic() < deadline:
        time.sleep(0.5)
        runs = offline_runs(tmp_path)
    assert sorted(r.get("id") for r in runs) == sorted(ids)  # three folders, three histories, no id twice
    assert all(r["name"] == "analysis" and "metric" in r["history"] for r in runs)
    ledger = [json.loads(x) for x in (tmp_path / LEDGER).read_text().splitlines()]
    assert [e["start"] for e in ledger] == [0, 1, 2] and ledger[1]["settings"] == ledger[2]["settings"]
    assert ledger[0]["settings"] != ledger[1]["settings"]
    # the same commands in another directory give the same sequence of ids' structure, not the same ids
    other = tmp_path / "other"
    assert _log_run(other, {"analysis": {"resamples": 200}}, 1.0) not in ids


def test_only_an_explicit_resume_with_the_same_settings_keeps_the_id(tmp_path):
    first, resumed = claim_run_id(OFFLINE, "train", "grpo-hash/s83", tmp_path, {"recipe": {"lr": 1e-5}})
    assert resumed is False
    again, resumed = claim_run_id(OFFLINE, "train", "grpo-hash/s83", tmp_path, {"recipe": {"lr": 1e-5}},
                                  resume=True)
    assert (again, resumed) == (first, True)
    # the tracking mode is not a setting; the learning rate is
    same = claim_run_id(OFFLINE, "train", "grpo-hash/s83", tmp_path, {"recipe": {"lr": 1e-5},
                                                                      "tracking": {"mode": "online"}}, resume=True)
    assert same == (first, True)
    changed, resumed = claim_run_id(OFFLINE, "train", "grpo-hash/s83", tmp_path, {"recipe": {"lr": 3e-5}},
                                    resume=True)
    assert resumed is False and changed != first
    fresh, resumed = claim_run_id(OFFLINE, "train", "grpo-hash/s83", tmp_path, {"recipe": {"lr": 3e-5}})
    assert resumed is False and fresh not in (first, changed)


def test_verl_relaunch_resumes_only_onto_its_checkpoint(tmp_path):
    import dataclasses

    from hydra import compose, initialize_config_module

    from crossed_rlvr.conf.schema import TrainConf, conf_of
    from crossed_rlvr.train.verl_engine import launch_env

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        composed = compose(config_name="crossed_train", overrides=[
            "engine=verl", "tracking=offline", "tracking.project=crossed-rlvr-test", "arm=grpo-hash/s83", "study=t",
            f"run_dir={tmp_path}", "recipe.lr=1e-6"])
    cfg = conf_of(TrainConf, composed)  # launch_env takes the arm's typed config, as crossed-train's door makes it
    first = launch_env(cfg)["WANDB_RUN_ID"]
    assert launch_env(cfg)["WANDB_RUN_ID"] != first  # scripts rewritten with no checkpoint: a new run
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("10")
    second = json.loads((tmp_path / LEDGER).read_text().splitlines()[-1])["id"]
    assert launch_env(cfg)["WANDB_RUN_ID"] == second  # the relaunch continues the checkpoint's run
    cfg = dataclasses.replace(cfg, recipe=dataclasses.replace(cfg.recipe, lr=2e-6))
    assert launch_env(cfg)["WANDB_RUN_ID"] not in (first, second)  # other settings: a new run


def test_env_values_reach_ray_as_strings_whatever_they_look_like():
    """A run id such as 8817e40312345678 parsed as a float (inf) in an unquoted Hydra override and Ray refused
    the launch (seen in a launch rehearsal); every value is now a quoted string, quotes and backslashes kept."""
    from crossed_rlvr.train.verl_engine import compose_verl, env_overrides

    values = {"WANDB_RUN_ID": "8817e40312345678", "WANDB_RUN_GROUP": "2024", "WANDB_NAME": "it's",
              "WANDB_DIR": "C:\\runs\\x", "WANDB_TAGS": "a,b\\"}
    env = compose_verl(env_overrides(values)).ray_kwargs.ray_init.runtime_env.env_vars
    assert {k: env[k] for k in values} == values and all(isinstance(env[k], str) for k in values)
