"""``engine.prompt_once=true``: a TRL arm's loss forward runs each group's prompt through the model once.

GRPO scores ``recipe.group_size`` completions of every prompt. TRL's forward runs prompt and completion together for
each completion, so a prompt's tokens pass the model once per completion (8 times at group size 8), and off a Triton
GPU its log-probability head scores every position, the prompt's included. On the real-cpu study's probe a prompt is
~56 tokens and a completion ~30, so most of an update's forward and backward is the same prompts again. Here the
distinct prompts run once; every completion continues from its prompt's cache (rows select it, so the gradient
of each prompt sums its completions'), and the output layer scores the completion positions only.

The log-probabilities and entropies are TRL's up to rounding (positions as TRL's forward gives them, the column index;
logits divided by the sampling temperature), a test holds them and their gradients to TRL's own. It materializes the
completions' logits (rows x completion length x vocabulary) where TRL's head works in chunks: a setting for small
models, on the CPU, where the compute is the cost; models whose output layer does more than one product (logit
soft-capping or scaling) keep TRL's forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

# config attributes of output layers that do more than the product (TRL's fused head applies them): not handled here
SCALED_HEADS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


def handles(model: PreTrainedModel) -> bool:
    """Whether this forward computes what TRL's does for ``model``: a plain causal LM whose head is one product."""
    text = model.config.get_text_config()
    return (getattr(model, "model", None) is not None and model.get_output_embeddings() is not None
            and all(getattr(text, a, None) is None for a in SCALED_HEADS))


def completion_logps(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     logits_to_keep: int, temperature: float, entropy: bool
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities (and entropies) of the last ``logits_to_keep`` tokens of each row, each distinct
    prompt (the columns before them, with their mask) run once."""
    import torch

    split = input_ids.shape[1] - logits_to_keep
    prompts = torch.cat([input_ids[:, :split], attention_mask[:, :split]], dim=1)
    distinct, row_of = torch.unique(prompts, dim=0, return_inverse=True)
    out = model.model(input_ids=distinct[:, :split], attention_mask=distinct[:, split:], use_cache=True)
    cache = out.past_key_values
    for layer in cache.layers:  # every completion continues from its prompt's cache
        layer.keys, layer.values = layer.keys[row_of], layer.values[row_of]
    completions = input_ids[:, split:]
    cont = model.model(input_ids=completions, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
    # the prompt's last position predicts the first completion token; each completion position the next
    hidden = torch.cat([out.last_hidden_state[row_of, -1:], cont.last_hidden_state[:, :-1]], dim=1)
    logits = model.get_output_embeddings()(hidden).float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, completions[..., None]).squeeze(-1)
    return picked, (-(logp.exp() * logp).sum(-1) if entropy else None)
