"""Typed schemas of every command's config (Hydra ConfigStore), so a wrong type fails at composition.

Each primary config (``crossed_train.yaml`` ...) starts its defaults list with its schema; every group
option merges into a typed node, so ``seed=abc`` or ``eval.temperature=hot`` stops Hydra with the key
named before anything runs. Values that must come from a fixed set (requests, conventions, stages)
are checked right after composition by :mod:`crossed_rlvr.conf.checks`, also before any stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class TinyConf:
    """Sizes of a tiny model; the defaults train in minutes on two CPU cores."""

    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 1024
    seed: int = 0


@dataclass
class ModelConf:
    name: str = MISSING
    source: str = MISSING          # local | hub | gguf-smollm2
    path: str | None = None
    system: str | None = None
    tiny: TinyConf | None = None


@dataclass
class TaskConf:
    name: str = MISSING
    source: str = MISSING          # arith | gsm8k | math500
    split: str = "test"
    n_items: int | None = None
    path: str | None = None
    # arithmetic probe
    n_test: int | None = None
    n_dev: int | None = None
    seed: int | None = None
    strata: list[int] | None = None
    max_operand: int | None = None
    ops: list[str] | None = None
    train_per_stratum: dict[int, int] | None = None
    # GSM8K / MATH-500 splits
    train_path: str | None = None
    dev_items: int | None = None
    dev_seed: int | None = None
    # paper 000's benchmarks (crossed_rlvr.tasks.choice)
    hub_config: str | None = None


@dataclass
class EvalConf:
    backend: str = "hf"            # hf | vllm
    dtype: str = "float32"
    batch_size: int = 16
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 640
    context_limit: int = 4096
    base_seed: int = 20260908
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    enforce_eager: bool = False    # vLLM: no CUDA graphs / compilation (the CPU build loads ~3x faster)
    cpu_kvcache_gib: int = 1       # vLLM's CPU build: VLLM_CPU_KVCACHE_SPACE when it is not set


@dataclass
class DistributeConf:
    """crossed-eval on Ray workers (eval/generate/workers.py); 0 workers: serial in the driver's process. Not part
    of any cell's settings: a run split differently writes the same files."""
    workers: int = 0               # Ray workers, each with its own engine (one per GPU on a GPU node)
    address: str | None = None     # null: a local Ray on this machine; auto or HOST:PORT: a running cluster
    cpus_per_worker: float = 1.0   # CPU workers: also their torch threads
    gpus_per_worker: float = 0.0   # 1 per vLLM engine (= eval.tensor_parallel_size)
    # responses per shard, the unit of scheduling, progress and resume; null: 4 x eval.batch_size (a multiple
    # of the batch keeps the serial run's batches, which bfloat16 vLLM's samples depend on)
    shard_size: int | None = None
    max_retries: int = 2           # a shard whose worker died is retried this often, then reported
    start_timeout_s: float = 300.0  # a worker that does not start in time (no free resources) is given up
    log_to_driver: bool = False    # workers' own output on the driver's console


@dataclass
class TrackingConf:
    mode: str = "offline"          # off | offline | online
    project: str = "crossed-rlvr"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class ProposalConf:
    enabled: bool = False
    target: list[float] = field(default_factory=list)  # shares or counts per stratum
    proposal: list[float] = field(default_factory=list)
    epsilon: float = 1.0e-6
    # App. D.1's three frozen difficulty strata: a JSON Lines file (item_id, stratum) for every training item,
    # or null for the task's own strata; crossed-study estimates them with the initial policy when neither
    # exists (train/strata.py); the study records the file's sha256 here so matched arms share it
    strata_file: str | None = None
    strata_sha256: str | None = None
    estimate_samples: int = 4      # samples per training item for the difficulty estimate (half per request)


@dataclass
class LoraConf:
    enabled: bool = False
    r: int = 16
    alpha: int = 32
    target_modules: Any = "all-linear"


@dataclass
class RecipeConf:
    group_size: int = 8
    prompts_per_update: int = 32
    updates: int = 100
    lr: float = 1.0e-6
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: float = 1.0
    policy_epochs: int = 1
    clip_ratio: float = 0.2
    loss_agg: str = "seq-mean-token-mean"
    kl_loss: bool = False
    kl_reward: bool = False
    entropy_coeff: float = 0.0
    norm_adv_by_std: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    max_response_tokens: int = 1024
    max_context_tokens: int = 3072
    save_every: int = 0            # verl: a resumable checkpoint every N updates (0: only the final one)
    proposal: ProposalConf = field(default_factory=ProposalConf)
    lora: LoraConf = field(default_factory=LoraConf)


