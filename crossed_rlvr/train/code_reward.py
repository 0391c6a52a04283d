"""The execution reward of code arms: the program an arm's convention asks for, run in the sandbox.

A rollout is rewarded 1 when the first closed block in the arm's delimiter (:func:`crossed_rlvr.rewards.code.
strict_block`, the strict reader: the reward wants the convention as the hash reward wants ``####``) defines a
program that passes the task's base and plus tests (EvalPlus's rules, :mod:`crossed_rlvr.eval.score.execution`),
else 0. Every rollout of a batch runs at once, one sandbox slot per core, and one program is run once however many
rollouts wrote it. A sandbox that fails raises: an arm never learns from a reward of 0 that was the machine's.

Kept apart from :mod:`crossed_rlvr.rewards.programs`, whose programs never execute text. The engines' entries:
:func:`make_trl_code_reward` (TRL) and :func:`compute_score` (verl; the row's ``extra_info`` names the convention
and the dataset file).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crossed_rlvr.rewards.code import CODE_CONVENTIONS, solution, strict_block
from crossed_rlvr.train.trl_reward import completion_text

_PROGRAMS: dict[str, CodeRewardProgram] = {}


class CodeRewardProgram:
    """One dataset's execution reward in this process (its sandbox and expected outputs made on first use)."""

    def __init__(self, dataset: str | Path, slots: int | None = None, cache_dir: str | Path | None = None) -> None:
        from crossed_rlvr.tasks.code import load_code_dataset

        self.ds = load_code_dataset(dataset)
        self.slots = slots or max(1, len(os.sched_getaffinity(0)))
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._executor: Any = None

    def _exec(self) -> Any:
        if self._executor is None:
            from crossed_rlvr.eval.score.execution import Executor
            from crossed_rlvr.sandbox.bwrap import Sandbox

            self._executor = Executor(self.ds, Sandbox(slots=self.slots), self.cache_dir)
        return self._executor

    def score_many(self, conventions: Sequence[str], texts: Sequence[str], task_ids: Sequence[str]) -> list[float]:
        programs: list[tuple[str, str] | None] = []
        for conv, text, tid in zip(conventions, texts, task_ids, strict=True):
            if conv not in CODE_CONVENTIONS:
                raise ValueError(f"code reward: unknown convention {conv!r}; code conventions: {', '.join(CODE_CONVENTIONS)}")
            task = self.ds.tasks.get(str(tid))
            if task is None:
                raise ValueError(f"code reward: task {tid!r} is not in {self.ds.path}")
            block = strict_block(conv, text)
            programs.append(None if block is None else (task.task_id, solution(task.prompt, task.entry_point, block)))
        ran = [p for p in programs if p is not None]
        verdicts = iter(self._exec().score(ran) if ran else [])
        out = []
        for p in programs:
            if p is None:
                out.append(0.0)
                continue
            v = next(verdicts)
            out.append(float(v["base"].status == "pass" and v["plus"].status == "pass"))
        return out


def program_for(dataset: str | Path, cache_dir: str | Path | None = None) -> CodeRewardProgram:
    key = str(Path(dataset).resolve())
    if key not in _PROGRAMS:
        _PROGRAMS[key] = CodeRewardProgram(dataset, cache_dir=cache_dir)
    return _PROGRAMS[key]


def close_programs() -> None:
    """End every execution reward's sandbox in this process (its slots' uids and its folder under /tmp)."""
    while _PROGRAMS:
        _, program = _PROGRAMS.popitem()
        if program._executor is not None:
            program._executor.sandbox.close()


def make_trl_code_reward(convention: str, dataset: str | Path, cache_dir: str | Path | None = None
                         ) -> Callable[..., list[float]]:
    """A TRL reward function: the dataset's ``reference`` column holds each row's task id."""
    if convention not in CODE_CONVENTIONS:
        raise ValueError(f"unknown code convention {convention!r}; expected one of {', '.join(CODE_CONVENTIONS)}")
    program = program_for(dataset, cache_dir)

    def reward_fn(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                  reference: Sequence[str] | None = None, **_: Any) -> list[float]:  # Any: TRL's other columns
        if reference is None:
            raise ValueError("the code reward needs a 'reference' column holding each row's task id")
        return program.score_many([convention] * len(completions), [completion_text(c) for c in completions], list(reference))

    reward_fn.__name__ = f"{convention}_reward"  # logged as rewards/<convention>_reward/mean, as every arm's
    return reward_fn


def code_payload_metric(convention: str) -> Callable[..., list[float]]:
    """Requested-payload presence of a code arm (a non-empty block in its delimiter) as a TRL 'reward' logged with
    weight 0, under the answer arms' name."""
    from crossed_rlvr.rewards.code import payload_present

    def requested_payload(prompts: object = None, completions: Sequence[Any] = (),
                          **_: Any) -> list[float]:  # Any: TRL's other columns
        return [float(payload_present(convention, completion_text(c))) for c in completions]

    return requested_payload


def compute_score(data_source: str | None, solution_str: str, ground_truth: str,
                  extra_info: dict[str, Any] | None = None, **_: Any) -> dict[str, float]:  # Any: verl's other fields
    """verl's custom reward entry for code rows: ``ground_truth`` is the task id; ``extra_info`` names the
    ``convention`` and the ``code_dataset`` file."""
    info = extra_info or {}
    if not info.get("convention") or not info.get("code_dataset"):
        raise ValueError(f"verl code reward row from data_source={data_source!r} needs extra_info['convention'] and "
                         "extra_info['code_dataset']")
    score = program_for(info["code_dataset"]).score_many([str(info["convention"])], [solution_str],
                                                         [str(ground_truth)])[0]
    return {"score": score, "acc": score, "is_weight": float(info.get("is_weight", 1.0))}
