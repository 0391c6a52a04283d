"""Typed schemas of every command's config (Hydra ConfigStore), so a wrong type fails at composition.

Each primary config (``crossed_train.yaml`` ...) starts its defaults list with its schema; every group
option merges into a typed node, so ``seed=abc`` or ``eval.temperature=hot`` stops Hydra with the key
named before anything runs. Values that must come from a fixed set (requests, conventions, stages)
are checked right after composition by :mod:`crossed_rlvr.conf.checks`, also before any stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from omegaconf import MISSING

from crossed_rlvr.limits import BIG, DECODING, SEED, Choices, Range, Relation
from crossed_rlvr.numerics import MODES
from crossed_rlvr.rewards.conventions import MARKER_PAIR, REQUESTS, TEMPLATES


class ReadOnly:
    """A typed config is read-only once made: a stage that needs other settings makes a changed copy
    (``dataclasses.replace``), so what the command's door checked is what every stage reads. Not a frozen dataclass:
    OmegaConf makes a frozen dataclass's node read-only, and Hydra composes the command's config into these very
    schemas (a group option or an override writes into the node), so the guard sits on the instances alone."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_sealed", True)

    if not TYPE_CHECKING:  # mypy reads the dataclasses' own fields; an assignment it would let through fails here
        def __setattr__(self: ReadOnly, name: str, value: object) -> None:
            if self.__dict__.get("_sealed"):
                raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r} of a typed config "
                                                      f"({type(self).__name__}): make a changed copy with dataclasses.replace")
            object.__setattr__(self, name, value)


def num(default: float | None, low: float, high: float, *, low_open: bool = False,
        why: str = "") -> Any:  # Any: the field's default, an int or a float (or None)
    """A numeric field with its declared range (``default`` may be None for an optional field)."""
    return field(default=default, metadata={"range": Range(low, high, low_open, why)})


def choice(default: str | None, among: Sequence[str | bool] | Callable[[], Iterable[str]],
           **meta: object) -> Any:  # Any: the field's default, a string (or None)
    """A string field with its declared choices (``among`` callable: a registry read when the value is checked)."""
    return field(default=default, metadata={"choices": Choices(among), **meta})


def choices(factory: Callable[[], list[str]], among: Sequence[str] | Callable[[], Iterable[str]]) -> Any:
    """A list field, each value among its declared choices, at least one."""
    return field(default_factory=factory, metadata={"choices": Choices(among)})


def _conventions() -> tuple[str, ...]:
    from crossed_rlvr.rewards.conventions import CONVENTIONS

    return tuple(CONVENTIONS)


def _sources() -> tuple[str, ...]:
    from crossed_rlvr.task_sources import SOURCES

    return tuple(SOURCES)  # the registered sources (crossed_rlvr/task_sources.py)


def nums(factory: Callable[[], object] | None, low: float, high: float, *, low_open: bool = False,
         why: str = "") -> Any:  # Any: the field's list or dict, or None
    """A list (or dict's values) of numbers, each within the declared range; ``factory`` None: default null."""
    meta = {"range": Range(low, high, low_open, why)}
    return field(default=None, metadata=meta) if factory is None else field(default_factory=factory, metadata=meta)


@dataclass
class TinyConf(ReadOnly):
    """Sizes of a tiny model; the defaults train in minutes on two CPU cores."""

    relations: ClassVar = (Relation("divides", "num_key_value_heads", "num_attention_heads"),
                           Relation("divides", "num_attention_heads", "hidden_size"))
    hidden_size: int = num(128, 1, 65_536)
    intermediate_size: int = num(384, 1, 262_144)
    num_hidden_layers: int = num(3, 1, 1024)
    num_attention_heads: int = num(4, 1, 1024)
    num_key_value_heads: int = num(2, 1, 1024)
    max_position_embeddings: int = num(1024, 1, 1_048_576)
    seed: int = num(0, *SEED)


@dataclass
class ModelConf(ReadOnly):
    name: str = MISSING
    source: str = choice(MISSING, ("local", "hub", "gguf-smollm2"))
    path: str | None = None
    system: str | None = None
    tiny: TinyConf | None = None


