"""Training reward programs (paper 001 App. D.1), looked up by convention.

Each program looks only at the final 300 characters of a response, takes the *last* match of its convention,
removes commas and dollar signs, and compares the payload with the reference as an exact string: 1.0 on a match,
else 0.0. The convention-specific syntax is part of the training intervention, which is why these differ from the
evaluation readers in ``crossed_rlvr.eval`` (e.g. ``#### 12.0`` against ``12`` earns no training reward but strict
evaluation credit). Each program is its convention's own (:mod:`crossed_rlvr.rewards.conventions`); the answer-only
arms of either request share one, and the native-boxed MATH arm's (App. D.3.1) compares by Math-Verify
(:mod:`crossed_rlvr.rewards.symbolic`).

Pure functions over strings; nothing evaluated as code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from crossed_rlvr.rewards.conventions import CONVENTIONS, WINDOW_CHARS, LiveMap, Program, RewardProgram

__all__ = ["REWARD_PROGRAMS", "WINDOW_CHARS", "RewardFn", "RewardProgram", "get_program", "program_name", "reward"]


# every registered convention's program by its name, in registration order (a shared program once)
REWARD_PROGRAMS: Mapping[str, Program] = LiveMap(lambda: {c.program.name: c.program for c in CONVENTIONS.values()})


def program_name(convention: str) -> str:
    """The program a convention's rollouts are scored by (the answer-only arms of either request share one,
    App. D.2); a name that is no convention is taken as a program."""
    conv = CONVENTIONS.get(convention)
    return conv.program.name if conv is not None else convention


def get_program(convention: str) -> Program:
    try:
        return REWARD_PROGRAMS[program_name(convention)]
    except KeyError:
        raise KeyError(f"no training reward program for convention {convention!r}; expected one of "
                       f"{', '.join(REWARD_PROGRAMS)}") from None


def reward(convention: str, response: str, reference: str) -> float:
    """The training reward of ``response`` under ``convention`` (1.0 or 0.0)."""
    return get_program(convention).score(response, reference)


RewardFn = Callable[[str, str], float]
