"""verl's single-turn agent loop on this CPU, with one addition: every sampled completion carries a seed of its own.

verl 0.9.1's vLLM server samples from the engine's generator, seeded once per engine (``rollout.seed + replica
rank``): which completion a request gets depends on what the engine sampled before it, so a relaunched run, or the
same run on another number of ranks, samples otherwise. verl's ``full_determinism`` gives every request the same
seed instead, so a prompt's samples come out identical and its GRPO advantages are 0. Here the agent loop, which
knows which trajectory it runs, gives each request ``sample_seed(rollout seed, update, row, session)``: ``row`` is
the prompt's row in the drawn training stream (``extra_info.index``, one row a draw, so an item drawn twice in one
update has two rows) and ``session`` which of its ``rollout.n`` samples this is. A completion is then a function of
the weights and those numbers alone (vLLM's per-request seeds are batch-independent in float32), in whatever order
the requests reach the server: what lets the CPU route check a killed and relaunched arm against the same arm
uninterrupted (at one world size: vLLM at tensor-parallel 1 and 2 sums in another order, and a near-tie can be
sampled otherwise). A seed counted at the server in order of arrival would not do: the samples of an item drawn
twice would change groups, and GRPO advantages, from run to run.

The CPU platform (train/verl_cpu.py: ``AGENT_LOOPS``) names this loop as verl's default agent loop through
``rollout.agent.agent_loop_config_path``; GPU nodes run verl's own loop unchanged.
"""

from __future__ import annotations

import hashlib
from typing import Any

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop


def sample_seed(seed: int, step: int, row: int, session: int) -> int:
    """The seed of one completion: (rollout seed, update, row of the drawn stream, session) and nothing else."""
    digest = hashlib.sha256(f"{seed}:{step}:{row}:{session}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class SeededAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn agent loop, each request seeded by (update, row, session)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        params = dict(sampling_params)
        if "seed" not in params:
            params["seed"] = sample_seed(int(self.rollout_config.seed), int(kwargs["global_steps"]),
                                         int(kwargs["index"]), int(kwargs["session_id"]))
        return await super().run(params, **kwargs)