@dataclass
class TrainModelConf(ModelConf):
    """An arm's model: the initial policy, with the hash of its weights where a study bound them (unset otherwise,
    and so out of the arm's settings: ``files.settings``)."""

    weights_sha256: str | None = None


@dataclass
class TaskConf(ReadOnly):
    name: str = MISSING
    source: str = choice(MISSING, _sources)  # arith | gsm8k | math500 | ...
    split: str = choice("test", ("test", "dev", "train"))
    n_items: int | None = num(None, 1, BIG)
    path: str | None = None
    # arithmetic probe
    n_test: int | None = num(None, 1, BIG)
    n_dev: int | None = num(None, 1, BIG)
    seed: int | None = num(None, *SEED)
    strata: list[int] | None = nums(None, 1, 64, why="operations per expression")
    max_operand: int | None = num(None, 1, 10**9)
    ops: list[str] | None = None
    train_per_stratum: dict[int, int] | None = nums(None, 0, BIG, why="0: no training items of that stratum")
    # GSM8K / MATH-500 splits
    train_path: str | None = None
    dev_items: int | None = num(None, 0, BIG, why="0: no dev hold-out (validate on the test split)")
    # frozen training rows (paper 001 §3, B.1): a file of the rows themselves, pinned by its sha256
    train_rows: str | None = None
    train_rows_sha256: str | None = None
    dev_seed: int | None = num(None, *SEED)
    # paper 000's benchmarks (crossed_rlvr.tasks.choice)
    hub_config: str | None = None
    # code tasks (source evalplus): the generated one-line functions (tasks.code.generated_split)
    generated: bool = False
    n_train: int | None = num(None, 1, 10_000)


@dataclass
class EvalConf(ReadOnly):
    relations: ClassVar = (Relation("exceeds", "context_limit", "max_new_tokens", "the prompt gets the difference"),)
    backend: str = choice("hf", ("hf", "vllm"))
    # null: bfloat16 on a GPU, float32 on the CPU; float32 | bfloat16 | float16 | auto (bfloat16 where computed natively)
    dtype: str | None = choice(None, ("float32", "bfloat16", "float16", "auto"))
    # the transformers backend's: auto (a GPU torch sees, else the CPU) | cpu | cuda
    device: str = choice("auto", ("auto", "cpu", "cuda"))
    batch_size: int = num(16, 1, 65_536)
    temperature: float = field(default=0.6, metadata={"range": DECODING["temperature"]})
    top_p: float = field(default=0.95, metadata={"range": DECODING["top_p"]})
    max_new_tokens: int = field(default=640, metadata={"range": DECODING["max_new_tokens"]})
    context_limit: int = num(4096, 2, 1_048_576)
    base_seed: int = num(20260908, *SEED)
    gpu_memory_utilization: float = num(0.9, 0.0, 0.99, low_open=True, why="vLLM's share of the GPU")
    tensor_parallel_size: int = num(1, 1, 64)
    enforce_eager: bool = False    # vLLM: no CUDA graphs / compilation (the CPU build loads ~3x faster)
    cpu_kvcache_gib: int = num(1, 1, 4096)      # vLLM's CPU build: VLLM_CPU_KVCACHE_SPACE when it is not set
    # the transformers backend's matrix products on the CPU: null, torch's own; onednn, each linear layer's weight
    # packed once for oneDNN (decoding steps ~2x faster on this project's CPUs, float32 and bfloat16); vLLM packs its
    # own weights. Unset, as every optional setting, it stays out of a cell's settings (files.settings).
    linear: str | None = choice(None, ("onednn",))
    # the transformers backend's attention: null, the model's own (sdpa); eager, unfused (a decoding step's one query
    # a row over a short cache is faster unfused on the CPU); sdpa_gqa, sdpa with grouped key/value heads read in
    # place instead of copied per query head (eval/generate/attention.py).
    attention: str | None = choice(None, ("eager", "sdpa", "sdpa_gqa"))
    # the transformers backend: the prompts' common first tokens (a chat template's system turn) prefilled once a
    # stream and every prompt prefilled from there; unset, every prompt whole
    shared_prefix: bool | None = None
    # the transformers backend: a prompt that shares more with an earlier one than every prompt does (an item's
    # question under another request or wording) is prefilled past the shared tokens only, on a copy of that prompt's
    # cache; unset, every prompt whole. vLLM caches prefixes itself.
    prefix_cache: bool | None = None


