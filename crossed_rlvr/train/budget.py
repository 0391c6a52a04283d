"""What verl 0.9.1 reserves on a Ray cluster before its first GPU worker runs, read from its composed config.

verl's start-up waits on Ray without a timeout (``ray.get`` on the TransferQueue actors and on the
resource pools' placement groups), so a node that offers too little hangs silently. The reservations,
from verl 0.9.1's and TransferQueue 0.1.11's code:

- ``TaskRunnerV1`` (``@ray.remote``, default resources): 1 CPU to be scheduled, none held after; our
  importance-weighted runner (``verl_weighted``) asks ``num_cpus=1`` and holds it;
- TransferQueue (``tq.init`` in the task runner): a controller and ``num_data_storage_units`` storage
  units, ``num_cpus=1`` each, held for the whole run, placed round-robin over the nodes;
- the global resource pool: one placement group per node, ``STRICT_PACK``, with one bundle
  ``{CPU: max_colocate_count, GPU: 1}`` per GPU (``ResourcePoolManager.max_colocate_count = 3``);
- after the GPU workers are built: vLLM's HTTP server actors, the reward-loop and agent-loop workers
  (default resources): 1 free CPU each at the moment they are scheduled, none held. (The CPU launch
  rehearsal stops before them, at the workers' NCCL; with one CPU fewer it still reaches that point.)

So every node must hold its GPU bundles plus its share of the storage units, and the head node the
controller, the task runner and one free CPU for the default-resource actors besides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from omegaconf import DictConfig

# verl's own ppo_trainer config as Hydra composes it (train/verl_engine.py: compose_verl): verl's schema, read by
# verl's key names, never one of this package's configs (those are typed once at each command's door,
# conf/schema.py). Named here, the lowest module that reads it, so that every reader imports it without a circle.
VerlConfig: TypeAlias = "DictConfig"

UNITS_PER_NODE = 2  # TransferQueue storage units per node unless engine.tq_storage_units says (its advice: >= 2)
COLOCATE = 3  # verl.single_controller.ray.base.ResourcePoolManager.max_colocate_count (0.9.1)


class BudgetError(RuntimeError):
    """A node offers less than verl will wait for."""


@dataclass(frozen=True)
class Budget:
    nnodes: int
    gpus_per_node: int
    storage_units: int      # TransferQueue SimpleStorage units, 1 CPU each
    runner_cpus: int        # held by the task runner (1 for our weighted runner, 0 for verl's)
    colocate: int = COLOCATE

    @property
    def head_extra(self) -> int:
        """CPUs the head node needs beyond the GPU bundles and its storage units: the TransferQueue
        controller, the task runner's own CPU, and one free CPU to schedule default-resource actors."""
        return 1 + self.runner_cpus + 1

    def cpus_per_node(self) -> int:
        """CPUs each node must offer Ray (the head's need; the other nodes need no more than that)."""
        return self.colocate * self.gpus_per_node + math.ceil(self.storage_units / self.nnodes) + self.head_extra

    def describe(self) -> str:
        per_node = self.cpus_per_node()
        return (f"verl asks, per node: {self.gpus_per_node} GPU bundle(s) of {{CPU: {self.colocate}, GPU: 1}} "
                f"= {self.colocate * self.gpus_per_node} CPUs; TransferQueue {self.storage_units} storage unit(s) "
                f"+ 1 controller at 1 CPU each ({math.ceil(self.storage_units / self.nnodes)} unit(s) on a node); "
                f"task runner {self.runner_cpus} CPU held; 1 CPU free to place reward/agent-loop workers: "
                f"{per_node} CPUs and {self.gpus_per_node} GPU(s) on each of {self.nnodes} node(s)")

    def check(self, cpus: float, gpus: float, where: str = "the node") -> None:
        """Refuse a node that offers fewer CPUs or GPUs than verl will wait for (message names both)."""
        need = self.cpus_per_node()
        short = []
        if cpus < need:
            short.append(f"{cpus:g} CPUs < {need}")
        if gpus < self.gpus_per_node:
            short.append(f"{gpus:g} GPUs < {self.gpus_per_node}")
        if short:
            raise BudgetError(f"{where} offers Ray {cpus:g} CPUs and {gpus:g} GPUs ({'; '.join(short)}): verl would "
                              f"wait forever. {self.describe()}. Give Ray more CPUs (engine.cpus_per_node, "
                              "ray start --num-cpus) or fewer storage units (engine.tq_storage_units).")


def verl_budget(composed: VerlConfig, weighted: bool) -> Budget:
    """The budget of one arm from verl's composed config (``compose_verl``)."""
    storage = composed.transfer_queue.backend.SimpleStorage.num_data_storage_units
    return Budget(nnodes=int(composed.trainer.nnodes), gpus_per_node=int(composed.trainer.n_gpus_per_node),
                  storage_units=int(storage), runner_cpus=1 if weighted else 0)


def budget_for(gpus_per_node: int, nnodes: int = 1, storage_units: int | None = None, weighted: bool = False) -> Budget:
    """The budget of the project's verl arms (``storage_units`` None: 2 per node, train/translate.py)."""
    return Budget(nnodes=nnodes, gpus_per_node=gpus_per_node, storage_units=storage_units or UNITS_PER_NODE * nnodes,
                  runner_cpus=1 if weighted else 0)
