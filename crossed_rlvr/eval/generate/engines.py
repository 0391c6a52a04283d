"""Generation backends behind one interface: transformers (batched, on the CPU or a GPU: ``eval.device``), vLLM.

Both take prompts that are already chat-formatted token ids, one seed per prompt (base + item id,
paper 001 App. C.1), temperature, top-p, a max-new-token budget and a context limit. A length
check before generation refuses any prompt that would need input truncation; nothing is cut
silently. Each generation records its finish reason (``stop`` or ``length``) and token counts. Both
backends stop on one set of token ids (``stop_token_ids``) and never count the stop token.

The transformers backend samples with its own loop instead of ``generate``: ``generate`` draws one
random stream per batch, so a response would depend on its batch-mates. Here every row has its
own ``torch.Generator`` seeded with the item seed and draws exactly one uniform per step, so the
same item seed gives the same response whatever batch it falls in. Both backends batch continuously: up to
``eval.batch_size`` rows decode together, and a row that ends makes room for the next prompt at once
(``stream``), instead of the batch stepping on until its longest row ends. vLLM is imported only when chosen.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from crossed_rlvr.errors import ConfigError, CrossedError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch
    from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase
    from vllm.outputs import CompletionOutput


@dataclass(frozen=True)
class GenParams:
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 640
    context_limit: int = 4096


@dataclass(frozen=True)
class Generation:
    text: str
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int
    response_tokens: int
    # the tokens as made, the stop token included (a trainer scores these; records keep the text)
    token_ids: tuple[int, ...] = field(default=(), compare=False, repr=False)


class ContextLengthError(CrossedError, ValueError):
    """A prompt plus the output budget does not fit the context limit (no silent truncation)."""


def check_lengths(prompt_ids: list[list[int]], params: GenParams, names: list[str] | None = None) -> None:
    for k, ids in enumerate(prompt_ids):
        if len(ids) + params.max_new_tokens > params.context_limit:
            who = names[k] if names else f"prompt {k}"
            raise ContextLengthError(
                f"{who}: {len(ids)} prompt tokens + {params.max_new_tokens} new tokens exceed the context limit "
                f"{params.context_limit}; raise the limit or shorten the prompt (inputs are never truncated)"
            )


class Backend(Protocol):
    """An engine: ``generate`` answers every prompt in order; ``stream`` yields (index, generation) as each finishes,
    with the engine's batch refilled as rows end (the evaluation writes responses as they come)."""

    def generate(
        self, prompt_ids: list[list[int]], seeds: list[int], params: GenParams
    ) -> list[Generation]: ...

    def stream(
        self, prompt_ids: list[list[int]], seeds: list[int], params: GenParams
    ) -> Iterator[tuple[int, Generation]]: ...


# end-of-turn markers of common chat formats (ChatML/Qwen, Llama 3, Gemma, Phi-3): a chat policy ends its turn with
# one, and a policy folder need not list it as an eos anywhere (a base model's tokenizer and config say endoftext)
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


class GenerationError(CrossedError, RuntimeError):
    """An engine ended a request neither by a stop token nor by the length budget (a record allows only these)."""


def stop_token_ids(tokenizer: PreTrainedTokenizerBase, generation_config: GenerationConfig | None = None) -> set[int]:
    """The token ids that end a response, the same for every backend: the tokenizer's eos, the generation
    config's eos (one id or a list), and the chat template's end-of-turn marker where the tokenizer has it."""
    ids = {tokenizer.eos_token_id, *end_of_turn_ids(tokenizer)}
    gen_eos = getattr(generation_config, "eos_token_id", None)
    if gen_eos is not None:
        ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return {int(i) for i in ids if i is not None}


