"""``eval.attention=sdpa_gqa``: transformers' fused attention with the key and value heads shared inside the kernel.

A model with fewer key/value heads than query heads (grouped-query attention: SmolLM2-135M has 3 for 9, Qwen2.5-7B 4
for 28) needs each key/value head read by several query heads. transformers' ``sdpa`` hands PyTorch's kernel the
grouping itself only when no attention mask is given (``use_gqa_in_sdpa``); a left-padded batch always has one, so
every layer of every decoding step copies the keys and values once per query head in the group (``repeat_kv``:
SmolLM2-135M at 8 rows and ~150 positions, ~2.7 MB a layer, 83 MB a step beside its 540 MB of weights). PyTorch's
kernel takes the grouping with a mask too (``enable_gqa``, torch 2.5), reading each key/value head in place; each
query head's sums are those it computes on the repeated copy (measured: equal to the bit, and a decoding step's
attention ~3x faster on the CPU). Registered with transformers under its own name, with ``sdpa``'s mask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

NAME = "sdpa_gqa"


def sdpa_gqa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **_kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa_attention_forward`` with ``enable_gqa`` whatever the mask (its attention interface)."""
    import torch

    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = query.shape[2] > 1 and attention_mask is None and causal  # as transformers': a prefill with no mask
    grouped = {"enable_gqa": True} if key.shape[1] != query.shape[1] else {}
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, is_causal=causal,
                                                           **grouped)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Make ``NAME`` an attention implementation transformers' models can be set to (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, sdpa_gqa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
