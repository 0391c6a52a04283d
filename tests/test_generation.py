"""Tiny models, per-item seeded generation, the context-length check, SFT pairs."""

import json

import pytest

from crossed_rlvr.eval.generate.engines import ContextLengthError, GenParams, HFBackend
from crossed_rlvr.policies.loading import load_policy, load_tokenizer
from crossed_rlvr.prompts import messages, render
from crossed_rlvr.sft import pairs
from crossed_rlvr.tasks.arith import make_splits


def test_tiny_model_is_an_ordinary_hf_directory(tiny):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    assert model.config.model_type == "qwen2"
    tok = load_tokenizer(tiny)
    text = "Step 1: 3 + 4 = 7\n#### 7 \\boxed{7}"
    assert tok.decode(tok(text)["input_ids"]) == text  # character level, whitespace kept
    prompt, ids, sha = render(tok, messages("Compute 3 + 4.", "hash"))
    assert prompt.startswith("<|im_start|>user\nCompute 3 + 4.\nLet's think step by step")
    assert prompt.endswith("<|im_start|>assistant\n") and len(sha) == 64 and tok.decode(ids) == prompt


def _prompts(tok, n):
    items = make_splits(n, 3)["test"][:n]
    return [render(tok, messages(it["question"], "boxed"))[1] for it in items]


def test_same_seed_same_response_whatever_the_batch(tiny):
    model, tok = load_policy(tiny)
    ids = _prompts(tok, 7)
    seeds = [20260908 + k for k in range(7)]
    params = GenParams(temperature=1.0, top_p=0.9, max_new_tokens=20, context_limit=512)
    alone = HFBackend(model, tok, batch_size=1).generate(ids, seeds, params)
    batched = HFBackend(model, tok, batch_size=4).generate(ids, seeds, params)
    shuffled = HFBackend(model, tok, batch_size=7).generate(ids[::-1], seeds[::-1], params)[::-1]
    assert alone == batched == shuffled
    other = HFBackend(model, tok, batch_size=4).generate(ids, [s + 1 for s in seeds], params)
    assert other != alone
    assert all(g.finish_reason in ("stop", "length") and g.response_tokens <= 20 for g in alone)
    assert all(g.prompt_tokens == len(i) for g, i in zip(alone, ids))


def test_greedy_is_deterministic_and_length_checked(tiny):
    model, tok = load_policy(tiny)
    ids = _prompts(tok, 3)
    greedy = GenParams(temperature=0.0, top_p=1.0, max_new_tokens=10, context_limit=512)
    backend = HFBackend(model, tok, batch_size=2)
    assert backend.generate(ids, [1, 2, 3], greedy) == backend.generate(ids, [4, 5, 6], greedy)
    with pytest.raises(ContextLengthError, match=r"exceed the context limit 60; .*never truncated"):
        backend.generate(ids, [1, 2, 3], GenParams(max_new_tokens=10, context_limit=60))


def test_content_matched_pairs(tmp_path):
    items = make_splits(12, 3)["test"]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert pairs.write_pairs(items, a, b, "hash", "boxed") == 12
    for ra, rb, it in zip(map(json.loads, a.read_text().splitlines()), map(json.loads, b.read_text().splitlines()),
                          items):
        assert ra["prompt"] == rb["prompt"] == it["question"]  # no format instruction
        assert ra["completion"].endswith(f"\n#### {it['reference']}")
        assert rb["completion"].endswith(f"\n\\boxed{{{it['reference']}}}")
        assert ra["completion"].rsplit("\n", 1)[0] == rb["completion"].rsplit("\n", 1)[0]


def test_pair_mismatch_writes_nothing(tmp_path, monkeypatch):
    items = make_splits(6, 3)["test"]
    real = pairs.target

    def drifting(item, convention):
        text = real(item, convention)
        return text.replace("Step 1", "Step one", 1) if convention == "boxed" and item["item_id"] == "4" else text

    monkeypatch.setattr(pairs, "target", drifting)
    with pytest.raises(pairs.PairMismatch, match=r"row 5 \(item '4'\): targets differ beyond the final marker"):
        pairs.write_pairs(items, tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert not list(tmp_path.iterdir())


def test_nucleus_sampler_matches_a_direct_implementation():
    import torch

    def direct(row, u, temperature, top_p):
        probs = torch.softmax(row / temperature, dim=-1)
        p, i = torch.sort(probs, descending=True, stable=True)
        cum = torch.cumsum(p, 0)
        keep = int(((cum - p) < top_p).sum().clamp(min=1))
        cdf = cum[:keep] / cum[keep - 1]
        return int(i[min(int(torch.searchsorted(cdf, torch.tensor([u], dtype=cdf.dtype))), keep - 1)])

    gen = torch.Generator().manual_seed(0)
    # Peaked rows (nucleus inside the top 512) and a flat row (nucleus beyond it: full-sort path).
    logits = torch.cat([torch.randn(6, 5000, generator=gen, dtype=torch.float64) * 4,
                        torch.randn(2, 5000, generator=gen, dtype=torch.float64) * 0.01])
    for temperature, top_p in ((0.6, 0.95), (1.0, 1.0), (1.0, 0.5)):
        u = torch.rand(8, generator=gen, dtype=torch.float64)
        got = HFBackend._sample(logits, u, GenParams(temperature=temperature, top_p=top_p))
        assert got.tolist() == [direct(logits[r], float(u[r]), temperature, top_p) for r in range(8)]
    # bfloat16 logits tie often: over the whole vocabulary (top_p = 1) ties take a stable sort's order
    tied = (torch.randn(64, 5000, generator=gen) * 4).to(torch.bfloat16).double()
    u = torch.rand(64, generator=gen, dtype=torch.float64)
    got = HFBackend._sample(tied, u, GenParams(temperature=1.0, top_p=1.0))
    assert got.tolist() == [direct(tied[r], float(u[r]), 1.0, 1.0) for r in range(64)]


def test_canary_a_rows_uniforms_drawn_at_once_are_its_draws_one_at_a_time():
    """The transformers backend draws a row's uniforms when it joins the batch (``engines.uniforms``), not one per
    decoding step in Python: torch's CPU generator must give the same float64 sequence either way, or every sampled
    response would change. If a torch release breaks this, ``uniforms`` must draw one at a time again."""
    import torch

    from crossed_rlvr.eval.generate.engines import uniforms

    seeds = [20260908, 20260908 + 17, 7]
    for n in (1, 15, 16, 96, 640):
        one_by_one = []
        for s in seeds:
            g = torch.Generator().manual_seed(s)
            one_by_one.append(torch.stack([torch.rand((), generator=g, dtype=torch.float64) for _ in range(n)]))
        assert torch.equal(uniforms(seeds, n), torch.stack(one_by_one)), n