def end_of_turn_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Ids of the END_OF_TURN markers the tokenizer has as tokens and its chat template writes (all of them that
    it has when there is no template to read)."""
    template = getattr(tokenizer, "chat_template", None)
    text = " ".join(template.values()) if isinstance(template, dict) else template
    vocab = tokenizer.get_vocab()
    return [vocab[m] for m in END_OF_TURN if m in vocab and (not isinstance(text, str) or m in text)]


def folder_generation_config(path: str) -> Any:
    """A policy's generation config as transformers and vLLM read it: ``generation_config.json``, else the one
    derived from ``config.json``, else None."""
    from transformers import AutoConfig, GenerationConfig

    try:
        return GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json
        pass
    try:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(path))
    except (OSError, ValueError):  # no readable config.json either
        return None


class HFBackend:
    """transformers forward passes with a KV cache, left padding and per-row seeded sampling."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 16,
                 shared_prefix: bool = False, prefix_cache: bool = False):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        # the prompts' common first tokens (a chat template's system turn) prefilled once a stream (eval.shared_prefix)
        self.shared_prefix = shared_prefix
        # a prompt prefilled from the cache of an earlier one it shares more with (eval.prefix_cache)
        self.prefix_cache = prefix_cache
        self.device = getattr(model, "device", "cpu")  # inputs go where the weights are (eval.device)
        self.stop_ids = stop_token_ids(tokenizer, getattr(model, "generation_config", None))
        self.pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(self.stop_ids))
        )
        # Only the last position's logits are read: a model that can skip the others (transformers' causal LMs take
        # ``logits_to_keep``) is asked to, so the prompt pass never multiplies every prompt position by the whole
        # vocabulary (the output layer dominates a small model's prefill; ``generate`` skips it alike).
        self.last_only = {"logits_to_keep": 1} if accepts(model, "logits_to_keep") else {}

    def generate(self, prompt_ids: list[list[int]], seeds: list[int], params: GenParams) -> list[Generation]:
        return in_order(self.stream(prompt_ids, seeds, params), len(prompt_ids))

    def stream(self, prompt_ids: list[list[int]], seeds: list[int], params: GenParams
               ) -> Iterator[tuple[int, Generation]]:
        """(index, generation) of each prompt as it finishes, decoding at most ``batch_size`` rows at a time.

        Continuous batching: a row that finishes leaves the batch and the next prompts (shortest first, so
        joiners need little padding) are prefilled and join it, their caches left-padded to the batch's width.
        A batch that waits for its longest row decodes its finished rows' slots for nothing (on the real-cpu
        study's items, batches of 8 step ~1.5x as often as refilled ones). Each row still draws one uniform
        per token from its own generator, so its stream never depends on its batch-mates."""
        check_lengths(prompt_ids, params)
        run = _Decoding(self, params, seeds, common_prefix(prompt_ids) if self.shared_prefix else [])
        if self.prefix_cache:
            run.lead_by(prefix_leaders(prompt_ids, MIN_SHARED_PREFIX))
        pending = list(reversed(join_order(prompt_ids, run.leader)))  # popped from the end
        while pending or run.rows:
            free = self.batch_size - len(run.rows)
            with _inference():  # never around a yield: the consumer's own code runs outside inference mode
                if pending and free > 0 and (not run.rows or run.joinable()):
                    run.join([pending.pop() for _ in range(min(free, len(pending)))], prompt_ids)
                else:
                    run.step()
            yield from run.finished()

    @staticmethod
    def _sample(logits: torch.Tensor, u: torch.Tensor, params: GenParams) -> torch.Tensor:
        """Token per row: greedy at T=0, else nucleus sampling by inverse CDF at the row's uniform u."""
        import torch

        if params.temperature <= 0:
            return torch.argmax(logits, dim=-1)
        probs = torch.softmax(logits / params.temperature, dim=-1)
        # Fast path: the nucleus almost always lies within the top few hundred tokens; rows whose
        # top-k mass falls short of top_p are redone with a full sort. Both paths are exact.
        k = min(probs.shape[-1], 512)
        sorted_p, sorted_i = torch.topk(probs, k, dim=-1, sorted=True)
        if params.top_p >= 1.0:  # the whole vocabulary is the nucleus: only rows whose draw lies past the top k sort
            return HFBackend._whole(probs, sorted_p, sorted_i, u)
        short = sorted_p.sum(dim=-1) < params.top_p
        if bool(short.any()):
            full_p, full_i = torch.sort(probs[short], dim=-1, descending=True, stable=True)
            picks = HFBackend._nucleus(sorted_p, sorted_i, u, params.top_p)
            picks[short] = HFBackend._nucleus(full_p, full_i, u[short], params.top_p)
            return picks
        return HFBackend._nucleus(sorted_p, sorted_i, u, params.top_p)

    @staticmethod
    def _whole(probs: torch.Tensor, top_p: torch.Tensor, top_i: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Inverse-CDF sampling over the whole vocabulary (top_p = 1) in the order of a stable descending sort: the
        token where the cumulative mass first reaches u times the total. Found among the top k when it lies before the
        k-th largest probability's ties (which ``topk`` may break otherwise than the sort), else by a full sort, which
        was a third of a decoding step when every row took it."""
        import torch

        by_index, perm = torch.sort(top_i, dim=-1)  # the candidates by token id, then stably by probability:
        p, order = torch.sort(top_p.gather(-1, perm), dim=-1, descending=True, stable=True)  # ties by token id
        ids = by_index.gather(-1, order)
        cum = torch.cumsum(p, dim=-1)
        above = (p > p[:, -1:]).sum(dim=-1)  # candidates strictly above the k-th largest: the sort's own first ones
        settled = torch.where(above > 0, cum.gather(-1, (above - 1).clamp(min=0)[:, None]).squeeze(-1), 0.0)
        target = u * probs.sum(dim=-1)
        beyond = target > settled
        picks = ids.gather(-1, torch.searchsorted(cum, target[:, None]).clamp(max=cum.shape[-1] - 1)).squeeze(-1)
        if bool(beyond.any()):
            full_p, full_i = torch.sort(probs[beyond], dim=-1, descending=True, stable=True)
            picks[beyond] = HFBackend._nucleus(full_p, full_i, u[beyond], 1.0)
        return picks

    @staticmethod
    def _nucleus(sorted_p: torch.Tensor, sorted_i: torch.Tensor, u: torch.Tensor, top_p: float) -> torch.Tensor:
        import torch

        cum = torch.cumsum(sorted_p, dim=-1)
        # Nucleus: the smallest prefix whose mass reaches top_p (always at least one token).
        n_keep = ((cum - sorted_p) < top_p).sum(dim=-1).clamp(min=1)
        mass = cum.gather(-1, (n_keep - 1)[:, None])
        pick = torch.searchsorted(cum, u[:, None] * mass).squeeze(-1)
        pick = torch.minimum(pick, n_keep - 1)
        return sorted_i.gather(-1, pick[:, None]).squeeze(-1)


MIN_SHARED_PREFIX = 8  # tokens: a shorter common start is not worth a cache of its own


def common_prefix(prompt_ids: list[list[int]]) -> list[int]:
    """The prompts' longest common first tokens, one short of the shortest prompt (every prompt keeps a token of its
    own to prefill); empty when shorter than ``MIN_SHARED_PREFIX``."""
    if not prompt_ids:
        return []
    first, n = prompt_ids[0], min(map(len, prompt_ids)) - 1
    for prompt in prompt_ids[1:]:
        n = next((k for k in range(n) if prompt[k] != first[k]), n)
    return list(first[:n]) if n >= MIN_SHARED_PREFIX else []


def shared_length(a: list[int], b: list[int]) -> int:
    """How many first tokens two prompts share."""
    n = min(len(a), len(b))
    return next((k for k in range(n) if a[k] != b[k]), n)


def prefix_leaders(prompt_ids: list[list[int]], block: int) -> list[int]:
    """Each prompt's leader: the first prompt holding the same whole KV-cache blocks that it shares with any other
    prompt, where those are more than every prompt shares (the chat template's system turn); else itself. Prompts
    sorted by their tokens put each one beside those it shares most with."""
    order = sorted(range(len(prompt_ids)), key=lambda k: prompt_ids[k])
    near = [0] * len(prompt_ids)  # tokens each prompt shares with its nearest neighbour
    for a, b in itertools.pairwise(order):
        n = shared_length(prompt_ids[a], prompt_ids[b])
        near[a], near[b] = max(near[a], n), max(near[b], n)
    # what every prompt shares: the first and the last in sorted order share only that
    everyone = shared_length(prompt_ids[order[0]], prompt_ids[order[-1]]) // block if len(order) > 1 else 0
    leaders: dict[tuple[int, ...], int] = {}
    out = []
    for k, prompt in enumerate(prompt_ids):
        whole = near[k] // block
        key = tuple(prompt[: whole * block])
        out.append(leaders.setdefault(key, k) if whole > everyone else k)
    return out


def join_order(prompt_ids: list[list[int]], leader: list[int]) -> list[int]:
    """The order prompts join a transformers stream: shortest first (joiners need little padding), each prompt's
    followers (``leader``: ``prefix_leaders``) right after it, so its cache is fresh when they join."""
    followers: dict[int, list[int]] = {}
    for k, lead in enumerate(leader):
        if lead != k:
            followers.setdefault(lead, []).append(k)
    heads = sorted((k for k, lead in enumerate(leader) if lead == k), key=lambda k: len(prompt_ids[k]))
    return [j for k in heads for j in (k, *followers.get(k, ()))]


def in_order(stream: Iterator[tuple[int, Generation]], n: int) -> list[Generation]:
    """A stream's ``n`` generations in the order of their prompts (each backend's ``generate``)."""
    out = dict(stream)
    return [out[k] for k in range(n)]  # every prompt is handed over once


def uniforms(seeds: list[int], n: int) -> torch.Tensor:
    """Each seed's first ``n`` float64 uniforms from a CPU generator seeded with it (one row per seed): the i-th is
    the one its row's i-th token is sampled with. Drawn at once per row, they are the draws one at a time would give
    (a canary test holds torch to that), so no row's draw is made in Python at each decoding step; CPU generators on
    every device, so an item seed samples alike on a GPU."""
    import torch

    return torch.stack([torch.rand(n, generator=torch.Generator().manual_seed(int(s)), dtype=torch.float64)
                        for s in seeds])


def _inference() -> Any:  # Any: torch's inference-mode context, imported late
    import torch

    return torch.inference_mode()


class _Decoding:
    """The rows one ``HFBackend.stream`` decodes together: their KV cache, attention mask, positions and tokens.

    Rows are indices into the prompts. A row's cache is left-padded (mask 0) to the batch's width; columns no
    row attends to any more are cut from the left after rows leave, so the width stays that of the longest
    row. Only a cache of plain growing layers (``DynamicLayer``) can take joiners mid-batch; any other
    (sliding windows) waits until its batch has drained."""

    def __init__(self, backend: HFBackend, params: GenParams, seeds: list[int], prefix: list[int] | None = None):
        import torch

        self.b, self.params = backend, params
        # the shared first tokens and their cache (Any: the model's cache object)
        self.prefix, self.prefix_cache = list(prefix or []), cast(Any, None)
        self.greedy, self.seeds = params.temperature <= 0, seeds
        self.stops = torch.tensor(sorted(backend.stop_ids), dtype=torch.long, device=backend.device)
        self.prompt_len: dict[int, int] = {}
        self.done: list[tuple[int, Generation]] = []
        # eval.prefix_cache: each prompt's leader (itself: none), and each leader's prompt cache, one (keys, values)
        # a layer, kept until its last follower has joined
        self.leader: list[int] = list(range(len(seeds)))
        self.following: dict[int, int] = {}  # each leader's followers yet to join
        self.kept: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self._empty()

    def lead_by(self, leader: list[int]) -> None:
        """Prefill each prompt from its leader's cache (``prefix_leaders``; a leader comes before its followers)."""
        self.leader = leader
        self.following = dict(Counter(lead for k, lead in enumerate(leader) if lead != k))

    def _empty(self) -> None:
        import torch

        self.rows: list[int] = []
        self.past: Any = None  # Any: the model's cache object
        self.mask = self.positions = self.last = self.made = torch.zeros(0, dtype=torch.long)
        # each row's picks so far (row by row with ``rows``), read once when the row leaves
        self.seq = torch.zeros((0, self.params.max_new_tokens), dtype=torch.long)
        # each row's uniforms, one per token it may make (drawn when it joins; see ``uniforms``)
        self.u = torch.zeros((0, self.params.max_new_tokens), dtype=torch.float64)

    def joinable(self) -> bool:
        return self.joinable_cache(self.past)

    @staticmethod
    def joinable_cache(cache: Any) -> bool:  # Any: the model's cache object
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None) or []
        return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)

    def join(self, new: list[int], prompt_ids: list[list[int]]) -> None:
        """Prefill the prompts ``new`` and add them to the batch: a follower whose leader has been prefilled from its
        leader's cache, the others left-padded among themselves."""
        heads = [k for k in new if self.leader[k] == k]
        if heads:
            self._join_whole(heads, prompt_ids)
        rest = [k for k in new if k not in heads]
        for k in rest:
            if self.leader[k] != k:
                self._join_follower(k, prompt_ids)
        alone = [k for k in rest if self.leader[k] == k]  # followers of a cache that cannot be shared
        if alone:
            self._join_whole(alone, prompt_ids)

    def _join_follower(self, k: int, prompt_ids: list[list[int]]) -> None:
        """Prefill prompt ``k`` past the tokens it shares with its leader, on a copy of the leader's cache of them
        (the keys carry their positions, which are the same in both prompts), and add it to the batch."""
        import torch
        from transformers.cache_utils import DynamicCache

        lead = self.leader[k]
        prompt, dev = prompt_ids[k], self.b.device
        n = min(len(prompt) - 1, shared_length(prompt, prompt_ids[lead]))
        # the cache copies what it is given (its layers grow by concatenation), so the leader's stays as it is
        past = DynamicCache(ddp_cache_data=[(keys[:, :, :n], values[:, :, :n]) for keys, values in self.kept[lead]])
        self.following[lead] -= 1
        if not self.following[lead]:  # its last follower
            del self.kept[lead]
        ids = torch.tensor([prompt[n:]], device=dev)
        mask = torch.ones((1, len(prompt)), dtype=torch.long, device=dev)
        positions = torch.arange(n, len(prompt), device=dev)[None]
        out = self.b.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=past,
                           use_cache=True, **self.b.last_only)
        self.prompt_len[k] = len(prompt)
        self._add([k], out.past_key_values, mask, positions, out.logits[:, -1, :])

    def _join_whole(self, new: list[int], prompt_ids: list[list[int]]) -> None:
        """Prefill the prompts ``new`` (left-padded among themselves) and add them to the batch."""
        import torch

        dev = self.b.device
        if self.prefix and self.prefix_cache is None:
            self._prefill_prefix()
        cut = len(self.prefix)  # each prompt past the shared prefix, whose cache every joiner starts from
        # identical prompts (a GRPO group, several samples of one item) are prefilled once and their cache copied
        first: dict[tuple[int, ...], int] = {}
        of = [first.setdefault(tuple(prompt_ids[k][cut:]), len(first)) for k in new]
        unique = list({tuple(prompt_ids[k][cut:]): prompt_ids[k][cut:] for k in new}.values())
        width = max(len(p) for p in unique)
        ids = torch.full((len(unique), width), self.b.pad_id, dtype=torch.long)
        mask = torch.zeros((len(unique), width), dtype=torch.long)
        for r, p in enumerate(unique):
            ids[r, width - len(p):] = torch.tensor(p)
            mask[r, width - len(p):] = 1
        for k in new:
            self.prompt_len[k] = len(prompt_ids[k])
        ids, mask = ids.to(dev), mask.to(dev)
        positions = (mask.cumsum(-1) - 1).clamp(min=0) + cut  # a token's position is the one it has in its prompt
        past = None
        if cut:  # [prefix | left padding | rest of the prompt]: the padding masked, as at the left
            past = self._prefixed(len(unique))
            mask = torch.cat([torch.ones((len(unique), cut), dtype=mask.dtype, device=dev), mask], dim=1)
        out = self.b.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=past,
                           use_cache=True, **self.b.last_only)
        past, logits = out.past_key_values, out.logits[:, -1, :]
        if len(unique) < len(new):
            rows = torch.tensor(of, device=dev)
            past.batch_select_indices(rows)
            mask, positions, logits = mask[rows], positions[rows], logits[rows]
        if self.following and not self.joinable_cache(past):  # sliding windows: every prompt prefilled whole
            self.lead_by(list(range(len(self.leader))))
        for r, k in enumerate(new):
            if self.following.get(k):  # a leader: its prompt's cache, the padding left out, for its followers
                cols = mask[r].nonzero().squeeze(-1)  # indexing by a tensor copies
                self.kept[k] = [(layer.keys[r:r + 1, :, cols], layer.values[r:r + 1, :, cols]) for layer in past.layers]
        self._add(new, past, mask, positions, logits)

    def _add(self, new: list[int], past: Any,  # Any: the model's cache object
             mask: torch.Tensor, positions: torch.Tensor, logits: torch.Tensor) -> None:
        """Add the prefilled rows ``new`` (their cache ``past``, attention ``mask``, ``positions`` and last logits)
        to the batch, and let each pick its first token."""
        import torch

        dev = self.b.device
        if self.rows:
            self._merge(past, mask)
        else:
            self.past, self.mask = past, mask
        self.rows = self.rows + new
        self.positions = torch.cat([self.positions.to(dev), positions[:, -1:]])
        self.made = torch.cat([self.made, torch.zeros(len(new), dtype=torch.long)])
        self.seq = torch.cat([self.seq, torch.zeros((len(new), self.params.max_new_tokens), dtype=torch.long)])
        if not self.greedy:
            self.u = torch.cat([self.u, uniforms([self.seeds[k] for k in new], self.params.max_new_tokens)])
        self._pick(logits, rows=new)

    def _prefixed(self, rows: int) -> Any:  # Any: the model's cache object
        """A cache holding the shared prefix (prefilled at the first join) for ``rows`` rows."""
        import copy

        cache = copy.deepcopy(self.prefix_cache)
        cache.batch_repeat_interleave(rows)
        return cache

    def _prefill_prefix(self) -> None:
        """The shared prefix's cache, once; a cache of other layers than plain growing ones (sliding windows) is not
        shared (each prompt is then prefilled whole)."""
        import torch

        ids = torch.tensor([self.prefix], device=self.b.device)
        self.prefix_cache = self.b.model(input_ids=ids, use_cache=True, **self.b.last_only).past_key_values
        if not self.joinable_cache(self.prefix_cache):
            self.prefix, self.prefix_cache = [], None

    def step(self) -> None:
        """One decoding step of every row."""
        import torch

        self.mask = torch.cat([self.mask, torch.ones((len(self.rows), 1), dtype=torch.long, device=self.b.device)], 1)
        self.positions = self.positions + 1
        out = self.b.model(input_ids=self.last[:, None], attention_mask=self.mask, position_ids=self.positions,
                           past_key_values=self.past, use_cache=True, **self.b.last_only)
        self.past = out.past_key_values
        self._pick(out.logits[:, -1, :], rows=self.rows)

    def _pick(self, logits: torch.Tensor, rows: list[int]) -> None:
        """Each row of ``rows`` (the last rows of the batch) picks its next token; rows that end leave."""
        import torch

        n_old = len(self.rows) - len(rows)
        if self.greedy:  # the argmax of the float32 logits is that of their float64 copy
            picks = torch.argmax(logits, dim=-1)
        else:  # the row's next uniform: its stream never depends on its batch-mates
            u = self.u[n_old:].gather(1, self.made[n_old:, None]).squeeze(1)
            picks = HFBackend._sample(logits.double(), u.to(self.b.device), self.params)
        self.last = picks if n_old == 0 else torch.cat([self.last, picks])
        self.made[n_old:] += 1
        self.seq[torch.arange(n_old, len(self.rows)), self.made[n_old:] - 1] = picks.cpu()
        ends = torch.isin(self.last, self.stops).cpu()
        full = self.made >= self.params.max_new_tokens
        leave = ends | full
        if bool(leave.any()):
            self._leave(leave, ends)

    def _leave(self, leave: torch.Tensor, ends: torch.Tensor) -> None:
        """The rows ``leave`` marks end (``ends``: at a stop token, else at the length budget); the rest go on."""
        for r in leave.nonzero().squeeze(-1).tolist():  # per leaving row, never per step
            k = self.rows[r]
            made = self.seq[r, : int(self.made[r])].tolist()
            ids = [t for t in made if t not in self.b.stop_ids]
            text = self.b.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            self.done.append((k, Generation(text, "stop" if bool(ends[r]) else "length", self.prompt_len.pop(k),
                                            len(ids), tuple(made))))
        keep = (~leave).nonzero().squeeze(-1)
        if len(keep) == 0:
            self._empty()
            return
        self.rows = [self.rows[r] for r in keep.tolist()]
        sel = keep.to(self.b.device)
        self.past.batch_select_indices(sel)
        self.mask, self.positions, self.last = self.mask[sel], self.positions[sel], self.last[sel]
        self.made, self.seq = self.made[keep], self.seq[keep]
        if not self.greedy:
            self.u = self.u[keep]
        used = self.mask.any(0)
        if not bool(used[0]):  # columns only departed rows attended to
            self._cut(int(used.int().argmax()))

    def _cut(self, lead: int) -> None:
        for layer in self.past.layers:
            layer.keys, layer.values = layer.keys[:, :, lead:], layer.values[:, :, lead:]
        self.mask = self.mask[:, lead:]

    def _merge(self, new_past: Any, new_mask: torch.Tensor) -> None:  # Any: the model's cache object
        """Append the joiners' cache and mask to the batch's, the narrower one left-padded with masked zeros."""
        import torch

        width = max(self.mask.shape[1], new_mask.shape[1])

        def pad(t: torch.Tensor, dim: int) -> torch.Tensor:
            short = width - t.shape[dim]
            if short == 0:
                return t
            shape = list(t.shape)
            shape[dim] = short
            return torch.cat([t.new_zeros(shape), t], dim=dim)

        for mine, theirs in zip(self.past.layers, new_past.layers, strict=True):
            mine.keys = torch.cat([pad(mine.keys, 2), pad(theirs.keys, 2)])
            mine.values = torch.cat([pad(mine.values, 2), pad(theirs.values, 2)])
        self.mask = torch.cat([pad(self.mask, 1), pad(new_mask, 1)])

    def finished(self) -> list[tuple[int, Generation]]:
        out, self.done = self.done, []
        return out


