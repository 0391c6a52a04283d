"""crossed-train's config is typed once, at the command's door (``conf.schema.conf_of``), and checked into the one
type the trainer takes (``train.checks.CheckedTrainConf``). The arm's settings hash is computed from the typed config
(``files.settings``), and must be the one the Hydra node gave, so that a finished arm stays finished: the
same dict for crossed-train's own config, for a study's arm in the study's process and for the same arm read back
from its JSON spec by a worker process (JSON writes ``task.train_per_stratum``'s int keys as strings). Unset
optional settings (None, their default) are out of it: nothing to write for a setting that is not set."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from crossed_rlvr.conf.schema import TrainConf, conf_of
from crossed_rlvr.errors import RecipeError
from crossed_rlvr.files import unset_out
from crossed_rlvr.tracking import untracked
from crossed_rlvr.train.checks import check_train_conf, planned_arm
from crossed_rlvr.train.run import resolved


def composed(*overrides: str) -> Any:
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_train", overrides=["run_dir=/tmp/arm", *overrides])


def node_settings(cfg: Any) -> dict[str, Any]:
    """The arm's settings as they were read from the Hydra node before the config was typed: the resolved node less
    the watching settings and every unset setting, and less validation and eval for a TRL arm that does not
    validate (the arm's model carries the initial weights' hash only where a study bound one)."""
    data = unset_out(untracked(OmegaConf.to_container(cfg, resolve=True)))
    if data["engine"]["name"] == "trl" and not data["validation"]["every"]:
        data.pop("validation")
        data.pop("eval")
    return data


@pytest.mark.parametrize("overrides", [(), ("engine=verl",), ("validation.every=2",)])
def test_the_typed_config_holds_the_settings_the_node_held(overrides):
    cfg = composed(*overrides)
    typed = conf_of(TrainConf, cfg)
    assert isinstance(typed, TrainConf) and typed.task.train_per_stratum == {1: 40, 2: 3960}
    settings = resolved(check_train_conf(typed, initial_built=False))
    assert unset_out(settings) == node_settings(cfg)
    # an unset optional setting is out of the arm's settings, without a mark on its field
    assert "weights_sha256" not in settings["model"] and "sampler" not in settings["engine"]


def test_a_study_arm_has_one_settings_hash_in_the_study_and_in_a_worker():
    """The study binds the initial weights' hash into the arm's model; a worker reads the arm back from JSON."""
    arm = OmegaConf.to_container(composed("engine=verl"), resolve=True)
    arm["model"]["weights_sha256"] = "0" * 64
    in_process = resolved(planned_arm(arm))
    from_spec = resolved(planned_arm(json.loads(json.dumps(arm))))
    assert in_process == from_spec and unset_out(in_process) == node_settings(OmegaConf.create(arm))
    from_node = conf_of(TrainConf, OmegaConf.create(json.loads(json.dumps(arm))))  # a resolved_config.json as a node
    assert from_node.task.train_per_stratum == {1: 40, 2: 3960}
    assert in_process["model"]["weights_sha256"] == "0" * 64


def test_defaults_come_from_the_schema():
    """A config that names only some keys reads every other one at the schema's default, by attribute."""
    arm = OmegaConf.to_container(composed(), resolve=True)
    del arm["engine"]["micro_batch_per_gpu"], arm["validation"]
    typed = conf_of(TrainConf, arm)
    assert typed.engine.micro_batch_per_gpu == 1 and typed.validation.every == 0 and typed.validation.split == "dev"


def test_a_typed_config_is_read_only_and_changed_only_by_a_copy():
    """What the door typed and checked is what every stage reads: an assignment to any section fails with the
    field named, and ``dataclasses.replace`` gives a changed copy that is read-only too, the original unchanged."""
    import dataclasses

    typed = conf_of(TrainConf, composed())
    for target, name in ((typed, "seed"), (typed.engine, "micro_batch_per_gpu"), (typed.recipe.proposal, "enabled")):
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"'{name}'"):
            setattr(target, name, getattr(target, name))
    changed = dataclasses.replace(typed, engine=dataclasses.replace(typed.engine, micro_batch_per_gpu=2))
    assert changed.engine.micro_batch_per_gpu == 2 and typed.engine.micro_batch_per_gpu == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.engine.micro_batch_per_gpu = 4


def test_the_check_refuses_before_it_types():
    bad = conf_of(TrainConf, composed("engine.micro_batch=3"))
    with pytest.raises(RecipeError, match=r"engine\.micro_batch=3 does not divide"):
        check_train_conf(bad, initial_built=False)


def test_an_sft_job_is_typed_once_and_records_its_config_as_given():
    """crossed-sft's door (``sft.run.SFTJob``): a study's SFT spec, read back from JSON by a worker with the one arm it
    trains (``only``), is typed by the schema (defaults filled, int keys restored); its wandb runs record the spec
    as the study wrote it, so their ids stay the ones earlier runs were given."""
    from crossed_rlvr.sft.run import SFTJob

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        study = OmegaConf.to_container(compose(config_name="crossed_study", overrides=["run_dir=/tmp/s"]), resolve=True)
    spec = {"model": study["model"], "task": study["task"], "sft": study["sft"], "run_dir": "/tmp/s", "seeds": [83],
            "arm": "hash", "control": "boxed", "train_items": {"n": 10, "seed": 7}, "tracking": study["tracking"],
            "study": "s", "only": "sft-hash/s83"}
    job = SFTJob.of(OmegaConf.create(json.loads(json.dumps(spec))))
    assert job.only == "sft-hash/s83" and job.cfg.mode == "arms" and job.cfg.warmstart.band.every == 0
    assert job.cfg.task.train_per_stratum == {1: 40, 2: 3960}
    assert job.given == json.loads(json.dumps(spec))