@dataclass
class DistributeConf(ReadOnly):
    """crossed-eval on Ray workers (eval/generate/workers.py); 0 workers: serial in the driver's process. Not part
    of any cell's settings: a run split differently writes the same files."""
    workers: int = num(0, 0, 4096, why="0: generate serially in the driver, no Ray")  # Ray workers, each with its own engine (one per GPU on a GPU node)
    address: str | None = None     # null: a local Ray on this machine; auto or HOST:PORT: a running cluster
    cpus_per_worker: float = num(1.0, 0.0, 1024.0, why="0: Ray reserves no CPU for a GPU worker")  # CPU workers: also their torch threads
    gpus_per_worker: float = num(0.0, 0.0, 64.0, why="0: CPU workers")  # 1 per vLLM engine (= eval.tensor_parallel_size)
    # responses per shard, the unit of scheduling, progress and resume; null: 4 x eval.batch_size (a worker keeps
    # its engine's batch full over a shard, as the serial run does over a policy's cells)
    shard_size: int | None = num(None, 1, BIG)
    max_retries: int = num(2, 0, 100, why="0: a shard whose worker died is reported at once")  # a shard whose worker died is retried this often, then reported
    start_timeout_s: float = num(300.0, 1.0, 86_400.0)  # a worker that does not start in time (no free resources) is given up
    log_to_driver: bool = False    # workers' own output on the driver's console


@dataclass
class TrackingConf(ReadOnly):
    mode: str = choice("offline", ("off", "offline", "online", False))  # YAML's `off` reads as False
    project: str = "crossed-rlvr"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class ProposalConf(ReadOnly):
    relations: ClassVar = (Relation("some_positive", "target"), Relation("some_positive", "proposal"))
    enabled: bool = False
    target: list[float] = nums(list, 0.0, 1e9, why="0: a stratum left out of the target")  # shares or counts per stratum (some positive)
    proposal: list[float] = nums(list, 0.0, 1e9, why="0: a stratum never proposed")
    epsilon: float = num(1.0e-6, 0.0, 1.0, low_open=True, why="the proposal's floor share, below 1")
    # App. D.1's three frozen difficulty strata: a JSON Lines file (item_id, stratum) for every training item,
    # or null for the task's own strata; crossed-study estimates them with the initial policy when neither
    # exists (train/strata.py); the study records the file's sha256 here so matched arms share it
    strata_file: str | None = None
    strata_sha256: str | None = None
    estimate_samples: int = num(4, 2, 1024)  # samples per training item for the difficulty estimate (half per request)
    # true: estimate the strata with the initial policy even when the task's items carry strata of their own (an
    # arithmetic task's operation counts are a structure, not the model's difficulty App. D.1 stratifies by)
    estimate: bool = False


@dataclass
class LoraConf(ReadOnly):
    enabled: bool = False
    r: int = num(16, 1, 4096)
    alpha: int = num(32, 1, 65_536)
    target_modules: Any = "all-linear"


@dataclass
class RecipeConf(ReadOnly):
    relations: ClassVar = (Relation("exceeds", "max_context_tokens", "max_response_tokens",
                                    "the prompt gets the difference"),)
    group_size: int = num(8, 2, 4096, why="GRPO compares responses within a group")
    prompts_per_update: int = num(32, 1, 65_536)
    updates: int = num(100, 1, 1_000_000)
    lr: float = num(1.0e-6, 0.0, 1.0, low_open=True)
    weight_decay: float = num(0.01, 0.0, 10.0, why="0: no weight decay")
    betas: list[float] = nums(lambda: [0.9, 0.999], 0.0, 0.999999, why="AdamW's decay rates: 0 keeps no history, 1 never forgets")
    grad_clip: float = num(1.0, 0.0, 1e6, low_open=True)
    policy_epochs: int = num(1, 1, 1, why="one policy epoch per batch, App. D.1")
    clip_ratio: float = num(0.2, 0.0, 10.0, low_open=True)
    loss_agg: str = "seq-mean-token-mean"
    kl_loss: bool = False
    kl_reward: bool = False
    entropy_coeff: float = num(0.0, 0.0, 10.0, why="0: no entropy bonus (App. D.1)")
    norm_adv_by_std: bool = True
    temperature: float = num(1.0, 0.0, 10.0, low_open=True, why="sampled rollouts: at 0 a group is one response")
    top_p: float = num(1.0, 0.0, 1.0, low_open=True)
    max_response_tokens: int = num(1024, 1, 1_048_576)
    max_context_tokens: int = num(3072, 2, 1_048_576)
    # verl: a resumable checkpoint every N updates (0: only the final one)
    save_every: int = num(0, 0, 1_000_000, why="0: only the final checkpoint")
    keep_optimizer: bool = False   # keep the final checkpoint's optimizer state after a verified merge
    proposal: ProposalConf = field(default_factory=ProposalConf)
    lora: LoraConf = field(default_factory=LoraConf)


