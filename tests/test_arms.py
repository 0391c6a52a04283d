"""The study's arms stage, one job a function: the route an arm trains on is decided where the arms are planned
(study/route.py), arms that are not matched stop the study with a typed error the command turns into one line and
exit 1, the frozen strata are made from what they need (the proposal, the items, the sampling, the run's layout),
and the GPU smoke reports a failed step without swallowing an interrupt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crossed_rlvr.conf.schema import StudyConf, conf_of
from crossed_rlvr.errors import RUN_FAILED, RunFailure
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.study.arms import ArmsNotMatched, check_matched, frozen_strata
from crossed_rlvr.study.plan import plan_arms
from crossed_rlvr.study.route import ArmRoute
from tests.helpers import study_cfg


def routes(tmp_path, monkeypatch, gpu: bool, *overrides: str) -> set[ArmRoute]:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    cfg = study_cfg(tmp_path / "run", *overrides)
    return {plan.route for plan in plan_arms(conf_of(StudyConf, cfg), RunLayout(tmp_path / "run"), "routes")}


@pytest.mark.parametrize(("gpu", "overrides", "route"), [
    (False, ["experiment=smoke"], ArmRoute.IN_STUDY),  # TRL on this CPU, one arm at a time
    (True, ["experiment=smoke"], ArmRoute.OWN_PROCESS),  # on a GPU: a process of its own, its memory freed after
    (False, ["experiment=smoke", "engine.nproc_per_node=2", "validation.every=0"], ArmRoute.OWN_PROCESS),  # torchrun
    (False, ["experiment=smoke", "arms.parallel=2"], ArmRoute.WORKERS),
    (True, ["experiment=smoke-verl"], ArmRoute.IN_STUDY),  # verl's launch scripts, written (and run) from the study
])
def test_the_route_is_decided_when_the_arms_are_planned(tmp_path, monkeypatch, gpu, overrides, route):
    assert routes(tmp_path, monkeypatch, gpu, *overrides) == {route}


def test_training_follows_the_planned_route_without_asking_the_machine(tmp_path, monkeypatch):
    """Planned on a GPU, the arms train in processes of their own even where torch is asked nothing more."""
    import torch

    from crossed_rlvr.study.arms import train_arms
    from crossed_rlvr.train import worker

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = study_cfg(tmp_path / "run", "experiment=smoke", "recipe.updates=1")
    plans = plan_arms(conf_of(StudyConf, cfg), RunLayout(tmp_path / "run"), "routes")

    def asked() -> bool:
        raise AssertionError("the arms stage asked torch for a GPU")

    monkeypatch.setattr(torch.cuda, "is_available", asked)
    launched = []
    monkeypatch.setattr(worker, "run_arm", lambda arm, spec, nproc: launched.append(spec) or {"seconds": 1.0})
    results = train_arms(cfg, [(plan, plan.base) for plan in plans])
    assert launched == [plan.layout.worker_spec for plan in plans]
    assert results == {plan.name: {"seconds": 1.0} for plan in plans}


def unmatched_arms(run: Path) -> None:
    """The smoke study's two seed-83 arms on disk, trained with different learning rates."""
    for conv, lr in (("hash", 1e-6), ("boxed", 2e-6)):
        arm = RunLayout(run).arm(conv, 83)
        arm.root.mkdir(parents=True)
        arm.resolved_config.write_text(json.dumps({"convention": {"name": conv}, "template": "original",
                                                   "recipe": {"lr": lr}}))
        arm.train_rows.parent.mkdir(parents=True)
        arm.train_rows.write_text("")


def test_arms_that_are_not_matched_raise_a_typed_error(tmp_path):
    cfg = study_cfg(tmp_path / "run", "experiment=smoke", "arms.seeds=[83]")
    unmatched_arms(tmp_path / "run")
    with pytest.raises(ArmsNotMatched) as info:
        check_matched(plan_arms(conf_of(StudyConf, cfg), RunLayout(tmp_path / "run"), "matched"))
    assert isinstance(info.value, RunFailure) and not isinstance(info.value, SystemExit)
    assert str(info.value).startswith("arms grpo-hash/s83 and grpo-boxed/s83 are not matched: [{'key': 'recipe.lr'")
    assert "\n" not in str(info.value)


