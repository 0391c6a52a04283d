"""A TRL arm goes on from its last saved update when run again after an interruption (kill -9, SIGTERM, a
preempted or requeued job), and ends on the weights the same arm ends on uninterrupted.

- **Cadence.** ``recipe.save_every`` = N (0 < N < ``recipe.updates``) saves a resumable checkpoint every N updates
  under ``<arm>/trl/checkpoint-<K>`` (Hugging Face Trainer's own: weights, AdamW state, scheduler, the RNG states
  and the trainer state from which the data sampler's position follows); Trainer keeps the last one only
  (``save_total_limit=1``; it removes the older one after the new one is complete, so two exist during a save).
  0 saves none: an interrupted arm starts again from its initial policy. The folder is removed once the arm's
  final checkpoint is in place.
- **A complete checkpoint** has its ``trainer_state.json``, which Trainer writes last: a later one without it (the
  process was killed during the save) is removed and the one before is resumed.
- **The checkpoints' config.** ``trl/config_sha256`` holds the hash of the resolved config that wrote them: a run of
  another config in the same folder starts from its initial policy, never from another arm's weights.
- **The history.** ``metrics.jsonl`` keeps the lines of the updates the checkpoint holds (the later ones are
  written again by the rerun), so the file ends as the uninterrupted arm's.
- **SIGUSR1** (SLURM's warning before a time limit; crossed_rlvr/interrupt.py) saves a checkpoint at the next
  update and stops training; the arm then ends with exit status 138 and no final checkpoint.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.files import atomic_write_text, json_lines

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from crossed_rlvr.conf.schema import TrainConf

STATE = "trainer_state.json"  # written last into a checkpoint folder by Trainer: whole once it is complete
STAMP = "config_sha256"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def save_every(cfg: TrainConf) -> int:
    """Updates between resumable checkpoints; 0 where none is saved before the final one."""
    every, updates = int(cfg.recipe.save_every or 0), int(cfg.recipe.updates)
    return every if 0 < every < updates else 0


def save_args(cfg: TrainConf) -> dict[str, Any]:
    """Trainer's saving arguments for the arm's cadence (``save_every``)."""
    every = save_every(cfg)
    # a SIGUSR1 saves at the next update under any cadence: in full, and as the only one kept
    keep = {"save_total_limit": 1, "save_only_model": False}
    return {"save_strategy": "steps", "save_steps": every, **keep} if every else {"save_strategy": "no", **keep}


def checkpoint_steps(output: Path) -> dict[int, Path]:
    """Trainer's checkpoint folders under ``output`` by their update."""
    named = ((_NAME.match(p.name), p) for p in output.glob("checkpoint-*") if p.is_dir())
    return {int(m.group(1)): p for m, p in named if m}


def last_saved(output: Path, digest: str) -> Path | None:
    """The checkpoint to resume from: the latest complete one written under the config hashed ``digest``. Incomplete
    ones (killed during their save) are removed; so are all where another config wrote them. Records ``digest`` for
    the checkpoints to come."""
    stamp = output / STAMP
    if output.exists() and (not stamp.exists() or stamp.read_text().strip() != digest):
        shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp, digest + "\n")
    last = None
    for _step, folder in sorted(checkpoint_steps(output).items()):
        if complete(folder):
            last = folder
    for step, folder in checkpoint_steps(output).items():
        if last is None or step > saved_step(last):
            shutil.rmtree(folder)
    return last


def complete(checkpoint: Path) -> bool:
    """Whether a checkpoint folder was saved whole: Trainer writes its state last, and not atomically, so a save
    killed while writing it leaves the file empty or cut (seen: a kill -9 right as it appeared)."""
    try:
        saved_step(checkpoint)
    except (OSError, ValueError, KeyError):
        return False
    return True


def saved_step(checkpoint: Path) -> int:
    """The update a checkpoint folder holds (its trainer state's ``global_step``)."""
    return int(json.loads((checkpoint / STATE).read_text())["global_step"])


def on_every_rank(resume: Path | None, world: int) -> Path | None:
    """Rank 0's choice (it removed the incomplete checkpoints) on every rank: all resume from the same one."""
    if world <= 1:
        return resume
    import torch.distributed as dist

    box = [str(resume) if resume else None]
    dist.broadcast_object_list(box, src=0)
    return Path(box[0]) if box[0] else None


def keep_metrics_until(metrics: Path, step: int) -> None:
    """``metrics.jsonl`` with the lines of updates after ``step`` left out: the rerun writes them again (0: a
    fresh start, none kept)."""
    if step == 0:
        metrics.unlink(missing_ok=True)
        return
    if not metrics.exists():
        return
    kept = [row for row, _where in json_lines(metrics) if int(row.get("step", 0)) <= step]
    atomic_write_text(metrics, "".join(json.dumps(row) + "\n" for row in kept))


def save_and_stop_callback() -> Any:  # Any: a TrainerCallback
    """At each update's end: where SIGUSR1 asked for it (``interrupt.save_requested``; on several ranks, where any
    rank was asked, so that all stop at the same update), save a checkpoint and stop training."""
    from transformers import TrainerCallback

    from crossed_rlvr.interrupt import save_requested

    class SaveAndStop(TrainerCallback):
        def __init__(self) -> None:
            self.stopped_at: int | None = None

        def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                        **kwargs: Any) -> None:
            if _any_rank(save_requested()):
                control.should_save = True
                control.should_training_stop = True
                self.stopped_at = state.global_step

    return SaveAndStop()


def _any_rank(flag: bool) -> bool:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    import torch

    value = torch.tensor([1 if flag else 0], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