@dataclass
class NameConf(ReadOnly):
    name: str = MISSING


@dataclass
class AlgorithmConf(ReadOnly):
    name: str = choice(MISSING, ("grpo", "reinforce_pp"))  # reinforce_pp: verl's REINFORCE++ (engine=verl only)


@dataclass
class EngineConf(ReadOnly):
    name: str = choice(MISSING, ("trl", "verl"))
    # TRL
    micro_batch: int | None = num(None, 1, 65_536)
    use_vllm: bool = False
    nproc_per_node: int = num(1, 1, 64)  # TRL in crossed-study: each arm across this many processes (torchrun)
    bf16: bool = False             # TRL: bfloat16 autocast over fp32 masters (GPU; CPU with AMX/AVX512-BF16)
    # TRL: where GRPO completions come from. null: TRL's own model.generate; stream: the evaluator's continuous-batching
    # decoder over a packed copy of the current weights, each group's prompt prefilled once (train/rollout.py)
    sampler: str | None = choice(None, ("stream",))
    # TRL: each group's prompt through the model once in the loss's forward, its completions continuing from its cache,
    # and the output layer on completion positions only (train/prompt_once.py); null keeps TRL's forward
    prompt_once: bool | None = None
    # verl
    # cuda: GPU nodes; cpu: verl's trainer on this CPU (train/verl_cpu.py), 1 gloo rank a GPU
    device: str = choice("cuda", ("cuda", "cpu"))
    nnodes: int = num(1, 1, 4096)
    n_gpus_per_node: int = num(4, 1, 64)
    micro_batch_per_gpu: int = num(1, 1, 65_536)
    rollout_tp: int = num(1, 1, 64)
    gpu_memory_utilization: float = num(0.6, 0.0, 0.99, low_open=True, why="vLLM's share of the GPU")
    rollout_is_threshold: float = num(2.0, 1.0, 1e6, why="the importance weights' truncation, at least 1")
    param_offload: bool = True
    optimizer_offload: bool = True
    gradient_checkpointing: bool = True  # both engines: activations recomputed in the backward (memory for compute)
    launch: bool = False
    cpus_per_node: int | None = num(None, 1, 4096)  # Ray's CPUs per node; null: what verl's budget needs (train/budget.py)
    tq_storage_units: int | None = num(None, 1, 1024)  # TransferQueue storage units (1 CPU each); null: 2 per node
    wait_limit_s: float = num(300.0, 1.0, 86_400.0)  # a Ray resource wait longer than this ends the launch (train/verl_launch.py)
    # the SLURM scripts' warning before the time limit (--signal=B:USR1@<s>): the arm saves and the job requeues itself
    # (crossed_rlvr/cluster.py); null: 300 s, 0: none. Left out of the arm's config hash: it changes no weights
    slurm_warning_s: int | None = num(None, 0, 86_400, why="null: 300 s; 0: no warning and no requeue")
    # verl: auto (flash_attention_2 when flash-attn is installed, else sdpa), flash_attention_2 or sdpa; TRL: auto
    # (the model's own), sdpa, eager (unfused: an update's loss 6.5 s instead of 7.4 s at one CPU thread for SmolLM2)
    # or flash_attention_2
    attention: str = choice("auto", ("auto", "eager", "sdpa", "flash_attention_2"))
    save_optimizer: bool = False
    # the memory plan (train/memory.py): usable memory of one GPU (torch.cuda.mem_get_info's total: H100/H200
    # 80 GB 79.6, H200 140.4, A100 80 GB 79.2, A100 40 GB 39.4) and the AdamW step without a foreach copy
    gpu_memory_gib: float = num(79.6, 1.0, 1024.0, why="usable memory of one GPU for the memory plan")
    # the rest of the node the plan is made for at stages=prepare (null: not checked until the launch reads it)
    host_memory_gib: float | None = num(None, 1.0, 1_000_000.0, why="host memory of one node")
    disk_free_gb: float | None = num(None, 0.0, 1e9, why="free disk under run_dir")
    fused_optimizer: bool = False
    # the weighted trainer writes each update's advantages before and after the importance scaling into
    # <arm>/advantages/step-<N>.pt (train/verl_weighted.py), for a check from outside the trainer
    dump_advantages: bool = False


