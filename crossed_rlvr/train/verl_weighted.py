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

Every update logs the weights (``crossed/is_weight_mean``, ``_min``, ``_max``) and each stratum's share of the
batch (``crossed/stratum_share/<stratum>``; the reward entry returns each training row's stratum and item id).
Both trainers here (unweighted arms run ``CrossedSyncTrainer``) remove the checkpoint a relaunch resumed from
once newer steps replace it, which verl itself never does (``stale_resume_step``), and add the arm's own settings
to the wandb run verl opens (``add_arm_settings``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from crossed_rlvr.layout import ArmLayout

if TYPE_CHECKING:
    from transfer_queue import KVBatchMeta

    from crossed_rlvr.train.budget import VerlConfig

TRAINER_NAME = "crossed_is_sync"  # its own registry entry, for lookups; it runs as verl's "sync" mode
BASE_NAME = "crossed_sync"  # the unweighted trainer (verl's, plus the resumed-from step's removal)


def trajectory_field(extra_fields: Iterable[object], key: str) -> list[Any]:
    """One ``reward_extra_info`` value per trajectory (None where the reward entry gave none). ``extra_fields``: verl's,
    one entry a trajectory, a dict or TensorDict's non-tensor wrapper of one (its ``data``)."""
    out = []
    for value in list(extra_fields):
        fields = getattr(value, "data", value)
        info = fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}
        out.append(info.get(key))
    return out


def importance_weights(extra_fields: Iterable[object]) -> torch.Tensor:
    """One weight per trajectory from verl's ``extra_fields`` (``reward_extra_info.is_weight``)."""
    weights = trajectory_field(extra_fields, "is_weight")
    missing = next((k for k, w in enumerate(weights) if w is None), None)
    if missing is not None:
        raise KeyError(f"trajectory {missing}: reward_extra_info has no 'is_weight'; the reward entry must be "
                       "crossed_rlvr/train/verl_reward.py:compute_score with is_weight in extra_info")
    return torch.tensor([float(w) for w in weights], dtype=torch.float32)


def scale_advantages(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Multiply each trajectory's (jagged, per-token) advantages by its weight."""
    rows = advantages.unbind() if advantages.is_nested else list(advantages)
    if len(rows) != len(weights):
        raise ValueError(f"{len(rows)} trajectories but {len(weights)} importance weights")
    scaled = [row * w.to(row.dtype) for row, w in zip(rows, weights, strict=True)]
    if advantages.is_nested:
        return torch.nested.as_nested_tensor(scaled, layout=torch.jagged)
    return torch.stack(scaled)


def weight_metrics(weights: torch.Tensor, strata: list[str | None]) -> dict[str, float]:
    """The update's importance weights (mean, min, max) and each stratum's share of its trajectories, as verl logs
    them (wandb, the metrics file): what a user checks first when the proposal is on."""
    out = {"crossed/is_weight_mean": float(weights.mean()), "crossed/is_weight_min": float(weights.min()),
           "crossed/is_weight_max": float(weights.max())}
    named = [s for s in strata if s is not None]
    for name in sorted(set(named)):
        out[f"crossed/stratum_share/{name}"] = named.count(name) / len(strata)
    return out


# The arm whose weighted trainer writes each update's advantages before and after the scaling (``advantages/``, one
# file a step), when the launch sets it: the check from outside the trainer (tests/test_verl_train.py recomputes each weight
# from the strata file and App. D.1's formula). Off by default: a 7B update holds ~260k advantage values.
DUMP_ENV = "CROSSED_ADVANTAGE_DUMP"
# The arm whose CPU-route vLLM rollout writes its log-probs of a fixed token sequence after every weight sync
# (ArmLayout.rollout_probe, train/verl_vllm.py): the check that the actor's weights reach vLLM after each update.
PROBE_ENV = "CROSSED_ROLLOUT_PROBE"


def dump_advantages(arm_dir: str, step: int, extra_fields: Iterable[object], before: torch.Tensor, after: torch.Tensor,
                    weights: torch.Tensor) -> None:
    import os

    rows = lambda t: [r.detach().cpu().clone() for r in (t.unbind() if t.is_nested else list(t))]  # noqa: E731
    path = ArmLayout(Path(arm_dir)).advantages_at(step)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"step": step, "item_id": trajectory_field(extra_fields, "item_id"),
              "stratum": trajectory_field(extra_fields, "stratum"), "is_weight": weights.tolist(),
              "before": rows(before), "after": rows(after)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    torch.save(record, tmp)
    tmp.replace(path)


# A JSON file of the arm's own settings (train/verl_engine.py: write_wandb_config), added to the wandb run verl opens.
SETTINGS_ENV = "CROSSED_WANDB_SETTINGS"


def add_arm_settings() -> None:
    """The arm's settings into the config of the wandb run verl opened in this process (none open: nothing)."""
    import json
    import os

    path = os.environ.get(SETTINGS_ENV)
    if not path:
        return
    import wandb

    if wandb.run is not None:
        with open(path, encoding="utf-8") as fh:
            wandb.run.config.update(json.load(fh), allow_val_change=True)


def stale_resume_step(arm: ArmLayout, resumed_from: int | None, saves: int, keep: int | None) -> Path | None:
    """The arm's folder of the step a launch resumed from, once verl's own saves in this launch reach ``keep``
    (``trainer.max_actor_ckpt_to_keep``), else None. verl deletes only what the running process saved (its list of
    saved paths starts empty in every process), so without this the resumed-from step stays on disk for good: a 7B
    step is ~91 GB. verl never needs it again once a newer step is complete. ``keep`` None keeps every step."""
    if not resumed_from or not keep or keep < 1 or saves < keep:
        return None
    folder = arm.verl_shards(resumed_from).parent  # the step's folder: its actor's shards and verl's extra state
    return folder if folder.is_dir() else None


def _register() -> type:
    from tensordict import TensorDict
    from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    if TRAINER_NAME in TRAINER_REGISTRY:
        return TRAINER_REGISTRY[TRAINER_NAME]

    @register_trainer(BASE_NAME)
    class CrossedSyncTrainer(PPOTrainerSync):
        """verl's synchronous PPO trainer, which also removes the step a relaunch resumed from once newer steps
        replace it (``stale_resume_step``)."""

        _resumed_from: int | None = None
        _saves = 0

        def on_train_begin(self) -> None:  # verl has opened its trackers (wandb.init) by now
            super().on_train_begin()
            add_arm_settings()

        def _load_checkpoint(self) -> None:
            super()._load_checkpoint()
            self._resumed_from = int(self.global_steps) or None

        def _save_checkpoint(self) -> None:
            import shutil

            super()._save_checkpoint()  # the step's files, then verl's tracker file
            self._saves += 1
            trainer = self.config.trainer
            # verl's checkpoints folder is the arm's (train/translate.py writes trainer.default_local_dir so)
            arm = ArmLayout(Path(str(trainer.default_local_dir)).parent)
            stale = stale_resume_step(arm, self._resumed_from, self._saves, trainer.get("max_actor_ckpt_to_keep"))
            if stale is not None:
                shutil.rmtree(stale, ignore_errors=True)
                print(f"crossed-rlvr: removed {stale}, the step this launch resumed from "
                      f"({arm.verl_shards(int(self.global_steps)).parent.name} is saved)", flush=True)
                self._resumed_from = None

    @register_trainer(TRAINER_NAME)
    class ImportanceWeightedTrainer(CrossedSyncTrainer):
        """verl's synchronous PPO trainer with advantages scaled by P_i/Q_i after they are computed."""

        def _compute_advantage(self, batch: KVBatchMeta, metrics: dict[str, Any]) -> KVBatchMeta:
            import os

            import transfer_queue as tq

            batch = super()._compute_advantage(batch, metrics)
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                   select_fields=["advantages", "extra_fields"])
            weights = importance_weights(data["extra_fields"])
            scaled = scale_advantages(data["advantages"], weights)
            tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                            fields=TensorDict({"advantages": scaled}, batch_size=len(batch)))
            metrics.update(weight_metrics(weights, trajectory_field(data["extra_fields"], "stratum")))
            if os.environ.get(DUMP_ENV):
                dump_advantages(os.environ[DUMP_ENV], int(getattr(self, "global_steps", 0)), data["extra_fields"],
                                data["advantages"], scaled, weights)
            return batch

    return ImportanceWeightedTrainer


