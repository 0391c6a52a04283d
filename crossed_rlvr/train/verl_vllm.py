"""verl's own vLLM rollout on this CPU, with one addition: every completion is sampled with a seed of its own.

verl 0.9.1's vLLM server (``vLLMHttpServer``) samples from the engine's generator, seeded once per engine
(``rollout.seed + replica rank``): which completion a request gets depends on what the engine sampled before it,
so a relaunched run, or the same run on another number of ranks, samples otherwise. verl's ``full_determinism``
gives every request the same seed instead, so a prompt's samples come out identical and its GRPO advantages are
0. Here each request's sampling parameters carry ``sample_seed(rollout seed, update, prompt, k)``, where ``k``
counts the prompt's completions at this update in this server: the set of a prompt's samples is then a function
of the weights and the prompt alone (vLLM's per-request seeds are batch-independent in float32), which is what
lets the CPU route check a killed and relaunched arm against the same arm uninterrupted (at one world size: vLLM at
tensor-parallel 1 and 2 sums in another order, and a near-tie can be sampled otherwise). Nothing else of verl's server or
replica changes; the CPU platform (train/verl_cpu.py) registers this replica under verl's own rollout name
``vllm``, so GPU nodes, which never load that platform, run verl's replica unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import crossed_rlvr.train.verl_cpu  # noqa: F401  (verl's lookup of vLLM's CPU build, before verl's vLLM rollout)

# isort: split
import ray
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.train.verl_weighted import PROBE_ENV

# A fixed token sequence whose log-probs the rollout writes after each weight sync when PROBE_ENV names the arm
PROBE_IDS = list(range(100, 132))


def sample_seed(seed: int, step: int, prompt_ids: list[int], sample: int) -> int:
    """The seed of one completion: (rollout seed, update, prompt, sample) and nothing else."""
    digest = hashlib.sha256(f"{seed}:{step}:{sample}:{','.join(map(str, prompt_ids))}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class SeededServer(vLLMHttpServer):
    """verl's vLLM server, each request seeded by (update, prompt, sample)."""

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       **kwargs: Any) -> Any:
        params = dict(sampling_params)
        if "seed" not in params:
            greedy = float(params.get("temperature", 1.0) or 0.0) <= 0
            key = (self.global_steps, greedy, tuple(prompt_ids))
            drawn: dict[tuple[Any, ...], int] = self.__dict__.setdefault("drawn", {})
            sample = drawn.get(key, 0)
            drawn[key] = sample + 1  # counted on arrival: a prompt's samples get seeds 0..n-1 in any order
            params["seed"] = sample_seed(int(self.config.seed), int(self.global_steps or 0), list(prompt_ids), sample)
        return await super().generate(prompt_ids, params, request_id, **kwargs)

    def _get_worker_extension_cls(self) -> str:
        return "crossed_rlvr.train.verl_vllm_worker.CPUWorkerExtension"  # weights reloadable on the CPU

    async def set_global_steps(self, global_steps: int) -> None:
        await super().set_global_steps(global_steps)
        self.__dict__["drawn"] = {}  # new weights: every prompt's samples count from 0 again
        if os.environ.get(PROBE_ENV):
            await self.write_probe(ArmLayout(Path(os.environ[PROBE_ENV])).rollout_probe, global_steps)

    async def write_probe(self, path: Path, global_steps: int) -> None:
        """Append the engine's log-probs of ``PROBE_IDS`` under the weights it now holds (each token given the ones
        before it, at temperature 1: the full softmax the actor computes)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, seed=0)
        final = None
        async for out in self.engine.generate(prompt=TokensPrompt(prompt_token_ids=PROBE_IDS), sampling_params=params,
                                              request_id=f"crossed-probe-{global_steps}-{time.time_ns()}"):
            final = out
        assert final is not None and final.prompt_logprobs is not None
        logprobs = [float(d[t].logprob) for d, t in zip(final.prompt_logprobs[1:], PROBE_IDS[1:], strict=True)]
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": int(global_steps), "logprobs": logprobs}) + "\n")


class SeededReplica(vLLMReplica):
    """verl's vLLM replica serving through ``SeededServer``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(SeededServer)
