"""One recipe, two engines: the TRL GRPOConfig arguments and the verl overrides (paper 001 App. D.1).

Both translations are written from the same recipe fields: TRL's as keyword arguments, verl's through
:class:`VerlArm` (the arm's folder and settings, typed once) and :func:`verl_overrides`, the one writer of its
override strings. ``shared_knobs_trl`` and ``shared_knobs_verl`` read TRL's arguments and verl's composed config
into common names so a test can check that they agree (a silent engine default, such as TRL's ``dapo`` loss
instead of sequence-mean/token-mean aggregation, would show up there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crossed_rlvr.command import hydra_value
from crossed_rlvr.conf.schema import EngineConf, TrainConf
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.train.checks import rollout_seed

if TYPE_CHECKING:
    from crossed_rlvr.train.budget import VerlConfig


def trl_args(cfg: TrainConf, world: int = 1) -> dict[str, Any]:
    """GRPOConfig keyword arguments for one arm on ``world`` processes: each process generates and trains
    on ``micro`` completions at a time, and the accumulation keeps micro x accumulation x world equal to
    the recipe's batch of completions, so an update is the same on any number of ranks."""
    r, e = cfg.recipe, cfg.engine
    batch = int(r.prompts_per_update) * int(r.group_size)
    micro = int(e.micro_batch or r.group_size)
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
        "use_vllm": bool(e.use_vllm),
        # recomputes each layer's forward in the backward: memory for ~1/3 more compute (TRL's default is on)
        "gradient_checkpointing": bool(e.gradient_checkpointing),
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
ACTOR, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"


def storage_units(engine: EngineConf) -> int:
    """TransferQueue's storage units: ``engine.tq_storage_units``, else 2 per node, TransferQueue's own advice
    (">= 2 x number of nodes"). verl's default of 8 holds 8 Ray CPUs (and 8 processes) on a one-node run
    for nothing: a single-GPU node would need 13 CPUs instead of 7 (train/budget.py)."""
    from crossed_rlvr.train.budget import UNITS_PER_NODE

    return int(engine.tq_storage_units or UNITS_PER_NODE * int(engine.nnodes))


@dataclass(frozen=True)
class VerlArm:
    """One GRPO arm as verl runs it: where its files are (its folder's :class:`ArmLayout`, resolved: the data, the
    checkpoints and validation dumps, whose names verl's own files sit under) and every setting verl's
    ``ppo_trainer`` is given, read once from the arm's checked config (:meth:`of`). :func:`verl_overrides` writes
    it as verl's Hydra overrides where the launch scripts are written (train/verl_engine.py); nothing reads an
    override back: the launch reads verl's composed config (train/verl_launch.py)."""

    layout: ArmLayout
    reward_path: str        # the reward entry verl loads (train/verl_reward.py)
    model_path: str
    name: str               # the arm's name: verl's experiment name
    project: str
    tracked: bool           # wandb on: verl logs there too
    seed: int
    data_seed: int
    rollout_seed: int       # the arm seed spread over the rollout's vLLM engines (train.checks.rollout_seed)
    adv_estimator: str
    norm_adv_by_std: bool
    kl_reward: bool
    kl_loss: bool
    prompts_per_update: int
    group_size: int
    max_context_tokens: int
    max_response_tokens: int
    lr: float
    weight_decay: float
    betas: tuple[float, float]
    grad_clip: float
    policy_epochs: int
    clip_ratio: float
    loss_agg: str
    entropy_coeff: float
    temperature: float
    top_p: float
    val_temperature: float  # crossed validation's sampling: greedy (App. D.1) unless validation.greedy=false
    val_top_p: float
    val_every: int          # updates between validations (the last update: only before training and at the end)
    updates: int
    save_every: int         # a resumable checkpoint every N updates (0, or N >= updates: only the final one)
    save_optimizer: bool
    micro_batch_per_gpu: int
    gradient_checkpointing: bool
    param_offload: bool
    optimizer_offload: bool
    fused_optimizer: bool
    rollout_tp: int
    gpu_memory_utilization: float
    rollout_is_threshold: float
    nnodes: int
    n_gpus_per_node: int
    storage_units: int

    @classmethod
    def of(cls, cfg: TrainConf, layout: ArmLayout, reward_path: str) -> VerlArm:
        """The arm's verl settings from its crossed-train config (read here and nowhere else)."""
        r, e = cfg.recipe, cfg.engine
        greedy = cfg.validation.greedy  # App. D.1: "validation is greedy"
        return cls(
            layout=layout, reward_path=reward_path, model_path=str(cfg.model.path), name=str(cfg.arm),
            project=str(cfg.tracking.project), tracked=cfg.tracking.mode not in ("off", False, None),
            seed=int(cfg.seed), data_seed=int(cfg.data_seed), rollout_seed=rollout_seed(int(cfg.seed), e),
            adv_estimator={"grpo": "grpo", "reinforce_pp": "reinforce_plus_plus"}[cfg.algorithm.name],
            norm_adv_by_std=bool(r.norm_adv_by_std), kl_reward=bool(r.kl_reward), kl_loss=bool(r.kl_loss),
            prompts_per_update=int(r.prompts_per_update), group_size=int(r.group_size),
            max_context_tokens=int(r.max_context_tokens), max_response_tokens=int(r.max_response_tokens),
            lr=float(r.lr), weight_decay=float(r.weight_decay), betas=(float(r.betas[0]), float(r.betas[1])),
            grad_clip=float(r.grad_clip), policy_epochs=int(r.policy_epochs), clip_ratio=float(r.clip_ratio),
            loss_agg=str(r.loss_agg), entropy_coeff=float(r.entropy_coeff), temperature=float(r.temperature),
            top_p=float(r.top_p), val_temperature=0.0 if greedy else float(cfg.eval.temperature),
            val_top_p=1.0 if greedy else float(cfg.eval.top_p),
            val_every=int(cfg.validation.every or 0) or int(r.updates), updates=int(r.updates),
            save_every=int(r.save_every or 0), save_optimizer=bool(e.save_optimizer),
            micro_batch_per_gpu=int(e.micro_batch_per_gpu), gradient_checkpointing=bool(e.gradient_checkpointing),
            param_offload=bool(e.param_offload), optimizer_offload=bool(e.optimizer_offload),
            fused_optimizer=bool(e.fused_optimizer), rollout_tp=int(e.rollout_tp),
            gpu_memory_utilization=float(e.gpu_memory_utilization), rollout_is_threshold=float(e.rollout_is_threshold),
            nnodes=int(e.nnodes), n_gpus_per_node=int(e.n_gpus_per_node), storage_units=storage_units(e))

    @property
    def resumable(self) -> bool:
        """Resumable checkpoints before the last update (``recipe.save_every``)."""
        return 0 < self.save_every < self.updates