class VLLMBackend:
    """vLLM on a GPU: one SamplingParams per prompt carries the item seed; exact token ids are passed.

    It stops on the token ids the transformers backend stops on (``stop_token_ids``), counts a response's tokens
    without the stop token, and refuses a request that ended any other way than ``stop`` or ``length``.

    ``close`` shuts the engine down explicitly (the runner calls it before the next policy loads):
    leaving it to garbage collection keeps the first policy's weights and KV cache on the GPU."""

    def __init__(
        self, model_path: str, dtype: str = "bfloat16", context_limit: int = 4096, cpu_kvcache_gib: int = 1,
        tokenizer: PreTrainedTokenizerBase | None = None, **engine_kwargs: Any  # Any: vLLM's LLM(...) options
    ):
        import os

        from crossed_rlvr.machine import cpu_build
        from crossed_rlvr.policies.loading import load_tokenizer

        if cpu_build():  # vLLM's CPU build: its KV cache size, and the engine in this process (no spawn)
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(cpu_kvcache_gib)))
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            # no chunked prefill: after a prompt split over engine steps vLLM rewinds the request's seeded generator
            # by a Philox offset, which a CPU generator lacks (every request here carries its item's seed)
            engine_kwargs.setdefault("enable_chunked_prefill", False)
        # vLLM adds the tokenizer's and the generation config's eos itself, never a chat end-of-turn marker
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model_path)
        self.stop_ids = stop_token_ids(tokenizer, folder_generation_config(model_path))
        from vllm import LLM  # imported only when this backend is chosen

        self.llm = LLM(model=model_path, dtype=dtype, max_model_len=context_limit, seed=0, **engine_kwargs)
        self.streams = 0  # request ids are unique per engine: each stream's own prefix

    def generate(self, prompt_ids: list[list[int]], seeds: list[int], params: GenParams) -> list[Generation]:
        return in_order(self.stream(prompt_ids, seeds, params), len(prompt_ids))

    def stream(self, prompt_ids: list[list[int]], seeds: list[int], params: GenParams
               ) -> Iterator[tuple[int, Generation]]:
        """(index, generation) of each prompt as vLLM finishes it. The engine is handed as many prompts as its KV cache
        holds at their longest (prompt and ``max_new_tokens``), more as requests end, and keeps up to ``max_num_seqs``
        (``eval.batch_size``) of them running: its scheduler fills the batch from every cell of the policy at once,
        and never has to preempt a request for room (vLLM recomputes a preempted request with a fresh generator, so
        a seeded sample would then depend on what else was running). A prompt that shares cache blocks with an
        earlier one beyond what every prompt shares (an item's question under another request or wording) follows it:
        it is handed over once that one has been prefilled, so it reads the shared blocks from vLLM's prefix cache
        (prompts prefilled in the same step share nothing). A consumer that stops early leaves no request queued."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        check_lengths(prompt_ids, params)
        engine = self.llm.llm_engine
        self.streams += 1
        ids: dict[str, int] = {}
        room, block = self.cache_blocks()
        held: dict[int, int] = {}  # prompt -> the cache blocks it may take, while the engine has it
        leader = prefix_leaders(prompt_ids, block)
        started: set[int] = set()  # prompts the engine has prefilled (it returned their first token)
        deferred: list[int] = []  # followers waiting for their leader's prefill, in prompt order

        def blocks(k: int) -> int:
            return -(-(len(prompt_ids[k]) + params.max_new_tokens) // block)

        def fits(k: int) -> bool:  # at least one request runs whatever its length (check_lengths bounds it)
            return room is None or not held or sum(held.values()) + blocks(k) <= room

        def add(k: int) -> None:
            sampling = SamplingParams(temperature=params.temperature,
                                      top_p=params.top_p if params.temperature > 0 else 1.0,
                                      max_tokens=params.max_new_tokens, seed=int(seeds[k]),
                                      stop_token_ids=sorted(self.stop_ids))
            asked = f"s{self.streams}-{k}"
            ids[asked] = k
            ids[str(engine.add_request(asked, TokensPrompt(prompt_token_ids=prompt_ids[k]), sampling))] = k
            held[k] = blocks(k)

        waiting = iter(range(len(prompt_ids)))
        nxt = next(waiting, None)

        def admit() -> None:
            nonlocal nxt
            while deferred and leader[deferred[0]] in started and fits(deferred[0]):
                add(deferred.pop(0))
            while nxt is not None and fits(nxt):
                if leader[nxt] == nxt or leader[nxt] in started:
                    add(nxt)
                else:
                    deferred.append(nxt)
                nxt = next(waiting, None)

        try:
            admit()
            while engine.has_unfinished_requests() or deferred:
                for out in engine.step():
                    k = ids[str(out.request_id)]
                    started.add(k)
                    if out.finished:
                        held.pop(k, None)
                        yield k, self._generation(k, int(seeds[k]), prompt_ids[k], out.outputs[0])
                admit()
        finally:
            if engine.has_unfinished_requests():
                engine.abort_request(list(ids))

    def cache_blocks(self) -> tuple[int | None, int]:
        """The blocks of the engine's KV cache and the tokens a block holds, once the engine has sized it (None blocks
        where this process cannot see them: an engine core in another process keeps its own count)."""
        cache = getattr(getattr(self.llm.llm_engine, "vllm_config", None), "cache_config", None)
        blocks = getattr(cache, "num_gpu_blocks", None)
        return (int(blocks) if blocks else None), int(getattr(cache, "block_size", None) or 16)

    def _generation(self, k: int, seed: int, prompt: list[int], out: CompletionOutput) -> Generation:
        """One record's generation from vLLM's ``CompletionOutput``; its ``token_ids`` end with the stop token, which
        the transformers backend never counts."""
        reason = str(out.finish_reason)
        if reason not in ("stop", "length"):  # abort, error, repetition: not a response the policy finished
            raise GenerationError(
                f"prompt {k} of the batch (item seed {seed}): vLLM ended the request with finish reason {reason!r}, "
                "not stop or length; nothing is recorded for it (re-run to generate it)"
            )
        tokens = list(out.token_ids)
        if reason == "stop" and tokens and tokens[-1] in self.stop_ids:
            tokens = tokens[:-1]
        return Generation(out.text, reason, len(prompt), len(tokens))

    def close(self) -> None:
        import contextlib
        import gc

        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        shutdown = getattr(llm, "shutdown", None)  # LLM.shutdown() where vLLM has it
        if callable(shutdown):
            shutdown()
        else:  # the V1 engine core process otherwise
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            if core is not None and callable(getattr(core, "shutdown", None)):
                core.shutdown()
        del llm
        with contextlib.suppress(Exception):
            from vllm.distributed.parallel_state import (
                destroy_distributed_environment,
                destroy_model_parallel,
            )

            destroy_model_parallel()
            destroy_distributed_environment()
        gc.collect()
        with contextlib.suppress(Exception):
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def accepts(model: Any, name: str) -> bool:  # Any: a transformers model, or a stand-in without forward
    """Whether the model's forward takes the keyword ``name``."""
    import inspect

    forward = getattr(model, "forward", None)
    if forward is None:
        return False
    try:
        return name in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def release(loaded: dict[str, tuple[Backend, PreTrainedTokenizerBase]]) -> None:
    """Shut down every loaded engine (a vLLM engine holds its GPU memory until closed) and forget them."""
    for backend, _ in loaded.values():
        close = getattr(backend, "close", None)
        if callable(close):
            close()
    loaded.clear()