@dataclass
class SFTRecipeConf(ReadOnly):
    """The ``sft`` group: paper 001 App. D.2.1's recipe (the trainer's config adds seed and reporting)."""

    relations: ClassVar = (Relation("divides", "per_device_batch", "effective_batch"),)
    epochs: float = num(2.0, 0.0, 1000.0, low_open=True)
    learning_rate: float = num(1.0e-5, 0.0, 1.0, low_open=True)
    lr_scheduler: str = "cosine"
    warmup_ratio: float = num(0.03, 0.0, 1.0, why="0: no warmup")
    effective_batch: int = num(32, 1, 65_536)
    per_device_batch: int = num(8, 1, 65_536)
    max_length: int = num(1024, 2, 1_048_576)
    weight_decay: float = num(0.0, 0.0, 10.0, why="0: no weight decay (App. D.2.1)")
    deepspeed: str | None = None   # a DeepSpeed JSON file, or zero2 / zero3 (conf/sft/deepspeed/)
    bf16: bool = False             # bfloat16 autocast over fp32 master weights, on GPUs only
    nproc_per_node: int = num(1, 1, 64)  # the study runs each SFT stage on this many processes (torchrun)
    parallel_arms: int = num(1, 1, 64)  # the study trains this many arms side by side, one process (GPU) each
    # the model's attention while fine-tuning: null, its own (sdpa); eager, unfused (a 16-row step of SmolLM2 at
    # 2 threads: 4.25 s instead of 4.8 s)
    attention: str | None = choice(None, ("eager", "sdpa"))


@dataclass
class TrainItemsConf(ReadOnly):
    n: int | None = num(4000, 1, BIG)
    seed: int = num(101, *SEED)  # tasks/training.py: GRPO_ITEM_SEED (the SFT commands default to SFT_ITEM_SEED)


@dataclass
class ValidationConf(ReadOnly):
    every: int = num(0, 0, 1_000_000, why="0: no validation during training")
    requests: list[str] = choices(lambda: list(MARKER_PAIR), REQUESTS)
    templates: list[str] = choices(lambda: ["original"], TEMPLATES)
    n_items: int | None = num(None, 1, BIG)
    split: str = "dev"
    score_workers: int = num(1, 1, 256)
    # verl: validation is greedy (paper 001 App. D.1); false samples with the eval group's T and top-p
    greedy: bool = True


@dataclass
class RehearsalConf(ReadOnly):
    timeout_s: float = num(600.0, 1.0, 86_400.0)  # one arm's rehearsal (train/rehearsal.py) is killed after this
    wait_limit_s: float = num(120.0, 1.0, 86_400.0)  # a Ray resource wait longer than this fails the rehearsal
    # the arms whose launch is rehearsed (null: every arm); matched arms differ only in their reward program,
    # so one convention is enough to try a new cluster's start-up at a verl start-up's cost instead of several
    conventions: list[str] | None = None


@dataclass
class TrainConf(ReadOnly):
    model: TrainModelConf = MISSING
    task: TaskConf = MISSING
    convention: NameConf = MISSING
    recipe: RecipeConf = MISSING
    algorithm: AlgorithmConf = MISSING
    engine: EngineConf = MISSING
    eval: EvalConf = MISSING
    tracking: TrackingConf = MISSING
    validation: ValidationConf = field(default_factory=ValidationConf)
    seed: int = num(83, *SEED)
    data_seed: int = num(83, *SEED)
    numerics: str = choice("portable", MODES)  # CPU kernels held to AVX2, or the machine's own (numerics.py)
    threads: int | None = num(None, 1, 1024)  # torch threads of TRL's training (other sums); null: torch's default
    run_dir: str = MISSING
    arm: str = MISSING
    study: str | None = None
    overwrite: bool = False
    template: str = choice("original", TEMPLATES)
    train_items: TrainItemsConf = field(default_factory=TrainItemsConf)


