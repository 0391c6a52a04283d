"""A sampling copy of weights that are being trained: what training samples from when it decodes.

Sampling inside a training loop (a GRPO arm's completions, the warm start's band checks) decodes the weights as they
stand. Decoding reads every weight at every step, so it runs fastest on a copy in the sampling precision whose linear
layers read oneDNN-packed weights (``onednn.py``); the trained model keeps its fp32 masters. The copy is made once and
refreshed in place before each use: weights copied in, then packed again.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


class Snapshot:
    """``refresh(model)``: a copy of ``model``'s weights now, in ``dtype``; ``pack``: its linear layers on oneDNN-packed
    weights (CPU); ``attention``: the copy's attention implementation (None: the model's own)."""

    def __init__(self, dtype: torch.dtype, pack: bool, batch_hint: int, attention: str | None = None):
        self.dtype, self.pack, self.batch_hint, self.attention = dtype, pack, batch_hint, attention
        self.copy: PreTrainedModel | None = None

    def refresh(self, model: PreTrainedModel) -> PreTrainedModel:
        import torch

        from crossed_rlvr.eval.generate.onednn import pack_linears

        if self.copy is None:
            self.copy = copy.deepcopy(model).to(self.dtype).eval().requires_grad_(False)
            for module in self.copy.modules():  # a forward patched onto the instance (TRL's fused log-prob head)
                module.__dict__.pop("forward", None)  # calls the trained model's own: the copy runs its class's
            if self.attention is not None:
                self.copy.set_attn_implementation(self.attention)
        with torch.no_grad():
            mine = self.copy.state_dict()
            for name, tensor in model.state_dict().items():
                mine[name].copy_(tensor)
        if self.pack:
            pack_linears(self.copy, self.batch_hint)  # re-read from the refreshed weights
        return self.copy