@dataclass
class NameConf:
    name: str = MISSING


@dataclass
class EngineConf:
    name: str = MISSING            # trl | verl
    # TRL
    micro_batch: int | None = None
    use_vllm: bool = False
    nproc_per_node: int = 1        # TRL in crossed-study: each arm across this many processes (torchrun)
    bf16: bool = False             # TRL: bfloat16 autocast over fp32 masters (GPU; CPU with AMX/AVX512-BF16)
    # verl
    nnodes: int = 1
    n_gpus_per_node: int = 4
    micro_batch_per_gpu: int = 1
    rollout_tp: int = 1
    gpu_memory_utilization: float = 0.6
    rollout_is_threshold: float = 2.0
    param_offload: bool = True
    optimizer_offload: bool = True
    gradient_checkpointing: bool = True
    launch: bool = False
    cpus_per_node: int | None = None  # Ray's CPUs per node; null: what verl's budget needs (train/budget.py)
    tq_storage_units: int = 8      # verl's TransferQueue storage units (1 CPU each)
    wait_limit_s: float = 300.0    # a Ray resource wait longer than this ends the launch (train/verl_launch.py)
    attention: str = "auto"
    save_optimizer: bool = False


@dataclass
class SFTRecipeConf:
    """The ``sft`` group: paper 001 App. D.2.1's recipe (the trainer's config adds seed and reporting)."""

    epochs: float = 2.0
    learning_rate: float = 1.0e-5
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.03
    effective_batch: int = 32
    per_device_batch: int = 8
    max_length: int = 1024
    weight_decay: float = 0.0
    deepspeed: str | None = None   # a DeepSpeed JSON file, or zero2 / zero3 (conf/sft/deepspeed/)
    bf16: bool = False             # bfloat16 autocast over fp32 master weights, on GPUs only
    nproc_per_node: int = 1        # the study runs each SFT stage on this many processes (torchrun)
    parallel_arms: int = 1         # the study trains this many arms side by side, one process (GPU) each


@dataclass
class TrainItemsConf:
    n: int | None = 4000
    seed: int = 101


@dataclass
class ValidationConf:
    every: int = 0
    requests: list[str] = field(default_factory=lambda: ["hash", "boxed"])
    templates: list[str] = field(default_factory=lambda: ["original"])
    n_items: int | None = None
    split: str = "dev"
    score_workers: int = 1
    # verl: validation is greedy (paper 001 App. D.1); false samples with the eval group's T and top-p
    greedy: bool = True


@dataclass
class RehearsalConf:
    timeout_s: float = 600.0       # one arm's rehearsal (train/rehearsal.py) is killed after this
    wait_limit_s: float = 120.0    # a Ray resource wait longer than this fails the rehearsal


@dataclass
class TrainConf:
    model: ModelConf = MISSING
    task: TaskConf = MISSING
    convention: NameConf = MISSING
    recipe: RecipeConf = MISSING
    algorithm: NameConf = MISSING
    engine: EngineConf = MISSING
    eval: EvalConf = MISSING
    tracking: TrackingConf = MISSING
    validation: ValidationConf = field(default_factory=ValidationConf)
    seed: int = 83
    data_seed: int = 83
    run_dir: str = MISSING
    arm: str = MISSING
    study: str | None = None
    overwrite: bool = False
    template: str = "original"
    train_items: TrainItemsConf = field(default_factory=TrainItemsConf)


@dataclass
class PolicyConf:
    name: str = MISSING
    path: str = MISSING
    training_convention: str = "initial"
    train_seed: int | None = None


@dataclass
class EvalCommandConf:
    model: ModelConf = MISSING
    task: TaskConf = MISSING
    eval: EvalConf = MISSING
    tracking: TrackingConf = MISSING
    run_dir: str = MISSING
    study: str | None = None
    policies: list[PolicyConf] | None = None
    requests: list[str] = field(default_factory=lambda: ["hash", "boxed"])
    templates: list[str] = field(default_factory=lambda: ["original"])
    template_subset: int | None = 300
    template_subset_seed: int = 20260919
    samples: int = 1
    overwrite: bool = False
    distribute: DistributeConf = field(default_factory=DistributeConf)


@dataclass
class BandConf:
    """The warm start stops once every request's sampled payload rate lies in [low, high] (sft/band.py)."""

    low: float = 0.3
    high: float = 0.8
    every: int = 0                 # checked at step 0 and every N optimizer steps; 0: no band (train to the end)
    n_items: int = 32              # the task's dev items, sampled once per request per check


