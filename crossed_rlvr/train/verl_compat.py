"""verl 0.9.1 beside the TRL this package pins (1.16): the one fix every verl process needs, loaded by verl itself.

verl's ``apply_monkey_patch`` (``verl/models/transformers/monkey_patch.py``, run when the FSDP engine builds the
actor) imports TRL's ``AutoModelForCausalLMWithValueHead`` whenever TRL is installed, from
``trl.experimental.ppo`` or ``trl``, to patch its ``state_dict``. TRL 1.16 has the class in neither place (PPO left
TRL), so on any node with both installed the actor's construction fails with ImportError. GRPO has no value
head: verl's check "is TRL available" is made to mean "does TRL have the value-head class", and nothing else
changes. verl imports this module in every process (``VERL_USE_EXTERNAL_MODULES``, set by
``crossed_rlvr.train.verl_launch`` for the driver and for Ray's workers). tests/test_verl_cpu.py fails when a
verl release changes the patched code.
"""

from __future__ import annotations

import importlib
import inspect

import verl.models.transformers.monkey_patch as verl_monkey_patch

PATCHED_CALL = "if is_trl_available():"


def value_head_available() -> bool:
    """Whether TRL has the value-head model verl's monkey patch wants to patch."""
    for module in ("trl.experimental.ppo", "trl"):
        try:
            if hasattr(importlib.import_module(module), "AutoModelForCausalLMWithValueHead"):
                return True
        except ImportError:
            continue
    return False


def patched_source_matches() -> bool:
    """Whether verl's ``apply_monkey_patch`` still guards the value-head import with ``is_trl_available``."""
    return PATCHED_CALL in inspect.getsource(verl_monkey_patch.apply_monkey_patch)


verl_monkey_patch.is_trl_available = value_head_available
