"""The study's matched arms (paper 001 §2): GRPO arms trained one after another or in worker processes, the check
that the arms of a seed differ only in their convention, the frozen difficulty strata of the training items
(App. D.1), and verl's validation dumps read back as response records.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.conf.schema import EvalConf, ProposalConf, StudyConf, TaskConf, conf_of
from crossed_rlvr.errors import RunFailure
from crossed_rlvr.fingerprint import digest, fingerprint
from crossed_rlvr.layout import ArmLayout, RunLayout
from crossed_rlvr.names import pair_name
from crossed_rlvr.study.plan import ArmPlan, eval_fingerprint
from crossed_rlvr.study.route import ArmRoute
from crossed_rlvr.study.stamps import Stamps
from crossed_rlvr.tasks.training import GRPO_ITEM_SEED

if TYPE_CHECKING:
    from tqdm import tqdm

# what a stage's info keeps of an arm's training summary
RESULT_KEYS = ("seconds", "reward_first", "reward_last", "payload_first", "payload_last", "skipped", "validation_steps",
               "validation_seconds", "bf16", "threads")


def arm_result(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary[k] for k in RESULT_KEYS if k in summary}


Job = tuple[ArmPlan, dict[str, Any]]  # an arm's plan and its crossed-train config with the initial policy bound


def train_arms(cfg: StudyConf, jobs: list[Job]) -> dict[str, dict[str, Any]]:
    """Train every arm (configs checked when the arms were planned) along the route its plan carries
    (study/route.py): in a process of its own each, in this process, or ``arms.parallel`` worker processes of one
    CPU thread each (a tiny model's small matrices gain little from threads, so two single-thread arms at once
    finish in about the time of one two-thread arm)."""
    from tqdm import tqdm

    updates = int(cfg.recipe.updates)
    bar = tqdm(total=updates * len(jobs), desc="GRPO updates (all arms)", unit="update")
    route = jobs[0][0].route if jobs else ArmRoute.IN_STUDY  # one study config: every arm's plan has the same
    if route is ArmRoute.OWN_PROCESS:
        from crossed_rlvr.train.worker import run_arm

        nproc = int(cfg.engine.nproc_per_node or 1)
        return _one_by_one(jobs, bar, updates, lambda plan, arm: run_arm(arm, plan.layout.worker_spec, nproc))
    if route is ArmRoute.IN_STUDY:
        from crossed_rlvr.train.checks import planned_arm
        from crossed_rlvr.train.run import run_train

        return _one_by_one(jobs, bar, updates, lambda plan, arm: run_train(planned_arm(arm)))  # with its threads
    return _in_workers(jobs, bar, updates, max(1, int(cfg.arms.parallel)))


def recorded_finals(stamps: Stamps, plans: list[ArmPlan]) -> list[str]:
    """Arms finished before their summary recorded their final policy's bytes (``train/run.py``): each such summary
    takes the hash the arms stage recorded of that policy when it finished, so crossed-train finds a final policy
    changed since (edited, truncated, removed) and trains the arm again, rather than taking it as it is now. The
    names of the arms whose summary was given it."""
    from crossed_rlvr.files import atomic_write_json
    from crossed_rlvr.train.run import FINAL_SHA256

    recorded = (stamps.read("arms") or {}).get("outputs_sha256", {})
    given = []
    for plan in plans:
        path, final = plan.layout.summary, str(plan.policy.path)
        if final in recorded and path.exists() and FINAL_SHA256 not in (summary := json.loads(path.read_text())):
            atomic_write_json(path, {**summary, FINAL_SHA256: recorded[final]})
            given.append(plan.name)
    return given


def carry_over_arms(jobs: list[Job], whole: str, ran: str | None) -> list[str]:
    """Arms finished under an earlier freshness rule (study/stamps.py): their resolved config named the initial policy
    by every file of its folder (``whole``), recorded unset settings as null, held the default numerics whatever the
    study ran (``ran``: the numerics its arms stage recorded, None without a stamp), or left out the torch threads
    the study trained it with (which its summary records). Where the config an arm
    recorded is its config now up to that change, its summary and resolved config are rewritten to the config it has
    now, so crossed-train reuses it (it reuses an arm by its config's fingerprint) rather than training it again for
    the change of rule alone. The names of the arms carried over."""
    from crossed_rlvr.files import atomic_write_text, config_sha256, unset_out
    from crossed_rlvr.train.checks import planned_arm
    from crossed_rlvr.train.run import resolved

    carried = []
    for plan, cfg in jobs:
        path, config = plan.layout.summary, plan.layout.resolved_config
        if not path.exists() or not config.exists():
            continue
        old, recorded = json.loads(path.read_text()), json.loads(config.read_text())
        now, digest_now = fingerprint(resolved(planned_arm(cfg)))
        if old.get("config_sha256") in (None, digest_now) or old["config_sha256"] != config_sha256(recorded):
            continue  # current already, or a recorded config that is not the one it trained with: crossed-train decides
        if recorded.get("model", {}).get("weights_sha256") == whole:
            recorded["model"]["weights_sha256"] = cfg["model"]["weights_sha256"]
        if ran is not None:  # what its process ran, which the study's stamp records
            recorded["numerics"] = ran
        if "threads" in now and "threads" not in recorded and old.get("threads") == now["threads"]:
            recorded["threads"] = now["threads"]  # held by the study, recorded by the arm's summary
        if unset_out(recorded) != unset_out(json.loads(json.dumps(now, default=str))):
            continue  # trained from other weights or with other settings: trained again
        atomic_write_text(config, json.dumps(now, indent=2, sort_keys=True) + "\n")
        atomic_write_text(path, json.dumps({**old, "config_sha256": digest_now}, indent=2) + "\n")
        carried.append(plan.name)
    return carried


def _one_by_one(jobs: list[Job], bar: tqdm, updates: int,
                train: Callable[[ArmPlan, dict[str, Any]], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    results = {}
    for plan, arm in jobs:
        results[plan.name] = arm_result(train(plan, arm))
        bar.update(updates)
    bar.close()
    return results


def _in_workers(jobs: list[Job], bar: tqdm, updates: int, parallel: int) -> dict[str, dict[str, Any]]:
    """The arms in ``parallel`` spawned processes; the bar follows the updates the arms' metrics files record."""
    import concurrent.futures as cf
    import multiprocessing as mp

    results: dict[str, dict[str, Any]] = {}
    seen = 0
    with cf.ProcessPoolExecutor(max_workers=parallel, mp_context=mp.get_context("spawn"),
                                initializer=_one_thread) as pool:
        futures = {pool.submit(_train_worker, plan.layout, arm): plan.name for plan, arm in jobs}
        pending = set(futures)
        while pending:
            done, pending = cf.wait(pending, timeout=2.0)
            for fut in done:
                results[futures[fut]] = arm_result(fut.result())  # re-raises a worker's error
            now = max(seen, sum(_lines(plan.layout.metrics) for plan, _arm in jobs))
            bar.update(now - seen)
            seen = now
    bar.update(updates * len(jobs) - seen)
    bar.close()
    return {plan.name: results[plan.name] for plan, _arm in jobs}


class ArmsNotMatched(RunFailure):
    """Two arms of one seed differ in more than their convention: the study stops (exit 1, one line)."""


def check_matched(plans: list[ArmPlan]) -> dict[str, dict[str, bool]]:
    """Every seed's arms differ only in the convention (prompt suffix and reward program), data order included;
    a pair that does not stops the study (:class:`ArmsNotMatched`). Verdicts by pair (``grpo/s83``), then by the
    other arm's name."""
    from crossed_rlvr.train.matched import check_and_record

    verdicts: dict[str, dict[str, bool]] = {}
    by_seed: dict[int, list[ArmPlan]] = {}
    for plan in plans:
        by_seed.setdefault(int(plan.policy.seed or 0), []).append(plan)
    for seed, arms in by_seed.items():
        first = arms[0]
        for other in arms[1:]:
            verdict = check_and_record(first.layout.root, other.layout.root)
            verdicts.setdefault(pair_name(first.policy.method, seed), {})[f"{first.name} vs {other.name}"] = (
                verdict["matched"])
            if not verdict["matched"]:
                raise ArmsNotMatched(f"arms {first.name} and {other.name} are not matched: "
                                     f"{verdict['config_differences'] or verdict['data_differences']}")
    return verdicts


def frozen_strata(proposal: ProposalConf, items: Callable[[], list[dict[str, Any]]], sampling: EvalConf,
                  system: str | None, run: RunLayout, initial: tuple[str, str], say: Callable[[str], None],
                  prepare: bool = False) -> dict[str, Any] | None:
    """The frozen difficulty strata of the GRPO arms' training ``items`` (made only when needed) when the proposal
    is on (App. D.1): the user's file (``recipe.proposal.strata_file``), none when the items carry strata (unless
    ``recipe.proposal.estimate``), else estimated with the ``initial`` policy (its path and weights hash) under the
    evaluation's ``sampling`` (train/strata.py) into ``run.strata``, reused while the policy, items and sampling
    settings are unchanged (``run.strata_meta``, by the one fingerprint: ``crossed_rlvr/fingerprint.py``).
    ``prepare``: the dress rehearsal, which estimates on a GPU only."""
    from crossed_rlvr.errors import RecipeError
    from crossed_rlvr.files import atomic_write_json
    from crossed_rlvr.files import sha256_file as file_sha256
    from crossed_rlvr.train.strata import StrataError, estimate_strata

    if not proposal.enabled:
        return None
    if proposal.strata_file:
        path = Path(str(proposal.strata_file)).resolve()
        if not path.exists():
            raise RecipeError(f"recipe.proposal.strata_file={proposal.strata_file}: no such file")
        return {"file": str(path), "sha256": file_sha256(path)}
    rows = items()
    if rows and all(it.get("stratum") is not None for it in rows) and not proposal.estimate:
        return None
    out, meta_path, (ipath, weights) = run.strata, run.strata_meta, initial
    inputs = {"policy": weights, "items": digest([it["item_id"] for it in rows]), "eval": eval_fingerprint(sampling),
              "samples": int(proposal.estimate_samples)}  # the policy comes hashed by the one rule (or NOT_HASHED)
    meta, _ = fingerprint(inputs)  # the stages' one rule, numerics included
    was = json.loads(meta_path.read_text()) if out.exists() and meta_path.exists() else None
    if was is not None and was in (meta, inputs):  # inputs alone: written before the strata followed the one rule
        if was != meta:
            atomic_write_json(meta_path, meta)
            say("    strata: carried over to the stages' freshness rule (their inputs unchanged)")
        return {"file": str(out.resolve()), "sha256": file_sha256(out)}
    if prepare and sampling.backend == "vllm":
        import torch

        if not torch.cuda.is_available():
            raise RecipeError(
                "recipe.proposal.enabled=true: the training items have no difficulty strata, and estimating "
                f"them needs the initial policy on a GPU (eval={sampling.backend}). For stages=prepare or "
                "stages=rehearse here, give recipe.proposal.strata_file=PATH (JSON Lines: item_id, stratum); "
                "on the GPU node the study estimates them before the arms train.")
    say(f"    estimating difficulty strata of {len(rows)} training items with the initial policy "
        f"({int(proposal.estimate_samples)} samples each, App. D.1)")
    try:
        info = estimate_strata(rows, ipath, sampling, int(proposal.estimate_samples), out, system)
    except StrataError as err:
        raise RecipeError(str(err)) from None
    atomic_write_json(meta_path, meta)
    say(f"    strata: {info['counts']} -> {out}")
    return {"file": str(out.resolve()), "sha256": info["sha256"]}


def grpo_items(task: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The GRPO arms' training items of the task as the arms see it (the items every arm's stream is drawn from)."""
    from crossed_rlvr.tasks.training import train_items

    return train_items(conf_of(TaskConf, task), int(n), GRPO_ITEM_SEED)


def import_verl_validation(plan: ArmPlan, stamps: Stamps, task: str, say: Callable[[str], None]) -> None:
    """verl's validation dumps of one arm as response records, every step as ``<arm>@step<K>`` (rewritten when
    the dumps change)."""
    from crossed_rlvr.eval.ingest.verl import import_verl_steps
    from crossed_rlvr.files import atomic_write_json, atomic_write_jsonl

    arm, policy = plan.layout, plan.policy
    dumps = arm.validation
    steps = sorted(dumps.glob("*.jsonl")) if dumps.is_dir() else []
    if not [p for p in steps if p.stem.isdigit()]:
        return
    out, stamp = arm.verl_validation_records, arm.verl_validation_sources
    sources = {p.name: stamps.hash(p) for p in steps if p.stem.isdigit()}
    if out.exists() and stamp.exists() and json.loads(stamp.read_text()) == sources:
        return
    name = policy.name
    records = import_verl_steps(dumps, policy=policy, task=task)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(out, records)
    atomic_write_json(stamp, sources)
    say(f"    imported verl validation of {name}: {len(sources)} step(s), {len(records)} responses")


def _lines(path: Path) -> int:
    try:
        return sum(1 for _ in path.open())
    except FileNotFoundError:
        return 0


def _one_thread() -> None:
    from crossed_rlvr.interrupt import training_worker

    training_worker()  # the study's own process reports Ctrl-C and SIGTERM; SIGUSR1 saves the worker's arm
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def _train_worker(arm: ArmLayout, cfg: dict[str, Any]) -> dict[str, Any]:
    """One GRPO arm in a worker process; its console output goes to ``<arm>/train.log``."""
    import contextlib

    from crossed_rlvr.train.checks import planned_arm
    from crossed_rlvr.train.run import run_train

    arm.root.mkdir(parents=True, exist_ok=True)
    with arm.log.open("w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        return run_train(planned_arm(cfg))
