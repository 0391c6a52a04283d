"""The crossed evaluator's two backends agree: vLLM (its CPU build, in this process) and transformers, greedy on
the same prompt ids, stop on the same token ids, count the same response tokens (never the stop token) and
record the same finish reason and text; a request vLLM aborted is refused, never recorded as a stop.

The policy folder is shaped like one trained from a base model: no ``generation_config.json``, and a tokenizer
and config whose eos is ``<|endoftext|>``, so only the chat template's ``<|im_end|>`` ends a turn. A random
model rarely picks that token, so its output row is set to make it the greedy pick a few tokens in.

Measured here: 23 s on a quiet 2-core machine (73 s with its cores shared), most of it loading vLLM's engine.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.eval.generate import engines
from crossed_rlvr.eval.generate.engines import GenParams, HFBackend, VLLMBackend
from crossed_rlvr.policies.loading import load_policy
from crossed_rlvr.policies.tiny import TinyConfig, build_tiny_model
from crossed_rlvr.prompts import messages, render

# vLLM's engine (tests/conftest.py)
pytestmark = [pytest.mark.exclusive]

# vLLM's CPU attention needs head_dim >= 32
HEAD32 = TinyConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=2)
GREEDY = GenParams(temperature=0.0, top_p=1.0, max_new_tokens=12, context_limit=256)
FIRST_STOP = 3  # the stop comes after at least this many tokens, so the texts compared are not empty


def prompt_ids(tokenizer) -> list[int]:
    return render(tokenizer, messages("What is 2 + 3?", "hash"))[1]


def greedy_steps(model, ids: list[int], steps: int) -> list[tuple]:
    """(final normed hidden state, next-token logits) of each greedy step (full forward passes: the model is tiny)."""
    import torch

    out, seq, seen = [], list(ids), []
    hook = model.model.norm.register_forward_hook(lambda _m, _i, h: seen.append(h[0, -1]))
    try:
        with torch.inference_mode():
            for _ in range(steps):
                logits = model(torch.tensor([seq])).logits[0, -1]
                out.append((seen[-1], logits))
                seq.append(int(torch.argmax(logits)))
    finally:
        hook.remove()
    return out


def stop_row(steps: list[tuple], stop: int):
    """An output row for the stop token that makes it the greedy pick at the first step k >= FIRST_STOP where that
    can be done with a margin either side (below the best other token at every earlier step, above it at k): the
    hidden state of step k, scaled. Steps before k keep their picks, so the greedy run is the same up to k."""
    import torch

    for k in range(FIRST_STOP, len(steps)):
        row = steps[k][0]
        ratios = []  # per step: the scale at which the stop token would tie the best other token
        for hidden, logits in steps[: k + 1]:
            s, rest = float(hidden @ row), float(torch.cat([logits[:stop], logits[stop + 1:]]).max())
            ratios.append(rest / s if s > 0 else math.inf)
        bound = min(ratios[:-1])
        if ratios[-1] * 1.5 < bound:
            return row * (ratios[-1] + min(bound, 3 * ratios[-1])) / 2
    raise AssertionError("no step where the stop token can become the greedy pick")


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> Path:
    """A tiny policy that ends its turn with ``<|im_end|>`` a few tokens in, which neither its tokenizer nor its
    config names as eos (no generation_config.json)."""
    import torch

    out = build_tiny_model(tmp_path_factory.mktemp("agree") / "m", HEAD32)
    model, tok = load_policy(out)
    end_text, im_end = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    model.config.tie_word_embeddings, model.config.eos_token_id = False, end_text
    head = torch.randn(model.lm_head.weight.shape, generator=torch.Generator().manual_seed(1))
    head[3 + 97:] = 0.0  # only the specials and printable ASCII (the tokenizer's first 100 ids) get picked
    model.lm_head.weight = torch.nn.Parameter(head)
    with torch.no_grad():
        model.lm_head.weight[im_end] = stop_row(greedy_steps(model, prompt_ids(tok), GREEDY.max_new_tokens), im_end)
    model.save_pretrained(out)
    (out / "generation_config.json").unlink()
    tok.eos_token = "<|endoftext|>"
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def both(policy):
    """(transformers generation, vLLM generation, transformers backend, vLLM backend (closed)) of one prompt."""
    model, tok = load_policy(policy)
    hf = HFBackend(model, tok, batch_size=1)
    ids = prompt_ids(tok)
    want = hf.generate([ids], [7], GREEDY)[0]
    vllm = VLLMBackend(str(policy), dtype="float32", context_limit=GREEDY.context_limit, enforce_eager=True)
    try:
        got = vllm.generate([ids], [7], GREEDY)[0]
        # more prompt tokens than one engine step takes (no shared prefix), each request with its item seed: with chunked prefill a
        # prompt is split over steps and vLLM rewinds the request's generator by a Philox offset that a CPU
        # generator does not have ("CPU Generator does not use offset"); the CPU build runs without it
        SPLIT.extend(vllm.generate([[ids[k], *[ids[0]] * 199] for k in range(40)], list(range(40)),
                                   GenParams(temperature=1.0, top_p=1.0, max_new_tokens=2, context_limit=256)))
    finally:
        vllm.close()
    return want, got, hf, vllm


SPLIT: list = []


def test_seeded_requests_beyond_one_engine_steps_tokens_run_on_the_cpu_build(both):
    assert len(SPLIT) == 40 and all(g.prompt_tokens == 200 and g.finish_reason in ("stop", "length") for g in SPLIT)


def test_the_policy_folder_names_no_end_of_turn_eos(policy):
    """The case the backends must agree on: eos is <|endoftext|> everywhere, <|im_end|> comes from the template."""
    model, tok = load_policy(policy)
    assert not (policy / "generation_config.json").exists()
    assert tok.eos_token == "<|endoftext|>" and model.generation_config.eos_token_id == tok.eos_token_id
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert engines.stop_token_ids(tok, engines.folder_generation_config(str(policy))) == {tok.eos_token_id, im_end}


def test_both_backends_stop_on_the_same_token_ids(both):
    _, _, hf, vllm = both
    assert vllm.stop_ids == hf.stop_ids and len(hf.stop_ids) == 2


def test_both_backends_record_the_same_stopped_response(both):
    want, got, _, _ = both
    assert want.finish_reason == "stop" and FIRST_STOP <= want.response_tokens < GREEDY.max_new_tokens, want
    assert want.text.isprintable() and want.text.strip()
    assert (got.finish_reason, got.response_tokens, got.text, got.prompt_tokens) == (
        want.finish_reason, want.response_tokens, want.text, want.prompt_tokens)


def test_an_aborted_vllm_request_is_refused_not_recorded_as_a_stop(monkeypatch, tmp_path):
    """vLLM's finish reasons beyond stop and length (abort, error, repetition) are not a finished response: the
    error names the prompt and its item seed (vLLM itself replaced by a stand-in)."""
    from tests.helpers import FakeVLLMEngine

    backend = fake_vllm(monkeypatch, tmp_path, FakeVLLMEngine(reasons=("stop", "abort")))  # the second ends aborted
    with pytest.raises(CrossedError, match=r"prompt 1 of the batch \(item seed 12\).*'abort'"):
        backend.generate([[3, 4], [3, 4]], [11, 12], GREEDY)


def fake_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, engine: Any) -> VLLMBackend:
    """A VLLMBackend whose vLLM is a stand-in driving ``engine`` (tests/helpers.py: FakeVLLMEngine)."""
    import sys
    import types

    class FakeLLM:
        def __init__(self, model, **kwargs):
            self.llm_engine = engine

    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = FakeLLM, lambda **kw: kw
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: prompt_token_ids
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    return VLLMBackend(str(build_tiny_model(tmp_path / "m", HEAD32)))


@pytest.mark.parametrize(("fit", "most"), [(2, 2), (0, 1), (None, 5)])
def test_vllm_is_handed_as_many_prompts_as_its_kv_cache_holds_at_their_longest(monkeypatch, tmp_path, fit, most):
    """The engine gets every prompt its KV cache holds at once (each at its prompt and max_new_tokens), more as they
    end, so it never preempts a request for room (a preempted request restarts its seeded generator): a cache of
    room for 2 runs 2 at a time, one smaller than a single request runs one at a time, an unknown one gets all 5."""
    from tests.helpers import FakeVLLMEngine

    per = -(-(10 + GREEDY.max_new_tokens) // 16)  # 16-token blocks a 10-token prompt may take
    engine = FakeVLLMEngine(cache_blocks=None if fit is None else max(1, fit * per + per - 1))
    backend = fake_vllm(monkeypatch, tmp_path, engine)
    out = backend.generate([[3] * 10] * 5, [11, 12, 13, 14, 15], GREEDY)
    assert [g.text for g in out] == ["#### 3"] * 5 and engine.most == most


def test_a_prompt_sharing_cache_blocks_with_an_earlier_one_follows_its_prefill(monkeypatch, tmp_path):
    """An item's question under two requests: the second prompt is handed to vLLM once the first has been prefilled,
    so it reads their shared blocks from the prefix cache; the system turn every prompt shares makes no leader."""
    from crossed_rlvr.eval.generate.engines import prefix_leaders
    from tests.helpers import FakeVLLMEngine

    system = [1] * 16  # one whole block, in every prompt
    questions = [[2] * 32, [3] * 32]  # two whole blocks each
    prompts = [system + q + [suffix] * 8 for suffix in (7, 8) for q in questions]  # hash then boxed, item by item
    assert prefix_leaders(prompts, 16) == [0, 1, 0, 1]
    assert prefix_leaders([system + [k] * 20 for k in range(3)], 16) == [0, 1, 2]  # the shared system turn alone
    assert prefix_leaders(prompts[:1], 16) == [0]
    engine = FakeVLLMEngine(cache_blocks=None)
    out = fake_vllm(monkeypatch, tmp_path, engine).generate(prompts, [11, 12, 13, 14], GREEDY)
    assert len(out) == 4 and engine.most == 2  # the leaders' step, then their followers'


def test_finished_responses_are_handed_over_for_writing_at_least_every_write_every(monkeypatch, tmp_path):
    """vLLM runs up to 256 rows at once: the responses it finishes are handed to the cells' files at most
    ``WRITE_EVERY`` at a time, so a kill loses at most those (and the ones being generated), whatever the batch."""
    from crossed_rlvr.eval.generate.plan import WRITE_EVERY, Job, generate_jobs
    from crossed_rlvr.policies.loading import load_tokenizer
    from tests.helpers import FakeVLLMEngine

    backend = fake_vllm(monkeypatch, tmp_path, FakeVLLMEngine())
    jobs = [Job("hash", "original", k, {"item_id": str(k), "question": f"What is {k} + 1?"}, 0) for k in range(70)]
    chunks = [len(c) for c in generate_jobs(backend, load_tokenizer(str(tmp_path / "m")), jobs, None, 7, 256, GREEDY)]
    assert sum(chunks) == 70 and max(chunks) == WRITE_EVERY == 32