@dataclass
class PolicyConf(ReadOnly):
    name: str = MISSING
    path: str = MISSING
    training_convention: str = "initial"
    train_seed: int | None = num(None, *SEED)
    # what trained it (grpo, sft, or any method of a policy trained elsewhere) and, for an arm's checkpoint, which
    # (step<K>): stored with its responses, never read from its name (null: read from a name written before these
    # were given, names.legacy_policy_parts)
    method: str | None = None
    checkpoint: str | None = None


@dataclass
class EvalCommandConf(ReadOnly):
    model: ModelConf = MISSING
    task: TaskConf = MISSING
    eval: EvalConf = MISSING
    tracking: TrackingConf = MISSING
    numerics: str = choice("portable", MODES)  # CPU kernels held to AVX2, or the machine's own (numerics.py)
    run_dir: str = MISSING
    study: str | None = None
    policies: list[PolicyConf] | None = None
    requests: list[str] = field(default_factory=lambda: list(MARKER_PAIR))
    templates: list[str] = field(default_factory=lambda: ["original"])
    template_subset: int | None = num(300, 1, BIG)
    template_subset_seed: int = num(20260919, *SEED)
    samples: int = num(1, 1, 10_000)
    overwrite: bool = False
    distribute: DistributeConf = field(default_factory=DistributeConf)
    # the CPU numerics of cells made before a cell's settings recorded them (a study sets it from its eval stage);
    # unset, such a cell is refused in one line: eval/generate/plan.py
    numerics_before: str | None = choice(None, MODES)


@dataclass
class BandConf(ReadOnly):
    """The warm start stops once every request's sampled payload rate lies in [low, high] (sft/band.py)."""

    relations: ClassVar = (Relation("at_most", "low", "high"),)
    low: float = num(0.3, 0.0, 1.0, why="payload rates: 0 admits a policy that never follows")
    high: float = num(0.8, 0.0, 1.0, why="payload rates: at least band.low")
    every: int = num(0, 0, 1_000_000, why="0: no band, train to the end")  # checked at step 0 and every N optimizer steps; 0: no band (train to the end)
    n_items: int = num(32, 1, BIG)  # the task's dev items, sampled once per request per check


@dataclass
class WarmstartConf(ReadOnly):
    requests: list[str] = field(default_factory=lambda: list(MARKER_PAIR))
    templates: list[str] = field(default_factory=lambda: ["original", "para_a", "para_b"])
    seed: int = num(0, *SEED)
    follow_rate: float = num(1.0, 0.0, 1.0, why="share of targets in the requested convention; 0: all in the other")
    base: str | None = None        # a given model to warm-start; null: a fresh tiny model (model.tiny)
    band: BandConf = field(default_factory=BandConf)  # sampled with the command's eval group


@dataclass
class SFTCommandConf(ReadOnly):
    relations: ClassVar = (Relation("distinct", "seeds", why="one arm per seed", noun="seed "),)
    model: ModelConf = MISSING
    task: TaskConf = MISSING
    sft: SFTRecipeConf = MISSING
    tracking: TrackingConf = MISSING
    numerics: str = choice("portable", MODES)  # CPU kernels held to AVX2, or the machine's own (numerics.py)
    run_dir: str = MISSING
    study: str | None = None
    eval: EvalConf = field(default_factory=EvalConf)  # the sampling of warmstart.band's checks
    mode: str = choice("arms", ("warmstart", "arms"))
    seeds: list[int] = nums(lambda: [83], *SEED)
    arm: str = choice("hash", _conventions)
    control: str = choice("boxed", _conventions)
    train_items: TrainItemsConf = field(default_factory=lambda: TrainItemsConf(seed=7))
    warmstart: WarmstartConf = field(default_factory=WarmstartConf)