@pytest.mark.long
def test_a_study_whose_arms_are_not_matched_exits_1_in_one_line(tmp_path):
    """Through crossed-study's own handler (crossed_rlvr/command.py): the arms stage's check, on arms trained apart."""
    unmatched_arms(tmp_path / "run")
    script = ("import sys\n"
              "from crossed_rlvr.study import arms, pipeline\n"
              "pipeline.Study.run_all = lambda self: arms.check_matched(self.plans)  # the arms' check, at once\n"
              "from crossed_rlvr.study.cli import main\n"
              f"sys.argv = ['crossed-study', 'experiment=smoke', 'arms.seeds=[83]', 'run_dir={tmp_path / 'run'}']\n"
              "main()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          check=False)
    err = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("─")]
    assert proc.returncode == RUN_FAILED, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert err[-1].startswith("crossed-study: arms grpo-hash/s83 and grpo-boxed/s83 are not matched: "), err


def strata_args(tmp_path, items, **proposal):
    from omegaconf import OmegaConf

    from crossed_rlvr.conf.schema import EvalConf, ProposalConf

    said: list[str] = []
    return (OmegaConf.structured(ProposalConf(**proposal)), items, OmegaConf.structured(EvalConf()), None,
            RunLayout(tmp_path / "run"), ("/model", "w1"), said.append)


def test_frozen_strata_takes_the_proposal_the_items_and_the_runs_layout(tmp_path):
    """Not the study: the proposal's settings, the training items (made only when the strata are estimated), the
    sampling, the initial policy and the run's layout, whose strata files it reuses."""
    def no_items() -> list:
        raise AssertionError("the items were made although no strata are estimated")

    assert frozen_strata(*strata_args(tmp_path, no_items, enabled=False)) is None
    user = tmp_path / "mine.jsonl"
    user.write_text('{"item_id": "a", "stratum": "s1"}\n')
    given = frozen_strata(*strata_args(tmp_path, no_items, enabled=True, strata_file=str(user)))
    assert given["file"] == str(user.resolve()) and len(given["sha256"]) == 64
    carried = [{"item_id": "a", "stratum": "s1"}]
    assert frozen_strata(*strata_args(tmp_path, lambda: carried, enabled=True)) is None  # the task's own strata
    run = RunLayout(tmp_path / "run")
    run.strata.parent.mkdir(parents=True)
    run.strata.write_text('{"item_id": "a", "stratum": "s2"}\n')
    args = strata_args(tmp_path, lambda: carried, enabled=True, estimate=True)
    from crossed_rlvr.fingerprint import digest, fingerprint
    from crossed_rlvr.study.plan import eval_fingerprint

    inputs = {"policy": "w1", "items": digest(["a"]), "eval": eval_fingerprint(args[2]),
              "samples": args[0].estimate_samples}
    run.strata_meta.write_text(json.dumps(inputs))  # as written before the strata followed the stages' one rule
    assert frozen_strata(*args)["file"] == str(run.strata.resolve())  # estimated before from the same inputs
    assert json.loads(run.strata_meta.read_text()) == fingerprint(inputs, str)[0]  # carried over, once
    assert args[6].__self__ == ["    strata: carried over to the stages' freshness rule (their inputs unchanged)"]
    assert frozen_strata(*args)["file"] == str(run.strata.resolve())  # the rule's own record matches as it is
    assert len(args[6].__self__) == 1


def test_the_gpu_smoke_reports_a_failed_step_and_lets_an_interrupt_through(capsys):
    from crossed_rlvr.study.smoke import run_steps

    def unmatched() -> str:
        raise ArmsNotMatched("arms a and b are not matched: []")

    assert run_steps([("rehearse", lambda: "ok"), ("train", unmatched), ("eval", lambda: "never")]) == 1
    out = capsys.readouterr().out
    assert "PASS rehearse" in out and "FAIL train" in out and "ArmsNotMatched: arms a and b" in out
    assert "eval" not in out

    def interrupted() -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_steps([("train", interrupted)])


