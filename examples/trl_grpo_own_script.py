"""A researcher's own TRL GRPO script that uses crossed-rlvr's parts (docs/api.md).

The hash arm of paper 001 (App. D.1) in miniature: a tiny model built here (no download), arithmetic questions
asked with the hash request, the hash training reward read from the dataset's own ``answer`` column, and crossed
validation under both requests every few updates, logged through the trainer (add ``--report-to wandb`` to send
it to wandb). Runs on a CPU in under a minute:

    python trl_grpo_own_script.py --steps 4 --out own-grpo
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


CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_policy(folder: Path, seed: int):
    """A fresh tiny Qwen2 model with a byte-level tokenizer (one token per byte, a ChatML chat template), built here
    with transformers and tokenizers, saved and loaded as any hub model would be: it stands in for your own."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {token: k for k, token in enumerate([*specials, *sorted(pre_tokenizers.ByteLevel.alphabet())])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                        additional_special_tokens=specials[1:], chat_template=CHAT_TEMPLATE)
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder, padding_side="left")


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

    model, tokenizer = tiny_policy(args.out / "model", args.seed)
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
