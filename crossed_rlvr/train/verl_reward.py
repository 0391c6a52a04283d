"""verl custom reward entry (``reward.custom_reward_function.path/name`` in verl 0.9.x).

verl calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` and adds the keys of
``reward.custom_reward_function.reward_kwargs`` as keyword arguments. The convention travels with each data
row in ``extra_info["convention"]`` so one entry serves every arm; a parquet written elsewhere (verl's own
GSM8K preprocessing, whose ``extra_info`` holds only split/index/answer/question) names it once, in
``reward_kwargs.convention``. The program itself is the shared one in :mod:`crossed_rlvr.rewards.programs`.

A code arm's rows (``extra_info["convention"]`` a code delimiter, ``extra_info["code_dataset"]`` the task
file) are scored by running the program in the sandbox (:mod:`crossed_rlvr.train.code_reward`).

The result is a dict: ``score`` (the reward), ``acc`` (the same value, verl's usual metric name)
and ``is_weight``, the row's importance weight P_i/Q_i (1.0 without the frozen proposal), which verl
keeps with each trajectory so that :mod:`crossed_rlvr.train.verl_weighted` can scale advantages; a training
row's result also names its ``item_id`` and, with the proposal, its ``stratum`` (the trainer logs each stratum's
share of the batch).
Validation rows (crossed validation) name their request in ``extra_info["request"]``; for them
the result adds ``payload`` (the requested payload is present) and ``strict`` (the request's strict
reader is correct): cheap pure readers, so verl logs both per request (``val-aux/<data_source>/...``)
at every validation step and writes them into its dump. Math-Verify and the rest of the panel run after
the import, never inside verl's reward loop.
"""

from __future__ import annotations

from typing import Any

from crossed_rlvr.rewards.conventions import CONVENTIONS
from crossed_rlvr.rewards.programs import REWARD_PROGRAMS, reward

# Keyword arguments verl 0.9.1's reward managers add on their own (with a reward model's router): accepted and
# unused. Any other keyword came from reward_kwargs, and one we do not know is refused rather than ignored.
VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})


def known_conventions() -> tuple[str, ...]:
    """Every name a row or reward_kwargs may give: the answer conventions, their programs and the code delimiters."""
    from crossed_rlvr.rewards.code import CODE_CONVENTIONS

    return tuple(sorted({*CONVENTIONS, *REWARD_PROGRAMS, *CODE_CONVENTIONS}))


def row_convention(data_source: str | None, info: dict[str, Any], convention: str | None) -> str:
    """The row's ``extra_info['convention']``, else ``reward_kwargs.convention``; refused when neither names
    one, when they disagree, or when it is no convention (so a typo never trains on a silent zero reward)."""
    own = info.get("convention")
    if own and convention and str(own) != str(convention):
        raise ValueError(f"verl reward row from data_source={data_source!r} says extra_info['convention']={own!r} "
                         f"but reward_kwargs.convention={convention!r}: drop one of them")
    chosen = own or convention
    if not chosen:
        raise ValueError(
            f"verl reward row from data_source={data_source!r} has no extra_info['convention'] and no convention "
            "was given: set reward.custom_reward_function.reward_kwargs.convention (e.g. hash) for a parquet "
            "written elsewhere, or write the training parquet with crossed-rlvr so every row names its convention"
        )
    if str(chosen) not in known_conventions():
        where = "extra_info['convention']" if own else "reward_kwargs.convention"
        raise ValueError(f"unknown convention {chosen!r} ({where}, data_source={data_source!r}); "
                         f"expected one of {', '.join(known_conventions())}")
    return str(chosen)


def compute_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    convention: str | None = None,
    **kwargs: Any,
) -> dict[str, float | str]:
    """Training reward of one rollout under the row's convention, else ``reward_kwargs.convention``
    (paper 001 App. D.1)."""
    if unknown := sorted(set(kwargs) - VERL_KWARGS):
        raise TypeError(f"compute_score got unknown keyword argument(s) {unknown} (from "
                        "reward.custom_reward_function.reward_kwargs?); it takes only 'convention'")
    info = dict(extra_info or {})
    info["convention"] = conv = row_convention(data_source, info, convention)
    from crossed_rlvr.rewards.code import CODE_CONVENTIONS

    if conv in CODE_CONVENTIONS:
        return {**code_score(data_source, solution_str, str(ground_truth), info)}
    score = reward(conv, solution_str, str(ground_truth))
    out: dict[str, float | str] = {"score": score, "acc": score, "is_weight": float(info.get("is_weight", 1.0))}
    request = info.get("request")
    if not request:  # a training row: its item and stratum travel to the trainer (per-update stratum shares)
        out.update({k: str(info[k]) for k in ("item_id", "stratum") if info.get(k) is not None})
    else:
        from crossed_rlvr.eval.score.payload import detect
        from crossed_rlvr.eval.score.readers import STRICT, get_reader

        out["payload"] = float(detect(solution_str).present(str(request)))
        out["strict"] = float(get_reader(STRICT[str(request)])(solution_str, str(ground_truth), request).correct)
    return out


def code_score(data_source: str | None, solution_str: str, ground_truth: str, info: dict[str, Any]) -> dict[str, float]:
    """A code arm's row: its program run on the task's tests in the sandbox (train/code_reward.py; paper 001 App.
    D.3); a validation row adds the request's payload (a block in its delimiter) and strict pass."""
    from crossed_rlvr.rewards.code import payload_present
    from crossed_rlvr.train.code_reward import compute_score as run_tests

    out = run_tests(data_source, solution_str, ground_truth, info)
    request = info.get("request")
    if request:
        out["payload"] = float(payload_present(str(request), solution_str))
        out["strict"] = run_tests(data_source, solution_str, ground_truth, {**info, "convention": request})["score"]
    return out
