"""Reporting conventions and training reward programs (paper 001 §2.1, App. B.3, D.1).

Importable by verl and TRL without the rest of the project: only the standard library is used, apart from
the symbolic program's Math-Verify and pebble (project dependencies, imported when it first scores).
"""

from crossed_rlvr.rewards.conventions import (
    CONVENTIONS,
    PARTNER,
    REQUESTS,
    TEMPLATES,
    Convention,
    get_convention,
    request_suffix,
)
from crossed_rlvr.rewards.programs import REWARD_PROGRAMS, RewardProgram, get_program, reward

__all__ = [
    "CONVENTIONS",
    "PARTNER",
    "REQUESTS",
    "REWARD_PROGRAMS",
    "TEMPLATES",
    "Convention",
    "RewardProgram",
    "get_convention",
    "get_program",
    "request_suffix",
    "reward",
]
