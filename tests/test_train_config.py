"""GRPO recipe: config checks, one recipe translated to TRL and verl, proposal weights, matched arms."""

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module

from crossed_rlvr.errors import CrossedError, RecipeError
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.train.checks import check_config
from crossed_rlvr.train.matched import check_and_record
from crossed_rlvr.train.proposal import frozen_proposal
from crossed_rlvr.train.recipe import training_rows, write_rows
from crossed_rlvr.train.run import resolved
from crossed_rlvr.train.translate import (
    VerlArm,
    shared_knobs_trl,
    shared_knobs_verl,
    trl_args,
    verl_overrides,
)
from crossed_rlvr.train.verl_engine import compose_verl


def cfg_for(*overrides):
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_train", overrides=["tracking=off", *overrides])


def verl_arm(cfg, folder="out"):
    """The arm's verl settings with its folder at ``folder`` and a stand-in reward entry."""
    return VerlArm.of(cfg, ArmLayout(Path(folder)), "r.py")


def test_trl_and_verl_translations_agree():
    for recipe in ("paper", "tiny"):
        cfg = cfg_for(f"recipe={recipe}", "model=qwen2.5-7b-instruct")
        trl = shared_knobs_trl(trl_args(cfg))
        verl = shared_knobs_verl(compose_verl(verl_overrides(verl_arm(cfg))))  # as verl reads them
        assert trl == verl
    cfg = cfg_for("recipe=paper", "model=qwen2.5-7b-instruct")
    args = trl_args(cfg)
    assert args["loss_type"] == "grpo" and args["beta"] == 0.0 and args["scale_rewards"] == "group"
    assert args["per_device_train_batch_size"] * args["gradient_accumulation_steps"] == 256
    assert (args["learning_rate"], args["epsilon"], args["num_generations"], args["max_steps"]) == (1e-6, 0.2, 8, 100)
    composed = compose_verl(verl_overrides(verl_arm(cfg)))
    assert composed.reward.custom_reward_function.path == "r.py"  # the 0.9.x key, not the ignored top-level one
    assert composed.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"
    assert composed.algorithm.rollout_correction.rollout_is_threshold == 2.0


def test_the_arms_paths_reach_verl_from_its_layout():
    """verl's data, checkpoints and validation dumps are the arm folder's, as ArmLayout spells them: verl's own
    tracker file and step folders then sit where the layout looks for them (ArmLayout.verl_latest, verl_shards)."""
    arm = ArmLayout(Path("/runs/study/train/hash/s83"))
    composed = compose_verl(verl_overrides(VerlArm.of(cfg_for("engine=verl"), arm, "/pkg/verl_reward.py")))
    assert composed.data.train_files == str(arm.verl_train_data) and composed.data.val_files == str(arm.verl_val_data)
    assert composed.trainer.default_local_dir == str(arm.checkpoints)
    assert composed.trainer.validation_data_dir == str(arm.validation)
    assert arm.verl_latest.parent == arm.checkpoints and arm.verl_shards(3).parent.parent == arm.checkpoints


def test_a_path_hydra_would_misread_reaches_verl_as_written_and_a_plain_one_stays_unquoted():
    """A run folder or model path with a comma (unquoted: a sweep), parentheses or a quote (unquoted: a parse error)
    reaches verl's composed config as the same string; a plain path is written as it is, so the overrides of
    finished arms read as before."""
    from crossed_rlvr.command import hydra_value

    odd = Path("/runs/it's (copy),2/study/train/hash/s83")
    arm = VerlArm.of(cfg_for("engine=verl", "model.path='/models/Qwen2.5 (base),v2'"), ArmLayout(odd), "/pkg/r.py")
    composed = compose_verl(verl_overrides(arm))
    assert composed.trainer.default_local_dir == str(ArmLayout(odd).checkpoints)
    assert composed.data.train_files == str(ArmLayout(odd).verl_train_data)
    assert composed.actor_rollout_ref.model.path == "/models/Qwen2.5 (base),v2"
    assert hydra_value("/runs/study/train/hash/s83/checkpoints") == "/runs/study/train/hash/s83/checkpoints"
    assert hydra_value("2024") == "'2024'" and hydra_value("a\\") == "a\\"


