"""GRPO on multi-GPU nodes through verl 0.9.x: data, reward entry, overrides and launch scripts.

``prepare_verl`` writes, into the arm's run directory: the training and validation parquet files
in verl's layout (``prompt`` chat messages, ``data_source``, ``reward_model.ground_truth``,
``extra_info`` carrying the convention), the Hydra overrides translated from the shared recipe
(``verl_overrides.txt``, composed and checked against verl's own ``ppo_trainer`` config), and two
launch scripts: one node, and a Ray cluster under SLURM. verl itself needs GPUs to train; on a CPU
machine everything up to the launch is real and checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shlex
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.cluster import RAY_AUTH, RAY_CLUSTER, WARNING_S, run_then_settle, slurm_header
from crossed_rlvr.command import hydra_quoted
from crossed_rlvr.conf.schema import TrainConf
from crossed_rlvr.errors import RecipeError
from crossed_rlvr.files import atomic_write_json, atomic_write_text
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.train.checks import CheckedTrainConf
from crossed_rlvr.train.recipe import chat_prompt
from crossed_rlvr.train.translate import VerlArm, verl_overrides

if TYPE_CHECKING:
    from crossed_rlvr.train.budget import Budget, VerlConfig


def reward_entry_path() -> str:
    """The file verl loads with ``reward.custom_reward_function.path`` (our programs, no framework imports)."""
    import crossed_rlvr.train.verl_reward as entry

    return str(Path(entry.__file__).resolve())


def verl_rows(rows: list[dict[str, Any]], data_source: str, per_request: bool = False) -> list[dict[str, Any]]:
    """Rows in verl's layout, each prompt the evaluation's chat messages (``recipe.chat_prompt``); ``per_request``
    (validation) names the request in ``data_source`` so that verl's val-core metrics come per request."""
    return [
        {
            "data_source": f"{data_source}/{r['request']}" if per_request else data_source,
            "prompt": chat_prompt(r),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(r["reference"])},
            "extra_info": {"convention": r["convention"], "item_id": str(r["item_id"]), "index": int(r.get("row", k)),
                           "is_weight": float(r.get("is_weight", 1.0)),
                           # the proposal's stratum (App. D.1): the weighted trainer logs each stratum's share
                           **({"stratum": str(r["stratum"])} if r.get("stratum") is not None else {}),
                           **({"request": r["request"]} if per_request else {}),
                           # a code row's tests: the dataset file its task id names (train/code_reward.py)
                           **({"code_dataset": r["code_dataset"]} if r.get("code_dataset") else {})},
        }
        for k, r in enumerate(rows)
    ]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)


