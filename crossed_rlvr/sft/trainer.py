"""Supervised fine-tuning through transformers' Trainer (paper 001 App. D.2.1).

Defaults are the paper's recipe: 2 epochs, learning rate 1e-5 with cosine decay and 3% warmup,
effective batch 32, maximum length 1024, fp32 master weights under bfloat16 autocast on GPUs. The loss
is on the completion only (prompt tokens are masked, and the output layer runs on completion positions
only). The same trainer serves the warm start of a
tiny initial policy and the marker-swapped arms.

One recipe on any number of processes: launched by ``torchrun`` (or ``deepspeed``/``accelerate``), each
process takes ``per_device_batch`` examples and the gradient accumulation is chosen so that
per-device x accumulation x world size = ``effective_batch``; under plain ``python`` on a node with
several GPUs the arm stays on one GPU (transformers would otherwise wrap it in ``nn.DataParallel`` and
multiply the batch). ``sft.deepspeed`` takes a DeepSpeed JSON file or a shipped config by name
(``zero2``, ``zero3``: ``conf/sft/deepspeed/``). Only the first process writes the arm, atomically,
with its tokenizer and chat template, whether the base is a local folder or a hub name.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.conf import CONF_DIR
from crossed_rlvr.conf.schema import SFTRecipeConf
from crossed_rlvr.errors import CrossedError
from crossed_rlvr.layout import SFT_SUMMARY
from crossed_rlvr.machine import bf16_autocast
from crossed_rlvr.prompts import messages, render
from crossed_rlvr.ranks import world_size

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEEPSPEED_DIR = CONF_DIR / "sft" / "deepspeed"


@dataclass
class SFTConfig(SFTRecipeConf):
    """The ``sft`` group's recipe plus the run's seed and where to report."""

    seed: int = 83
    report_to: str = "none"


class SFTRecipeError(CrossedError, ValueError):
    pass


class _Examples:
    """Tokenized (prompt, completion) pairs with the prompt masked out of the labels."""

    def __init__(self, rows: list[dict[str, Any]], tokenizer: PreTrainedTokenizerBase, max_length: int):
        self.features, self.dropped = [], 0
        eos = tokenizer.eos_token_id
        for row in rows:
            msgs = row.get("messages") or messages(row["prompt"], row.get("request"), row.get("template", "original"))
            _, prompt_ids, _ = render(tokenizer, msgs)
            completion_ids = tokenizer(row["completion"], add_special_tokens=False)["input_ids"] + [eos]
            ids = prompt_ids + completion_ids
            if len(ids) > max_length:
                self.dropped += 1  # never train on a cut target
                continue
            self.features.append({"input_ids": ids, "labels": [-100] * len(prompt_ids) + completion_ids})

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return self.features[i]


def _collate(pad_id: int):
    import torch

    def collate(batch: list[dict[str, list[int]]]) -> dict[str, Any]:
        width = max(len(b["input_ids"]) for b in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, b in enumerate(batch):
            n = len(b["input_ids"])
            ids[r, :n], labels[r, :n], mask[r, :n] = torch.tensor(b["input_ids"]), torch.tensor(b["labels"]), 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}

    return collate


def completion_rows(labels: torch.Tensor) -> torch.Tensor:
    """Positions whose next token is a completion token: the only positions the loss reads."""
    import torch

    rows = torch.zeros_like(labels, dtype=torch.bool)
    rows[:, :-1] = labels[:, 1:] != -100
    return rows


def _completion_loss_trainer():
    """A ``Trainer`` whose causal-LM loss runs the output layer only where the loss reads it.

    The loss is the model's own (next-token cross-entropy over completion tokens, summed and divided by the
    accumulated batch's completion tokens, as transformers' ``ForCausalLMLoss``), but the output layer
    projects only the positions that predict a completion token: prompt and padding positions are most of a
    warm-start row and SmolLM2's output layer (49,152 rows) ~20% of its matrix products. A forward pre-hook
    on the output layer selects those positions, so any wrapping (DDP, DeepSpeed) still runs the model's own
    forward. Measured on the real-cpu warm start (SmolLM2-135M, 16 rows, 2 threads, bf16 autocast): 6.9 s -> 5.2 s a step.
    """
    import torch
    from transformers import Trainer

    class CompletionLossTrainer(Trainer):
        _rows: Any = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.model_accepts_loss_kwargs = True  # the loss below divides by the accumulated batch's tokens

        def select_completion_positions(self, model: PreTrainedModel) -> None:
            head = model.get_output_embeddings()

            def pick(_module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...] | None:
                if self._rows is None:  # generation (the band checks) and anything else: the whole input
                    return None
                return (args[0][self._rows], *args[1:])

            if not isinstance(head, torch.nn.Module):
                raise SFTRecipeError(f"{type(model).__name__} has no output layer to compute the loss from")
            head.register_forward_pre_hook(pick)

        def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: torch.Tensor | int | None = None) -> Any:
            labels = inputs["labels"]
            self._rows = rows = completion_rows(labels)
            try:
                outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
            finally:
                self._rows = None
            targets = labels[:, 1:][rows[:, :-1]]
            logits = outputs.logits.float()
            if logits.shape[:-1] != targets.shape:
                raise SFTRecipeError(f"{type(self.accelerator.unwrap_model(model)).__name__}: the output layer "
                                     f"returned logits of shape {tuple(outputs.logits.shape)} for "
                                     f"{targets.numel()} completion positions")
            loss = torch.nn.functional.cross_entropy(logits, targets.to(logits.device), reduction="sum")
            if num_items_in_batch is None:
                loss = loss / max(targets.numel(), 1)
            else:
                loss = loss / num_items_in_batch
                if self.args.average_tokens_across_devices:  # as Trainer.compute_loss: the gradients are averaged
                    loss = loss * self.accelerator.num_processes
            return (loss, outputs) if return_outputs else loss

    return CompletionLossTrainer


def batch_plan(effective: int, per_device: int, world: int) -> tuple[int, int]:
    """(per-device batch, accumulation) with per-device x accumulation x world = ``effective``
    (App. D.2.1's effective batch on any number of processes). A per-device batch larger than the
    world's share is lowered to it; a batch the processes cannot split evenly is refused."""
    if effective < 1 or per_device < 1:
        raise SFTRecipeError(f"sft.effective_batch={effective} and sft.per_device_batch={per_device} must be >= 1")
    if effective % world:
        raise SFTRecipeError(f"sft.effective_batch={effective} cannot be split over {world} processes")
    per_device = min(per_device, effective // world)
    if effective % (per_device * world):
        raise SFTRecipeError(f"sft.effective_batch={effective} is not a multiple of sft.per_device_batch={per_device} "
                             f"x {world} processes")
    return per_device, effective // (per_device * world)


def deepspeed_config(value: str | None) -> str | None:
    """A DeepSpeed config path; ``zero2``/``zero3`` name the shipped ones."""
    if not value:
        return None
    shipped = DEEPSPEED_DIR / f"{value}.json"
    if shipped.exists():
        return str(shipped)
    if not Path(value).exists():
        raise SFTRecipeError(f"sft.deepspeed={value!r}: neither a file nor one of "
                             f"{', '.join(sorted(p.stem for p in DEEPSPEED_DIR.glob('*.json')))}")
    return str(value)


def save_tokenizer(tokenizer: PreTrainedTokenizerBase, base: str | Path, out: Path) -> None:
    """The base's own tokenizer files when it is a local folder (byte for byte), else the loaded
    tokenizer written out (a hub base has no folder to copy from); either way with its chat template."""
    from crossed_rlvr.policies.loading import copy_tokenizer_files

    if Path(base).is_dir() and (Path(base) / "tokenizer_config.json").exists():
        copy_tokenizer_files(base, out)
    else:
        tokenizer.save_pretrained(str(out))
    if not (out / "tokenizer_config.json").exists():
        raise RuntimeError(f"{out}: the tokenizer was not written")


def train_sft(base_dir: str | Path, rows: list[dict[str, Any]], out_dir: str | Path, cfg: SFTConfig,
              callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Fine-tune ``base_dir`` on ``rows`` and save a Hugging Face model directory to ``out_dir``.

    A callback with a ``summary`` (the warm start's request-following band, ``sft/band.py``) adds it to
    the summary."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, TrainingArguments, set_seed

    from crossed_rlvr.policies.loading import load_tokenizer

    world = world_size()
    per_device, accum = batch_plan(int(cfg.effective_batch), int(cfg.per_device_batch), world)
    ds = deepspeed_config(cfg.deepspeed)
    gpu = torch.cuda.is_available()
    bf16 = bf16_autocast(bool(cfg.bf16))
    if ds and world > 1 and not gpu:
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")  # DeepSpeed's CPU accelerator: gloo, before the model
    set_seed(cfg.seed)
    tokenizer = load_tokenizer(base_dir)
    data = _Examples(rows, tokenizer, cfg.max_length)
    if not len(data):
        raise ValueError(f"no SFT example fits max_length={cfg.max_length} ({data.dropped} dropped)")
    out = Path(out_dir)
    work = out.with_name(out.name + ".trainer")
    tmp = out.with_name(out.name + ".tmp")
    # the arguments first: under ZeRO-3 from_pretrained then partitions the weights as it loads them
    args = TrainingArguments(
        output_dir=str(work), num_train_epochs=cfg.epochs, learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler, warmup_ratio=cfg.warmup_ratio, weight_decay=cfg.weight_decay,
        per_device_train_batch_size=per_device, gradient_accumulation_steps=accum, seed=cfg.seed,
        data_seed=cfg.seed, logging_steps=1, save_strategy="no", report_to=[] if cfg.report_to == "none" else
        [cfg.report_to], deepspeed=ds, bf16=bf16, use_cpu=not gpu,
        ddp_backend="gloo" if world > 1 and not gpu else None, dataloader_num_workers=0, disable_tqdm=False,
        remove_unused_columns=False,
    )
    # fp32 master weights; with bf16 the Trainer computes under bfloat16 autocast (App. D.2.1)
    attention = {"attn_implementation": cfg.attention} if cfg.attention else {}
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32, **attention)
    trainer = _completion_loss_trainer()(model=model, args=args, train_dataset=data,
                                         data_collator=_collate(tokenizer.pad_token_id), callbacks=callbacks)
    trainer.select_completion_positions(model)
    if trainer.args.n_gpu > 1 and world == 1:
        trainer.args._n_gpu = 1  # one GPU per arm (App. D.2.1), never nn.DataParallel over the node
    first = trainer.is_world_process_zero()
    if first:
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written arm of an interrupted run
    start = time.perf_counter()
    result = trainer.train()
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(tmp))  # collective under ZeRO-3 (the shards are gathered); written by rank 0
    summary = {"train_loss": float(result.training_loss), "examples": len(data), "dropped_overlong": data.dropped,
               "tokens_per_epoch": sum(len(f["input_ids"]) for f in data.features), "steps": int(result.global_step),
               "seconds": round(time.perf_counter() - start, 1),
               "world_size": world, "per_device_batch": per_device, "accumulation": accum, "bf16": bf16,
               "threads": torch.get_num_threads(),
               "losses": [round(x["loss"], 6) for x in trainer.state.log_history if "loss" in x],
               "config": asdict(cfg), "base": str(base_dir)}
    for cb in callbacks or []:
        summary.update(getattr(cb, "summary", None) or {})
    if first:
        save_tokenizer(tokenizer, base_dir, tmp)
        with contextlib.suppress(OSError):  # the base may have no generation config
            GenerationConfig.from_pretrained(str(base_dir)).save_pretrained(str(tmp))
        (tmp / SFT_SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
        shutil.rmtree(work, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()  # no rank returns before the arm is in place
    return summary