def test_verls_overrides_are_written_by_one_function_within_the_length_rule():
    """The overrides are built from the typed arm in one function (its blocks in helpers), under the 80-line rule
    with no exemption (tests/test_layout.py); the settings are read from the config once, in VerlArm.of."""
    import ast
    import inspect

    from crossed_rlvr.train import translate

    lengths = {node.name: node.end_lineno - node.lineno + 1
               for node in ast.walk(ast.parse(inspect.getsource(translate)))
               if isinstance(node, ast.FunctionDef)}
    assert lengths["verl_overrides"] <= 80 and max(lengths.values()) <= 80
    assert list(inspect.signature(verl_overrides).parameters) == ["arm"]
    cfg = cfg_for("recipe=paper", "model=qwen2.5-7b-instruct", "engine=verl")
    assert verl_overrides(verl_arm(cfg)) == verl_overrides(verl_arm(cfg))  # a pure function of the typed arm


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.path=/nonexistent"], r"model.path='/nonexistent' does not exist"),
    (["engine.micro_batch=48", "model=qwen2.5-7b-instruct"], r"engine.micro_batch=48 does not divide the batch of 256"),
    (["recipe.group_size=1", "model=qwen2.5-7b-instruct"], r"recipe.group_size=1: outside its range \[2, 4,096\] "
                                                            r"\(GRPO compares responses within a group\)"),
    (["algorithm=reinforce_pp", "model=qwen2.5-7b-instruct"], r"reinforce_pp runs only with engine=verl"),
    (["template=para_c", "model=qwen2.5-7b-instruct"], r"template='para_c' is unknown"),
    (["engine=verl", "recipe.top_p=0.95", "model=qwen2.5-7b-instruct"],
     r"recipe.top_p=0.95 with engine=verl: vLLM's rollout log-probs are renormalised after the top-p cut"),
    (["engine=verl", "seed=1073741824", "model=qwen2.5-7b-instruct"],
     r"seed=1073741824 with engine=verl: its 4 vLLM engines are seeded seed x 4 \+ replica, past 4,294,967,295; "
     r"use a seed of at most 1,073,741,823"),
])
def test_bad_configs_fail_before_training(overrides, message):
    with pytest.raises(CrossedError, match=message):
        check_config(cfg_for(*overrides))


def test_a_verl_arm_below_top_p_1_exits_2_and_a_trl_arm_keeps_its_top_p(tmp_path):
    """A verl arm's importance ratios compare vLLM's renormalised top-p log-probs with the actor's full softmax
    (App. D.1's rollout correction): refused in one line naming the field; TRL samples with any top_p."""
    import subprocess
    import sys
    from pathlib import Path

    cfg = cfg_for("recipe.top_p=0.95", "model=qwen2.5-7b-instruct")
    check_config(cfg)
    assert trl_args(cfg)["top_p"] == 0.95
    out = subprocess.run([str(Path(sys.executable).parent / "crossed-train"), "engine=verl", "recipe.top_p=0.95",
                          "model=qwen2.5-7b-instruct", "tracking=off", f"run_dir={tmp_path}/arm"],
                         capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0].startswith("crossed-train: recipe.top_p=0.95 with engine=verl: ")
    assert not (tmp_path / "arm" / "data").exists()  # nothing was prepared


def test_unknown_convention_is_refused_by_name():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="convention/latex"):
        cfg_for("convention=latex")
    cfg = cfg_for("model=qwen2.5-7b-instruct")
    cfg.convention.name = "latex"
    with pytest.raises(RecipeError, match="convention='latex' is unknown"):
        check_config(cfg)


def test_proposal_weights():
    items = [{"stratum": s} for s in ["a"] * 10 + ["b"] * 30 + ["c"] * 60]
    prop = frozen_proposal(items, [1, 1, 2], [3, 1, 1], epsilon=1e-6)
    assert prop.q.sum() == pytest.approx(1.0) and prop.p.sum() == pytest.approx(1.0)
    draws = prop.sample(20000, seed=1)
    # Importance weighting recovers target expectations: E_Q[w f] = E_P[f] for a stratum indicator.
    w = np.array([wt for _, wt in draws])
    in_c = np.array([items[i]["stratum"] == "c" for i, _ in draws])
    assert np.mean(w * in_c) == pytest.approx(0.5, abs=0.02)
    assert prop.sample(50, seed=3) == prop.sample(50, seed=3)


