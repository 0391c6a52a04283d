"""A memory and disk plan of a verl arm, before launch: will it fit the GPUs and the disk?

Read against verl 0.9.1 and torch 2.11 (the GPU lock's versions):

- **Train phase.** verl's FSDP engine (FSDP2, ``actor.strategy=fsdp2``: the same sharded fp32 state as FSDP1, each
  layer's bf16 parameters gathered as it runs) brings parameters, gradients and optimizer state back to the GPU for the
  update even with ``param_offload``/``optimizer_offload`` (``verl/workers/engine/base.py``, the train-mode
  context switch): fp32 masters 4 B, fp32 gradients 4 B, AdamW's ``exp_avg`` and ``exp_avg_sq`` 8 B per
  parameter, sharded over the arm's GPUs. torch's default ("foreach") AdamW step makes a temporary copy of
  one state tensor list (``torch/optim/adam.py``, ``_multi_tensor_adam``: 4 B per parameter per GPU); the
  fused step does not (``engine.fused_optimizer=true`` sets verl's ``optim.override_optimizer_config``).
  One micro-batch of ``engine.micro_batch_per_gpu`` sequences of ``recipe.max_context_tokens`` tokens adds
  activations (with gradient checkpointing: each layer's bf16 input, 2·s·h B per layer, plus one layer
  recomputed, 34·s·h B; without: 34·s·h B per layer (Korthikanti et al. 2022, flash/SDPA attention)) and
  the logits: bf16, their fp32 copy for the log-softmax and its fp32 gradient, 10·s·V B. vLLM sleeps
  during the update (its KV cache freed, weights offloaded: ``free_cache_engine``).
- **Rollout phase.** vLLM holds ``engine.gpu_memory_utilization`` of the card; the actor's state stays on
  the GPU unless offloaded.
- Both phases add ``OVERHEAD_GIB`` for the CUDA context, NCCL buffers and the allocator's fragmentation.
- **Host memory (per node).** ``param_offload`` keeps each rank's fp32 parameter shard in pinned CPU memory
  between updates (4 B per parameter over the node's ranks), ``optimizer_offload`` its AdamW state (8 B);
  on top comes the largest transient, 4 B per parameter whole: rank 0 loads the Hugging Face model in fp32
  before sharding it, and a checkpoint save gathers the full fp32 state dict for the merged config. 92 GB
  offloaded plus 30 GB for a 7B model. Then every process verl starts beside the GPU workers, each importing torch
  (``WORKER_MIB``, measured): its agent-loop, reward-loop and data-loader workers (8 of each unless the arm's
  overrides say otherwise; the data loaders' twice while validation runs beside training's iterator), the
  TransferQueue controller and storage units, the task runner, each GPU worker's own imports, vLLM's front end
  and EngineCore per replica and its worker per GPU, and Ray's daemons. Checked against ``/proc/meminfo`` when
  the launch starts.
- **Disk.** A resumable checkpoint (``recipe.save_every`` > 0, or ``engine.save_optimizer``) holds fp32
  weights and AdamW state, 12 B per parameter; a model-only one 4 B. verl keeps the previous checkpoint
  until the new one is complete (``max_actor_ckpt_to_keep=1``), so a save needs twice that; the merged
  Hugging Face model adds 4 B per parameter (fp32, as saved).

A plan is made for a declared node (``engine.n_gpus_per_node`` GPUs of ``engine.gpu_memory_gib``, and, when
given, ``engine.host_memory_gib`` of host memory and ``engine.disk_free_gb`` of free disk) and refused at
``stages=prepare`` with its arithmetic and the overrides that fix it, the cheapest first (fused AdamW before more
GPUs). At launch ``verl_launch`` plans again on the node it starts on: its GPUs' memory as torch reads it, its
available host memory and free disk.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossed_rlvr.conf.schema import EngineConf, ModelConf, StudyConf, TrainConf
from crossed_rlvr.errors import CrossedError

GIB = 2**30
OVERHEAD_GIB = 2.0

# Resident memory of one process of each kind verl 0.9.1 starts beside its GPU workers, in MiB: the pages it holds
# alone (USS: Private_Clean + Private_Dirty of /proc/<pid>/smaps_rollup), measured by scripts/measure_worker_memory.py
# with each kind started as verl starts it on a local Ray (the tiny model; torch 2.13 CPU, Ray 2.60, TransferQueue
# 0.1.11; vLLM's three processes from vLLM's CPU build 0.28.0 with a 16 MiB KV cache). RSS beside each, for scale:
# agent-loop worker 473 (RSS 697), reward-loop worker 397 (613), data-loader worker 200 after a full garbage
# collection in it (forked from the task runner, RSS 556 mostly shared with it), TransferQueue storage unit and
# controller 272 (442), task runner 469 (689), a GPU worker's imports 449 (667), vLLM's front end 500 (739),
# EngineCore 483 (725) and worker 531 (773), Ray's daemons with the dashboard 396 together (1431). The libraries
# they share count once per node: 242, the largest RSS - USS. On a GPU node each process maps CUDA's libraries too
# and the GPU worker and vLLM's hold a CUDA context: these figures are floors.
WORKER_MIB: dict[str, float] = {
    "agent-loop workers": 473, "reward-loop workers": 397, "data-loader workers": 200,
    "TransferQueue storage units": 272, "TransferQueue controller": 272, "task runner": 469,
    "GPU workers' own imports": 449, "vLLM front ends": 500, "vLLM EngineCores": 483, "vLLM workers": 531,
    "Ray's daemons": 396, "shared libraries (once)": 242,
}
# verl 0.9.1's worker counts (trainer/config: rollout/rollout.yaml agent.num_workers, reward/reward.yaml
# num_workers, data/legacy_data.yaml dataloader_num_workers), which train/translate.py leaves as they are, and the
# CPU route's (train/verl_cpu.py OVERRIDES); tests/test_memory_plan.py reads both back from verl's composed config.
VERL_WORKERS = {"agent": 8, "reward": 8, "dataloader": 8}
CPU_WORKERS = {"agent": 1, "reward": 1, "dataloader": 0}


class PlanError(CrossedError, ValueError):
    """The arm does not fit its GPUs (raised with the plan's arithmetic and the fixes)."""


class NoShape(PlanError):
    """No config.json to plan from (yet: a study's initial policy is built by its first stage)."""


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    tied: bool
    attention_bias: bool
    model_type: str = "llama"

    @classmethod
    def from_config(cls, c: dict[str, Any]) -> Shape:
        return cls(int(c["vocab_size"]), int(c["hidden_size"]), int(c["num_hidden_layers"]),
                   int(c["intermediate_size"]), int(c["num_attention_heads"]),
                   int(c.get("num_key_value_heads") or c["num_attention_heads"]), bool(c.get("tie_word_embeddings")),
                   bool(c.get("attention_bias", c.get("model_type") == "qwen2")),  # Qwen2: q/k/v biases
                   str(c.get("model_type") or "llama"))

    def config(self) -> dict[str, Any]:
        """The config.json fields that fix the model's tensors (transformers' ``AutoConfig.for_model`` takes them)."""
        extra = {"attention_bias": self.attention_bias} if self.model_type != "qwen2" else {}  # Qwen2's are fixed
        return {"model_type": self.model_type, "vocab_size": self.vocab, "hidden_size": self.hidden,
                "num_hidden_layers": self.layers, "intermediate_size": self.intermediate,
                "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads,
                "tie_word_embeddings": self.tied, **extra}

    def parameters(self) -> int:
        """Parameters of a decoder-only transformer (embeddings, attention, gated MLP, RMS norms, head)."""
        h, head_dim = self.hidden, self.hidden // self.heads
        kv = self.kv_heads * head_dim
        attention = h * h * 2 + h * kv * 2 + ((h + 2 * kv) if self.attention_bias else 0)
        layer = attention + 3 * h * self.intermediate + 2 * h
        return self.vocab * h * (1 if self.tied else 2) + self.layers * layer + h


# Shapes of the hub models the presets name, for a plan without the network (their config.json values):
# vocabulary, hidden size, layers, MLP size, heads, key-value heads, tied embeddings, attention biases, model type.
KNOWN_SHAPES: dict[str, Shape] = {
    "Qwen/Qwen2.5-7B-Instruct": Shape(152064, 3584, 28, 18944, 28, 4, False, True, "qwen2"),
    "Qwen/Qwen2.5-1.5B-Instruct": Shape(151936, 1536, 28, 8960, 12, 2, True, True, "qwen2"),
    "allenai/OLMo-2-1124-7B-Instruct": Shape(100352, 4096, 32, 11008, 32, 32, False, False, "olmo2"),
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": Shape(49152, 2048, 24, 8192, 32, 32, True, False, "llama"),
    "HuggingFaceTB/SmolLM2-135M-Instruct": Shape(49152, 576, 30, 1536, 9, 3, True, False, "llama"),
}


def model_shape(model: ModelConf) -> Shape:
    """The model's shape from its config.json: a local folder, the Hugging Face cache, or the presets' table."""
    path = str(model.path or "")
    local = Path(path) / "config.json"
    if local.exists():
        return Shape.from_config(json.loads(local.read_text()))
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        if isinstance(cached, str):
            return Shape.from_config(json.loads(Path(cached).read_text()))
    except Exception:  # noqa: BLE001 - no hub library or an id it refuses: fall through to the table
        pass
    if path in KNOWN_SHAPES:
        return KNOWN_SHAPES[path]
    raise NoShape(f"model.path={path!r}: no config.json to plan memory from (a local folder, the Hugging Face "
                    "cache, or one of the presets' models); fetch it first: crossed-study ... stages=fetch")


@dataclass
class Plan:
    params: int
    gpus: int
    card_gib: float
    train: dict[str, float] = field(default_factory=dict)    # GiB per GPU in the update
    rollout: dict[str, float] = field(default_factory=dict)  # GiB per GPU while vLLM generates
    disk: dict[str, float] = field(default_factory=dict)     # GB per arm
    host: dict[str, float] = field(default_factory=dict)     # GiB of CPU memory per node
    checkpoint_gb: float = 0.0                               # one checkpoint of the arm
    host_gib: float | None = None                            # the declared node's host memory (None: not declared)
    disk_free_gb: float | None = None                        # its free disk for the checkpoints (None: not declared)

    @property
    def train_peak(self) -> float:
        return sum(self.train.values())

    @property
    def rollout_peak(self) -> float:
        return sum(self.rollout.values())

    @property
    def host_peak(self) -> float:
        return sum(self.host.values())

    @property
    def disk_peak(self) -> float:
        """GB the checkpoint folder holds at its fullest: two checkpoints during a save, or the last one and
        the merged model."""
        return max(2 * self.checkpoint_gb, self.checkpoint_gb + 4 * self.params / 1e9)

    def fits(self) -> bool:
        return self.train_peak <= self.card_gib and self.rollout_peak <= self.card_gib

    def node(self) -> str:
        """The node planned for, as declared (or read at launch)."""
        host = f"{self.host_gib:.0f} GiB host memory" if self.host_gib is not None else "host memory not declared"
        disk = f"{self.disk_free_gb:.0f} GB free disk" if self.disk_free_gb is not None else "free disk not declared"
        return f"{self.gpus} x GPU of {self.card_gib:.1f} GiB, {host}, {disk}"

    def node_problem(self) -> str | None:
        """The declared node's host memory or disk falls short (None: fits, or not declared)."""
        return node_problem({"host_peak_gib": self.host_peak, "disk_peak_gb": self.disk_peak},
                            float("inf") if self.host_gib is None else self.host_gib,
                            float("inf") if self.disk_free_gb is None else self.disk_free_gb, 0.0, "the declared node",
                            declared=True)

    def table(self) -> str:
        def verdict(need: float, have: float | None, unit: str) -> str:
            return "(checked against the node at launch)" if have is None else \
                f"{'fits' if need <= have else 'DOES NOT FIT'} the declared {have:.0f} {unit} (checked again at launch)"

        rows = [f"memory plan: {self.params / 1e9:.2f}B parameters on {self.gpus} GPU(s) of {self.card_gib:.1f} GiB",
                f"  node: {self.node()}", "  update (per GPU):"]
        rows += [f"    {k:<52s} {v:8.1f} GiB" for k, v in self.train.items()]
        rows.append(f"    {'total':<52s} {self.train_peak:8.1f} GiB {'fits' if self.train_peak <= self.card_gib else 'DOES NOT FIT'}")
        rows.append("  rollout (per GPU):")
        rows += [f"    {k:<52s} {v:8.1f} GiB" for k, v in self.rollout.items()]
        rows.append(f"    {'total':<52s} {self.rollout_peak:8.1f} GiB "
                    f"{'fits' if self.rollout_peak <= self.card_gib else 'DOES NOT FIT'}")
        rows.append("  host memory (per node):")
        rows += [f"    {k:<52s} {v:8.1f} GiB" for k, v in self.host.items()]
        rows.append(f"    {'total':<52s} {self.host_peak:8.1f} GiB {verdict(self.host_peak, self.host_gib, 'GiB')}")
        rows.append("  disk (per arm):")
        rows += [f"    {k:<52s} {v:8.1f} GB" for k, v in self.disk.items()]
        rows.append(f"    {'at the fullest':<52s} {self.disk_peak:8.1f} GB {verdict(self.disk_peak, self.disk_free_gb, 'GB')}")
        return "\n".join(rows)


def plan(cfg: TrainConf | StudyConf, shape: Shape | None = None) -> Plan:
    """The memory and disk plan of one verl arm from its config (``engine``, ``recipe``, ``model``)."""
    e, r = cfg.engine, cfg.recipe
    shape = shape or model_shape(cfg.model)
    n = shape.parameters()
    gpus = e.n_gpus_per_node * e.nnodes
    card = e.gpu_memory_gib
    s = e.micro_batch_per_gpu * r.max_context_tokens
    h = shape.hidden
    host, disk = e.host_memory_gib, e.disk_free_gb
    p = Plan(params=n, gpus=gpus, card_gib=card, host_gib=None if host is None else float(host),
             disk_free_gb=None if disk is None else float(disk))
    p.train["fp32 parameters (4 B, sharded)"] = 4 * n / gpus / GIB
    p.train["fp32 gradients (4 B, sharded)"] = 4 * n / gpus / GIB
    p.train["AdamW exp_avg + exp_avg_sq (8 B, sharded)"] = 8 * n / gpus / GIB
    fused = e.fused_optimizer
    p.train[f"optimizer step copy ({'fused: none' if fused else 'foreach: 4 B'})"] = 0.0 if fused else 4 * n / gpus / GIB
    if e.gradient_checkpointing:
        act = (2 * s * h * shape.layers + 34 * s * h) / GIB
        p.train["activations (checkpointed) of one micro-batch"] = act
    else:
        p.train["activations of one micro-batch"] = 34 * s * h * shape.layers / GIB
    p.train["logits bf16 + fp32 + fp32 grad of one micro-batch"] = 10 * s * shape.vocab / GIB
    p.train["CUDA context, NCCL, fragmentation"] = OVERHEAD_GIB
    p.rollout[f"vLLM (gpu_memory_utilization={float(e.gpu_memory_utilization):g})"] = \
        float(e.gpu_memory_utilization) * card
    resident = 0.0
    if not e.param_offload:
        resident += 8 * n / gpus / GIB  # parameters and gradients
    if not e.optimizer_offload:
        resident += 8 * n / gpus / GIB
    p.rollout["actor state kept on the GPU (not offloaded)"] = resident
    p.rollout["CUDA context, NCCL, fragmentation"] = OVERHEAD_GIB
    nodes = e.nnodes
    if e.param_offload:
        p.host["offloaded fp32 parameters (4 B, the node's shards)"] = 4 * n / nodes / GIB
    if e.optimizer_offload:
        p.host["offloaded AdamW state (8 B, the node's shards)"] = 8 * n / nodes / GIB
    p.host["model load on rank 0, or a checkpoint save (fp32, 4 B)"] = 4 * n / GIB
    p.host.update(host_processes(e))
    resumable = r.save_every > 0 or e.save_optimizer
    one = p.checkpoint_gb = (12 if resumable else 4) * n / 1e9
    p.disk[f"checkpoint ({'weights + AdamW, 12 B' if resumable else 'weights, 4 B'} per parameter)"] = one
    p.disk["during a save (the previous one kept until done)"] = 2 * one
    p.disk["merged Hugging Face model (fp32)"] = 4 * n / 1e9
    kept = 4 * n / 1e9 if resumable and not r.keep_optimizer else one
    p.disk["kept after the merge" + (" (optimizer removed)" if kept < one else "")] = kept + 4 * n / 1e9
    return p


def process_counts(e: EngineConf) -> dict[str, int]:
    """Processes of each kind on the busiest node (the head: the task runner and its data loaders are there) as
    verl runs the arm: agent-loop and reward-loop workers are placed round-robin over the nodes, the storage units
    too; the data loaders' workers twice while validation's run beside training's iterator (verl keeps that one);
    a vLLM replica of ``engine.rollout_tp`` GPUs (all of them on the CPU route) has a front end and an EngineCore,
    and a worker per GPU."""
    from crossed_rlvr.train.translate import storage_units

    nodes, per_node = e.nnodes, e.n_gpus_per_node
    cpu = e.device == "cpu"
    workers = CPU_WORKERS if cpu else VERL_WORKERS
    tp = per_node if cpu else e.rollout_tp
    replicas = max(1, per_node // tp)
    return {"agent-loop workers": math.ceil(workers["agent"] / nodes),
            "reward-loop workers": math.ceil(workers["reward"] / nodes), "data-loader workers": 2 * workers["dataloader"],
            "TransferQueue storage units": math.ceil(storage_units(e) / nodes), "TransferQueue controller": 1,
            "task runner": 1, "GPU workers' own imports": per_node, "vLLM front ends": replicas,
            "vLLM EngineCores": replicas, "vLLM workers": per_node,
            "Ray's daemons": 1, "shared libraries (once)": 1}


def host_processes(e: EngineConf) -> dict[str, float]:
    """GiB of host memory of verl's processes, a line per kind: its count times its measured ``WORKER_MIB``."""
    return {f"{kind}: {count} x {WORKER_MIB[kind]:g} MiB": count * WORKER_MIB[kind] * 2**20 / GIB
            for kind, count in process_counts(e).items() if count > 0}


def fixes(p: Plan, cfg: TrainConf | StudyConf) -> list[str]:
    """Overrides that make a plan fit, each with what it gives back."""
    out = []
    e = cfg.engine
    foreach = next((v for k, v in p.train.items() if k.startswith("optimizer step copy")), 0.0)
    if p.train_peak > p.card_gib and foreach > 0 and p.train_peak - foreach <= p.card_gib:
        out.append(f"engine.fused_optimizer=true (fused AdamW: no step copy, -{foreach:.1f} GiB per GPU)")
    if p.train_peak > p.card_gib:
        # the terms that shard over the GPUs (state and the step copy) and the ones each GPU holds whole
        sharded = sum(v for k, v in p.train.items() if "sharded" in k or k.startswith("optimizer step copy"))
        whole = p.train_peak - sharded
        need = next((g for g in (2, 4, 8, 16, 32, 64) if sharded * p.gpus / g + whole <= p.card_gib), None)
        if need is not None and need > p.gpus:
            out.append(f"engine.n_gpus_per_node={need} (or engine.nnodes): the state shards over more GPUs")
        if not e.gradient_checkpointing:
            out.append("engine.gradient_checkpointing=true (activations of one layer at a time)")
        if e.micro_batch_per_gpu > 1:
            out.append("engine.micro_batch_per_gpu=1 (one sequence's activations and logits at a time)")
    if p.rollout_peak > p.card_gib:
        out.append("engine.param_offload=true engine.optimizer_offload=true, or a lower "
                   "engine.gpu_memory_utilization (vLLM's share)")
    return out


def gpu_problem(p: Plan, cfg: TrainConf | StudyConf, where: str = "engine.gpu_memory_gib") -> str | None:
    """The update or the rollout does not fit the plan's card: the phase, its need, and the fixes."""
    if p.fits():
        return None
    phase = "the update" if p.train_peak > p.card_gib else "the rollout"
    peak = p.train_peak if p.train_peak > p.card_gib else p.rollout_peak
    fix = fixes(p, cfg)
    return (f"{cfg.model.path}: {phase} needs {peak:.1f} GiB per GPU, more than the {p.card_gib:.1f} GiB of {where}; "
            + (f"fix: {'; or '.join(fix)}" if fix else "no override fits it on this node"))


def check(cfg: TrainConf | StudyConf, shape: Shape | None = None) -> Plan:
    """The plan, or PlanError with its table and the overrides that would make it fit the declared node."""
    p = plan(cfg, shape)
    problem = gpu_problem(p, cfg) or p.node_problem()
    if problem is not None:
        raise PlanError(problem + "\n" + p.table())
    return p


def node_problem(planned: dict[str, Any], available_gib: float, free_gb: float, already_gb: float,
                 folder: str, declared: bool = False) -> str | None:
    """What a node lacks for a plan (``memory_plan.json``), in one line with the fix, else None.
    ``available_gib``: /proc/meminfo's MemAvailable at launch, or ``engine.host_memory_gib`` (``declared``);
    ``free_gb``: free space on the checkpoint folder's file system, or ``engine.disk_free_gb``; ``already_gb``:
    checkpoints already in it (a resume keeps them)."""
    host = float(planned.get("host_peak_gib") or 0.0)
    if host > available_gib:
        has = (f"the declared node has {available_gib:.1f} GiB (engine.host_memory_gib)" if declared else
               f"this node has {available_gib:.1f} GiB available (/proc/meminfo MemAvailable)")
        return (f"host memory: the offloaded state, the model load (or a checkpoint save) and verl's worker "
                f"processes need {host:.1f} GiB on a node, and {has}; fix: engine.optimizer_offload=false if the GPUs "
                "hold the AdamW state (memory_plan.txt), or a node with more memory")
    need = float(planned.get("disk_peak_gb") or 0.0) - already_gb
    if need > free_gb:
        has = (f"the declared node has {free_gb:.1f} GB free (engine.disk_free_gb)" if declared else
               f"{folder}'s file system has {free_gb:.1f} GB free")
        return (f"disk: the checkpoints need {need:.1f} GB more at their fullest (two at a save) and {has}; fix: "
                "recipe.save_every=0 (a model-only checkpoint at the end, 4 B per parameter), or a run_dir on a "
                "larger file system")
    return None


def gpu_table() -> list[tuple[str, float]]:
    """(name, total GiB) of each GPU torch sees on this node: what the launch plans on. Read from the device
    properties, which come from the driver without a CUDA context: ``torch.cuda.mem_get_info`` would create one on
    every GPU it asks about (~0.3-0.5 GiB each), held by the launch driver for the whole run and taken from the
    plan's headroom."""
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        out.append((str(props.name), props.total_memory / GIB))
    return out


def replan_problem(cfg: TrainConf | StudyConf, gpus: list[tuple[str, float]]) -> tuple[str | None, str]:
    """The arm's plan again on the GPUs it will use on this node (``gpus``: ``gpu_table()``, the first
    ``engine.n_gpus_per_node`` of them): a refusal with the fixes, or None, and the line that says what was
    planned on. The smallest card of the ones used counts; fewer GPUs than asked is Ray's budget check's to say.
    ``cfg``: the arm's config (at launch its ``resolved_config.json``, typed by ``resolved_arm``), or a study's."""
    import dataclasses

    used = gpus[: cfg.engine.n_gpus_per_node]
    if not used:
        return None, "no GPU read on this node: the plan is the prepared one"
    name, card = min(used, key=lambda g: g[1])
    here = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, gpu_memory_gib=card))
    p = plan(here)
    said = (f"memory plan on this node's {len(used)} x {name} ({card:.1f} GiB): update {p.train_peak:.1f} GiB, "
            f"rollout {p.rollout_peak:.1f} GiB per GPU")
    problem = gpu_problem(p, here, where=f"this node's {name}")
    if problem is not None:
        problem += " (prepare the arm again with it: crossed-study ... stages=prepare)"
    return problem, said
