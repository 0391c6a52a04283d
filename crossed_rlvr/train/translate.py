"""One recipe, two engines: the TRL GRPOConfig arguments and the verl overrides (paper 001 App. D.1).

Both translations are written from the same recipe fields, and ``shared_knobs`` reads each back
into common names so a test can check that they agree (a silent engine default, such as TRL's
``dapo`` loss instead of sequence-mean/token-mean aggregation, would show up there).
"""

from __future__ import annotations

from typing import Any

from crossed_rlvr.conf.checks import rollout_seed


def trl_args(cfg: Any, world: int = 1) -> dict[str, Any]:
    """GRPOConfig keyword arguments for one arm on ``world`` processes: each process generates and trains
    on ``micro`` completions at a time, and the accumulation keeps micro x accumulation x world equal to
    the recipe's batch of completions, so an update is the same on any number of ranks."""
    r, e = cfg.recipe, cfg.engine
    batch = int(r.prompts_per_update) * int(r.group_size)
    micro = int(e.get("micro_batch") or r.group_size)
    if batch % (micro * world):
        raise ValueError(f"the batch of {batch} completions (recipe.prompts_per_update={r.prompts_per_update} x "
                         f"recipe.group_size={r.group_size}) does not split into engine.micro_batch={micro} x "
                         f"{world} processes")
    return {
        "learning_rate": float(r.lr), "weight_decay": float(r.weight_decay),
        "adam_beta1": float(r.betas[0]), "adam_beta2": float(r.betas[1]), "max_grad_norm": float(r.grad_clip),
        "lr_scheduler_type": "constant", "warmup_steps": 0,
        "per_device_train_batch_size": micro, "gradient_accumulation_steps": batch // (micro * world),
        "num_generations": int(r.group_size), "num_iterations": int(r.policy_epochs),
        "epsilon": float(r.clip_ratio), "epsilon_high": float(r.clip_ratio),  # symmetric clip
        "beta": 0.0 if not r.kl_loss else 0.001,  # no KL loss: TRL then loads no reference model
        # TRL's default "dapo" is token-mean over the batch; the paper's sequence-mean/token-mean is "grpo".
        "loss_type": {"seq-mean-token-mean": "grpo", "token-mean": "dapo"}[r.loss_agg],
        "scale_rewards": "group" if r.norm_adv_by_std else "none",
        "entropy_coef": float(r.entropy_coeff),
        "temperature": float(r.temperature), "top_p": float(r.top_p),
        "max_completion_length": int(r.max_response_tokens),
        "max_steps": int(r.updates), "seed": int(cfg.seed), "data_seed": int(cfg.data_seed),
        "shuffle_dataset": False,  # the stream is drawn offline, identically for both arms
        "use_vllm": bool(e.get("use_vllm", False)),
    }


# Every seed in verl 0.9.1's ppo_trainer config (a test walks the composed config for keys named
# *seed): the arm seed must reach all of them, or every arm shares verl's default 42.
ROLLOUT_SEED_KEY = "actor_rollout_ref.rollout.seed"  # vLLM sampling of rollouts and validation
VERL_SEED_KEYS: tuple[str, ...] = (
    "actor_rollout_ref.actor.fsdp_config.seed",      # model init / FSDP RNG
    "actor_rollout_ref.actor.data_loader_seed",      # mini-batch construction
    "actor_rollout_ref.ref.fsdp_config.seed",
    ROLLOUT_SEED_KEY,
    "critic.fsdp.seed", "critic.data_loader_seed",   # unused by GRPO, set so no default survives
    "reward.reward_model.rollout.seed",
)


def verl_seeds(cfg: Any) -> list[str]:
    """The arm seed in every verl seed; the rollout's as ``conf.checks.rollout_seed`` spreads it, since replica r's
    vLLM engine is seeded rollout.seed + r and the arm seed itself would share engine seeds between arms."""
    seed = int(cfg.seed)
    return [f"{key}={rollout_seed(seed, cfg.engine) if key == ROLLOUT_SEED_KEY else seed}" for key in VERL_SEED_KEYS]


def storage_units(engine: Any) -> int:
    """TransferQueue's storage units: ``engine.tq_storage_units``, else 2 per node, TransferQueue's own advice
    (">= 2 x number of nodes"). verl's default of 8 holds 8 Ray CPUs (and 8 processes) on a one-node run
    for nothing: a single-GPU node would need 13 CPUs instead of 7 (train/budget.py)."""
    from crossed_rlvr.train.budget import UNITS_PER_NODE

    return int(engine.get("tq_storage_units") or UNITS_PER_NODE * int(engine.get("nnodes", 1) or 1))


