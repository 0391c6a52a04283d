"""crossed-rlvr: train matched RLVR policies and evaluate them crossed (training convention x request).

The public API (docs/api.md) for use inside one's own training scripts: the training reward programs, the
payload detector, the readers and the reader panel, the TRL reward and crossed-validation callback, and verl's
reward entry. Each name is imported on first use (PEP 562), so ``import crossed_rlvr`` loads neither torch,
transformers nor TRL, and verl, which loads the reward programs alone, never pays for the rest.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it (imported by name: this package sits below every stage it re-exports)
_EXPORTS: dict[str, str] = {
    # training reward programs (paper 001 App. D.1) and the request wordings (App. B.3)
    "reward": "crossed_rlvr.rewards.programs",
    "get_program": "crossed_rlvr.rewards.programs",
    "RewardProgram": "crossed_rlvr.rewards.programs",
    "REWARD_PROGRAMS": "crossed_rlvr.rewards.programs",
    "request_suffix": "crossed_rlvr.rewards.conventions",
    # payload detector (App. B.2)
    "detect": "crossed_rlvr.eval.score.payload",
    "PayloadReport": "crossed_rlvr.eval.score.payload",
    # readers (App. C.1) and the reader panel
    "READERS": "crossed_rlvr.eval.score.readers",
    "STRICT": "crossed_rlvr.eval.score.readers",
    "Reader": "crossed_rlvr.eval.score.readers",
    "Reading": "crossed_rlvr.eval.score.readers",
    "get_reader": "crossed_rlvr.eval.score.readers",
    "score_response": "crossed_rlvr.eval.score.panel",
    # training engines: TRL's reward and crossed validation, verl's reward entry
    "make_trl_reward": "crossed_rlvr.train.trl_reward",
    "CrossedValidationCallback": "crossed_rlvr.train.validation",
    "compute_score": "crossed_rlvr.train.verl_reward",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'crossed_rlvr' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