@dataclass
class WarmstartConf:
    requests: list[str] = field(default_factory=lambda: ["hash", "boxed"])
    templates: list[str] = field(default_factory=lambda: ["original", "para_a", "para_b"])
    seed: int = 0
    follow_rate: float = 1.0
    base: str | None = None        # a given model to warm-start; null: a fresh tiny model (model.tiny)
    band: BandConf = field(default_factory=BandConf)  # sampled with the command's eval group


@dataclass
class SFTCommandConf:
    model: ModelConf = MISSING
    task: TaskConf = MISSING
    sft: SFTRecipeConf = MISSING
    tracking: TrackingConf = MISSING
    run_dir: str = MISSING
    study: str | None = None
    eval: EvalConf = field(default_factory=EvalConf)  # the sampling of warmstart.band's checks
    mode: str = "arms"
    seeds: list[int] = field(default_factory=lambda: [83])
    arm: str = "hash"
    control: str = "boxed"
    train_items: TrainItemsConf = field(default_factory=lambda: TrainItemsConf(seed=7))
    warmstart: WarmstartConf = field(default_factory=WarmstartConf)


@dataclass
class InitialConf:
    build: str = "warmstart"       # warmstart | given
    train_items: int = 4000
    follow_rate: float = 0.5
    requests: list[str] = field(default_factory=lambda: ["hash", "boxed"])
    templates: list[str] = field(default_factory=lambda: ["original", "para_a", "para_b"])
    seed: int = 0
    band: BandConf = field(default_factory=BandConf)  # stop the warm start in a request-following band
    threads: int | None = 1        # torch threads of the warm start; null: torch's default (the machine's cores)


@dataclass
class ArmsConf:
    kind: str = "grpo"             # grpo | sft
    conventions: list[str] = field(default_factory=lambda: ["hash", "boxed"])
    seeds: list[int] = field(default_factory=lambda: [83, 84])
    parallel: int = 2
    train_items: int = 4000
    sft_arm: str = "hash"
    sft_control: str = "boxed"
    threads: int | None = 1        # torch threads of arms trained in the study's own process (parallel=1)


@dataclass
class EvaluationConf:
    requests: list[str] = field(default_factory=lambda: ["hash", "boxed"])
    templates: list[str] = field(default_factory=lambda: ["original", "para_a", "para_b"])
    n_items: int | None = None
    template_subset: int | None = 50
    template_subset_seed: int = 20260919
    samples: int = 1
    threads: int | None = 1        # torch threads of the serial evaluation; null: torch's default


# The paired bootstrap's settings (paper 002 §4): fewer than 10 resamples cannot give a percentile interval
# worth printing (the headline would read an empty interval as "includes 0"); more than a million are beyond
# any study's need and a machine's memory (draws are resamples x statistics floats). numpy's generator takes
# seeds 0 .. 2**64 - 1. Checked by conf.checks (the study) and analysis.bootstrap (crossed-analyze).
RESAMPLES_RANGE = (10, 1_000_000)
SEED_RANGE = (0, 2**64 - 1)


@dataclass
class AnalysisConf:
    resamples: int = 20000
    rng_seed: int = 20260919


@dataclass
class StudyConf:
    model: ModelConf = MISSING
    task: TaskConf = MISSING
    sft: SFTRecipeConf = MISSING
    recipe: RecipeConf = MISSING
    algorithm: NameConf = MISSING
    engine: EngineConf = MISSING
    eval: EvalConf = MISSING
    tracking: TrackingConf = MISSING
    experiment_name: str | None = None
    run_dir: str = MISSING
    stages: str = "all"            # all | prepare | rehearse
    requires_gpu: bool = False
    initial: InitialConf = field(default_factory=InitialConf)
    arms: ArmsConf = field(default_factory=ArmsConf)
    evaluation: EvaluationConf = field(default_factory=EvaluationConf)
    validation: ValidationConf = field(default_factory=ValidationConf)
    rehearsal: RehearsalConf = field(default_factory=RehearsalConf)
    analysis: AnalysisConf = field(default_factory=AnalysisConf)
    distribute: DistributeConf = field(default_factory=DistributeConf)  # the eval stage's workers


SCHEMAS = {"crossed_train": TrainConf, "crossed_eval": EvalCommandConf, "crossed_sft": SFTCommandConf,
           "crossed_study": StudyConf}


def register() -> None:
    """Store each command's schema as ``<command>_schema`` (the first entry of its defaults list)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for name, node in SCHEMAS.items():
        cs.store(name=f"{name}_schema", node=node)
