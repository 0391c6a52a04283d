"""A researcher's own TRL GRPO script that uses crossed-rlvr's parts (docs/api.md).

The hash arm of paper 001 (App. D.1) in miniature: a tiny model built here (no download), arithmetic questions
asked with the hash request, the hash training reward read from the dataset's own ``answer`` column, and crossed
validation under both requests every few updates, logged through the trainer (add ``--report-to wandb`` to send
it to wandb). Runs on a CPU in under a minute:

    python trl_grpo_own_script.py --steps 4 --out /tmp/own-grpo
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import crossed_rlvr as cr


def arithmetic(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (question, answer) pairs of small sums."""
    rng = random.Random(seed)
    pairs = [(rng.randint(1, 9), rng.randint(1, 9)) for _ in range(n)]
    return [(f"What is {a} + {b}?", str(a + b)) for a, b in pairs]


def training_dataset(pairs: list[tuple[str, str]]):
    """Chat prompts under the hash request, with the final answer in a column named ``answer``."""
    from datasets import Dataset

    suffix = cr.request_suffix("hash")
    return Dataset.from_list([{"prompt": [{"role": "user", "content": f"{q}\n{suffix}"}], "answer": a}
                              for q, a in pairs])


def tiny_policy(folder: Path):
    """A fresh tiny Qwen2 model and its tokenizer, built locally and loaded as any hub model would be."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from crossed_rlvr.policies.tiny import TinyConfig, build_tiny_model

    path = build_tiny_model(folder, TinyConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                               num_attention_heads=2, num_key_value_heads=1))
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def grpo_config(args: argparse.Namespace):
    from trl import GRPOConfig

    # The paper's recipe where TRL's defaults differ: sequence-mean/token-mean loss, no KL, std-scaled groups.
    return GRPOConfig(output_dir=str(args.out / "trainer"), use_cpu=True, bf16=False, max_steps=args.steps,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=24,
                      learning_rate=1e-4, lr_scheduler_type="constant", loss_type="grpo", beta=0.0,
                      scale_rewards="group", logging_steps=1, save_strategy="no", report_to=args.report_to,
                      seed=args.seed, disable_tqdm=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="GRPO updates")
    parser.add_argument("--every", type=int, default=2, help="validate every N updates")
    parser.add_argument("--out", type=Path, default=Path("own-grpo"), help="output folder")
    parser.add_argument("--report-to", default="none", help="TRL's report_to, e.g. wandb")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from trl import GRPOTrainer

    model, tokenizer = tiny_policy(args.out / "model")
    trainer = GRPOTrainer(model=model, args=grpo_config(args), processing_class=tokenizer,
                          reward_funcs=[cr.make_trl_reward("hash", reference_column="answer")],
                          train_dataset=training_dataset(arithmetic(64, args.seed)))
    validation = cr.CrossedValidationCallback(arithmetic(6, args.seed + 1), ["hash", "boxed"], tokenizer,
                                              max_new_tokens=24, every_n_steps=args.every).attach(trainer)
    trainer.train()
    (args.out / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    for entry in validation.history:
        print(json.dumps(entry))


if __name__ == "__main__":
    main()
