"""Load a policy (model + tokenizer) from a local directory, a hub name, or SmolLM2's GGUF file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_tokenizer(path: str | Path):
    """The policy's tokenizer (plain ``AutoTokenizer``), left-padded for batched generation.

    Folders written before the tiny tokenizer became byte-level carry a ``crossed_rlvr_tokenizer: char``
    marker; those are read with ``PreTrainedTokenizerFast`` so their character pipeline is kept."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg_path = Path(path) / "tokenizer_config.json"
    is_char = cfg_path.exists() and json.loads(cfg_path.read_text()).get("crossed_rlvr_tokenizer") == "char"
    tok = (PreTrainedTokenizerFast if is_char else AutoTokenizer).from_pretrained(str(path))
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(path: str | Path, dtype: str = "float32", device: str = "cpu") -> tuple[Any, Any]:
    """(model, tokenizer) from a Hugging Face model directory or hub name, in eval mode, its weights in ``dtype`` on
    ``device`` (``cpu`` or ``cuda``: the evaluation passes ``eval.device`` resolved, ``eval/generate/device.py``)."""
    import torch
    from transformers import AutoModelForCausalLM

    local = Path(path)
    if not local.exists() and ("/" not in str(path) or str(path).startswith((".", "/"))):
        raise FileNotFoundError(f"model {path}: no such directory (and not a hub name)")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype)).to(device)
    model.eval()
    return model, load_tokenizer(path)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def copy_tokenizer_files(src: str | Path, dst: str | Path) -> None:
    """Copy a policy's tokenizer files next to new weights (keeps the char-tokenizer marker)."""
    import shutil

    for name in TOKENIZER_FILES:
        if (Path(src) / name).exists():
            shutil.copy2(Path(src) / name, Path(dst) / name)
