"""A verl rollout that generates with transformers: verl's trainer on a machine without vLLM or SGLang.

verl 0.9.1's trainer generates through rollout *replicas*: a server actor per replica answers
``generate(request_id, prompt_ids=..., sampling_params=...)`` with a ``TokenOutput``, and a ``BaseRollout``
inside each training worker (the "server adapter") receives the actor's weights after every update
(``update_weights`` with ``checkpoint_engine.backend=naive``). This module is that pair for transformers,
registered under the rollout name ``hf`` by the CPU platform module (train/verl_cpu.py) through verl's own
registries. It is slow and simple by design: it exists so that verl's whole training route (rollout, reward,
advantage, importance-weighted PPO update, checkpoint, resume, merge, validation) runs on a CPU in CI.

- **Log-probs** of every sampled token are ``log_softmax(logits / T)`` (plain ``log_softmax`` when greedy),
  the quantity verl's actor recomputes: without them verl skips the rollout importance-sampling correction.
- **Reproducible sampling**: each completion draws from its own generator seeded by (rollout seed, update,
  prompt, sample), so a run resumed from a checkpoint samples exactly what the uninterrupted run sampled.
- **Weights** arrive as the (name, tensor) stream verl's FSDP engine yields; every rank drains it (it all-
  gathers), the replica's first rank hands the full state dict to its server, which refuses a stream that
  does not cover its model (stale weights would silently make the run off-policy).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

NAME = "hf"  # the rollout name verl_cpu registers this under
logger = logging.getLogger(__name__)


def server_name(replica_rank: int) -> str:
    return f"crossed_hf_rollout_{replica_rank}"


def sample_seed(seed: int, step: int, prompt_ids: list[int], sample: int) -> int:
    """The generator seed of one completion: (rollout seed, update, prompt, sample) and nothing else."""
    digest = hashlib.sha256(f"{seed}:{step}:{sample}:{','.join(map(str, prompt_ids))}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def next_token(logits: torch.Tensor, temperature: float, top_p: float, top_k: int,
               generator: torch.Generator) -> tuple[int, float]:
    """One token from a (vocab,) float32 logit row, and its log-prob under ``log_softmax(logits / T)``."""
    if temperature <= 0:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, -1)[token])
    scaled = logits / temperature
    logp = torch.log_softmax(scaled, -1)
    keep = scaled.clone()
    if top_k and top_k > 0:
        kth = torch.topk(keep, min(top_k, keep.numel())).values[-1]
        keep[keep < kth] = float("-inf")
    if top_p < 1.0:
        probs, order = torch.sort(torch.softmax(keep, -1), descending=True)
        drop = torch.cumsum(probs, -1) - probs > top_p  # keep the smallest prefix reaching top_p
        keep[order[drop]] = float("-inf")
    token = int(torch.multinomial(torch.softmax(keep, -1), 1, generator=generator))
    return token, float(logp[token])


class HFRolloutServer:
    """One replica's generator: a transformers model in float32, fed the actor's weights after each update."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0, **_: Any) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        torch.set_num_threads(1)  # the trainer's workers hold the other cores
        path = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig).local_path
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
        self.model.eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        eos: set[int] = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        try:
            extra = GenerationConfig.from_pretrained(path).eos_token_id
            eos |= set(extra if isinstance(extra, list) else [extra] if extra is not None else [])
        except OSError:
            pass  # no generation_config.json: the tokenizer's end token only
        self.eos = eos
        self.response_length = int(config.response_length)
        self.seed = int(getattr(config, "seed", 0) or 0)
        self.replica_rank = replica_rank
        self.global_steps: int | None = None
        self.samples: dict[tuple[Any, ...], int] = {}  # (step, greedy, prompt) -> completions drawn so far
        self.lock = asyncio.Lock()

    def load_weights(self, state: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Put the actor's full state dict into the model; returns how many tensors were loaded."""
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        tied = {k for k in own if k not in state and self._tied(k)}
        missing = sorted(set(own) - set(state) - tied)
        if unknown or missing:
            raise RuntimeError(f"rollout weights do not match the model: unknown {unknown[:5]}, missing {missing[:5]}")
        with torch.no_grad():
            self.model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()}, strict=False)
        self.global_steps = global_steps
        self.samples.clear()
        return len(state)

    def _tied(self, key: str) -> bool:
        out = self.model.get_output_embeddings()
        return bool(getattr(self.model.config, "tie_word_embeddings", False)) and out is not None and \
            key.startswith(next(n for n, m in self.model.named_modules() if m is out))

    @torch.no_grad()
    def _generate(self, prompt_ids: list[int], params: dict[str, Any]) -> TokenOutput:
        temperature = float(params.get("temperature", 1.0) or 0.0)
        top_p = float(params.get("top_p", 1.0) or 1.0)
        top_k = int(params.get("top_k", -1) or -1)
        key = (self.global_steps, temperature <= 0, tuple(prompt_ids))
        sample = self.samples.get(key, 0)
        self.samples[key] = sample + 1
        generator = torch.Generator().manual_seed(sample_seed(self.seed, self.global_steps or 0, prompt_ids, sample))
        limit = min(self.response_length, int(params.get("max_tokens") or self.response_length))
        ids = torch.tensor([prompt_ids])
        out = self.model(input_ids=ids, use_cache=True)
        tokens: list[int] = []
        logps: list[float] = []
        stop = "length"
        for _ in range(limit):
            token, logp = next_token(out.logits[0, -1].float(), temperature, top_p, top_k, generator)
            tokens.append(token)
            logps.append(logp)
            if token in self.eos:
                stop = "completed"
                break
            out = self.model(input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True)
        return TokenOutput(token_ids=tokens, log_probs=logps, stop_reason=stop, num_preempted=0,
                           extra_fields={"global_steps": self.global_steps})

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **_: Any) -> TokenOutput:
        async with self.lock:  # one completion at a time, in arrival order (the sample counter follows it)
            return self._generate(list(prompt_ids), dict(sampling_params))

    # verl's replica calls these around weight syncs and for profiling; nothing to free or resume here.
    async def wake_up(self) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def resume_generation(self) -> None: ...
    async def wait_for_requests_to_drain(self) -> None: ...
    async def start_profile(self, **_: Any) -> None: ...
    async def stop_profile(self) -> None: ...

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}


class HFReplica(RolloutReplica):
    """One server actor per replica, on the node of the replica's first worker (as verl's vLLM replica)."""

    async def launch_servers(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = await self.workers[0].__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
        server = ray.remote(HFRolloutServer).options(
            name=server_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        ).remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{NAME}-rollout-{self.replica_rank}"


class HFServerAdapter(BaseRollout):
    """The rollout inside a training worker: forwards the actor's weights to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        c = self.config
        world = c.tensor_model_parallel_size * c.data_parallel_size * c.pipeline_model_parallel_size
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.replica_rank, self.leader = rank // world, rank % world == 0

    async def resume(self, tags: list[str]) -> None: ...

    async def release(self) -> None: ...

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"the {NAME} rollout takes full named tensors, not {wire_format!r}")
        state: dict[str, torch.Tensor] = {}
        if inspect.isasyncgen(weights):
            async for name, tensor in weights:
                state[name] = tensor.detach().to("cpu", copy=True)
        else:
            for name, tensor in weights:  # every rank drains the stream: the engine all-gathers as it yields
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.leader:
            server = ray.get_actor(server_name(self.replica_rank))
            await server.load_weights.remote(state, kwargs.get("global_steps"))