def test_an_arm_records_the_numerics_and_threads_its_study_runs_and_one_recorded_before_is_carried_over(tmp_path, monkeypatch):
    """An arm trains in the study's process or one the study starts, so under the study's CPU numerics, and in the
    study's process with its torch threads (other sums, other weights): its config says both, as its own run's would
    (it held the default numerics before, whatever the study ran, and no threads). An arm finished so is carried over
    when the arms stage's stamp says the study ran the numerics it runs now and its summary the threads, and trained
    again otherwise."""
    from crossed_rlvr.files import config_sha256
    from crossed_rlvr.fingerprint import fingerprint
    from crossed_rlvr.study.arms import carry_over_arms
    from crossed_rlvr.train.checks import planned_arm
    from crossed_rlvr.train.run import resolved

    monkeypatch.setattr("crossed_rlvr.numerics.mode", lambda: "native")  # this process as a native study's
    cfg = study_cfg(tmp_path / "run", "experiment=smoke", "numerics=native", "arms.seeds=[83]", "arms.threads=2")
    plans = plan_arms(conf_of(StudyConf, cfg), RunLayout(tmp_path / "run"), "numerics")
    assert {plan.base["numerics"] for plan in plans} == {"native"}
    assert {plan.base["threads"] for plan in plans} == {2}  # TRL in the study's process: its threads
    (tmp_path / "initial").mkdir()
    jobs = [(plan, plan.config(str(tmp_path / "initial"), "w" * 64, plan.base["task"])) for plan in plans]

    def written_before() -> None:  # each arm's record as the study wrote it before: the default numerics
        for plan, arm in jobs:
            plan.layout.root.mkdir(parents=True, exist_ok=True)
            recorded = {**resolved(planned_arm(arm)), "numerics": "portable"}
            recorded.pop("threads")  # nor the threads: its summary did
            plan.layout.resolved_config.write_text(json.dumps(recorded, default=str))
            plan.layout.summary.write_text(json.dumps({"config_sha256": config_sha256(recorded), "threads": threads}))

    threads = 1
    written_before()
    assert carry_over_arms(jobs, "whole", ran="native") == []  # trained with one thread: trained again
    threads = 2
    written_before()
    assert carry_over_arms(jobs, "whole", ran="portable") == []  # ran other numerics: trained again
    assert carry_over_arms(jobs, "whole", ran=None) == []  # nothing says what it ran
    assert carry_over_arms(jobs, "whole", ran="native") == [plan.name for plan in plans]
    for plan, arm in jobs:
        now, digest = fingerprint(resolved(planned_arm(arm)))
        assert json.loads(plan.layout.summary.read_text())["config_sha256"] == digest
        assert json.loads(plan.layout.resolved_config.read_text())["numerics"] == now["numerics"] == "native"
    for overrides in (["arms.parallel=2"], ["experiment=smoke-verl"]):  # in processes of their own; verl's
        cfg = study_cfg(tmp_path / "run", "experiment=smoke", "arms.threads=2", *overrides)
        assert {plan.base["threads"] for plan in plan_arms(conf_of(StudyConf, cfg), RunLayout(tmp_path), "t")} == {None}


def test_an_arm_finished_before_summaries_held_its_final_policy_takes_the_hash_its_stage_recorded(tmp_path):
    """An arm a study trained before its summary recorded its final policy's bytes takes the hash the arms stage
    recorded when it finished, so crossed-train finds a final policy changed since rather than taking it as it is
    now; an arm whose summary holds one, or that the stamp does not name, is left as it is."""
    from crossed_rlvr.files import atomic_write_json
    from crossed_rlvr.study.arms import recorded_finals
    from crossed_rlvr.study.stamps import Stamps

    run = tmp_path / "run"
    cfg = study_cfg(run, "experiment=smoke", "arms.seeds=[83]")
    hashed, boxed = plan_arms(conf_of(StudyConf, cfg), RunLayout(run), "finals")
    stamps = Stamps(run)
    assert recorded_finals(stamps, [hashed, boxed]) == []  # no stamp: nothing to take
    for plan in (hashed, boxed):
        plan.layout.root.mkdir(parents=True)
        plan.layout.summary.write_text(json.dumps({"config_sha256": "c"}))
    atomic_write_json(stamps.path("arms"), {"outputs_sha256": {str(hashed.policy.path): "a" * 64}})
    assert recorded_finals(stamps, [hashed, boxed]) == [hashed.name]
    assert json.loads(hashed.layout.summary.read_text()) == {"config_sha256": "c", "final_sha256": "a" * 64}
    assert json.loads(boxed.layout.summary.read_text()) == {"config_sha256": "c"}
    assert recorded_finals(stamps, [hashed, boxed]) == []  # once
