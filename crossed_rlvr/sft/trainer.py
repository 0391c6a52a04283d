"""Supervised fine-tuning through transformers' Trainer (paper 001 App. D.2.1).

Defaults are the paper's recipe: 2 epochs, learning rate 1e-5 with cosine decay and 3% warmup,
effective batch 32, maximum length 1024; an optional DeepSpeed config for multi-GPU. The loss is
on the completion only (prompt tokens are masked). The same trainer serves the warm start of a
tiny initial policy and the marker-swapped arms.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crossed_rlvr.conf.schema import SFTRecipeConf
from crossed_rlvr.prompts import messages, render


@dataclass
class SFTConfig(SFTRecipeConf):
    """The ``sft`` group's recipe plus the run's seed and where to report."""

    seed: int = 83
    report_to: str = "none"


class _Examples:
    """Tokenized (prompt, completion) pairs with the prompt masked out of the labels."""

    def __init__(self, rows: list[dict[str, Any]], tokenizer: Any, max_length: int):
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


def train_sft(base_dir: str | Path, rows: list[dict[str, Any]], out_dir: str | Path, cfg: SFTConfig) -> dict[str, Any]:
    """Fine-tune ``base_dir`` on ``rows`` and save a Hugging Face model directory to ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, set_seed

    from crossed_rlvr.policies.loading import copy_tokenizer_files, load_tokenizer

    set_seed(cfg.seed)
    tokenizer = load_tokenizer(base_dir)
    data = _Examples(rows, tokenizer, cfg.max_length)
    if not len(data):
        raise ValueError(f"no SFT example fits max_length={cfg.max_length} ({data.dropped} dropped)")
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    accum = max(1, cfg.effective_batch // cfg.per_device_batch)
    out = Path(out_dir)
    work = out.with_name(out.name + ".trainer")
    args = TrainingArguments(
        output_dir=str(work), num_train_epochs=cfg.epochs, learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler, warmup_ratio=cfg.warmup_ratio, weight_decay=cfg.weight_decay,
        per_device_train_batch_size=cfg.per_device_batch, gradient_accumulation_steps=accum, seed=cfg.seed,
        data_seed=cfg.seed, logging_steps=10, save_strategy="no", report_to=[] if cfg.report_to == "none" else
        [cfg.report_to], deepspeed=cfg.deepspeed, bf16=cfg.bf16, use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0, disable_tqdm=False, remove_unused_columns=False,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=_collate(tokenizer.pad_token_id))
    start = time.perf_counter()
    result = trainer.train()
    tmp = out.with_name(out.name + ".tmp")
    trainer.save_model(str(tmp))
    copy_tokenizer_files(base_dir, tmp)
    if (Path(base_dir) / "generation_config.json").exists():
        shutil.copy2(Path(base_dir) / "generation_config.json", tmp / "generation_config.json")
    summary = {"train_loss": float(result.training_loss), "examples": len(data), "dropped_overlong": data.dropped,
               "steps": int(result.global_step), "seconds": round(time.perf_counter() - start, 1),
               "config": asdict(cfg), "base": str(base_dir)}
    (tmp / "sft_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    shutil.rmtree(work, ignore_errors=True)
    return summary