def compose_verl(overrides: list[str]) -> VerlConfig:
    """verl's own ppo_trainer config composed with our overrides (raises on an unknown key)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            return compose(config_name="ppo_trainer", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def validate_verl(overrides: list[str]) -> VerlConfig:
    """Compose verl's config with ``overrides`` and run verl's own ``validate_config`` on it (the check
    verl's ``main_ppo`` makes before Ray starts: batch divisibility, micro-batch settings, ...)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    composed = compose_verl(overrides)
    # verl prints a success line per call and warns that GRPO disables the critic: noise here
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        validate_config(config=composed, use_reference_policy=need_reference_policy(composed),
                        use_critic=need_critic(composed))
    return composed


def validation_rows(cfg: TrainConf) -> list[dict[str, Any]]:
    """The task's dev items under every validation request and wording (crossed validation).

    Every row keeps the arm's convention (its score is the arm's training reward); the request is in
    the prompt, which ``crossed-import verl`` reads back to file each response under its request. The prompt is
    the evaluation's, system message included (``recipe.chat_prompt``). The rows of the task's kind
    (crossed_rlvr/task_sources.py): :func:`answer_validation_rows` or :func:`code_validation_rows`."""
    from crossed_rlvr.task_sources import task_kind

    return task_kind(cfg.task).step("validation_rows")(cfg)


def answer_validation_rows(cfg: TrainConf) -> list[dict[str, Any]]:
    """An answer task's crossed validation rows (:func:`validation_rows`)."""
    import dataclasses

    from crossed_rlvr.prompts import user_content
    from crossed_rlvr.tasks.build import build_items

    v = cfg.validation
    items = build_items(dataclasses.replace(cfg.task, split=v.split, n_items=v.n_items))
    if v.n_items:  # the first n items of the split, as crossed-eval takes them (TRL's validation)
        items = items[: v.n_items]
    cells = [(r, t) for r in v.requests for t in v.templates]
    system = cfg.model.system
    return [
        {"row": k * len(items) + j, "item_id": it["item_id"], "request": request, "template": template,
         "question": it["question"], "system": system, "prompt": user_content(it["question"], request, template),
         "reference": it["reference"], "convention": cfg.convention.name}
        for k, (request, template) in enumerate(cells) for j, it in enumerate(items)
    ]


def code_validation_rows(cfg: TrainConf) -> list[dict[str, Any]]:
    """A code arm's crossed validation: the evaluated tasks (the first ``validation.n_items``) under both code
    requests; each row's score is the arm's execution reward, and the reward entry adds the request's payload
    and strict pass (verl logs both per request)."""
    from crossed_rlvr.rewards.code import CODE_CONVENTIONS, code_request
    from crossed_rlvr.tasks.code import question, task_dataset

    ds = task_dataset(cfg.task)
    n = cfg.validation.n_items
    ids = list(ds.tasks)[:n] if n else list(ds.tasks)
    path = str(Path(ds.path).resolve())
    return [{"row": k * len(ids) + j, "item_id": tid, "request": request, "template": "original",
             "prompt": f"{question(ds.tasks[tid].prompt)}\n{code_request(request)}", "reference": tid,
             "convention": cfg.convention.name, "code_dataset": path}
            for k, request in enumerate(CODE_CONVENTIONS) for j, tid in enumerate(ids)]


def launch_env(cfg: TrainConf) -> dict[str, str]:
    """The study's tracking block as wandb's environment: exported by the launch scripts and passed to
    every Ray actor (verl calls ``wandb.init`` inside one)."""
    from crossed_rlvr.tracking import claim_run_id, enabled, resolved_config

    t = cfg.tracking
    mode = "disabled" if t.mode in ("off", False, None) else str(t.mode)
    run_dir = Path(str(cfg.run_dir))
    # a relaunch onto the arm's own verl checkpoint with the same settings resumes its wandb run; any
    # other start of the arm is a new run (crossed_rlvr.tracking.claim_run_id)
    resumable = ArmLayout(run_dir).verl_latest.exists()
    run_id = claim_run_id(t, "train", str(cfg.arm), run_dir, resolved_config(cfg), resume=resumable)[0] \
        if enabled(t) else "untracked"
    env = {"WANDB_MODE": mode, "WANDB_PROJECT": str(t.project), "WANDB_NAME": str(cfg.arm),
           "WANDB_RUN_GROUP": str(t.group or cfg.study or "crossed-train"),
           "WANDB_JOB_TYPE": "train", "WANDB_DIR": str(Path(str(cfg.run_dir)).resolve()),
           "WANDB_RUN_ID": run_id, "WANDB_RESUME": "allow"}
    if t.entity:
        env["WANDB_ENTITY"] = str(t.entity)
    if t.tags:
        env["WANDB_TAGS"] = ",".join(str(x) for x in t.tags)
    # no rank reaches for the hub: the weights and tokenizer come from the cache `stages=fetch` filled
    env["HF_HUB_OFFLINE"] = "1"
    if enabled(t):  # the arm's own settings in its run's config, beside the verl config verl logs itself
        from crossed_rlvr.train.verl_weighted import SETTINGS_ENV

        env[SETTINGS_ENV] = str(write_wandb_config(cfg, ArmLayout(run_dir).wandb_config).resolve())
    if cfg.engine.dump_advantages:  # read by the weighted trainer in verl's task runner
        from crossed_rlvr.train.verl_weighted import DUMP_ENV, PROBE_ENV

        env[DUMP_ENV] = str(run_dir.resolve())
        env[PROBE_ENV] = str(run_dir.resolve())  # and by the CPU route's vLLM rollout server (train/verl_vllm.py)
    return env


# verl's own top-level config keys: verl passes its config to wandb.init, which wins over a config file's key of the
# same name, so an arm setting of that name is logged as crossed_<key>
VERL_CONFIG_KEYS = ("actor_rollout_ref", "algorithm", "critic", "data", "reward", "trainer", "ray_kwargs")


def write_wandb_config(cfg: TrainConf, path: Path) -> Path:
    """The arm's resolved settings (recipe, convention, seed, task, model, ...), which our trainer adds to the wandb
    run verl opens (train/verl_weighted.py, ``SETTINGS_ENV``): verl logs only its own config, so a run would
    otherwise hold none of the study's settings to filter or group by. (wandb's own ``WANDB_CONFIG_PATHS`` cannot
    carry it: wandb 0.31 refuses that variable's string as its list-typed setting.)"""
    from crossed_rlvr.tracking import resolved_config

    data = {k: v for k, v in resolved_config(cfg).items() if k != "tracking"}
    data["study"] = str(cfg.study or "")
    atomic_write_json(path, {(f"crossed_{k}" if k in VERL_CONFIG_KEYS else k): v for k, v in data.items()})
    return path


def env_overrides(env: dict[str, str]) -> list[str]:
    """verl starts Ray with ``ray_kwargs.ray_init.runtime_env``: its env_vars reach every actor. Each value is a
    quoted Hydra string: unquoted, a run id such as ``8817e40312345678`` parses as a float (inf) or ``2024`` as
    an int, and Ray refuses an env var that is not a string."""
    return [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={hydra_quoted(v)}" for k, v in env.items()]


# flash-attn is a separate install (a source build against the installed torch); verl asks for it by
# default. Without it the launch falls back to SDPA, which cannot run packed (padding-free) batches.
SDPA = ["+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.use_remove_padding=False"]


def attention_block(python: str, choice: str) -> str:
    """Bash that sets ATTN to the attention overrides: fixed, or decided on the GPU node (``auto``). The scripts
    expand it as ``${ATTN[@]+"${ATTN[@]}"}``: under ``set -u``, bash before 4.4 (RHEL 7's 4.2) calls a plain
    ``"${ATTN[@]}"`` of the empty array (flash-attn installed) unbound and ends the script."""
    sdpa = " ".join(shlex.quote(o) for o in SDPA)
    if choice == "flash_attention_2":
        return "ATTN=()"
    if choice == "sdpa":
        return f"ATTN=({sdpa})"
    if choice != "auto":
        raise ValueError(f"engine.attention={choice!r}: expected auto, flash_attention_2 or sdpa")
    return "\n".join([f"if {shlex.quote(python)} -c 'import flash_attn' 2>/dev/null; then ATTN=(); else",
                      "  echo 'flash-attn is not installed: attention falls back to SDPA' >&2",
                      f"  ATTN=({sdpa})", "fi"])


SINGLE_NODE = """#!/usr/bin/env bash
# One node, {gpus} GPUs: GRPO arm {arm} through verl (generated by crossed-rlvr; rerun to regenerate).
# verl_launch checks the GPUs and verl's Ray budget first, and ends any Ray wait past {wait} s.
set -euo pipefail
{exports}
{attention}
# verl starts its own Ray here: never join whatever /tmp/ray/ray_current_cluster names (a `ray start` left over)
export RAY_ADDRESS=local
{finished}
{ray_auth}{python} -m crossed_rlvr.train.verl_launch {flags} -- \\
{args} \\
  ray_kwargs.ray_init.num_cpus={cpus} ${{ATTN[@]+"${{ATTN[@]}}"}}
# the launch rehearsal (CROSSED_REHEARSE=<GPUs> on a CPU machine) ends where verl first needs a GPU
if [ -n "${{CROSSED_REHEARSE:-}}" ]; then exit 0; fi
{merge}
"""

# The driver runs in the batch script itself, on the head (where sbatch runs it), as Ray's own SLURM template
# does: an `srun --overlap` step would ask for the job's GPUs, which `ray start --head` holds, and where a SLURM
# version shares only CPUs between steps it waits forever.
# The launch runs in the background of the batch shell, which passes SLURM's warning and SIGTERM on to it and
# requeues the job after a warned stop (crossed_rlvr/cluster.py: REQUEUE); the merge runs once it has finished.
SLURM_LAUNCH = run_then_settle("""RAY_ADDRESS="$head_ip:$port" {python} -m crossed_rlvr.train.verl_launch \\
  {flags} -- \\
{args} ${{ATTN[@]+"${{ATTN[@]}}"}}""") + """{merge}
"""


def slurm_script(warning_s: int) -> str:
    """The SLURM script's template, with SLURM's warning ``warning_s`` seconds before the time limit (0: none)."""
    return (slurm_header("GRPO arm {arm} through verl", warning_s) + "{exports}\n{attention}\n{finished}\n{ray_auth}"
            + RAY_CLUSTER + SLURM_LAUNCH)


# Overrides that say where files are, not what is trained: a run directory moved, or the package reinstalled
# elsewhere, is the same arm.
LOCATIONS = ("data.train_files=", "data.val_files=", "reward.custom_reward_function.path=",
             "trainer.default_local_dir=", "trainer.validation_data_dir=")


def training_digest(overrides: list[str]) -> str:
    """sha256 of what an arm trains with: its overrides less file locations and the environment passed to Ray
    (wandb's run id changes from launch to launch). A verified merge is stamped with it (train/checkpoints.py)."""
    kept = [o for o in overrides if ".runtime_env.env_vars." not in o and not o.startswith(LOCATIONS)]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()


def in_double_quotes(text: str) -> str:
    """``text`` as it must appear inside a bash double-quoted string."""
    return "".join("\\" + c if c in '\\"$`' else c for c in text)


def launch_budget(cfg: TrainConf, composed: VerlConfig) -> tuple[int, Budget]:
    """Ray CPUs per node for the launch scripts (``engine.cpus_per_node``, or verl's budget when null) and
    the budget; a configured count below the budget is refused here, before any script is written."""
    from crossed_rlvr.train.budget import BudgetError, verl_budget

    budget = verl_budget(composed, bool(cfg.recipe.proposal.enabled))
    cpus = cfg.engine.cpus_per_node
    if cpus is None:
        return budget.cpus_per_node(), budget
    try:
        budget.check(float(cpus), float(budget.gpus_per_node), where=f"engine.cpus_per_node={cpus}")
    except BudgetError as err:
        raise RecipeError(str(err)) from None
    return int(cpus), budget


def prepare_verl(cfg: CheckedTrainConf, rows: list[dict[str, Any]], run_dir: Path) -> dict[str, Any]:
    import sys

    arm = ArmLayout(run_dir)
    source = f"crossed_rlvr/{cfg.task.name}"
    train_file, val_file = arm.verl_train_data, arm.verl_val_data
    write_parquet(verl_rows(rows, source), train_file)
    val_rows = validation_rows(cfg)
    write_parquet(verl_rows(val_rows, source, per_request=True), val_file)
    env = launch_env(cfg)
    overrides = verl_overrides(VerlArm.of(cfg, ArmLayout(run_dir.resolve()), reward_entry_path())) + env_overrides(env)
    composed = validate_verl(overrides)  # verl's own config and checks must accept every key
    validate_verl(overrides + SDPA)  # and so must the SDPA fallback the launch may add
    arm.verl_overrides.write_text("\n".join(overrides) + "\n")
    args = " \\\n".join(f"  {shlex.quote(o)}" for o in overrides)
    e = cfg.engine
    # The interpreter that runs crossed-rlvr runs verl too (a bare `python` is whatever is on PATH).
    python = str(Path(sys.executable).absolute())
    ray = str(Path(sys.executable).absolute().parent / "ray")
    # With the frozen proposal, verl runs with our importance-weighted task runner and trainer.
    weighted = bool(cfg.recipe.proposal.enabled)
    cpus, budget = launch_budget(cfg, composed)
    from crossed_rlvr.train.memory import PlanError, check

    try:  # the GPUs and the disk this arm needs (train/memory.py), refused here when they do not fit
        memory = check(cfg)
    except PlanError as err:
        raise RecipeError(str(err)) from None
    atomic_write_text(arm.memory_plan, memory.table() + "\n")
    atomic_write_json(arm.memory_plan_json, {"params": memory.params, "gpus": memory.gpus,
                                                     "card_gib": memory.card_gib, "train_gib": memory.train,
                                                     "rollout_gib": memory.rollout, "disk_gb": memory.disk,
                                                     "host_gib": memory.host, "host_peak_gib": memory.host_peak,
                                                     "disk_peak_gb": memory.disk_peak, "node": memory.node()})
    cpu = e.device == "cpu"  # verl's trainer on this CPU: one gloo rank per logical GPU
    flags = " ".join([*(["--weighted"] if weighted else []), *([f"--cpu {int(e.n_gpus_per_node)}"] if cpu else []),
                      f"--wait-limit {e.wait_limit_s:g}"])
    # verl saves FSDP shards; the evaluator reads a Hugging Face directory like the TRL engine's.
    step = int(cfg.recipe.updates)
    final, shards = ArmLayout(run_dir.resolve()).checkpoint(step), ArmLayout(run_dir.resolve()).verl_shards(step)
    trained_with = training_digest(overrides)
    # a finished arm is never relaunched: verl would reload its final step, whose optimizer state is removed
    finished = (f"{shlex.quote(python)} -m crossed_rlvr.train.checkpoints --finished {final} "
                f"--trained-with {trained_with} && exit 0 || [ $? -eq 1 ]")
    merge = (f"{shlex.quote(python)} -m verl.model_merger merge --backend fsdp "
             f"--local_dir {shards} --target_dir {final}\n"
             # a verified merge frees the final step's optimizer state (train/checkpoints.py)
             f"{shlex.quote(python)} -m crossed_rlvr.train.checkpoints --merged {final} "
             f"--shards {shards} --trained-with {trained_with}"
             + (" --keep-optimizer" if cfg.recipe.keep_optimizer else ""))
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())
    fields = {"finished": finished, "flags": flags, "wait": f"{e.wait_limit_s:g}", "merge": merge, "gpus": int(e.n_gpus_per_node), "arm": cfg.arm, "args": args,
              "python": shlex.quote(python), "ray": shlex.quote(ray), "exports": exports,
              "cpus": cpus,
              "attention": attention_block(python, e.attention),
              # Ray's token auth for the head, the nodes and the drivers (crossed_rlvr.cluster.RAY_AUTH)
              "ray_auth": RAY_AUTH.format(token=in_double_quotes(str(ArmLayout(run_dir.resolve()).ray_auth_token)),
                                          python=shlex.quote(python))}
    single = arm.launch_single_node
    single.write_text(SINGLE_NODE.format(**fields))
    slurm = arm.launch_slurm
    warning = WARNING_S if e.slurm_warning_s is None else int(e.slurm_warning_s)
    slurm.write_text(slurm_script(warning).format(job=cfg.arm.replace("/", "_"), nodes=int(e.nnodes), **fields))
    single.chmod(0o755)
    slurm.chmod(0o755)
    result = {"train_parquet": str(train_file), "val_parquet": str(val_file), "overrides": len(overrides),
              "val_rows": len(val_rows), "launch_single_node": str(single), "launch_slurm": str(slurm),
              "composed_adv_estimator": str(composed.algorithm.adv_estimator), "weighted": weighted,
              "ray_cpus_per_node": cpus, "budget": budget.describe(),
              "memory_plan_gib": {"update": round(memory.train_peak, 1), "rollout": round(memory.rollout_peak, 1),
                                  "card": memory.card_gib}}
    if e.launch:
        import subprocess

        subprocess.run(["bash", str(single)], check=True)
        result["launched"] = True
        result["final_checkpoint"] = str(final)
    return result