@dataclass
class InitialConf(ReadOnly):
    build: str = choice("warmstart", ("warmstart", "given"))
    train_items: int = num(4000, 1, BIG)
    follow_rate: float = num(0.5, 0.0, 1.0, why="share of targets in the requested convention; 0: all in the other")
    requests: list[str] = field(default_factory=lambda: list(MARKER_PAIR))
    templates: list[str] = field(default_factory=lambda: ["original", "para_a", "para_b"])
    seed: int = num(0, *SEED)
    band: BandConf = field(default_factory=BandConf)  # stop the warm start in a request-following band
    threads: int | None = num(1, 1, 1024)  # torch threads of the warm start; null: torch's default (the machine's cores)
    cache_dir: str | None = None   # warm-started policies shared by studies, by fingerprint (study/warm_cache.py)


@dataclass
class ArmsConf(ReadOnly):
    relations: ClassVar = (Relation("distinct", "seeds", why="one arm per seed", noun="seed "),
                           Relation("distinct", "conventions", why="one arm per convention"))
    kind: str = choice("grpo", ("grpo", "sft", "given"))  # given: the final checkpoints of another study's arms
    from_run: str | None = None    # kind=given: that study's run_dir (its train/<convention>/s<seed>/checkpoints)
    conventions: list[str] = field(default_factory=lambda: list(MARKER_PAIR))
    seeds: list[int] = nums(lambda: [83, 84], *SEED)
    parallel: int = num(2, 1, 64)
    train_items: int = num(4000, 1, BIG)
    sft_arm: str = choice("hash", _conventions)
    sft_control: str = choice("boxed", _conventions)
    threads: int | None = num(1, 1, 1024)  # torch threads of arms trained in the study's own process (parallel=1)


@dataclass
class EvaluationConf(ReadOnly):
    requests: list[str] = field(default_factory=lambda: list(MARKER_PAIR))
    templates: list[str] = field(default_factory=lambda: ["original", "para_a", "para_b"])
    n_items: int | None = num(None, 1, BIG)
    template_subset: int | None = num(50, 1, BIG)
    template_subset_seed: int = num(20260919, *SEED)
    samples: int = num(1, 1, 10_000)
    threads: int | None = num(1, 1, 1024)  # torch threads of the serial evaluation; null: torch's default


# The paired bootstrap's settings (paper 002 §4): fewer than 10 resamples cannot give a percentile interval
# worth printing (the headline would read an empty interval as "includes 0"); more than a million are beyond
# any study's need and a machine's memory (draws are resamples x statistics floats). numpy's generator takes
# seeds 0 .. 2**64 - 1. Checked by conf.checks (the study) and analysis.bootstrap (crossed-analyze).
RESAMPLES_RANGE = (10, 1_000_000)
SEED_RANGE = (0, 2**64 - 1)


@dataclass
class AnalysisConf(ReadOnly):
    resamples: int = num(20000, *RESAMPLES_RANGE, why="an interval needs at least 10 resamples")
    rng_seed: int = num(20260919, *SEED_RANGE)


@dataclass
class StudyConf(ReadOnly):
    model: ModelConf = MISSING
    task: TaskConf = MISSING
    sft: SFTRecipeConf = MISSING
    recipe: RecipeConf = MISSING
    algorithm: AlgorithmConf = MISSING
    engine: EngineConf = MISSING
    eval: EvalConf = MISSING
    tracking: TrackingConf = MISSING
    experiment_name: str | None = None
    numerics: str = choice("portable", MODES)  # CPU kernels held to AVX2, or the machine's own (numerics.py)
    run_dir: str = MISSING
    stages: str = choice("all", ("all", "prepare", "rehearse", "fetch"))  # fetch: download hub models and data, stop
    requires_gpu: bool = False
    initial: InitialConf = field(default_factory=InitialConf)
    arms: ArmsConf = field(default_factory=ArmsConf)
    evaluation: EvaluationConf = field(default_factory=EvaluationConf)
    validation: ValidationConf = field(default_factory=ValidationConf)
    rehearsal: RehearsalConf = field(default_factory=RehearsalConf)
    analysis: AnalysisConf = field(default_factory=AnalysisConf)
    distribute: DistributeConf = field(default_factory=DistributeConf)  # the eval stage's workers


