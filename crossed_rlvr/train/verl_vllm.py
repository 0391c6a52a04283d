"""verl's own vLLM rollout on this CPU, with two additions: a probe of the weights it holds after every sync, and
weights reloadable on the CPU (train/verl_vllm_worker.py).

Every sampled request arrives with its own seed from the agent loop (train/verl_agent_loop.py), so nothing else of
verl's server or replica changes; the CPU platform (train/verl_cpu.py) registers this replica under verl's own
rollout name ``vllm``, so GPU nodes, which never load that platform, run verl's replica unchanged.
"""

from __future__ import annotations

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


class SeededServer(vLLMHttpServer):
    """verl's vLLM server, serving the agent loop's seeded requests and writing the weight probe."""

    def _get_worker_extension_cls(self) -> str:
        return "crossed_rlvr.train.verl_vllm_worker.CPUWorkerExtension"  # weights reloadable on the CPU

    async def set_global_steps(self, global_steps: int) -> None:
        await super().set_global_steps(global_steps)
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
