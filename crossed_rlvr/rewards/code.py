"""Code reporting conventions and the readers that take a program out of a response (paper 001 App. D.3).

The crossed design applies to code as to ``####``/``\\boxed{}``: two delimiter conventions, two requests.

- ``fence``: a Markdown code block opened by ```` ```python ```` and closed by ```` ``` ```` (HumanEval-style
  chat prompts, and what most instruction-tuned models write unasked);
- ``begin_done``: the program between ``[BEGIN]`` and ``[DONE]`` (MBPP's few-shot format).

Readers, fixed before any output is seen:

- **strict** (per convention): the first *closed* block in the requested delimiter, else nothing;
- **lenient**: the strict block, else the first closed block in any fence (any or no language tag) or in the
  other convention's delimiter, else an unclosed last block of either kind, else the whole response; so lenient
  finds a program wherever strict does (lenient ⊇ strict by construction);
- **payload** (per convention): a non-empty block in the requested delimiter; presence only, never correctness.

A program that does not define the task's entry point is taken as a body written after the prompt, so the prompt
(its signature and docstring) is put before it, as HumanEval's completions are scored.

Pure standard library: loaded by the execution reward of TRL and verl arms as well. Nothing here runs the code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crossed_rlvr.rewards.conventions import WORDINGS

CODE_TEMPLATES = WORDINGS  # App. B.3's three wordings


@dataclass(frozen=True)
class CodeConvention:
    name: str
    opener: str
    closer: str
    block: re.Pattern[str]
    open_tail: re.Pattern[str]
    phrase: str

    def wrap(self, code: str) -> str:
        """A program written in this convention (for worked examples and SFT targets)."""
        return f"{self.opener}\n{code.rstrip()}\n{self.closer}"


CODE_CONVENTIONS: dict[str, CodeConvention] = {
    "fence": CodeConvention(
        "fence", "```python", "```",
        re.compile(r"```python[ \t]*\r?\n(.*?)```", re.DOTALL),
        re.compile(r"```python[ \t]*\r?\n(.*)\Z", re.DOTALL),
        "in a single ```python code block"),
    "begin_done": CodeConvention(
        "begin_done", "[BEGIN]", "[DONE]",
        re.compile(r"\[BEGIN\][ \t]*\r?\n?(.*?)\[DONE\]", re.DOTALL),
        re.compile(r"\[BEGIN\][ \t]*\r?\n?(.*)\Z", re.DOTALL),
        "between [BEGIN] and [DONE]"),
}

# any Markdown fence, whatever its language tag (```py, ```Python3, bare ```)
_ANY_FENCE = re.compile(r"```[^\n`]*\r?\n(.*?)```", re.DOTALL)
_ANY_OPEN_FENCE = re.compile(r"```[^\n`]*\r?\n((?:(?!```).)*)\Z", re.DOTALL)

_FRAMES = {
    "original": "Write a Python solution to the task and give the complete function {phrase}.",
    "para_a": "Solve the task in Python. Put the complete function {phrase}.",
    "para_b": "Implement the function in Python and present the complete code {phrase}.",
}


def code_request(convention: str, template: str = "original") -> str:
    """The request suffix asking for a program in ``convention`` (three wordings, as for the math requests)."""
    return _FRAMES[template].format(phrase=CODE_CONVENTIONS[convention].phrase)


def _clean(block: str) -> str:
    text = block.strip("\r\n")
    # MBPP's own examples quote the program inside [BEGIN] ... [DONE]: '...'
    if len(text) >= 2 and text.strip()[:1] in "'\"" and text.strip()[-1:] == text.strip()[:1]:
        text = text.strip()[1:-1]
    return text


def strict_block(convention: str, response: str) -> str | None:
    """The first closed block in the requested delimiter, or None."""
    m = CODE_CONVENTIONS[convention].block.search(response)
    return _clean(m.group(1)) if m else None


def payload_present(convention: str, response: str) -> bool:
    """A non-empty block in the requested delimiter (App. B.2's payload, for code)."""
    block = strict_block(convention, response)
    return block is not None and bool(block.strip())


def lenient_block(convention: str, response: str) -> str:
    """The strict block, else any closed fence or delimited block, else an unclosed last one, else the response."""
    if (block := strict_block(convention, response)) is not None:
        return block
    found = []
    for pattern in (_ANY_FENCE, *(c.block for c in CODE_CONVENTIONS.values())):
        if m := pattern.search(response):
            found.append((m.start(), _clean(m.group(1))))
    if found:
        return min(found)[1]
    for pattern in (_ANY_OPEN_FENCE, *(c.open_tail for c in CODE_CONVENTIONS.values())):
        if m := pattern.search(response):
            found.append((m.start(), _clean(m.group(1))))
    if found:
        return max(found)[1]
    return response


def defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^\s*(async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) is not None


def solution(prompt: str, entry_point: str, code: str) -> str:
    """The program that is run: the code itself when it defines the entry point, else the prompt before it."""
    return code if defines(code, entry_point) else prompt + code
