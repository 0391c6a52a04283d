"""Crossed validation during training (TRL engine): every N updates, the arm under every request.

At step 0, every ``validation.every`` updates and at the last update, the callback saves the policy
as it stands (``validation/checkpoints/step-K``) and runs ``crossed-eval`` on it: the arm's fixed
validation items (the task's ``dev`` split, disjoint from training and test items, frozen into
``validation/items``), every requested convention and wording, the evaluation's sampling settings and
per-item seeds. So the responses at a step are, by construction, those of ``crossed-eval`` on the
checkpoint of that step, written as ordinary response records of the policy ``<arm>@step<K>`` that
``crossed-score`` and ``crossed-analyze`` read like any other cell. Each step is scored in a separate
process while training goes on and logged (``crossed_rlvr.train.validation_scores``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.names import checkpoint_name


def validation_config(cfg: Any, step: int, checkpoint: Path) -> Any:
    """The crossed-eval config of one validation step of an arm."""
    v = cfg.validation
    task = OmegaConf.to_container(cfg.task, resolve=True)
    task["split"] = v.get("split", "dev")
    task["n_items"] = v.get("n_items")
    return OmegaConf.create({
        "model": OmegaConf.to_container(cfg.model, resolve=True), "task": task,
        "eval": OmegaConf.to_container(cfg.eval, resolve=True), "tracking": {"mode": "off"},
        "run_dir": str(ArmLayout(Path(cfg.run_dir)).validation),
        "policies": [{"name": checkpoint_name(str(cfg.arm), step), "path": str(checkpoint),
                      "training_convention": cfg.convention.name, "train_seed": int(cfg.seed)}],
        "requests": list(v.requests), "templates": list(v.templates), "template_subset": None,
        "template_subset_seed": 0, "samples": 1, "overwrite": False,
    })


def rng_state() -> dict[str, Any]:
    import random

    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.random.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def restore_rng(state: dict[str, Any]) -> None:
    import random

    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["torch"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["cuda"])


def make_callback(cfg: Any, tokenizer_dir: Path) -> Any:
    """A TrainerCallback that validates the arm crossed at step 0, every N updates and at the end."""
    from transformers import TrainerCallback

    from crossed_rlvr.eval.generate.plan import cell_name
    from crossed_rlvr.eval.generate.runner import run_eval
    from crossed_rlvr.policies.loading import copy_tokenizer_files
    from crossed_rlvr.train.validation_scores import StepScorer

    every, last = int(cfg.validation.every), int(cfg.recipe.updates)
    arm = ArmLayout(Path(cfg.run_dir))
    out = arm.validation_eval

    class CrossedValidation(TrainerCallback):
        def __init__(self) -> None:
            self.done: set[int] = set()
            self.summaries: dict[int, dict[str, Any]] = {}
            self.scorer = StepScorer(arm, str(cfg.convention.name), int(cfg.validation.get("score_workers", 1)))
            self.scored: list[dict[str, Any]] = []
            self.seconds = 0.0  # wall time training spent on validation (saving, generating, waiting for scores)

        def validate(self, model: Any, step: int) -> None:
            if step in self.done:
                return
            self.done.add(step)
            start = time.perf_counter()
            ckpt = arm.validation_checkpoint(step)
            was_training = model.training
            model.save_pretrained(ckpt)
            copy_tokenizer_files(tokenizer_dir, ckpt)
            vcfg = validation_config(cfg, step, ckpt)
            state = rng_state()
            try:
                self.summaries[step] = run_eval(vcfg, progress=False)
            finally:  # generation reseeds the global generators: training goes on as if never validated
                restore_rng(state)
            model.train(was_training)
            policy = vcfg.policies[0].name
            files = [out.response_file(cell_name(policy, r, t)) for r in vcfg.requests for t in vcfg.templates]
            self.scorer.submit(step, files)
            self.scored += self.scorer.collect()
            self.seconds += time.perf_counter() - start

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            # Training starts from scratch (a finished arm is never retrained): responses, scores and
            # checkpoints of an earlier attempt belong to other weights and would be reused by their names.
            shutil.rmtree(out.root, ignore_errors=True)
            self.validate(model, 0)

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % every == 0 or state.global_step == last:
                self.validate(model, state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            start = time.perf_counter()
            try:
                self.scored += self.scorer.collect(wait=True)
            finally:
                self.scorer.close()
            self.seconds += time.perf_counter() - start

    return CrossedValidation()