def verl_overrides(cfg: Any, train_file: str, val_file: str, reward_path: str, out_dir: str) -> list[str]:
    """Hydra overrides of verl's ppo_trainer config (verl 0.9.x key names).

    The launch hygiene lives here: verl's synchronous trainer mode (the importance-weighted trainer
    replaces ``sync`` in its own process, train/verl_weighted.py), the arm seed in every seed (the rollout's
    spread over its vLLM engines, ``verl_seeds``), the rollout's log-probs for the importance correction, model-only
    checkpoints unless resumable ones are asked for (``recipe.save_every`` > 0 saves model, optimizer and
    data-loader state every N updates, and verl's ``resume_mode=auto`` continues an interrupted arm from the
    latest; ``engine.save_optimizer`` keeps optimizer state in the final one too), TransferQueue's storage
    units (``engine.tq_storage_units``; they count in the Ray budget, train/budget.py), and crossed
    validation: before training, every ``validation.every`` updates (0: only at the end) and at
    the end, under every validation request, greedy as App. D.1 (``validation.greedy=false``: sampled with
    ``eval.temperature`` and ``eval.top_p``; one sample per prompt), dumped to ``validation_data_dir`` for
    ``crossed-import verl --all-steps``.
    """
    r, e = cfg.recipe, cfg.engine
    batch_prompts = int(r.prompts_per_update)
    adv = {"grpo": "grpo", "reinforce_pp": "reinforce_plus_plus"}[cfg.algorithm.name]
    actor = "actor_rollout_ref.actor"
    rollout = "actor_rollout_ref.rollout"
    model_path = cfg.model.path
    save_every = int(r.get("save_every") or 0)
    resumable = 0 < save_every < int(r.updates)
    contents = "[model,optimizer,extra]" if resumable or e.get("save_optimizer", False) else "[model]"
    v = cfg.get("validation") or {}
    val_every = int(v.get("every") or 0) or int(r.updates)
    ev = cfg.get("eval") or {}
    if v.get("greedy", True) or not ev:  # App. D.1: "validation is greedy"
        ev = {"temperature": 0.0, "top_p": 1.0}
    tracked = cfg.tracking.mode not in ("off", False, None)
    return [
        "trainer.v1.trainer_mode=sync",
        f"algorithm.adv_estimator={adv}",
        f"algorithm.norm_adv_by_std_in_grpo={bool(r.norm_adv_by_std)}",
        f"algorithm.use_kl_in_reward={bool(r.kl_reward)}",
        f"data.train_files={train_file}", f"data.val_files={val_file}",
        f"data.train_batch_size={batch_prompts}",
        f"data.max_prompt_length={int(r.max_context_tokens) - int(r.max_response_tokens)}",
        f"data.max_response_length={int(r.max_response_tokens)}",
        "data.filter_overlong_prompts=True", "data.truncation=error", "data.shuffle=False",
        f"data.seed={int(cfg.data_seed)}",
        *verl_seeds(cfg),
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={bool(e.get('gradient_checkpointing', True))}",
        # FSDP2 (fully_shard): the engine verl's CPU route runs too (FSDP1 builds cuda:N device strings)
        f"{actor}.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
        f"{actor}.optim.lr={float(r.lr)}", f"{actor}.optim.weight_decay={float(r.weight_decay)}",
        f"{actor}.optim.betas=[{float(r.betas[0])},{float(r.betas[1])}]",
        f"{actor}.optim.clip_grad={float(r.grad_clip)}", f"{actor}.optim.lr_warmup_steps=0",
        f"{actor}.ppo_mini_batch_size={batch_prompts}", f"{actor}.ppo_epochs={int(r.policy_epochs)}",
        f"{actor}.ppo_micro_batch_size_per_gpu={int(e.get('micro_batch_per_gpu', 1))}",
        f"{actor}.clip_ratio={float(r.clip_ratio)}", f"{actor}.clip_ratio_low={float(r.clip_ratio)}",
        f"{actor}.clip_ratio_high={float(r.clip_ratio)}",
        f"{actor}.loss_agg_mode={r.loss_agg}",
        f"{actor}.use_kl_loss={bool(r.kl_loss)}", f"{actor}.entropy_coeff={float(r.entropy_coeff)}",
        f"{actor}.fsdp_config.param_offload={bool(e.get('param_offload', True))}",
        f"{actor}.fsdp_config.optimizer_offload={bool(e.get('optimizer_offload', True))}",
        f"{actor}.checkpoint.save_contents={contents}",
        *([f"{actor}.optim.override_optimizer_config={{fused:true}}"] if e.get("fused_optimizer", False) else []),
        f"{rollout}.name=vllm", f"{rollout}.n={int(r.group_size)}",
        f"{rollout}.temperature={float(r.temperature)}", f"{rollout}.top_p={float(r.top_p)}",
        f"{rollout}.response_length={int(r.max_response_tokens)}",
        f"{rollout}.tensor_model_parallel_size={int(e.get('rollout_tp', 1))}",
        f"{rollout}.gpu_memory_utilization={float(e.get('gpu_memory_utilization', 0.6))}",
        f"{rollout}.val_kwargs.do_sample={float(ev['temperature']) > 0}",
        f"{rollout}.val_kwargs.temperature={float(ev['temperature'])}",
        f"{rollout}.val_kwargs.top_p={float(ev['top_p'])}", f"{rollout}.val_kwargs.n=1",
        f"{rollout}.log_prob_micro_batch_size_per_gpu={int(e.get('micro_batch_per_gpu', 1))}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={int(e.get('micro_batch_per_gpu', 1))}",
        "algorithm.rollout_correction.rollout_is=token",
        # the correction needs the rollout's log-probs: True in verl's YAML but False in its RolloutConfig, and
        # without them verl skips the correction silently
        f"{rollout}.calculate_log_probs=True",
        f"algorithm.rollout_correction.rollout_is_threshold={float(e.get('rollout_is_threshold', 2.0))}",
        f"reward.custom_reward_function.path={reward_path}", "reward.custom_reward_function.name=compute_score",
        f"trainer.total_training_steps={int(r.updates)}", "trainer.total_epochs=1000",
        f"trainer.nnodes={int(e.get('nnodes', 1))}", f"trainer.n_gpus_per_node={int(e.get('n_gpus_per_node', 1))}",
        f"trainer.project_name={cfg.tracking.project}", f"trainer.experiment_name={cfg.arm}",
        f"trainer.default_local_dir={out_dir}/checkpoints", f"trainer.validation_data_dir={out_dir}/validation",
        # the final step is always saved (and merged into a HF directory by the launch script); with
        # recipe.save_every, every N updates too, and a relaunch resumes from the latest (verl keeps one)
        f"trainer.save_freq={save_every if resumable else int(r.updates)}", "trainer.max_actor_ckpt_to_keep=1",
        "trainer.resume_mode=auto",
        f"transfer_queue.backend.SimpleStorage.num_data_storage_units={storage_units(e)}",
        "trainer.val_before_train=True", f"trainer.test_freq={val_every}",
        # file: every update's metrics as JSON lines under <run_dir>/verl_metrics/, one file a launch (verl_launch)
        f"trainer.logger={'[console,wandb,file]' if tracked else '[console,file]'}",
    ]