def _arm(tmp_path, name, *overrides):
    cfg = cfg_for("recipe=tiny", "recipe.updates=3", "train_items.n=200", "model=qwen2.5-7b-instruct", *overrides)
    run = tmp_path / name
    run.mkdir()
    from crossed_rlvr.train.checks import checked_train

    (run / "resolved_config.json").write_text(json.dumps(resolved(checked_train(cfg))))
    write_rows(run / "data" / "train.jsonl", training_rows(cfg))
    return run


def test_matched_pair_passes_and_mismatches_are_caught(tmp_path):
    h = _arm(tmp_path, "h", "convention=hash")
    b = _arm(tmp_path, "b", "convention=boxed")
    verdict = check_and_record(h, b)
    assert verdict["matched"], verdict
    assert json.loads((h / "matched_check.json").read_text())["matched"] is True
    rows_h = [json.loads(x) for x in (h / "data" / "train.jsonl").read_text().splitlines()]
    rows_b = [json.loads(x) for x in (b / "data" / "train.jsonl").read_text().splitlines()]
    assert [r["item_id"] for r in rows_h] == [r["item_id"] for r in rows_b]
    assert rows_h[0]["prompt"].endswith('after "####".') and rows_b[0]["prompt"].endswith("within \\boxed{}.")
    # A different learning rate, a different data order, or the same convention twice: refused.
    lr = _arm(tmp_path, "lr", "convention=boxed", "recipe.lr=1e-3")
    v = check_and_record(h, lr)
    assert not v["matched"] and v["config_differences"][0]["key"] == "recipe.lr"
    order = _arm(tmp_path, "order", "convention=boxed", "data_seed=5")
    v = check_and_record(h, order)
    assert not v["matched"] and v["data_differences"][0]["field"] in ("item_id", "question", "reference")
    same = _arm(tmp_path, "same", "convention=hash", "seed=84", "data_seed=83")
    assert not check_and_record(h, same)["matched"]


def test_proposal_strata_must_match_the_task():
    cfg = cfg_for("recipe=tiny", "task=arith_tiny", "recipe.proposal.enabled=true", "model=qwen2.5-7b-instruct")
    with pytest.raises(RecipeError, match=r"recipe.proposal: 2 non-empty strata \(1ops, 2ops\) but 3 target"):
        training_rows(cfg)
    cfg = cfg_for("recipe=tiny", "task=arith_tiny", "recipe.proposal.enabled=true", "recipe.proposal.target=[1,3]",
                  "recipe.proposal.proposal=[3,1]", "model=qwen2.5-7b-instruct")
    rows = training_rows(cfg)
    weights = {r["stratum"]: r["is_weight"] for r in rows}
    assert weights["1ops"] > 1 > weights["2ops"] or weights["1ops"] < 1 < weights["2ops"]


def test_validation_settings_count_where_they_change_what_runs():
    """TRL without validation: the eval group changes nothing, so it is not part of the arm's identity; verl
    always validates (before training and at the end) with the eval sampling settings, so there it is."""
    trl = [resolved(cfg_for("recipe=tiny", f"eval.temperature={t}")) for t in (0.6, 1.0)]
    assert trl[0] == trl[1] and "validation" not in trl[0]
    verl = [resolved(cfg_for("recipe=tiny", "engine=verl", f"eval.temperature={t}")) for t in (0.6, 1.0)]
    assert verl[0] != verl[1] and verl[1]["eval"]["temperature"] == 1.0
    on = [resolved(cfg_for("recipe=tiny", "validation.every=5", f"eval.temperature={t}")) for t in (0.6, 1.0)]
    assert on[0] != on[1]


def test_trl_arms_recompute_activations_only_where_the_engine_says():
    assert trl_args(cfg_for("recipe=tiny"))["gradient_checkpointing"] is True  # TRL's own default, as before
    assert trl_args(cfg_for("recipe=tiny", "engine.gradient_checkpointing=false"))["gradient_checkpointing"] is False
