"""Tiny Qwen2-architecture causal LMs built locally (no hub download), for CPU runs of the study.

The tokenizer is a byte-level BPE without merges (one token per byte), with ChatML special tokens and a
Qwen-style chat template, so the saved folder is an ordinary Hugging Face model directory that
``AutoTokenizer``/``AutoModelForCausalLM`` load exactly (and lm-eval, vLLM and verl with them). A fresh model knows nothing: the SFT warm
start (``crossed_rlvr.sft``) turns it into an initial policy that follows both requests.
"""

from __future__ import annotations

from pathlib import Path

from crossed_rlvr.conf.schema import TinyConf as TinyConfig  # one definition of a tiny model's sizes

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable-character map (the alphabet of every byte-level BPE, Qwen2's included)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
            *range(ord("\u00ae"), ord("\u00ff") + 1)]
    moved = [b for b in range(256) if b not in keep]
    return {**{b: chr(b) for b in keep}, **{b: chr(256 + k) for k, b in enumerate(moved)}}


def build_tokenizer():
    """A byte-level BPE with no merges: one token per UTF-8 byte, so every text round-trips exactly.

    It is the shape of Qwen2's own tokenizer (ByteLevel pre-tokenizer and decoder over a BPE model),
    so ``AutoTokenizer``, which maps a Qwen2 config to ``Qwen2Tokenizer`` and rebuilds the pipeline
    from the vocabulary, gives the same ids: lm-eval, verl and vLLM read the folder like a hub model.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    # printable ASCII first (the tokens the probe uses), then the remaining bytes
    order = sorted(range(256), key=lambda b: (not (32 <= b < 127 or b in (9, 10)), b))
    alphabet = byte_alphabet()
    for b in order:
        vocab[alphabet[b]] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                  bos_token=None)
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
    tok.save_pretrained(out)
    return out

