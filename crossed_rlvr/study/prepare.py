"""Everything up to the launch, on any machine: the dress rehearsal (``stages=prepare``) writes every arm's
training data, verl's checked overrides and launch scripts, and the evaluation plan with the frozen test items;
``stages=rehearse`` then runs each verl arm's launch script through verl's start-up on a local Ray with logical
GPUs, up to its first CUDA-needing point. Nothing is trained or generated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from crossed_rlvr.conf.schema import TaskConf, conf_of
from crossed_rlvr.files import settings
from crossed_rlvr.study.arms import frozen_strata, grpo_items
from crossed_rlvr.study.configs import StudyConfigs
from crossed_rlvr.study.plan import Policy
from crossed_rlvr.tasks.training import SFT_ITEM_SEED

NOT_HASHED = "not hashed (stages=prepare)"


def prepare(configs: StudyConfigs, initial_path: str) -> dict[str, Any]:
    """``stages=prepare``: every arm's inputs and the evaluation plan; ``prepare_summary.json`` lists them."""
    c, layout = configs.cfg, configs.layout
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.config.write_text(OmegaConf.to_yaml(c, resolve=True))
    initial = Policy.initial(initial_path)
    if c.arms.kind == "given":  # nothing to prepare: the evaluation plan lists the checkpoints it will read
        given = configs.given_arms()
        arms = {a.name: {**a.record(), "exists": Path(a.path).is_dir()} for a in given}
        policies = given
    elif c.arms.kind == "sft":
        arms, policies = _sft_arms(configs, initial_path), configs.sft_policies()
    else:
        arms, policies = _grpo_arms(configs, initial_path), [plan.policy for plan in configs.plans]
    plan = eval_plan(configs, initial, policies)
    summary = {"initial": initial_path, "arms": arms, "eval_plan": str(layout.eval_plan),
               "responses_planned": plan["responses"]}
    layout.prepare_summary.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def rehearse(configs: StudyConfigs, initial_path: str) -> dict[str, Any]:
    """``stages=rehearse``: the dress rehearsal, then every verl arm's launch script run through verl's start-up
    on a local Ray with logical GPUs up to its first CUDA-needing point (train/rehearsal.py).
    ``rehearsal.json`` holds what each arm reached and how long it took."""
    from crossed_rlvr.train.rehearsal import rehearse as rehearse_arms

    summary = prepare(configs, initial_path)
    c = configs.cfg
    if c.arms.kind != "grpo" or c.engine.name != "verl":
        configs.say("    nothing to rehearse on Ray: the arms do not train through verl")
        summary["rehearsal"] = {}
        return summary
    r = c.rehearsal
    only = r.conventions
    arms = {name: arm for name, arm in summary["arms"].items() if only is None or arm["convention"] in only}
    summary["rehearsal"] = rehearse_arms(arms, int(c.engine.n_gpus_per_node), configs.layout.rehearsal,
                                         timeout=float(r.timeout_s),
                                         wait_limit=float(r.wait_limit_s), say=configs.say)
    configs.layout.prepare_summary.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _grpo_arms(configs: StudyConfigs, ipath: str) -> dict[str, Any]:
    """Each arm's inputs from its plan (checked when it was planned): verl's data, overrides and launch scripts, or
    TRL's training rows."""
    from crossed_rlvr.train.checks import planned_arm
    from crossed_rlvr.train.recipe import training_rows, write_rows
    from crossed_rlvr.train.run import run_train

    c = configs.cfg
    out: dict[str, Any] = {}
    strata = frozen_strata(c.recipe.proposal, lambda: grpo_items(configs.train_task(), c.arms.train_items), c.eval,
                           c.model.system, configs.layout, (ipath, NOT_HASHED), configs.say, prepare=True)
    task = configs.train_task()
    for plan in configs.plans:
        cfg = plan.config(ipath, NOT_HASHED, task, strata)
        cfg["engine"] = {**cfg["engine"], "launch": False}
        arm = plan.layout
        node = planned_arm(cfg)
        if c.engine.name == "verl":
            info = run_train(node)
            files = [str(p.relative_to(arm.root)) for p in (arm.verl_train_data, arm.verl_val_data,
                                                            arm.verl_overrides, arm.launch_single_node,
                                                            arm.launch_slurm)]
        else:  # TRL trains in-process: its data is the whole preparation
            arm.root.mkdir(parents=True, exist_ok=True)
            rows = training_rows(node)
            write_rows(arm.train_rows, rows)
            info, files = {"rows": len(rows)}, [str(arm.train_rows.relative_to(arm.root))]
        configs.say(f"    prepared {plan.name}: {', '.join(files)}")
        out[plan.name] = {**plan.policy.record(), "run_dir": str(arm.root), "files": files,
                          **{k: info[k] for k in ("val_rows", "overrides") if k in info}}
    return out


