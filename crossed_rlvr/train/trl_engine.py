"""GRPO on one machine through TRL's GRPOTrainer (runs on the CPU with a tiny model).

The rewarded convention's training reward program is the reward; the requested-payload detector
is logged as a second reward function with weight 0 (a metric that never moves the policy).
Importance weights of the frozen prompt proposal scale each sample's advantage. Checkpoints are
Hugging Face directories at step 0 and at the final step, and resumable ones every ``recipe.save_every`` updates
from which an interrupted arm goes on (train/resume.py); per-step metrics (reward, payload rate,
response length, clip fraction, entropy) go to ``metrics.jsonl`` and to wandb.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.conf.schema import TrainConf
from crossed_rlvr.files import link_files
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.machine import bf16_autocast
from crossed_rlvr.policies.loading import copy_tokenizer_files
from crossed_rlvr.ranks import rank, world_size
from crossed_rlvr.train.checks import CheckedTrainConf
from crossed_rlvr.train.recipe import chat_prompt
from crossed_rlvr.train.resume import (
    keep_metrics_until,
    last_saved,
    on_every_rank,
    save_and_stop_callback,
    save_args,
    saved_step,
)
from crossed_rlvr.train.translate import trl_args
from crossed_rlvr.train.trl_reward import make_trl_reward

if TYPE_CHECKING:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from trl import GRPOTrainer
    from wandb.sdk.wandb_run import Run as WandbRun

    from crossed_rlvr.train.rollout import StreamSampler
    from crossed_rlvr.train.validation import CrossedValidationCallback


def payload_metric(request: str) -> Callable[..., list[float]]:
    """Requested-payload presence d_r(y) as a TRL 'reward' (logged with weight 0)."""
    from crossed_rlvr.eval.score.payload import detect

    def requested_payload(prompts: object = None, completions: Sequence[str | list[dict[str, str]]] = (),
                          **kwargs: Any) -> list[float]:  # Any: TRL's dataset columns
        texts = [c if isinstance(c, str) else "".join(m.get("content", "") for m in c) for c in completions]
        return [1.0 if detect(t).present(request) else 0.0 for t in texts]

    return requested_payload


def metrics_callback(metrics_path: Path) -> Any:
    """A callback writing one line per update (rank 0's logs) to ``metrics.jsonl``."""
    from transformers import TrainerCallback

    class MetricsFile(TrainerCallback):
        def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                   logs: dict[str, object] | None = None, **kwargs: Any) -> None:
            if logs and "reward" in logs and state.is_world_process_zero:  # one line per update, from rank 0
                entry = {"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, int | float)}}
                with metrics_path.open("a") as fh:
                    fh.write(json.dumps(entry) + "\n")

    return MetricsFile()


def training_dataset(rows: list[dict[str, Any]]) -> Any:
    """The arm's training stream as a chat-prompt dataset (each row keeps its reference and weight)."""
    from datasets import Dataset

    return Dataset.from_list([
        {"prompt": chat_prompt(r), "reference": r["reference"], "convention": r["convention"],
         "is_weight": r["is_weight"], "item_id": r["item_id"], "row": r["row"]}
        for r in rows
    ])


def lora_config(cfg: TrainConf) -> Any:  # Any: peft's LoraConfig (peft is read untyped)
    """peft's LoraConfig when ``recipe.lora.enabled``, else None."""
    lora = cfg.recipe.lora
    if not lora.enabled:
        return None
    from peft import LoraConfig  # low-rank adapters: GRPO of a real model on a CPU within the hour

    return LoraConfig(r=int(lora.r), lora_alpha=int(lora.alpha), lora_dropout=0.0,
                      target_modules=lora.target_modules if isinstance(lora.target_modules, str)
                      else list(lora.target_modules), task_type="CAUSAL_LM")


def initial_checkpoint(model: Any, model_path: Path, out: Path) -> None:  # Any: a PreTrainedModel
    """The arm's step-0 checkpoint: where the initial policy is a local folder of safetensors weights, a copy of its
    own files (the same bytes, faster than serializing the weights again; a copy, not a link, so that damage to the
    initial policy's files never reaches a finished arm); else the loaded model saved."""
    weights = sorted(p.name for p in model_path.glob("*.safetensors")) if model_path.is_dir() else []
    if weights and (model_path / "config.json").is_file():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        names = ["config.json", *weights, *(n for n in ("generation_config.json", "model.safetensors.index.json")
                                              if (model_path / n).is_file())]
        for name in names:
            shutil.copy2(model_path / name, tmp / name)
        copy_tokenizer_files(model_path, tmp)
        tmp.rename(out)
    else:
        model.save_pretrained(out)
        copy_tokenizer_files(model_path, out)


def save_final(trainer: GRPOTrainer, final: Path, model_path: Path, merged: bool, first: bool, run_dir: Path,
               validated: Path | None = None) -> None:
    """The final checkpoint as a plain HF directory (LoRA adapters merged in), written whole then renamed.
    ``validated``: the folder crossed validation saved the final weights to (full-weight arms only: validation refuses
    LoRA); its files are linked, not written again."""
    import torch

    tmp = final.with_name(final.name + ".tmp")
    if merged:  # the evaluator loads plain HF directories: merge the adapters in
        if first:
            trainer.model.merge_and_unload().save_pretrained(str(tmp))
    elif validated is not None:  # validation runs on one process, which is the first
        from transformers.trainer import TRAINING_ARGS_NAME

        shutil.rmtree(tmp, ignore_errors=True)
        link_files(validated, tmp)  # the weights with the initial policy's tokenizer files, as below
        torch.save(trainer.args, tmp / TRAINING_ARGS_NAME)  # what Trainer.save_model writes beside the weights
    else:
        trainer.save_model(str(tmp))  # written by rank 0
    if first:
        if validated is None:  # a linked folder has them already (and a linked file is never written through)
            copy_tokenizer_files(model_path, tmp)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        shutil.rmtree(ArmLayout(run_dir).trl_output, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()  # no rank returns before the checkpoint is in place


def import_trainer(use_vllm: bool) -> None:
    """Import TRL's GRPOTrainer. TRL's trainer module imports vLLM (its client, its generation) whenever vLLM is installed:
    ~3 CPU-s in every process that trains an arm, for an engine that only ``engine.use_vllm=true`` samples with. An
    arm that samples otherwise (the default) imports the trainer with vLLM hidden from TRL; TRL asks only there. A
    process that imported it so cannot then sample with vLLM, and says so."""
    import sys

    import trl.import_utils as trl_imports

    if not use_vllm and "trl.trainer.grpo_trainer" not in sys.modules:
        found = trl_imports.is_vllm_available
        trl_imports.is_vllm_available = lambda *args, **kwargs: False
        try:
            import trl.trainer.grpo_trainer  # noqa: F401 (imported here, with vLLM hidden)
        finally:
            trl_imports.is_vllm_available = found
    from trl.generation import vllm_generation

    if use_vllm and trl_imports.is_vllm_available() and not vllm_generation.is_vllm_available():
        raise RuntimeError("engine.use_vllm=true in a process that trained an arm without vLLM before: TRL's trainer "
                           "was imported without it; train this arm in a process of its own")


def weighted_trainer(seen: list[list[str]], sampler: StreamSampler | None = None, prompt_once: bool = False,
                     use_vllm: bool = False) -> type:
    """TRL's GRPOTrainer with each sample's advantage scaled by its prompt's importance weight P_i/Q_i
    (App. D.1); the prompts of every generation batch are appended to ``seen``. With ``sampler``
    (``engine.sampler=stream``, train/rollout.py) the completions come from it instead of ``model.generate``; with
    ``prompt_once`` (``engine.prompt_once``, train/prompt_once.py) each distinct prompt runs once in the loss's forward."""
    import torch

    import_trainer(use_vllm)
    from trl import GRPOTrainer

    class WeightedGRPOTrainer(GRPOTrainer):
        """Scales each sample's advantage by its prompt's importance weight P_i/Q_i (App. D.1); samples under
        the autocast its loss is computed under."""

        def _generate_single_turn(self, prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> Any:
            if sampler is not None:  # text-only prompts (the checks refuse it beside vLLM or LoRA)
                return sampler.sample(self.accelerator.unwrap_model(self.model), prompt_ids), None
            # TRL samples through model.generate outside autocast, in the fp32 master weights, while the loss
            # runs in bfloat16 where engine.bf16 holds: sampling in the same precision halves the weights
            # each decoding step reads (autocast casts each weight once per context); a no-op without bf16.
            # vLLM keeps its own precision.
            with contextlib.nullcontext() if self.use_vllm else self.accelerator.autocast():
                return super()._generate_single_turn(prompt_ids, *args, **kwargs)

        def _get_per_token_logps_and_entropies(self, model: Any,  # Any: the trainer's model, wrapped or not
                                               input_ids: torch.Tensor, attention_mask: torch.Tensor,
                                               logits_to_keep: int, batch_size: int | None = None,
                                               compute_entropy: bool = False, compute_aux_loss: bool = False,
                                               **extra: Any) -> Any:  # Any: TRL's own signature and return
            from crossed_rlvr.train.prompt_once import completion_logps, handles

            text_only = all(v is None for v in extra.values())
            if prompt_once and text_only and not compute_aux_loss and handles(model):
                with self.accelerator.autocast():
                    logps, entropies = completion_logps(model, input_ids, attention_mask, logits_to_keep,
                                                        float(self.temperature), compute_entropy)
                return logps, entropies, None
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **extra)

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            seen.append(sorted({str(x["item_id"]) + "#" + str(x["row"]) for x in inputs}))
            out = super()._generate_and_score_completions(inputs)
            w = torch.tensor([float(x.get("is_weight", 1.0)) for x in inputs], dtype=out["advantages"].dtype,
                             device=out["advantages"].device)
            out["advantages"] = out["advantages"] * w
            return out

    return WeightedGRPOTrainer


def validation_callback(cfg: CheckedTrainConf, model_path: Path, lora: bool,
                        resumed: int | None = None) -> Any:  # Any: a TrainerCallback
    """The crossed validation callback when ``validation.every`` > 0 (full-weight arms only), else None; ``resumed``:
    the update training goes on from, whose validation history is kept."""
    if cfg.validation.every <= 0:
        return None
    if lora:
        raise ValueError("validation.every > 0 runs on full-weight arms only (recipe.lora.enabled=false)")
    from crossed_rlvr.train.validation import make_callback

    return make_callback(cfg, model_path, resumed)


def stream_sampler(cfg: TrainConf, tokenizer: Any, bf16: bool) -> StreamSampler | None:  # Any: a tokenizer
    """The arm's sampler where ``engine.sampler=stream`` (train/rollout.py): the recipe's sampling, one update's
    completions decoding at once; else None (TRL's own generate)."""
    if cfg.engine.sampler != "stream":
        return None
    import torch

    from crossed_rlvr.train.rollout import StreamSampler

    r = cfg.recipe
    return StreamSampler(tokenizer, max_new_tokens=int(r.max_response_tokens), temperature=float(r.temperature),
                         top_p=float(r.top_p), bf16=bf16, batch_size=int(r.prompts_per_update * r.group_size),
                         context_limit=int(r.max_context_tokens), cpu=not torch.cuda.is_available())


def train_trl(cfg: CheckedTrainConf, rows: list[dict[str, Any]], run_dir: Path, digest: str) -> dict[str, Any]:
    """Train one GRPO arm on ``rows``, from its last saved update where an earlier run of the same config (hashed
    ``digest``) saved one; returns time, final checkpoint, metrics file (and what the ranks did)."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig

    from crossed_rlvr.policies.loading import load_tokenizer

    seen: list[list[str]] = []  # the prompts this rank generated for, per generation batch
    if cfg.model.path is None:  # the checks refuse a local or hub model without one
        raise ValueError(f"model={cfg.model.name}: no model.path to train from")
    model_path = Path(cfg.model.path)
    tokenizer = load_tokenizer(model_path)

    bf16 = bf16_autocast(cfg.engine.bf16)
    WeightedGRPOTrainer = weighted_trainer(seen, stream_sampler(cfg, tokenizer, bf16), bool(cfg.engine.prompt_once),
                                           bool(cfg.engine.use_vllm))

    arm = ArmLayout(run_dir)
    metrics_path = arm.metrics
    world, first = world_size(), rank() == 0
    if world > 1 and cfg.validation.every > 0:
        raise ValueError("validation.every > 0 runs on one process; validate a multi-process arm's checkpoints "
                         "with crossed-eval, or train it on one process")
    gpu = torch.cuda.is_available()
    from crossed_rlvr.tracking import resolved_config, start_run

    # One wandb run per arm, opened here so that transformers' callback logs into it and never into the
    # previous arm's run (it does not finish runs between trainers, and study workers are reused); rank 0's.
    run = start_run(cfg.tracking, name=str(cfg.arm), job_type="train", run_dir=run_dir, study=cfg.study,
                    config=resolved_config(cfg)) if first else None
    report = ["wandb"] if run is not None else []
    resume = last_saved(arm.trl_output, digest) if first else None
    # the arguments first: on several processes they start the process group (gloo on a CPU)
    args = GRPOConfig(
        output_dir=str(arm.trl_output), logging_steps=1, report_to=report, **save_args(cfg),
        run_name=cfg.arm, use_cpu=not gpu, bf16=bf16, reward_weights=[1.0, 0.0],
        log_completions=False, disable_tqdm=not first, ddp_backend="gloo" if world > 1 and not gpu else None,
        **trl_args(cfg, world),
    )
    resume = on_every_rank(resume, world)
    attention = {} if cfg.engine.attention == "auto" else {"attn_implementation": str(cfg.engine.attention)}
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32, **attention)
    step0 = arm.checkpoint(0)
    if first and not step0.exists():
        initial_checkpoint(model, model_path, step0)
    dataset = training_dataset(rows)
    peft_config = lora_config(cfg)
    validation = validation_callback(cfg, model_path, peft_config is not None,
                                     saved_step(resume) if resume is not None else None)
    stopper = save_and_stop_callback()
    callbacks = [metrics_callback(metrics_path), *([validation] if validation is not None else []), stopper]
    trainer = WeightedGRPOTrainer(
        model=model, reward_funcs=reward_functions(cfg),
        args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=callbacks,
        peft_config=peft_config,
    )
    start = time.perf_counter()
    if first:
        keep_metrics_until(metrics_path, saved_step(resume) if resume is not None else 0)
    run_trainer(trainer, resume, validation, run, stopper, int(cfg.recipe.updates))
    seconds = time.perf_counter() - start
    final = arm.checkpoint(int(cfg.recipe.updates))
    ranks = across_ranks(trainer, seen) if world > 1 else None
    last = int(cfg.recipe.updates)
    validated = arm.validation_checkpoint(last) if validation is not None and last in validation.done else None
    save_final(trainer, final, model_path, peft_config is not None, first, run_dir, validated)
    result = {"seconds": round(seconds, 1), "final_checkpoint": str(final), "metrics": str(metrics_path),
              "world_size": world, "bf16": bf16, "threads": torch.get_num_threads()}
    if ranks is not None:
        result.update(ranks)
    if validation is not None:
        result.update(validation_steps=sorted(validation.done), validation_seconds=round(validation.seconds, 1))
    return result


def run_trainer(trainer: GRPOTrainer, resume: Path | None, validation: CrossedValidationCallback | None,
                run: WandbRun | None, stopper: TrainerCallback, updates: int) -> None:
    """``trainer.train()``, from ``resume`` where given; then the validation's scorer, the wandb run and a code arm's
    sandboxes closed, also when training failed. A SIGUSR1 that stopped training before the last update (its
    checkpoint saved: train/resume.py) stops the command."""
    from crossed_rlvr.interrupt import Stopped, training

    trainer.accelerator.wait_for_everyone()
    try:
        with training():
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    finally:
        if validation is not None:  # its scoring process, also when training failed (else this process never exits)
            validation.scorer.close()
        if run is not None:
            run.finish()
        from crossed_rlvr.train.code_reward import close_programs

        close_programs()  # a code arm's execution reward: its sandboxes end with the training that used them
    if getattr(stopper, "stopped_at", None) is not None and trainer.state.global_step < updates:
        import signal

        raise Stopped(signal.SIGUSR1)  # saved at this update (trl/checkpoint-<K>): a rerun goes on from there


def across_ranks(trainer: GRPOTrainer, seen: list[list[str]]) -> dict[str, Any]:
    """What the ranks did, gathered: each generation batch's prompts (rows of the training stream) per
    rank, disjoint and together the update's prompts; and each rank's final weights, identical under DDP."""
    import hashlib

    import torch.distributed as dist

    digest = hashlib.sha256()
    for name, tensor in sorted(trainer.model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    mine = {"seen": seen, "weights": digest.hexdigest()}
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    batches = list(zip(*(g["seen"] for g in gathered), strict=True))
    disjoint = all(sum(len(set(b)) for b in batch) == len(set().union(*map(set, batch))) for batch in batches)
    return {"ranks_disjoint_prompts": disjoint, "ranks_identical_weights": len({g["weights"] for g in gathered}) == 1,
            "weights_sha256": gathered[0]["weights"], "prompts_per_rank": [len(g["seen"][0]) for g in gathered]}


def reward_functions(cfg: TrainConf) -> list[Callable[..., list[float]]]:
    """The arm's reward (weight 1) and its requested-payload metric (weight 0): the convention's reward program,
    or for a code arm its programs run on the training tasks' tests in the sandbox (train/code_reward.py)."""
    conv = str(cfg.convention.name)
    from crossed_rlvr.rewards.code import CODE_CONVENTIONS

    if conv in CODE_CONVENTIONS:
        from crossed_rlvr.tasks.code import train_file
        from crossed_rlvr.train.code_reward import code_payload_metric, make_trl_code_reward

        return [make_trl_code_reward(conv, train_file(cfg.task)), code_payload_metric(conv)]
    return [make_trl_reward(conv), payload_metric(_request_of(conv))]


def _request_of(convention: str) -> str:
    from crossed_rlvr.rewards.conventions import get_convention

    return get_convention(convention).request
