"""``engine.sampler=stream``: a TRL arm's GRPO completions from the evaluator's own decoder.

TRL samples through ``model.generate``: every row of the update decodes until the longest ends, and each group's
prompt is prefilled once per completion (8 times at ``recipe.group_size=8``). Its other paths do not serve a CPU: its
vLLM path fails at the first weight sync on vLLM's CPU build (whose linear layers repack their weights and drop the
loader a sync calls), and its paged path casts the trained model to bfloat16 in place. This sampler instead hands the
update's prompts to the transformers backend's continuous-batching stream (``HFBackend.stream``): a row that ends
leaves the batch, identical prompts are prefilled once (and the prompts' common start, the chat template's system
turn, once an update), and on the CPU the linear layers read oneDNN-packed copies of the weights
(``eval/generate/onednn.py``), which is where a small model's decoding step spends its time.

It samples a copy of the current weights in the precision the loss is computed in (bfloat16 under ``engine.bf16``,
as TRL's own sampling under autocast; else float32), refreshed before every generation. Each completion draws its
uniforms from its own seed (``engines.uniforms``), and the seeds are drawn from torch's global generator, which TRL
seeds from the arm's seed: the same seed gives the same completions, whatever the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class StreamSampler:
    """GRPO completions (token ids, the stop token included, as TRL's ``generate`` path returns them) from a
    packed copy of the trained model's current weights, ``batch_size`` rows decoding at once."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_new_tokens: int, temperature: float, top_p: float,
                 bf16: bool, batch_size: int, context_limit: int, cpu: bool = True):
        import torch

        from crossed_rlvr.eval.generate.engines import GenParams
        from crossed_rlvr.eval.generate.snapshot import Snapshot

        self.tokenizer, self.batch_size = tokenizer, batch_size
        self.params = GenParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                                context_limit=context_limit)
        packs = cpu and torch.backends.mkldnn.is_available()
        # a decoding step's attention (one query a row over a short cache) is ~20% faster unfused on the CPU
        self.snapshot = Snapshot(torch.bfloat16 if bf16 else torch.float32, pack=packs, batch_hint=batch_size,
                                 attention="eager" if cpu else None)

    def refresh(self, model: PreTrainedModel) -> PreTrainedModel:
        """The sampling copy holding ``model``'s weights now."""
        return self.snapshot.refresh(model)

    def sample(self, model: PreTrainedModel, prompt_ids: list[list[int]]) -> list[list[int]]:
        """One completion per prompt, in the prompts' order; seeds drawn from torch's global generator."""
        import torch

        from crossed_rlvr.eval.generate.engines import HFBackend, in_order

        seeds = torch.randint(0, 2**62, (len(prompt_ids),)).tolist()
        backend = HFBackend(self.refresh(model), self.tokenizer, self.batch_size, shared_prefix=True)
        return [list(g.token_ids) for g in in_order(backend.stream(prompt_ids, seeds, self.params), len(prompt_ids))]
