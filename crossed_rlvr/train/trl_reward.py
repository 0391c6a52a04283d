"""TRL reward functions (``GRPOTrainer(reward_funcs=...)``).

TRL calls ``fn(prompts=, completions=, completion_ids=, **dataset_columns)`` and wants one float
per completion. Completions are strings, or lists of chat messages for conversational datasets.
The programs are the shared ones in :mod:`crossed_rlvr.rewards.programs`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from crossed_rlvr.rewards.programs import get_program, reward


def completion_text(completion: str | Sequence[Mapping[str, str]]) -> str:
    """A TRL completion's text: the string, or the assistant turn(s) of a conversational completion."""
    if isinstance(completion, str):
        return completion
    # Conversational: the assistant turn(s) generated for this prompt.
    return "".join(m.get("content", "") for m in completion if m.get("role", "assistant") == "assistant")


def column(columns: Mapping[str, Any], name: str, why: str) -> Sequence[Any]:
    """A dataset column TRL handed to the reward, or an error naming it and the columns that did arrive."""
    values = columns.get(name)
    if values is None:
        present = ", ".join(sorted(k for k in columns if k not in ("prompts", "completions", "completion_ids")))
        raise ValueError(f"TRL reward needs a {name!r} column in the training dataset ({why}); "
                         f"the dataset's columns: {present or 'none'}")
    return values


def make_trl_reward(convention: str | None = None, reference_column: str = "reference") -> Callable[..., list[float]]:
    """A TRL reward function for one convention, or one that reads the ``convention`` column (paper 001 App. D.1).

    ``reference_column`` names the dataset column holding each row's final answer (``reference`` in the
    project's own datasets; e.g. ``answer`` in a user's): the programs compare it as an exact string."""
    if convention is not None:
        get_program(convention)  # fail at construction on an unknown convention

    def reward_fn(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                  **kwargs: Any) -> list[float]:  # Any: TRL's dataset columns
        reference = [str(r) for r in column(kwargs, reference_column, "each row's final answer")]
        conventions = ([convention] * len(completions) if convention
                       else column(kwargs, "convention", "or a convention fixed at construction"))
        texts = [completion_text(y) for y in completions]
        if convention is not None and hasattr(program := get_program(convention), "score_many"):
            return program.score_many(texts, reference)  # symbolic: compared side by side
        return [reward(c, y, r) for c, y, r in zip(conventions, texts, reference, strict=True)]

    reward_fn.__name__ = f"{convention or 'convention'}_reward"
    return reward_fn
