"""Harness extractors as paper 000 App. E pinned them, transcribed from the files at those commits.

No installable package holds these versions (verl 0.9.1's GSM8K and MATH readers differ from the copies
the paper used), so the functions are transcribed line for line, as the paper itself did, and
``tests/data/pinned_harness.json`` holds the outputs of the upstream files themselves (run at the pinned
commits by ``scripts/pinned_harness_table.py``) on a shared table of strings: the test asserts zero
differences. Sources:

- hendrycks/math @ 940d1bf: ``modeling/dataset/util.py`` ``last_boxed_only_string``,
  ``modeling/eval_math_gpt.py`` ``remove_boxed`` (the MATH benchmark's reader);
- Open-Reasoner-Zero @ f6d1ec7: ``orz/ppo/tools/math_utils.py`` ``get_answer_str`` (the same two
  functions, the whole response when there is no box);
- hkust-nlp/simpleRL-reason @ 2204dd1: ``verl/utils/reward_score/gsm8k.py`` ``extract_solution``
  (verl's GSM8K reward as the paper's pairs were trained with it: the first ``####``);
- openai/simple-evals @ 5e623c2: ``common.py`` ``ANSWER_PATTERN`` and ``ANSWER_PATTERN_MULTICHOICE`` as
  ``math_eval.py`` and ``gpqa_eval.py`` apply them (``re.search``, group 1).
"""

from __future__ import annotations

import re

PINNED = {
    "hendrycks/math": "940d1bf", "Open-Reasoner-Zero": "f6d1ec7", "simpleRL-reason": "2204dd1",
    "simple-evals": "5e623c2", "Qwen2.5-Math": "cb098e1",
}


def last_boxed_only_string(string: str) -> str | None:
    """hendrycks/math 940d1bf modeling/dataset/util.py (Open-Reasoner-Zero f6d1ec7 has the same)."""
    idx = string.rfind("\\boxed")
    if idx < 0:
        idx = string.rfind("\\fbox")
        if idx < 0:
            return None
    i = idx
    right_brace_idx = None
    num_left_braces_open = 0
    while i < len(string):
        if string[i] == "{":
            num_left_braces_open += 1
        if string[i] == "}":
            num_left_braces_open -= 1
            if num_left_braces_open == 0:
                right_brace_idx = i
                break
        i += 1
    return None if right_brace_idx is None else string[idx:right_brace_idx + 1]


def remove_boxed(s: str | None) -> str | None:
    """hendrycks/math 940d1bf modeling/eval_math_gpt.py: the source's asserts (and its bare ``except``,
    which also catches ``None``) become the checks below."""
    left = "\\boxed{"
    if not isinstance(s, str) or s[:len(left)] != left or s[-1:] != "}":
        return None
    return s[len(left):-1]


def math_boxed(text: str) -> str | None:
    """The MATH evaluation code: the last ``\\boxed`` (or ``\\fbox``) with balanced braces, its content."""
    return remove_boxed(last_boxed_only_string(text))


def orz_boxed(text: str) -> str:
    """Open-Reasoner-Zero f6d1ec7 ``get_answer_str``, applied to the whole response (App. E)."""
    res = remove_boxed(last_boxed_only_string(text))
    return text if res is None else res


def simplerl_gsm8k(solution_str: str, method: str = "strict") -> str | None:
    """simpleRL-reason 2204dd1 verl/utils/reward_score/gsm8k.py ``extract_solution``."""
    if method == "strict":
        solution = re.search("#### (\\-?[0-9\\.\\,]+)", solution_str)
        if solution is None:
            return None
        return solution.group(0).split("#### ")[1].replace(",", "").replace("$", "")
    answer = re.findall("(\\-?[0-9\\.\\,]+)", solution_str)
    final_answer = None
    for final_answer in reversed(answer):  # the last number that is not '' or '.'
        if final_answer not in ("", "."):
            break
    return final_answer


ANSWER_PATTERN_MULTICHOICE = r"(?i)Answer[ \t]*:[ \t]*\$?([A-D])\$?"  # simple-evals 5e623c2 common.py
ANSWER_PATTERN = r"(?i)Answer\s*:\s*([^\n]+)"


def simple_evals_mc(text: str) -> str | None:
    match = re.search(ANSWER_PATTERN_MULTICHOICE, text)
    return match.group(1) if match else None


def simple_evals_math(text: str) -> str | None:
    match = re.search(ANSWER_PATTERN, text)
    return match.group(1) if match else None
