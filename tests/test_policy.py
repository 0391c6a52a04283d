"""One ``Policy`` from plan to report (policies/policy.py): the study's stamps store it, crossed-eval reads its config's
policies into it once and keeps it in ``run.json``, every response record carries its facts, and the analysis pairs
policies by those facts, never by reading them back from a name. What was written before the facts were stored (a
stamp, a config entry or a ``run.json`` without them) still reads."""

from __future__ import annotations

import importlib
import json

import pandas as pd
import pytest

from crossed_rlvr.policies.policy import Policy, weights_of
from tests.helpers import cfg_for, overrides


def test_a_policy_round_trips_through_a_stage_stamp(tmp_path):
    """Every fact, the method and checkpoint included, comes back from the stamp as it went in, whatever the name."""
    from crossed_rlvr.study.plan import policies_of
    from crossed_rlvr.study.stamps import Stamps

    mine = Policy("my own arm", str(tmp_path / "w"), "boxed", 7, "dpo", "step5", "ab" * 32)
    final = Policy.trained("grpo", "hash", 83, tmp_path / "grpo")
    stamps = Stamps(tmp_path)
    stamps.write("arms", "fp", [], 1.0, {"arms": {p.name: p.record() for p in (mine, final)}}, {})
    assert policies_of(stamps.read("arms")["info"]) == sorted([mine, final], key=lambda p: p.name)


def test_a_stamp_written_before_the_method_was_stored_still_reads():
    old = {"path": "runs/a/arms/grpo-hash_s83/checkpoints/step-2", "convention": "hash", "seed": 83}
    policy = Policy.from_record("grpo-hash/s83", old)
    assert (policy.method, policy.checkpoint, policy.convention, policy.seed) == ("grpo", "", "hash", 83)
    assert Policy.from_record("initial", {"path": "m", "convention": "initial", "seed": None}) == Policy.initial("m")


def test_a_config_entry_reads_back_whole_and_an_older_one_by_its_name():
    given = Policy("checkpoint 3 of mine", "/m", "hash", 2, "grpo", "step3")
    assert Policy.from_entry(given.entry()) == given
    older = {"name": "grpo-boxed/s1@step10", "path": "/m", "training_convention": "boxed", "train_seed": 1}
    assert Policy.from_entry(older) == Policy("grpo-boxed/s1@step10", "/m", "boxed", 1, "grpo", "step10")
    # what a cell's settings and the eval stage's fingerprint hold of it: the keys they have always held
    assert given.cell_settings() == {"name": "checkpoint 3 of mine", "path": "/m", "training_convention": "hash",
                                     "train_seed": 2}
    assert given.identity() == {"name": "checkpoint 3 of mine", "training_convention": "hash", "train_seed": 2}


def test_the_weights_of_a_policy_are_its_folders_hash_or_its_hub_name(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"w")
    assert weights_of(str(tmp_path), lambda p: "hash of " + p) == f"hash of {tmp_path}"
    assert weights_of("Qwen/Qwen2.5-7B", lambda p: "never") == "Qwen/Qwen2.5-7B"
    assert Policy.initial(tmp_path).hashed(lambda p: "h").weights == "h"


@pytest.mark.parametrize("module, name", [("crossed_rlvr.eval.generate.plan", "PolicySpec"),
                                          ("crossed_rlvr.names", "policy_facts"),
                                          ("crossed_rlvr.names", "policy_parts"),
                                          ("crossed_rlvr.eval.ingest.common", "policy_fields")])
def test_the_second_policy_class_and_the_name_readers_are_gone(module, name):
    assert not hasattr(importlib.import_module(module), name)


def test_the_study_hands_the_evaluation_the_one_policy():
    from crossed_rlvr.study import plan

    assert plan.Policy is Policy and not hasattr(Policy, "eval_entry")


def test_crossed_eval_carries_a_policys_facts_whatever_its_name(tmp_path, tiny):
    """Two arms named outside the naming scheme, their method, convention and seed given: the records, ``run.json``,
    the scores and the analysis carry them, and the analysis pairs the two as one seed's crossed pair."""
    from crossed_rlvr.analysis.analyze import read_contrasts
    from crossed_rlvr.analysis.report.folder import analyze
    from crossed_rlvr.eval.generate.runner import recorded_policies, run_eval
    from crossed_rlvr.eval.score.scoring import score_files

    run = tmp_path / "run"
    entries = ",".join(f"{{name: {name}, path: {tiny}, training_convention: {conv}, train_seed: 5, method: ppo}}"
                       for name, conv in (("mine-a", "hash"), ("mine-b", "boxed")))
    policies = f"policies=[{{name: initial, path: {tiny}, training_convention: initial, train_seed: null}},{entries}]"
    run_eval(cfg_for(*overrides(run, tiny, extra=[policies, "templates=[original]"])), progress=False)

    recorded = recorded_policies(run)
    assert recorded["mine-a"].facts() == {"policy": "mine-a", "training_convention": "hash", "train_seed": 5,
                                          "method": "ppo", "checkpoint": ""}
    assert recorded["mine-b"].convention == "boxed" and len(recorded["mine-b"].weights) == 64
    assert recorded["initial"].method == "initial"

    scores = tmp_path / "scores.parquet"
    score_files([run], scores, overwrite=True, progress=False)
    table = pd.read_parquet(scores).drop_duplicates("policy").set_index("policy")
    assert table.loc["mine-b", ["method", "training_convention", "train_seed"]].tolist() == ["ppo", "boxed", 5]
    out = analyze(scores, tmp_path / "analysis", n_resamples=20, figures=False)
    contrasts = read_contrasts(out / "contrasts.csv")
    pair = contrasts[(contrasts.name == "interaction") & (contrasts.policy == "ppo/s5")]
    assert not pair.empty and set(pair.arm_h) == {"hash"} and set(pair.arm_b) == {"boxed"}


def test_a_run_json_written_before_the_facts_were_recorded_still_reads(tmp_path):
    """Its policies keep only path and hash: the protocol card reads them as before; no policy is made up."""
    from crossed_rlvr.eval.generate.runner import recorded_policies

    (tmp_path / "run.json").write_text(json.dumps({"policies": {"grpo-hash/s1": {"path": "m", "weights_sha256": "x"}}}))
    assert recorded_policies(tmp_path) == {}


def test_a_stamp_read_back_from_json_names_no_input_as_changed():
    """A stamp's inputs come back from JSON with text keys (``"1"`` for the stratum 1): only real differences are
    named when a stage is redone."""
    from crossed_rlvr.study.stamps import changed_inputs

    now = {"task": {"train_per_stratum": {1: 100, 2: 100}}, "seed": 83}
    assert changed_inputs(json.loads(json.dumps(now)), now) == []
    assert changed_inputs(json.loads(json.dumps(now)), {**now, "seed": 84}) == ["seed"]