@dataclass
class AuditConf(ReadOnly):
    """``crossed-audit``: policies given by their training convention, evaluated crossed (study/audit.py). Each
    convention key takes one model folder or hub name, or a list of them (one per seed); ``initial`` the base."""

    model: ModelConf = MISSING
    task: TaskConf = MISSING
    eval: EvalConf = MISSING
    tracking: TrackingConf = MISSING
    numerics: str = choice("portable", MODES)  # CPU kernels held to AVX2, or the machine's own (numerics.py)
    run_dir: str = "runs/audit"
    initial: str | None = None
    # each given policy by the convention its training rewarded (an answer task's, or a code task's: App. D.3): a
    # path or hub name, or a list of them, one per seed (str | list[str]: OmegaConf has no unions). The command
    # line spells it ``hash=CKPT`` (crossed_rlvr/command.py: ``as_trained``)
    trained: dict[str, Any] = field(default_factory=dict)
    from_study: str | None = None  # a finished study's run_dir: its initial policy and arms join the given ones
    step: int | None = num(None, 0, BIG, why="0 is the initial weights, saved as step-0")  # from_study's checkpoints
    evaluation: EvaluationConf = field(default_factory=EvaluationConf)
    analysis: AnalysisConf = field(default_factory=AnalysisConf)
    distribute: DistributeConf = field(default_factory=DistributeConf)


SCHEMAS = {"crossed_train": TrainConf, "crossed_eval": EvalCommandConf, "crossed_sft": SFTCommandConf,
           "crossed_study": StudyConf, "crossed_audit": AuditConf}


C = TypeVar("C")


def conf_of(schema: type[C], cfg: object) -> C:
    """``cfg`` (a composed Hydra config, a dict, a JSON file's content) as ``schema``'s dataclasses, made once where a
    command starts (as verl's ``omega_conf_to_dataclass``): merged onto the schema, so every key is typed and every
    default is the schema's own, and read below by attribute, never by ``.get(key, default)``."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from crossed_rlvr.errors import ConfigError

    if isinstance(cfg, schema):  # typed already: the door is passed once
        return cfg
    if OmegaConf.is_config(cfg):  # a node read back from JSON holds its int keys as strings, as a dict does
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if isinstance(cfg, dict):
        cfg = int_keys(schema, cfg)
    try:
        made = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), cfg))
    except OmegaConfBaseException as err:  # a key the schema lacks, a value of another type, a missing value
        key = getattr(err, "full_key", "") or ""
        raise ConfigError(f"{key}: {str(err).splitlines()[0]}" if key else str(err).splitlines()[0]) from None
    if not isinstance(made, schema):
        raise TypeError(f"{schema.__name__}: the merged config is a {type(made).__name__}")
    return made


def given_of(cfg: object) -> dict[str, Any]:
    """A command's config as it was given, in plain dicts (a composed Hydra node resolved, a dict as it is), less
    Hydra's own node: what a run records of its config beside the typed one (crossed-sft's wandb runs and their
    ids), made at the door as ``conf_of`` is."""
    from collections.abc import Mapping

    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
    if not isinstance(data, Mapping):
        raise TypeError(f"a command's config is a mapping, not {type(cfg).__name__}")
    return {str(k): v for k, v in data.items() if k != "hydra"}


def int_keys(schema: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the keys of every ``dict[int, ...]`` field of ``schema`` as ints again: JSON writes every key as
    a string (``task.train_per_stratum`` read back from an arm's spec or resolved config), and the schema's node
    takes int keys only."""
    import typing

    hints = typing.get_type_hints(schema)
    out = dict(data)
    for f in dataclasses.fields(schema):
        value = out.get(f.name)
        args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)] or [hints[f.name]]
        kind = args[0]
        if isinstance(value, dict) and dataclasses.is_dataclass(kind) and isinstance(kind, type):
            out[f.name] = int_keys(kind, value)
        elif isinstance(value, dict) and typing.get_origin(kind) is dict and typing.get_args(kind)[0] is int:
            out[f.name] = {int(k): v for k, v in value.items()}
    return out


def register() -> None:
    """Store each command's schema as ``<command>_schema`` (the first entry of its defaults list)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for name, node in SCHEMAS.items():
        cs.store(name=f"{name}_schema", node=node)
