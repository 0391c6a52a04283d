"""Crossed validation during training (TRL engine): every N updates, the arm under every request.

At step 0, every ``validation.every`` updates and at the last update, the callback saves the policy
as it stands (``validation/checkpoints/step-K``) and runs ``crossed-eval`` on it: the arm's fixed
validation items (the task's ``dev`` split, disjoint from training and test items, frozen into
``validation/items``), every requested convention and wording, the evaluation's sampling settings and
per-item seeds. So the responses at a step are, by construction, those of ``crossed-eval`` on the
checkpoint of that step, written as ordinary response records of the policy ``<arm>@step<K>`` that
``crossed-score`` and ``crossed-analyze`` read like any other cell. Each step is scored in a separate
process while training goes on and logged (``crossed_rlvr.train.validation_scores``).

:class:`CrossedValidationCallback` is the standalone form for a user's own TRL script: plain arguments (held-out
items, requests, tokenizer), greedy responses in memory, and per request the payload rate and strict accuracy
logged through the trainer's own ``log`` (so to wandb, the console and ``state.log_history``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from crossed_rlvr.conf.schema import EvalCommandConf, ModelConf, TrainConf, conf_of
from crossed_rlvr.eval.score.payload import detect
from crossed_rlvr.eval.score.readers import STRICT, get_reader
from crossed_rlvr.files import link_files, settings
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.names import checkpoint_name, step_checkpoint
from crossed_rlvr.prompts import messages, user_content

if TYPE_CHECKING:
    from transformers import (
        PreTrainedModel,
        PreTrainedTokenizerBase,
        Trainer,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )


def validation_config(cfg: TrainConf, step: int, checkpoint: Path) -> EvalCommandConf:
    """The crossed-eval config of one validation step of an arm, typed by crossed-eval's schema. Its model is the
    arm's as an evaluation names one (``ModelConf``: the hash of the initial weights a study binds is the arm's own)."""
    v = cfg.validation
    task = {**settings(cfg.task), "split": v.split, "n_items": v.n_items}
    model = ModelConf(**{f.name: getattr(cfg.model, f.name) for f in fields(ModelConf)})
    return conf_of(EvalCommandConf, {
        "model": settings(model), "task": task, "eval": settings(cfg.eval), "tracking": {"mode": "off"},
        "run_dir": str(ArmLayout(Path(cfg.run_dir)).validation),
        # a GRPO arm's checkpoint: its facts given, never read back from its name
        "policies": [{"name": checkpoint_name(str(cfg.arm), step), "path": str(checkpoint),
                      "training_convention": cfg.convention.name, "train_seed": int(cfg.seed), "method": "grpo",
                      "checkpoint": step_checkpoint(step)}],
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


def step_files(cfg: TrainConf, step: int) -> list[Path]:
    """The response files of one validation step (every request and wording of the step's checkpoint)."""
    from crossed_rlvr.eval.generate.plan import cell_name

    arm = ArmLayout(Path(cfg.run_dir))
    vcfg = validation_config(cfg, step, arm.validation_checkpoint(step))
    assert vcfg.policies  # validation_config names the step's checkpoint, its one policy
    return [arm.validation_eval.response_file(cell_name(vcfg.policies[0].name, r, t)) for r in vcfg.requests
            for t in vcfg.templates]


def carry_over(cfg: TrainConf, resumed: int, scorer: Any) -> set[int]:  # Any: validation_scores.StepScorer
    """Training goes on from update ``resumed`` (train/resume.py): the steps validated up to it are kept (those whose
    scores were not yet summarised are scored again from their responses, by ``scorer``); those after it belong to
    updates to be trained again, and go. The steps kept."""
    from crossed_rlvr.files import atomic_write_text, json_lines

    arm = ArmLayout(Path(cfg.run_dir))
    every, last = int(cfg.validation.every), int(cfg.recipe.updates)
    summary = arm.validation_summary
    rows = [row for row, _where in json_lines(summary)] if summary.exists() else []
    kept = [row for row in rows if int(row["step"]) <= resumed]
    if summary.exists():
        atomic_write_text(summary, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    done = {int(row["step"]) for row in kept}
    for step in sorted({0, last, *range(every, last + 1, every)}):
        files = step_files(cfg, step)
        if step > resumed:
            shutil.rmtree(arm.validation_checkpoint(step), ignore_errors=True)
            for path in files:
                path.unlink(missing_ok=True)
        elif step not in done and all(path.exists() for path in files):
            done.add(step)
            scorer.submit(step, files)
    return done


def make_callback(cfg: TrainConf, tokenizer_dir: Path, resumed: int | None = None) -> Any:  # Any: a TrainerCallback
    """A TrainerCallback that validates the arm crossed at step 0, every N updates and at the end. ``resumed``: the
    update training goes on from (train/resume.py), whose validation history is kept (``carry_over``)."""
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
            self.scorer = StepScorer(arm, str(cfg.convention.name), cfg.validation.score_workers)
            self.scored: list[dict[str, Any]] = []
            self.seconds = 0.0  # wall time training spent on validation (saving, generating, waiting for scores)

        def validate(self, model: PreTrainedModel, step: int) -> None:
            if step in self.done:
                return
            self.done.add(step)
            start = time.perf_counter()
            ckpt = arm.validation_checkpoint(step)
            was_training = model.training
            saved = arm.checkpoint(step)
            if step == 0 and (saved / "config.json").exists():
                link_files(saved, ckpt)  # the weights the arm wrote before its first update: no second 0.5 GB write
            else:
                model.save_pretrained(ckpt)
                copy_tokenizer_files(tokenizer_dir, ckpt)
            vcfg = validation_config(cfg, step, ckpt)
            state = rng_state()
            try:
                self.summaries[step] = run_eval(vcfg, progress=False)
            finally:  # generation reseeds the global generators: training goes on as if never validated
                restore_rng(state)
            model.train(was_training)
            assert vcfg.policies  # validation_config names the step's checkpoint, its one policy
            policy = vcfg.policies[0].name
            files = [out.response_file(cell_name(policy, r, t)) for r in vcfg.requests for t in vcfg.templates]
            self.scorer.submit(step, files)
            self.scored += self.scorer.collect()
            self.seconds += time.perf_counter() - start

        def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                           model: PreTrainedModel | None = None, **kwargs: Any) -> None:
            if resumed is not None:
                self.done = carry_over(cfg, resumed, self.scorer)
                return
            # Training starts from scratch (a finished arm is never retrained): responses, scores and
            # checkpoints of an earlier attempt belong to other weights and would be reused by their names.
            shutil.rmtree(out.root, ignore_errors=True)
            self.validate(model, 0)

        def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                        model: PreTrainedModel | None = None, **kwargs: Any) -> None:
            if state.global_step % every == 0 or state.global_step == last:
                self.validate(model, state.global_step)

        def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                         **kwargs: Any) -> None:
            start = time.perf_counter()
            try:
                self.scored += self.scorer.collect(wait=True)
            finally:
                self.scorer.close()
            self.seconds += time.perf_counter() - start

    return CrossedValidation()