def shared_knobs_trl(args: dict[str, Any]) -> dict[str, Any]:
    return {
        "lr": args["learning_rate"], "clip": (args["epsilon"], args["epsilon_high"]),
        "group_size": args["num_generations"],
        "batch_completions": args["per_device_train_batch_size"] * args["gradient_accumulation_steps"],
        "temperature": args["temperature"], "top_p": args["top_p"], "response_len": args["max_completion_length"],
        "kl_off": args["beta"] == 0.0, "aggregation": {"grpo": "seq-mean-token-mean", "dapo": "token-mean"}[
            args["loss_type"]],
        "std_norm": args["scale_rewards"] == "group", "weight_decay": args["weight_decay"],
        "grad_clip": args["max_grad_norm"], "betas": (args["adam_beta1"], args["adam_beta2"]),
        "entropy": args["entropy_coef"], "updates": args["max_steps"],
    }


def shared_knobs_verl(overrides: list[str]) -> dict[str, Any]:
    o = dict(x.split("=", 1) for x in overrides)
    a, ro = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    betas = [float(b) for b in o[f"{a}.optim.betas"].strip("[]").split(",")]
    return {
        "lr": float(o[f"{a}.optim.lr"]), "clip": (float(o[f"{a}.clip_ratio_low"]), float(o[f"{a}.clip_ratio_high"])),
        "group_size": int(o[f"{ro}.n"]),
        "batch_completions": int(o["data.train_batch_size"]) * int(o[f"{ro}.n"]),
        "temperature": float(o[f"{ro}.temperature"]), "top_p": float(o[f"{ro}.top_p"]),
        "response_len": int(o[f"{ro}.response_length"]),
        "kl_off": o[f"{a}.use_kl_loss"] == "False" and o["algorithm.use_kl_in_reward"] == "False",
        "aggregation": o[f"{a}.loss_agg_mode"], "std_norm": o["algorithm.norm_adv_by_std_in_grpo"] == "True",
        "weight_decay": float(o[f"{a}.optim.weight_decay"]), "grad_clip": float(o[f"{a}.optim.clip_grad"]),
        "betas": tuple(betas), "entropy": float(o[f"{a}.entropy_coeff"]),
        "updates": int(o["trainer.total_training_steps"]),
    }
