"""TRL reward functions (``GRPOTrainer(reward_funcs=...)``).

TRL calls ``fn(prompts=, completions=, completion_ids=, **dataset_columns)`` and wants one float
per completion. Completions are strings, or lists of chat messages for conversational datasets.
The programs are the shared ones in :mod:`crossed_rlvr.rewards.programs`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from crossed_rlvr.rewards.programs import get_program, reward


def completion_text(completion: Any) -> str:
    """A TRL completion's text: the string, or the assistant turn(s) of a conversational completion."""
    if isinstance(completion, str):
        return completion
    # Conversational: the assistant turn(s) generated for this prompt.
    return "".join(m.get("content", "") for m in completion if m.get("role", "assistant") == "assistant")


def make_trl_reward(convention: str | None = None) -> Callable[..., list[float]]:
    """A TRL reward function for one convention, or one that reads the ``convention`` column."""
    if convention is not None:
        get_program(convention)  # fail at construction on an unknown convention

    def reward_fn(
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        reference: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        if reference is None:
            raise ValueError("TRL reward needs a 'reference' column in the training dataset")
        conventions = [convention] * len(completions) if convention else kwargs.get("convention")
        if conventions is None:
            raise ValueError("TRL reward needs a 'convention' column or a convention fixed at construction")
        texts = [completion_text(y) for y in completions]
        if convention is not None and hasattr(program := get_program(convention), "score_many"):
            return program.score_many(texts, [str(r) for r in reference])  # symbolic: compared side by side
        return [reward(c, y, str(r)) for c, y, r in zip(conventions, texts, reference, strict=True)]

    reward_fn.__name__ = f"{convention or 'convention'}_reward"
    return reward_fn