# Log keys: Trainer integrations file ``eval_*`` under ``eval/`` (wandb: eval/crossed/<request>/payload).
METRIC_PREFIX = "eval_crossed"


def metric_name(request: str, measure: str) -> str:
    return f"{METRIC_PREFIX}/{request}/{measure}"


def item_pairs(items: Iterable[Sequence[str] | Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(question, reference) pairs from pairs or from mappings with ``question`` and ``reference`` keys."""
    pairs = [(str(it["question"]), str(it["reference"])) if isinstance(it, Mapping) else (str(it[0]), str(it[1]))
             for it in items]
    if not pairs:
        raise ValueError("crossed validation needs at least one held-out (question, reference) item")
    return pairs


def crossed_metrics(responses: Mapping[str, Sequence[str]], references: Sequence[str]) -> dict[str, float]:
    """Per request r: the share of responses carrying r's payload (detector, paper 001 App. B.2) and the accuracy
    of r's frozen strict reader (App. C.1), over the same items."""
    out: dict[str, float] = {}
    for request, texts in responses.items():
        read = get_reader(STRICT[request])
        out[metric_name(request, "payload")] = sum(detect(t).present(request) for t in texts) / len(texts)
        out[metric_name(request, "strict")] = sum(
            read(t, ref, request).correct for t, ref in zip(texts, references, strict=True)) / len(texts)
    return out


class CrossedValidationCallback(TrainerCallback):
    """Crossed validation for any TRL ``GRPOTrainer`` (paper 001 §2.1-2.2 measured during training, as App. D.1's
    arms are): before the first update, every ``every_n_steps`` updates and after the last, the policy answers each
    held-out item under each request, greedy, and the trainer logs ``eval_crossed/<request>/payload`` and
    ``eval_crossed/<request>/strict``. Prompts are the evaluation's: the question, then the request's suffix in
    ``template``, in the tokenizer's chat template (with ``system`` when given, as in the training prompts).

    ``attach(trainer)`` adds it to the trainer: its metrics go through ``trainer.log``, which a callback reaches
    only through the trainer (in ``on_log`` the reporting callbacks, wandb's among them, have already run)."""

    def __init__(self, items: Iterable[Sequence[str] | Mapping[str, Any]], requests: Sequence[str],
                 tokenizer: PreTrainedTokenizerBase, max_new_tokens: int = 256, every_n_steps: int = 50, *, template: str = "original",
                 system: str | None = None, batch_size: int = 16) -> None:
        if unknown := [r for r in requests if r not in STRICT]:
            raise ValueError(f"unknown request(s) {unknown}; expected some of {', '.join(STRICT)}")
        if every_n_steps < 1 or max_new_tokens < 1 or batch_size < 1:
            raise ValueError("every_n_steps, max_new_tokens and batch_size must be at least 1")
        self.items, self.requests, self.tokenizer = item_pairs(items), list(requests), tokenizer
        self.max_new_tokens, self.every, self.batch_size = max_new_tokens, every_n_steps, batch_size
        self.template, self.system = template, system
        self.trainer: Trainer | None = None
        self.history: list[dict[str, float]] = []  # one entry per validation: "step" and the logged metrics
        self.done: set[int] = set()

    def attach(self, trainer: Trainer) -> CrossedValidationCallback:
        """Add this callback to ``trainer`` and log through it; returns the callback."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    def prompt_ids(self, question: str, request: str) -> list[int]:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            msgs = messages(question, request, self.template, self.system)
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        else:  # a base model's tokenizer: the user turn as plain text
            text = user_content(question, request, self.template)
        return list(tok(text, add_special_tokens=False)["input_ids"])

    def generate(self, model: PreTrainedModel, prompts: list[list[int]]) -> list[str]:
        """Greedy responses, ``batch_size`` prompts at a time, left-padded."""
        import torch
        from transformers import GenerationConfig

        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        config = GenerationConfig(do_sample=False, max_new_tokens=self.max_new_tokens, pad_token_id=pad,
                                  eos_token_id=model.generation_config.eos_token_id or tok.eos_token_id)
        device, out = next(model.parameters()).device, []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start:start + self.batch_size]
            width = max(len(p) for p in batch)
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
            with torch.no_grad():
                new = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)[:, width:]
            out += tok.batch_decode(new, skip_special_tokens=True)
        return out

    def validate(self, model: PreTrainedModel) -> dict[str, float]:
        """The crossed metrics of ``model`` now; the model's mode and the global generators are restored after."""
        was_training, state = model.training, rng_state()
        model.eval()
        try:
            responses = {r: self.generate(model, [self.prompt_ids(q, r) for q, _ in self.items])
                         for r in self.requests}
        finally:  # validating never changes what is trained
            model.train(was_training)
            restore_rng(state)
        return crossed_metrics(responses, [ref for _, ref in self.items])

    def run(self, model: PreTrainedModel, step: int, control: TrainerControl) -> None:
        if step in self.done:
            return
        if self.trainer is None:
            raise RuntimeError("CrossedValidationCallback logs through trainer.log: add it with "
                               "callback.attach(trainer) rather than GRPOTrainer(callbacks=[...])")
        self.done.add(step)
        metrics = self.validate(model)
        self.history.append({"step": step, **metrics})
        should_log = control.should_log
        self.trainer.log(dict(metrics))
        # trainer.log clears should_log: the step's own record (loss, grad norm, learning rate) is still due
        control.should_log = should_log

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: PreTrainedModel | None = None, **kwargs: Any) -> None:
        self.run(model, state.global_step, control)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    model: PreTrainedModel | None = None, **kwargs: Any) -> None:
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.run(model, state.global_step, control)
