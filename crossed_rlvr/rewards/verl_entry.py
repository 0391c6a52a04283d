"""verl custom reward entry (``reward.custom_reward_function.path/name`` in verl 0.9.x).

verl calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)``. The
convention travels with each data row in ``extra_info["convention"]`` so one entry serves every
arm; the program itself is the shared one in :mod:`crossed_rlvr.rewards.programs`.
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
) -> float:
    """Training reward of one rollout; the convention comes from the data row (paper 001 App. D.1)."""
    convention = (extra_info or {}).get("convention")
    if not convention:
        raise ValueError(
            f"verl reward row from data_source={data_source!r} has no extra_info['convention']; "
            "write the training parquet with crossed-rlvr so every row names its convention"
        )
    return reward(str(convention), solution_str, str(ground_truth))