def verl_seeds(arm: VerlArm) -> list[str]:
    """The arm seed in every verl seed; the rollout's as ``train.checks.rollout_seed`` spreads it, since replica r's
    vLLM engine is seeded rollout.seed + r and the arm seed itself would share engine seeds between arms."""
    return [f"{key}={arm.rollout_seed if key == ROLLOUT_SEED_KEY else arm.seed}" for key in VERL_SEED_KEYS]


def verl_overrides(arm: VerlArm) -> list[str]:
    """Hydra overrides of verl's ppo_trainer config (verl 0.9.x key names), in a fixed order (an arm's launch
    scripts and ``verl_overrides.txt`` hold them as written here).

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
    return [
        "trainer.v1.trainer_mode=sync",
        f"algorithm.adv_estimator={arm.adv_estimator}",
        f"algorithm.norm_adv_by_std_in_grpo={arm.norm_adv_by_std}",
        f"algorithm.use_kl_in_reward={arm.kl_reward}",
        *_data(arm), *verl_seeds(arm),
        f"actor_rollout_ref.model.path={hydra_value(arm.model_path)}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={arm.gradient_checkpointing}",
        *_actor(arm), *_rollout(arm),
        f"reward.custom_reward_function.path={hydra_value(arm.reward_path)}", "reward.custom_reward_function.name=compute_score",
        *_trainer(arm),
    ]


def _data(arm: VerlArm) -> list[str]:
    return [
        f"data.train_files={hydra_value(str(arm.layout.verl_train_data))}",
        f"data.val_files={hydra_value(str(arm.layout.verl_val_data))}",
        f"data.train_batch_size={arm.prompts_per_update}",
        f"data.max_prompt_length={arm.max_context_tokens - arm.max_response_tokens}",
        f"data.max_response_length={arm.max_response_tokens}",
        "data.filter_overlong_prompts=True", "data.truncation=error", "data.shuffle=False",
        f"data.seed={arm.data_seed}",
    ]


def _actor(arm: VerlArm) -> list[str]:
    contents = "[model,optimizer,extra]" if arm.resumable or arm.save_optimizer else "[model]"
    return [
        # FSDP2 (fully_shard): the engine verl's CPU route runs too (FSDP1 builds cuda:N device strings)
        f"{ACTOR}.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
        f"{ACTOR}.optim.lr={arm.lr}", f"{ACTOR}.optim.weight_decay={arm.weight_decay}",
        f"{ACTOR}.optim.betas=[{arm.betas[0]},{arm.betas[1]}]",
        f"{ACTOR}.optim.clip_grad={arm.grad_clip}", f"{ACTOR}.optim.lr_warmup_steps=0",
        f"{ACTOR}.ppo_mini_batch_size={arm.prompts_per_update}", f"{ACTOR}.ppo_epochs={arm.policy_epochs}",
        f"{ACTOR}.ppo_micro_batch_size_per_gpu={arm.micro_batch_per_gpu}",
        f"{ACTOR}.clip_ratio={arm.clip_ratio}", f"{ACTOR}.clip_ratio_low={arm.clip_ratio}",
        f"{ACTOR}.clip_ratio_high={arm.clip_ratio}",
        f"{ACTOR}.loss_agg_mode={arm.loss_agg}",
        f"{ACTOR}.use_kl_loss={arm.kl_loss}", f"{ACTOR}.entropy_coeff={arm.entropy_coeff}",
        f"{ACTOR}.fsdp_config.param_offload={arm.param_offload}",
        f"{ACTOR}.fsdp_config.optimizer_offload={arm.optimizer_offload}",
        f"{ACTOR}.checkpoint.save_contents={contents}",
        *([f"{ACTOR}.optim.override_optimizer_config={{fused:true}}"] if arm.fused_optimizer else []),
    ]


def _rollout(arm: VerlArm) -> list[str]:
    return [
        f"{ROLLOUT}.name=vllm", f"{ROLLOUT}.n={arm.group_size}",
        f"{ROLLOUT}.temperature={arm.temperature}", f"{ROLLOUT}.top_p={arm.top_p}",
        f"{ROLLOUT}.response_length={arm.max_response_tokens}",
        f"{ROLLOUT}.tensor_model_parallel_size={arm.rollout_tp}",
        f"{ROLLOUT}.gpu_memory_utilization={arm.gpu_memory_utilization}",
        f"{ROLLOUT}.val_kwargs.do_sample={arm.val_temperature > 0}",
        f"{ROLLOUT}.val_kwargs.temperature={arm.val_temperature}",
        f"{ROLLOUT}.val_kwargs.top_p={arm.val_top_p}", f"{ROLLOUT}.val_kwargs.n=1",
        f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu={arm.micro_batch_per_gpu}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={arm.micro_batch_per_gpu}",
        "algorithm.rollout_correction.rollout_is=token",
        # the correction needs the rollout's log-probs: True in verl's YAML but False in its RolloutConfig, and
        # without them verl skips the correction silently
        f"{ROLLOUT}.calculate_log_probs=True",
        f"algorithm.rollout_correction.rollout_is_threshold={arm.rollout_is_threshold}",
    ]


def _trainer(arm: VerlArm) -> list[str]:
    return [
        f"trainer.total_training_steps={arm.updates}", "trainer.total_epochs=1000",
        f"trainer.nnodes={arm.nnodes}", f"trainer.n_gpus_per_node={arm.n_gpus_per_node}",
        f"trainer.project_name={hydra_value(arm.project)}", f"trainer.experiment_name={hydra_value(arm.name)}",
        # verl's checkpoints (its own files: ArmLayout.verl_latest, verl_shards) and validation dumps in the arm
        f"trainer.default_local_dir={hydra_value(str(arm.layout.checkpoints))}",
        f"trainer.validation_data_dir={hydra_value(str(arm.layout.validation))}",
        # the final step is always saved (and merged into a HF directory by the launch script); with
        # recipe.save_every, every N updates too, and a relaunch resumes from the latest (verl keeps one)
        f"trainer.save_freq={arm.save_every if arm.resumable else arm.updates}", "trainer.max_actor_ckpt_to_keep=1",
        "trainer.resume_mode=auto",
        f"transfer_queue.backend.SimpleStorage.num_data_storage_units={arm.storage_units}",
        "trainer.val_before_train=True", f"trainer.test_freq={arm.val_every}",
        # file: every update's metrics as JSON lines under <run_dir>/verl_metrics/, one file a launch (verl_launch)
        f"trainer.logger={'[console,wandb,file]' if arm.tracked else '[console,file]'}",
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


def shared_knobs_verl(composed: VerlConfig) -> dict[str, Any]:
    """The knobs ``shared_knobs_trl`` reads, from verl's own config composed with an arm's overrides (what verl
    runs, read by key: no override is parsed here)."""
    a, ro, alg = composed.actor_rollout_ref.actor, composed.actor_rollout_ref.rollout, composed.algorithm
    return {
        "lr": float(a.optim.lr), "clip": (float(a.clip_ratio_low), float(a.clip_ratio_high)),
        "group_size": int(ro.n), "batch_completions": int(composed.data.train_batch_size) * int(ro.n),
        "temperature": float(ro.temperature), "top_p": float(ro.top_p), "response_len": int(ro.response_length),
        "kl_off": a.use_kl_loss is False and alg.use_kl_in_reward is False,
        "aggregation": str(a.loss_agg_mode), "std_norm": alg.norm_adv_by_std_in_grpo is True,
        "weight_decay": float(a.optim.weight_decay), "grad_clip": float(a.optim.clip_grad),
        "betas": tuple(float(b) for b in a.optim.betas), "entropy": float(a.entropy_coeff),
        "updates": int(composed.trainer.total_training_steps),
    }
