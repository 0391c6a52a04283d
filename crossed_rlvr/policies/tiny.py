"""Tiny Qwen2-architecture causal LMs built locally (no hub download), for CPU runs of the study.

The tokenizer is character level over printable ASCII plus newline, with ChatML special tokens and
a Qwen-style chat template, so the saved folder is an ordinary Hugging Face model directory that
transformers loads (and vLLM/verl would load on a GPU). A fresh model knows nothing: the SFT warm
start (``crossed_rlvr.sft``) turns it into an initial policy that follows both requests.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@dataclass
class TinyConfig:
    """Sizes of a tiny model; the defaults train in minutes on two CPU cores."""

    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 1024
    seed: int = 0


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(string.printable) - set("\r\x0b\x0c\t")) + ["\t", "×", "÷", "−"]
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    vocab["<unk>"] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token="<|endoftext|>", eos_token="<|im_end|>",
        bos_token=None, additional_special_tokens=["<|im_start|>"],
    )
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    tok.model_max_length = 4096
    return tok


def build_tiny_model(out_dir: str | Path, config: TinyConfig | None = None) -> Path:
    """Create, initialise (seeded) and save a tiny Qwen2 model with its tokenizer."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = config or TinyConfig()
    tok = build_tokenizer()
    torch.manual_seed(config.seed)
    model_config = Qwen2Config(
        vocab_size=len(tok), hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True, bos_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, use_sliding_window=False,
    )
    model = Qwen2ForCausalLM(model_config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    save_char_tokenizer(tok, out)
    return out


def save_char_tokenizer(tok, out: str | Path) -> None:
    """Save the character tokenizer, marked so that :func:`load_tokenizer` keeps its pipeline.

    (transformers' AutoTokenizer maps a Qwen2 config to Qwen2Tokenizer, which would replace the
    character pre-tokenizer with byte-level BPE splitting.)
    """
    import json

    tok.save_pretrained(out)
    path = Path(out) / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg["crossed_rlvr_tokenizer"] = "char"
    path.write_text(json.dumps(cfg, indent=2) + "\n")
