"""The disk a study will write, checked before its first stage, as the GPU launch checks its node (train/memory.py).

A study on a disk too small for its models stops hours in with a library's traceback; the models' sizes are known
before anything is written (their parameter counts from the model's shape), so the study refuses at its start
instead, in one line, exit 2. What it counts (fp32 on the CPU, 4 B a parameter): the warm-started initial policy,
each trained arm's final model, its step-0 weights, the model its crossed validation saves at each validated step
(train/validation.py: step 0, every ``validation.every`` updates and the last) and, when checkpoints are resumable
(``recipe.save_every`` > 0: weights and AdamW state, 12 B a parameter): verl keeps one per arm; a TRL arm keeps its
last one until the arm ends and two during a save (train/resume.py), so two for each arm training at once.
Responses, scores and the report are small beside them.
"""

from __future__ import annotations

from pathlib import Path

from crossed_rlvr.conf.schema import StudyConf
from crossed_rlvr.errors import CrossedError
from crossed_rlvr.faults import free_gb
from crossed_rlvr.layout import RunLayout


class NoRoom(CrossedError):
    """The run folder's disk cannot hold what the study will write."""


def parameters(cfg: StudyConf) -> int | None:
    """The policy's parameter count from its shape (None: no config.json to read it from here)."""
    from crossed_rlvr.train.memory import NoShape, Shape, model_shape

    tiny = cfg.model.tiny
    if tiny is not None:  # a tiny model's shape is its settings (built by the warm start, policies/tiny.py)
        from crossed_rlvr.policies.tiny import build_tokenizer

        return Shape(len(build_tokenizer()), int(tiny.hidden_size), int(tiny.num_hidden_layers),
                     int(tiny.intermediate_size), int(tiny.num_attention_heads), int(tiny.num_key_value_heads),
                     True, True, "qwen2").parameters()
    try:
        return model_shape(cfg.model).parameters()
    except NoShape:
        return None


def arm_models(cfg: StudyConf) -> int:
    """Models a GRPO arm keeps: its final one, its step-0 weights (TRL: ``checkpoints/step-0``) and one a validated
    step (step 0, every ``validation.every`` updates and the last; none when validation is off)."""
    updates, every = int(cfg.recipe.updates), int(cfg.validation.every or 0)
    validated = len({0, updates, *range(every, updates + 1, every)}) if every > 0 else 0
    return 2 + validated


def planned_gb(cfg: StudyConf, run: RunLayout) -> tuple[float, str] | None:
    """GB the study's models still to be written take on disk, with what was counted (None: the model's size is
    unknown here). A finished stage or arm writes nothing again: a study resumed after a full disk is not refused
    for the models it already has."""
    n = parameters(cfg)
    if n is None:
        return None
    models = int(cfg.initial.build == "warmstart" and not run.stage_stamp("initial").is_file())
    arms = 0
    if cfg.arms.kind == "grpo" and not run.stage_stamp("arms").is_file():
        arms = sum(not run.arm(conv, int(seed)).summary.is_file() for seed in cfg.arms.seeds
                   for conv in cfg.arms.conventions)
    elif cfg.arms.kind == "sft" and not run.stage_stamp("arms").is_file():
        arms = 2 * len(cfg.arms.seeds)  # the marker arm and its control, a seed each
    every, updates = int(cfg.recipe.save_every), int(cfg.recipe.updates)
    resumable = every > 0
    per_arm = 4 * n * (arm_models(cfg) if cfg.arms.kind == "grpo" else 1)
    if cfg.engine.name == "trl":  # removed as each arm ends: two (during a save) for each arm training at once
        at_once = min(arms, max(1, int(cfg.arms.parallel)))
        resumable = 0 < every < updates and cfg.arms.kind == "grpo" and arms > 0
        saved = 2 * 12 * n * at_once if resumable else 0
    else:
        saved = 12 * n * arms if resumable else 0
    total = (4 * n * models + arms * per_arm + saved) / 1e9
    what = (f"{'the initial policy and ' if models else ''}{arms} arm(s)' models"
            f"{' and resumable checkpoints' if resumable else ''}, {n / 1e6:.1f}M parameters "
            "at 4 B each")
    return total, what


def check_room(cfg: StudyConf, run_dir: Path) -> None:
    """Refuse a study whose models do not fit the run folder's free disk (one line, before any stage)."""
    planned = planned_gb(cfg, RunLayout(run_dir))
    free = free_gb(run_dir)
    if planned is None or free is None or planned[0] <= free:
        return
    raise NoRoom(f"{run_dir}: {shown(free)} free, but this study writes about {shown(planned[0])} ({planned[1]}): "
                 "free space there or give another run_dir")


def shown(gb: float) -> str:
    """A size as people read it: GB from one GB up, MB below (a tiny model's study writes a few MB)."""
    return f"{gb:.2f} GB" if gb >= 1 else f"{gb * 1000:.1f} MB"
