"""Generation backends behind one interface: transformers (batched, on the CPU or a GPU: ``eval.device``), vLLM.

Both take prompts that are already chat-formatted token ids, one seed per prompt (base + item id,
paper 001 App. C.1), temperature, top-p, a max-new-token budget and a context limit. A length
check before generation refuses any prompt that would need input truncation; nothing is cut
silently. Each generation records its finish reason (``stop`` or ``length``) and token counts. Both
backends stop on one set of token ids (``stop_token_ids``) and never count the stop token.

The transformers backend samples with its own loop instead of ``generate``: ``generate`` draws one
random stream per batch, so a response would depend on its batch-mates. Here every row has its
own ``torch.Generator`` seeded with the item seed and draws exactly one uniform per step, so the
same item seed gives the same response whatever batch it falls in. vLLM is imported only when
chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from crossed_rlvr.errors import CrossedError

if TYPE_CHECKING:
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
    def generate(
        self, prompt_ids: list[list[int]], seeds: list[int], params: GenParams
    ) -> list[Generation]: ...


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

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 16):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
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
        check_lengths(prompt_ids, params)
        order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))  # less padding
        out: list[Generation | None] = [None] * len(prompt_ids)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            for i, gen in zip(
                idx, self._batch([prompt_ids[i] for i in idx], [seeds[i] for i in idx], params)
            ):
                out[i] = gen
        return out  # type: ignore[return-value]

    def _batch(self, prompts: list[list[int]], seeds: list[int], params: GenParams) -> list[Generation]:
        import torch

        n, width = len(prompts), max(map(len, prompts))
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for r, ids in enumerate(prompts):
            input_ids[r, width - len(ids) :] = torch.tensor(ids)
            mask[r, width - len(ids) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        greedy = params.temperature <= 0
        # CPU generators on every device: an item seed draws the same uniforms on a GPU as on the CPU; greedy
        # decoding draws none
        gens = [] if greedy else [torch.Generator().manual_seed(int(s)) for s in seeds]
        stops = torch.tensor(sorted(self.stop_ids), dtype=torch.long, device=self.device)
        steps: list[torch.Tensor] = []  # each step's picks of the rows active then
        rows: list[torch.Tensor] = []   # which rows those were (indices into the batch)
        stopped = torch.zeros(n, dtype=torch.bool)
        active = torch.arange(n)  # rows still generating; finished rows leave the batch (and its cache)
        past = None
        cur_ids = input_ids
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            for _ in range(params.max_new_tokens):
                out = self.model(
                    input_ids=cur_ids,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=past,
                    use_cache=True,
                    **self.last_only,
                )
                past = out.past_key_values
                if greedy:  # the argmax of the float32 logits is that of their float64 copy
                    picks = torch.argmax(out.logits[:, -1, :], dim=-1)
                else:
                    # One uniform per active row per step: a row's random stream never depends on its batch-mates.
                    u = torch.stack([torch.rand((), generator=gens[r], dtype=torch.float64) for r in active.tolist()])
                    picks = self._sample(out.logits[:, -1, :].double(), u.to(self.device), params)
                ends = torch.isin(picks, stops).cpu()
                stopped[active[ends]] = True
                keep = ~ends
                steps.append(picks.cpu())
                rows.append(active)
                if not bool(keep.any()):
                    break
                if not bool(keep.all()):
                    sel = keep.nonzero().squeeze(-1).to(self.device)
                    past.batch_select_indices(sel)
                    mask, positions, picks = mask[sel], positions[sel], picks[sel]
                    active = active[keep]
                cur_ids = picks[:, None]
                mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long, device=self.device)], dim=1)
                positions = positions[:, -1:] + 1
        produced: list[list[int]] = [[] for _ in range(n)]
        for picks, who in zip(steps, rows):  # once per batch, after decoding: each row's tokens but its stop token
            for r, tok in zip(who.tolist(), picks.tolist()):
                if tok not in self.stop_ids:
                    produced[r].append(tok)
        stopped_rows = stopped.tolist()
        return [
            Generation(
                self.tokenizer.decode(
                    produced[r], skip_special_tokens=True, clean_up_tokenization_spaces=False
                ),
                "stop" if stopped_rows[r] else "length",
                len(prompts[r]),
                len(produced[r]),
            )
            for r in range(n)
        ]

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
        short = sorted_p.sum(dim=-1) < params.top_p
        if bool(short.any()):
            full_p, full_i = torch.sort(probs[short], dim=-1, descending=True, stable=True)
            picks = HFBackend._nucleus(sorted_p, sorted_i, u, params.top_p)
            picks[short] = HFBackend._nucleus(full_p, full_i, u[short], params.top_p)
            return picks
        return HFBackend._nucleus(sorted_p, sorted_i, u, params.top_p)

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

    def generate(self, prompt_ids: list[list[int]], seeds: list[int], params: GenParams) -> list[Generation]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        check_lengths(prompt_ids, params)
        sampling = [
            SamplingParams(
                temperature=params.temperature,
                top_p=params.top_p if params.temperature > 0 else 1.0,
                max_tokens=params.max_new_tokens,
                seed=int(s),
                stop_token_ids=sorted(self.stop_ids),
            )
            for s in seeds
        ]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids], sampling)
        return [self._generation(k, s, ids, o.outputs[0]) for k, (s, ids, o) in enumerate(zip(seeds, prompt_ids, outs))]

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


def load_backend(path: str, gen: EngineSettings) -> tuple[Backend, PreTrainedTokenizerBase]:
    """The engine and tokenizer of one policy for the ``eval`` settings ``gen`` (vLLM or transformers), with
    ``eval.device`` and ``eval.dtype`` resolved on this machine (``eval/generate/device.py``)."""
    from crossed_rlvr.eval.generate.device import resolve_device, resolve_dtype

    device = resolve_device(gen.device)
    dtype = resolve_dtype(gen.dtype, device)
    if gen.backend == "vllm":
        from crossed_rlvr.policies.loading import load_tokenizer

        tokenizer = load_tokenizer(path)
        backend = VLLMBackend(path, dtype=dtype, context_limit=int(gen.context_limit), tokenizer=tokenizer,
                              cpu_kvcache_gib=int(gen.cpu_kvcache_gib),
                              gpu_memory_utilization=gen.gpu_memory_utilization,
                              tensor_parallel_size=gen.tensor_parallel_size, enforce_eager=bool(gen.enforce_eager))
        return backend, tokenizer
    from crossed_rlvr.policies.loading import load_policy

    model, tokenizer = load_policy(path, dtype=dtype, device=device)
    return HFBackend(model, tokenizer, batch_size=int(gen.batch_size)), tokenizer
