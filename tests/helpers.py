"""Helpers that several test modules share (plain values and functions; shared fixtures live in conftest.py
and gpu_fixtures.py), so that no test module imports another."""

from __future__ import annotations

from typing import Any

from crossed_rlvr.policies.tiny import TinyConfig

# the smallest tiny model that still generates: built in well under a second
SMALL = TinyConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=1, max_position_embeddings=512, seed=0)


def rec(item: int = 0, policy: str = "initial", request: str = "hash", template: str = "original", sample: int = 0,
        **kw: Any) -> dict[str, Any]:
    """One valid response record of the response-file contract; ``kw`` replaces any field."""
    base = {
        "item_id": str(item), "task": "gsm8k", "policy": policy,
        "training_convention": "initial" if policy == "initial" else policy.split("-")[1].split("/")[0],
        "train_seed": None if policy == "initial" else 83, "request": request, "template": template,
        "sample_idx": sample, "gen_seed": 1000 + item, "prompt_sha256": f"{item:064x}"[-64:] + "",
        "response": "#### 18", "finish_reason": "stop", "prompt_tokens": 10, "response_tokens": 3, "reference": "18",
    }
    base["prompt_sha256"] = f"{request}-{template}-{item}".ljust(64, "0")
    base.update(kw)
    return base