ImportanceWeightedTrainer = _register()
CrossedSyncTrainer = ImportanceWeightedTrainer.__mro__[1]


def install_as_sync(weighted: bool = True) -> None:
    """Make verl's ``sync`` mode build ``ImportanceWeightedTrainer`` (or, unweighted, ``CrossedSyncTrainer``) in
    this process only."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    _register()
    TRAINER_REGISTRY["sync"] = TRAINER_REGISTRY[TRAINER_NAME if weighted else BASE_NAME]


def task_runner_class(weighted: bool = True) -> Any:
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1

    base = TaskRunnerV1.__ray_metadata__.modified_class

    class CrossedTaskRunner(base):  # type: ignore[misc, valid-type]  # base: a class read from Ray's actor at run time
        """verl's v1 task runner; defined here so the actor imports (and registers) our trainer."""

        def run(self, config: VerlConfig) -> None:
            if config.trainer.v1.trainer_mode != "sync":
                raise ValueError("trainer.v1.trainer_mode must be sync for crossed-rlvr's trainers "
                                 f"(got {config.trainer.v1.trainer_mode!r}); verl runs other modes asynchronously")
            install_as_sync(weighted)
            from verl.trainer.ppo.v1 import get_trainer_cls

            print(f"crossed-rlvr trainer: {get_trainer_cls('sync').__name__}", flush=True)  # the rehearsal reads it
            super().run(config)

    # the weighted runner holds a CPU while it runs (train/budget.py counts it); verl's own runner holds none
    return ray.remote(num_cpus=1)(CrossedTaskRunner) if weighted else ray.remote(CrossedTaskRunner)


def main() -> None:
    import hydra
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    @hydra.main(config_path="pkg://verl.trainer.config", config_name="ppo_trainer", version_base=None)
    def _main(config: VerlConfig) -> None:
        auto_set_device(config)
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
        run_ppo(config, task_runner_class=task_runner_class())

    _main()


if __name__ == "__main__":
    main()
