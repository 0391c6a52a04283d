"""Importance weights of the frozen prompt proposal inside verl (paper 001 App. D.1).

verl 0.9's v1 trainer computes advantages in ``PPOTrainer._compute_advantage`` from transfer-queue
fields that do not include the data row. The weight therefore travels through the reward: our
``compute_score`` returns it in ``reward_extra_info`` (``is_weight``), which verl stores with each
trajectory as ``extra_fields``. ``ImportanceWeightedTrainer`` lets verl compute the GRPO advantages
as usual and then scales each trajectory's advantages by its weight, exactly as the TRL engine
does (for a positive weight this is a per-sample loss weight).

Launch with ``python -m crossed_rlvr.train.verl_weighted <verl overrides>``: the same Hydra entry as
``verl.trainer.main_ppo`` with ``trainer.v1.trainer_mode=sync``. verl treats every mode other than
``sync`` as asynchronous (replay buffer, ``gen_batch_size`` 1, transfer-queue checkpoints), so the
trainer keeps that name: the Ray task runner defined here puts ``ImportanceWeightedTrainer`` in
verl's registry under ``sync`` inside its own actor process, where verl then builds it.
"""

from __future__ import annotations

from typing import Any

import torch

TRAINER_NAME = "crossed_is_sync"  # its own registry entry, for lookups; it runs as verl's "sync" mode


def importance_weights(extra_fields: Any) -> torch.Tensor:
    """One weight per trajectory from verl's ``extra_fields`` (``reward_extra_info.is_weight``)."""
    weights = []
    for k, value in enumerate(list(extra_fields)):
        fields = getattr(value, "data", value)
        info = fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}
        if "is_weight" not in info:
            raise KeyError(f"trajectory {k}: reward_extra_info has no 'is_weight'; the reward entry must be "
                           "crossed_rlvr/train/verl_reward.py:compute_score with is_weight in extra_info")
        weights.append(float(info["is_weight"]))
    return torch.tensor(weights, dtype=torch.float32)


def scale_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Multiply each trajectory's (jagged, per-token) advantages by its weight."""
    rows = advantages.unbind() if advantages.is_nested else list(advantages)
    if len(rows) != len(weights):
        raise ValueError(f"{len(rows)} trajectories but {len(weights)} importance weights")
    scaled = [row * w.to(row.dtype) for row, w in zip(rows, weights, strict=True)]
    if advantages.is_nested:
        return torch.nested.as_nested_tensor(scaled, layout=torch.jagged)
    return torch.stack(scaled)


def _register() -> type:
    from tensordict import TensorDict
    from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    if TRAINER_NAME in TRAINER_REGISTRY:
        return TRAINER_REGISTRY[TRAINER_NAME]

    @register_trainer(TRAINER_NAME)
    class ImportanceWeightedTrainer(PPOTrainerSync):
        """verl's synchronous PPO trainer with advantages scaled by P_i/Q_i after they are computed."""

        def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
            import transfer_queue as tq

            batch = super()._compute_advantage(batch, metrics)
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                   select_fields=["advantages", "extra_fields"])
            weights = importance_weights(data["extra_fields"])
            scaled = scale_advantages(data["advantages"], weights)
            tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                            fields=TensorDict({"advantages": scaled}, batch_size=len(batch)))
            metrics["crossed/is_weight_mean"] = float(weights.mean())
            metrics["crossed/is_weight_max"] = float(weights.max())
            return batch

    return ImportanceWeightedTrainer


ImportanceWeightedTrainer = _register()


def install_as_sync() -> None:
    """Make verl's ``sync`` mode build ``ImportanceWeightedTrainer`` (in this process only)."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    TRAINER_REGISTRY["sync"] = _register()


def task_runner_class() -> Any:
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1

    base = TaskRunnerV1.__ray_metadata__.modified_class

    class CrossedTaskRunner(base):  # type: ignore[misc, valid-type]
        """verl's v1 task runner; defined here so the actor imports (and registers) our trainer."""

        def run(self, config: Any) -> None:
            if config.trainer.v1.trainer_mode != "sync":
                raise ValueError("trainer.v1.trainer_mode must be sync for importance-weighted GRPO "
                                 f"(got {config.trainer.v1.trainer_mode!r}); verl runs other modes asynchronously")
            install_as_sync()
            from verl.trainer.ppo.v1 import get_trainer_cls

            print(f"crossed-rlvr trainer: {get_trainer_cls('sync').__name__}", flush=True)  # the rehearsal reads it
            super().run(config)

    return ray.remote(num_cpus=1)(CrossedTaskRunner)


def main() -> None:
    import hydra
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    @hydra.main(config_path="pkg://verl.trainer.config", config_name="ppo_trainer", version_base=None)
    def _main(config: Any) -> None:
        auto_set_device(config)
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
        run_ppo(config, task_runner_class=task_runner_class())

    _main()


if __name__ == "__main__":
    main()