class EngineSettings(Protocol):
    """What ``load_backend`` reads of the ``eval`` settings: the schema's ``EvalConf``, or on a bare GPU image (torch
    alone, no OmegaConf to build the schema with) any object with these fields (scripts/device_check.py)."""

    @property
    def backend(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def context_limit(self) -> int: ...
    @property
    def cpu_kvcache_gib(self) -> int: ...
    @property
    def gpu_memory_utilization(self) -> float: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def enforce_eager(self) -> bool: ...
    @property
    def linear(self) -> str | None: ...
    @property
    def attention(self) -> str | None: ...
    @property
    def shared_prefix(self) -> bool | None: ...
    @property
    def prefix_cache(self) -> bool | None: ...


def load_backend(path: str, gen: EngineSettings) -> tuple[Backend, PreTrainedTokenizerBase]:
    """The engine and tokenizer of one policy for the ``eval`` settings ``gen`` (vLLM or transformers), with
    ``eval.device`` and ``eval.dtype`` resolved on this machine (``eval/generate/device.py``)."""
    from crossed_rlvr.eval.generate.device import resolve_device, resolve_dtype

    device = resolve_device(gen.device)
    dtype = resolve_dtype(gen.dtype, device)
    if gen.backend == "vllm":
        if gen.attention is not None:
            raise ConfigError(f"eval.attention={gen.attention} sets the transformers backend's attention; vLLM "
                              "chooses its own (leave eval.attention unset with eval.backend=vllm)")
        for name in ("shared_prefix", "prefix_cache"):
            if getattr(gen, name):
                raise ConfigError(f"eval.{name} is the transformers backend's; vLLM caches common prefixes itself "
                                  f"(leave eval.{name} unset with eval.backend=vllm)")
        from crossed_rlvr.policies.loading import load_tokenizer

        tokenizer = load_tokenizer(path)
        backend = VLLMBackend(path, dtype=dtype, context_limit=int(gen.context_limit), tokenizer=tokenizer,
                              cpu_kvcache_gib=int(gen.cpu_kvcache_gib),
                              gpu_memory_utilization=gen.gpu_memory_utilization,
                              tensor_parallel_size=gen.tensor_parallel_size, enforce_eager=bool(gen.enforce_eager),
                              max_num_seqs=int(gen.batch_size))  # rows decoded together, as the transformers backend
        return backend, tokenizer
    from crossed_rlvr.policies.loading import load_policy

    model, tokenizer = load_policy(path, dtype=dtype, device=device)
    if gen.attention is not None:
        if gen.attention == "sdpa_gqa":
            from crossed_rlvr.eval.generate.attention import register

            register()
        model.set_attn_implementation(gen.attention)
    if gen.linear == "onednn":
        if device != "cpu":
            raise ConfigError(f"eval.linear=onednn is for the CPU, but this evaluation generates on {device}; "
                              "leave eval.linear unset there")
        from crossed_rlvr.eval.generate.onednn import pack_linears

        pack_linears(model, int(gen.batch_size))
    return HFBackend(model, tokenizer, batch_size=int(gen.batch_size), shared_prefix=bool(gen.shared_prefix),
                     prefix_cache=bool(gen.prefix_cache)), tokenizer