def _sft_arms(configs: StudyConfigs, ipath: str) -> dict[str, Any]:
    from crossed_rlvr.sft.pairs import write_pairs
    from crossed_rlvr.tasks.training import train_items

    c, layout = configs.cfg, configs.layout
    arm, control = c.arms.sft_arm, c.arms.sft_control
    data = {conv: layout.sft_pairs(conv) for conv in (arm, control)}
    items = train_items(conf_of(TaskConf, configs.train_task()), int(c.arms.train_items), SFT_ITEM_SEED)
    n = write_pairs(items, data[arm], data[control], arm, control)
    configs.say(f"    prepared {n} content-matched SFT pairs: {data[arm]}, {data[control]}")
    return {p.name: {**p.record(), "pairs": n, "files": [str(data[p.convention].relative_to(layout.root))]}
            for p in configs.sft_policies()}


def eval_plan(configs: StudyConfigs, initial: Policy, arms: list[Policy]) -> dict[str, Any]:
    """Policies x requests x wordings with item counts and seeds, whatever the task's kind (a code task's dataset
    file and tasks beside: its ``run_facts``); freezes the test items now."""
    from crossed_rlvr.eval.generate.plan import frozen_items, item_seed, template_items
    from crossed_rlvr.task_sources import task_kind

    cfg = configs.evaluation(initial, arms)
    facts = task_kind(cfg.task).hook("run_facts")
    items, sha, path = frozen_items(Path(cfg.run_dir), cfg.task)
    base = int(cfg.eval.base_seed)
    per_template = {}
    for t in cfg.templates:
        chosen = template_items(items, t, cfg.template_subset, cfg.template_subset_seed)
        per_template[t] = {"items": len(chosen), "first_item_seed": item_seed(base, chosen[0], 0, 0) if chosen else None}
    cells: list[dict[str, Any]] = [
        {"policy": p.name, "path": p.path, "request": r, "template": t, "items": per_template[t]["items"],
         "samples": int(cfg.samples)} for p in cfg.policies or [] for r in cfg.requests for t in cfg.templates]
    plan = {"task": cfg.task.name, "split": cfg.task.split, "items_file": str(path), "items_sha256": sha,
            "n_items": len(items), "templates": per_template, "requests": list(cfg.requests),
            "generation": settings(cfg.eval), "seeds": "item seed = base_seed + item id (row index for "
            "non-numeric ids) + 10^7 x sample", "policies": settings(cfg.policies), "cells": cells,
            "responses": sum(x["items"] * x["samples"] for x in cells), **(facts(cfg.task) if facts else {})}
    configs.layout.eval_plan.write_text(json.dumps(plan, indent=2) + "\n")
    configs.say(f"    evaluation plan: {len(plan['policies'])} policies x {len(cfg.requests)} requests x "
                f"{len(cfg.templates)} wordings, {plan['responses']} responses ({path.name}, {len(items)} items)")
    return plan
