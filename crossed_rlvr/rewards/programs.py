"""Training reward programs (paper 001 App. D.1).

Each program looks only at the final 300 characters of a response, takes the *last* match of its
convention, removes commas and dollar signs, and compares the payload with the reference as an
exact string: 1.0 on a match, else 0.0. The convention-specific syntax is part of the training
intervention, which is why these differ from the evaluation readers in ``crossed_rlvr.eval``
(e.g. ``#### 12.0`` against ``12`` earns no training reward but strict evaluation credit).

- hash: a signed number after ``#### `` (the verl GSM8K reward's pattern).
- boxed: ``\\boxed{...}`` with a closing brace and no nested braces; payload trimmed.
- json / xml: ``{"answer": ...}`` / ``<answer>...</answer>``, same window and normalisation.
- answer_only (the I1 control, §2.4): the right value anywhere in the window, no marker.
- boxed_math (native-boxed MATH training, D.3.1): in :mod:`crossed_rlvr.rewards.symbolic`; the last
  balanced box compared with Math-Verify under a hard time limit (our rule: the paper prints none).

Pure functions over strings; no project or framework imports, nothing evaluated as code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from crossed_rlvr.rewards.conventions import CONVENTIONS
from crossed_rlvr.rewards.symbolic import SYMBOLIC_PROGRAMS, SymbolicBoxedProgram

WINDOW_CHARS = 300

_HASH = re.compile(r"#### (-?[0-9.,]+)")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_JSON = re.compile(r'\{\s*"answer"\s*:\s*"?([^"{}\n]*?)"?\s*\}')
_XML = re.compile(r"<answer>([^<>]*)</answer>")
# A number token for the answer-only program: optional sign, digits with commas, optional decimals.
_NUMBER = re.compile(r"-?\$?[0-9][0-9,]*(?:\.[0-9]+)?")


def _normalise(payload: str) -> str:
    return payload.replace(",", "").replace("$", "").strip()


def _window(response: str) -> str:
    return response[-WINDOW_CHARS:]


@dataclass(frozen=True)
class RewardProgram:
    """A training reward program: ``extract`` gives the payload it would compare, ``score`` the reward."""

    name: str
    pattern: re.Pattern[str]
    # A substring every match contains: a cheap test before the regex runs.
    anchor: str = ""
    # answer_only credits any candidate in the window; the marker programs credit the last one.
    any_match: bool = False

    def candidates(self, response: str) -> list[str]:
        window = _window(response)
        if self.anchor and self.anchor not in window:
            return []
        return [_normalise(m) for m in self.pattern.findall(window)]

    def read(self, response: str, reference: str) -> tuple[str | None, float]:
        """The payload this program compares (its last match) and the reward, in one pass."""
        found = self.candidates(response)
        answer = found[-1] if found else None
        target = str(reference).strip()
        hit = target in found if self.any_match else answer == target
        return answer, 1.0 if hit else 0.0

    def extract(self, response: str) -> str | None:
        return self.read(response, "")[0]

    def score(self, response: str, reference: str) -> float:
        return self.read(response, reference)[1]


REWARD_PROGRAMS: dict[str, RewardProgram] = {
    "hash": RewardProgram("hash", _HASH, anchor="#### "),
    "boxed": RewardProgram("boxed", _BOXED, anchor="\\boxed{"),
    "json": RewardProgram("json", _JSON, anchor='"answer"'),
    "xml": RewardProgram("xml", _XML, anchor="<answer>"),
    "answer_only": RewardProgram("answer_only", _NUMBER, any_match=True),
}


def program_name(convention: str) -> str:
    """The program a convention's rollouts are scored by (``Convention.program``: the answer-only arms of
    either request share ``answer_only``, App. D.2); a name that is no convention is taken as a program."""
    conv = CONVENTIONS.get(convention)
    return conv.program if conv is not None else convention


def get_program(convention: str) -> RewardProgram | SymbolicBoxedProgram:
    name = program_name(convention)
    if name in SYMBOLIC_PROGRAMS:
        return SYMBOLIC_PROGRAMS[name]
    try:
        return REWARD_PROGRAMS[name]
    except KeyError:
        raise KeyError(
            f"no training reward program for convention {convention!r}; expected one of "
            f"{', '.join([*REWARD_PROGRAMS, *SYMBOLIC_PROGRAMS])}"
        ) from None


def reward(convention: str, response: str, reference: str) -> float:
    """The training reward of ``response`` under ``convention`` (1.0 or 0.0)."""
    return get_program(convention).score(response, reference)


RewardFn = Callable[[str, str], float]
