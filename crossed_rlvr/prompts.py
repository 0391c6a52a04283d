"""Prompts: an item's question plus the request suffix in one wording, in the policy's chat format.

The question, chat template and system message stay fixed and only the final request suffix
changes (paper 001 App. B.3). SFT-arm training prompts carry no format instruction (App. D.2.1).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from crossed_rlvr.rewards.conventions import CONVENTIONS, ONE_SHOT_EXAMPLE, request_suffix

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def user_content(question: str, request: str | None, template: str = "original") -> str:
    """The user turn: the question, then the request suffix (none for format-free SFT prompts).

    ``one_shot`` (Table 1's one-example prompt) puts one worked example before it, its final line in the
    request's own convention, so the example never asks for one convention while showing another."""
    if request is None:
        return question
    asked = f"{question}\n{request_suffix(request, template)}"
    if template != "one_shot":
        return asked
    ex = ONE_SHOT_EXAMPLE
    shown = f"{ex['question']}\n{request_suffix(request, template)}"
    worked = f"{ex['solution']}\n{CONVENTIONS[request].mark(ex['answer'])}"
    return f"Here is an example.\n\n{shown}\n\n{worked}\n\nNow solve this one.\n\n{asked}"


def messages(question: str, request: str | None, template: str = "original", system: str | None = None
             ) -> list[dict[str, str]]:
    out = [{"role": "system", "content": system}] if system else []
    return [*out, {"role": "user", "content": user_content(question, request, template)}]


def render(tokenizer: PreTrainedTokenizerBase, msgs: list[dict[str, str]]) -> tuple[str, list[int], str]:
    """(prompt text, token ids, sha256 of the text) with the generation prompt appended."""
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text, ids, hashlib.sha256(text.encode("utf-8")).hexdigest()