def old_evaluation_dict(c: Any, study_name: str, run_dir: str, policies: list[Any]) -> dict[str, Any]:
    """crossed-eval's config as the study built it while it handed over a plain dict (the keys it set, no more): the
    dict every finished eval stage's fingerprint was taken of."""
    def plain(node: Any) -> Any:  # a typed section as the study's dicts held it: every field, unset ones as null
        return OmegaConf.to_container(OmegaConf.structured(node))

    ev = c.evaluation
    task = plain(c.task)
    if ev.n_items is not None:
        task["n_items"] = int(ev.n_items)
    return {"model": plain(c.model), "task": task, "eval": plain(c.eval), "tracking": plain(c.tracking),
            "study": study_name, "run_dir": run_dir, "policies": [p.entry() for p in policies],
            "requests": list(ev.requests), "templates": list(ev.templates), "template_subset": ev.template_subset,
            "template_subset_seed": int(ev.template_subset_seed), "samples": int(ev.samples), "overwrite": True,
            "distribute": plain(c.distribute),
            # the CPU numerics it runs with (crossed_rlvr/numerics.py), recorded since portable numerics became
            # the default: a stage made with the machine's own kernels has other files
            "numerics": c.numerics}


@pytest.mark.parametrize("overrides", [(), ("experiment=smoke", "arms.seeds=[83]", "tracking=off"),
                                       ("evaluation.n_items=7", "evaluation.template_subset=null")])
def test_the_study_hands_crossed_eval_its_schema_with_the_fingerprint_it_always_had(tmp_path, overrides):
    """The study's evaluation is crossed-eval's schema (``EvalCommandConf``) made of the study's typed parts; its
    settings (``files.settings``, less tracking) are the plain dict the study handed over before up to the unset
    settings they leave out, which a stamp of the earlier rule is carried over by (study/stamps.py)."""
    from crossed_rlvr.conf.schema import EvalCommandConf, PolicyConf, StudyConf
    from crossed_rlvr.files import settings
    from crossed_rlvr.layout import RunLayout
    from crossed_rlvr.policies.policy import Policy
    from crossed_rlvr.study.configs import StudyConfigs

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        c = conf_of(StudyConf, compose(config_name="crossed_study", overrides=[f"run_dir={tmp_path}", *overrides]))
    configs = StudyConfigs(c, RunLayout(tmp_path), "s", lambda _: None)
    initial = Policy.initial(str(tmp_path / "initial"))
    arms = [Policy.trained("grpo", conv, 83, str(tmp_path / conv)) for conv in ("hash", "boxed")]
    new = configs.evaluation(initial, arms)
    assert isinstance(new, EvalCommandConf) and all(isinstance(p, PolicyConf) for p in new.policies or [])
    old = old_evaluation_dict(c, "s", str(configs.layout.eval.root), configs.policies(initial, arms))
    assert unset_out(settings(new)) == unset_out(old) and None not in settings(new)["task"].values()


def test_the_warm_start_gets_its_typed_job_recording_the_config_the_study_gave(tmp_path):
    """The study's warm start is an ``SFTJob`` (typed once); its record of the config as given is the plain dict of
    the keys the study sets, so its wandb runs' ids stay the ones earlier studies' warm starts were given."""
    from pathlib import Path

    from crossed_rlvr.conf.schema import StudyConf
    from crossed_rlvr.layout import RunLayout
    from crossed_rlvr.sft.run import SFTJob
    from crossed_rlvr.study.configs import StudyConfigs

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        c = conf_of(StudyConf, compose(config_name="crossed_study", overrides=[f"run_dir={tmp_path}"]))
    warm = {"requests": ["hash"], "templates": ["original"], "seed": 0, "follow_rate": 0.5}
    job = StudyConfigs(c, RunLayout(tmp_path), "s", lambda _: None).warmstart(Path(tmp_path / "init"), warm)
    assert isinstance(job, SFTJob) and job.cfg.model.path == str(tmp_path / "init")
    assert job.cfg.warmstart.follow_rate == 0.5 and job.cfg.mode == "arms"
    assert sorted(job.given) == ["eval", "model", "run_dir", "sft", "study", "task", "tracking", "train_items",
                                 "warmstart"]
    assert job.given["warmstart"] == warm


def test_a_new_optional_setting_is_one_field_and_changes_no_hash():
    """An optional setting added to a section (its field alone, default None: the behaviour before it existed)
    leaves every settings record and hash as it was while unset; set, it is in them. Any section, no mark."""
    import dataclasses

    from crossed_rlvr.conf.schema import EvalConf, RecipeConf
    from crossed_rlvr.files import config_sha256, settings

    for section in (EvalConf, RecipeConf):
        grown = dataclasses.make_dataclass(f"Grown{section.__name__}", [("new_setting", "str | None", None)],
                                           bases=(section,))
        assert settings(grown()) == settings(section())
        assert config_sha256(settings(grown())) == config_sha256(settings(section()))
        assert settings(grown(new_setting="on"))["new_setting"] == "on"
