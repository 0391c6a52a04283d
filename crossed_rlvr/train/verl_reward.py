"""verl custom reward entry (``reward.custom_reward_function.path/name`` in verl 0.9.x).

verl calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``. The
convention travels with each data row in ``extra_info["convention"]`` so one entry serves every
arm; the program itself is the shared one in :mod:`crossed_rlvr.rewards.programs`.

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

from crossed_rlvr.rewards.programs import reward


def compute_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    **_: Any,
) -> dict[str, float | str]:
    """Training reward of one rollout; the convention comes from the data row (paper 001 App. D.1)."""
    convention = (extra_info or {}).get("convention")
    if not convention:
        raise ValueError(
            f"verl reward row from data_source={data_source!r} has no extra_info['convention']; "
            "write the training parquet with crossed-rlvr so every row names its convention"
        )
    from crossed_rlvr.rewards.code import CODE_CONVENTIONS

    if convention in CODE_CONVENTIONS:
        return code_score(data_source, solution_str, str(ground_truth), extra_info or {})
    score = reward(str(convention), solution_str, str(ground_truth))
    out = {"score": score, "acc": score, "is_weight": float((extra_info or {}).get("is_weight", 1.0))}
    request = (extra_info or {}).get("request")
    if not request:  # a training row: its item and stratum travel to the trainer (per-update stratum shares)
        out.update({k: str(extra_info[k]) for k in ("item_id", "stratum") if (extra_info or {}).get(k) is not None})
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
