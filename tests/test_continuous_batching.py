"""The transformers backend's continuous batching and crossed-eval's stream per policy.

A row that finishes leaves the batch and the next prompt joins it (its cache left-padded to the batch's width), so
the batch never decodes empty slots while prompts wait; each response is still its own (one uniform per token from
its item seed's generator), whatever rows it shared steps with. crossed-eval hands a policy's every unfinished
response, all its cells together, to one stream, so a cell's last rows share steps with the next cell's first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crossed_rlvr.eval.generate import engines
from crossed_rlvr.eval.generate.engines import GenParams, HFBackend
from crossed_rlvr.eval.generate.runner import run_eval
from crossed_rlvr.policies.loading import load_policy
from crossed_rlvr.prompts import messages, render
from crossed_rlvr.tasks.arith import make_splits
from tests.helpers import cfg_for, overrides

SAMPLED = GenParams(temperature=1.0, top_p=0.9, max_new_tokens=30, context_limit=512)


def prompts(tok: Any, n: int) -> list[list[int]]:
    items = make_splits(n, 3)["test"][:n]
    return [render(tok, messages(it["question"], request))[1] for it in items for request in ("hash", "boxed")]


class Spy:
    """The model's forward calls (rows and new positions of each) and the joins into a running batch."""

    def __init__(self, model: Any, monkeypatch: pytest.MonkeyPatch):
        self.calls: list[tuple[int, int]] = []
        self.joins = 0
        forward = model.forward

        def counted(*args: Any, **kwargs: Any) -> Any:
            ids = kwargs["input_ids"]
            self.calls.append((int(ids.shape[0]), int(ids.shape[1])))
            return forward(*args, **kwargs)

        monkeypatch.setattr(model, "forward", counted)
        merge = engines._Decoding._merge

        def joined(decoding: Any, *args: Any) -> None:
            self.joins += 1
            merge(decoding, *args)

        monkeypatch.setattr(engines._Decoding, "_merge", joined)

    @property
    def steps(self) -> int:
        return sum(1 for _rows, width in self.calls if width == 1)


def test_rows_join_a_running_batch_and_each_response_stays_its_own(tiny, monkeypatch):
    model, tok = load_policy(tiny)
    ids = prompts(tok, 8)
    seeds = [20260908 + k for k in range(len(ids))]
    alone = HFBackend(model, tok, batch_size=1).generate(ids, seeds, SAMPLED)
    lengths = [g.response_tokens + (g.finish_reason == "stop") for g in alone]
    assert len(set(lengths)) > 2  # rows end at different steps, so slots free up mid-batch

    spy = Spy(model, monkeypatch)
    batched = HFBackend(model, tok, batch_size=3).generate(ids, seeds, SAMPLED)
    assert batched == alone
    assert spy.joins > 0 and max(rows for rows, _ in spy.calls) <= 3
    # a batch that waited for its longest row would step sum(max of each batch) times; refilled, every step but the
    # last few decodes 3 rows, so the steps are about the tokens over 3
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    waiting = sum(max(lengths[i] for i in order[b:b + 3]) for b in range(0, len(order), 3))
    assert spy.steps < waiting, (spy.steps, waiting)
    assert spy.steps <= -(-sum(lengths) // 3) + max(lengths)


def test_a_stream_yields_each_response_as_it_finishes(tiny):
    model, tok = load_policy(tiny)
    ids = prompts(tok, 4)
    seeds = list(range(len(ids)))
    backend = HFBackend(model, tok, batch_size=2)
    streamed = list(backend.stream(ids, seeds, SAMPLED))
    assert sorted(k for k, _ in streamed) == list(range(len(ids)))
    assert [g for _, g in sorted(streamed, key=lambda kg: kg[0])] == backend.generate(ids, seeds, SAMPLED)
    ends = [g.response_tokens + (g.finish_reason == "stop") for _, g in streamed]
    assert ends[0] == min(ends[:2])  # the first batch's shorter row is handed over first, before its batch-mate


def test_crossed_eval_streams_all_of_a_policys_cells_at_once(tmp_path, tiny, monkeypatch):
    """One stream per policy holding every response its cells lack; the files are those of one response at a time."""
    sizes: list[int] = []
    stream = HFBackend.stream

    def recorded(self: HFBackend, ids: list[list[int]], *args: Any) -> Any:
        sizes.append(len(ids))
        return stream(self, ids, *args)

    monkeypatch.setattr(HFBackend, "stream", recorded)
    run_eval(cfg_for(*overrides(tmp_path / "together", tiny, extra=["eval.batch_size=3"])), progress=False)
    assert sizes == [2 * 6 + 2 * 3]  # hash and boxed, 6 items original and 3 para_a: one policy, one stream
    run_eval(cfg_for(*overrides(tmp_path / "alone", tiny, extra=["eval.batch_size=1"])), progress=False)

    def files(run: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes().replace(str(run).encode(), b"RUN")
                for p in sorted((run / "responses").glob("*.jsonl"))}

    assert files(tmp_path / "together") == files(tmp_path / "alone") and len(files(tmp_path / "alone")) == 4


def test_a_shared_prefix_is_prefilled_once_and_every_response_stays_its_own(tiny, monkeypatch):
    """``eval.shared_prefix``: the prompts' common first tokens (the chat template's system turn) are prefilled once a
    stream and each prompt from there on, at the positions it has in its prompt; the responses are those of whole
    prompts."""
    model, tok = load_policy(tiny)
    ids = prompts(tok, 6)
    shared = engines.common_prefix(ids)
    assert len(shared) >= engines.MIN_SHARED_PREFIX and all(p[:len(shared)] == shared for p in ids)
    seeds = [7 * k + 1 for k in range(len(ids))]
    whole = HFBackend(model, tok, batch_size=3).generate(ids, seeds, SAMPLED)
    spy = Spy(model, monkeypatch)
    got = HFBackend(model, tok, batch_size=3, shared_prefix=True).generate(ids, seeds, SAMPLED)
    assert [g.text for g in got] == [g.text for g in whole]
    assert [g.prompt_tokens for g in got] == [len(p) for p in ids]
    prefills = [(rows, width) for rows, width in spy.calls if width > 1]
    assert prefills[0] == (1, len(shared))  # the prefix, once
    assert all(width <= max(map(len, ids)) - len(shared) for _rows, width in prefills[1:])


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_a_follower_is_prefilled_from_its_leaders_cache_and_every_response_stays_its_own(tiny, monkeypatch,
                                                                                      shared_prefix):
    """``eval.prefix_cache``: an item's prompt under the second request shares the system turn, the question and the
    instruction's first words with its prompt under the first; it joins right after it and is prefilled past them
    only, on a copy of that prompt's cache (with ``eval.shared_prefix`` too). The responses, sampled and greedy, are
    those of whole prompts, and fewer prompt positions are prefilled."""
    model, tok = load_policy(tiny)
    ids = prompts(tok, 6)
    leader = engines.prefix_leaders(ids, engines.MIN_SHARED_PREFIX)
    assert leader == [k - k % 2 for k in range(len(ids))]  # each item's boxed prompt follows its hash prompt
    seeds = [7 * k + 1 for k in range(len(ids))]
    greedy = GenParams(temperature=0.0, top_p=1.0, max_new_tokens=30, context_limit=512)
    for params in (SAMPLED, greedy):
        whole_spy = Spy(model, monkeypatch)
        whole = HFBackend(model, tok, batch_size=3, shared_prefix=shared_prefix).generate(ids, seeds, params)
        monkeypatch.undo()
        spy = Spy(model, monkeypatch)
        backend = HFBackend(model, tok, batch_size=3, shared_prefix=shared_prefix, prefix_cache=True)
        got = backend.generate(ids, seeds, params)
        monkeypatch.undo()
        assert [g.text for g in got] == [g.text for g in whole]
        assert [g.token_ids for g in got] == [g.token_ids for g in whole]
        assert [g.prompt_tokens for g in got] == [len(p) for p in ids]
        # each follower prefilled alone, past what it shares with its leader (one token of its own at least)
        own = [(1, len(ids[k]) - min(engines.shared_length(ids[k], ids[k - 1]), len(ids[k]) - 1))
               for k in range(1, len(ids), 2)]
        prefills = [c for c in spy.calls if c[1] > 1]
        assert all(c in prefills for c in own), (own, prefills)
        assert sum(r * w for r, w in prefills) < sum(r * w for r, w in whole_spy.calls if w > 1)
        assert spy.steps <= whole_spy.steps + 1


def test_grouped_attention_reads_each_key_value_head_in_place_and_computes_the_same(tiny, monkeypatch):
    """``eval.attention=sdpa_gqa`` (the tiny model: 2 query heads share 1 key/value head): a left-padded batch's logits
    equal sdpa's to the bit, so do the responses (sampled and greedy), and no key or value is copied per query
    head (transformers' ``repeat_kv``, which its ``sdpa`` calls whenever a mask is given)."""
    import torch
    import transformers.integrations.sdpa_attention as sdpa_module

    from crossed_rlvr.conf.schema import EvalConf

    _model, tok = load_policy(tiny)
    ids = prompts(tok, 4)
    seeds = [3 * k + 2 for k in range(len(ids))]
    base = engines.load_backend(str(tiny), EvalConf(batch_size=3))[0]
    grouped = engines.load_backend(str(tiny), EvalConf(batch_size=3, attention="sdpa_gqa"))[0]
    assert grouped.model.config._attn_implementation == "sdpa_gqa"
    width = max(map(len, ids))
    batch = torch.tensor([[0] * (width - len(p)) + p for p in ids])
    mask = (torch.arange(width)[None] >= torch.tensor([width - len(p) for p in ids])[:, None]).long()
    with torch.inference_mode():
        want = base.model(input_ids=batch, attention_mask=mask).logits
        greedy = GenParams(temperature=0.0, top_p=1.0, max_new_tokens=30, context_limit=512)
        expected = [base.generate(ids, seeds, p) for p in (SAMPLED, greedy)]

        def copied(*_args: Any) -> None:
            raise AssertionError("a key/value head copied per query head")

        monkeypatch.setattr(sdpa_module, "repeat_kv", copied)
        assert torch.equal(grouped.model(input_ids=batch, attention_mask=mask).logits, want)
    got = [grouped.generate(ids, seeds, p) for p in (SAMPLED, greedy)]
    assert [[g.token_ids for g in run] for run in got] == [[g.token_ids for g in run] for run in expected]


def test_common_prefix_leaves_every_prompt_a_token_and_skips_short_ones():
    long = list(range(20))
    assert engines.common_prefix([[*long, 1], [*long, 2, 3]]) == long
    assert engines.common_prefix([long, [*long, 5]]) == long[:-1]  # the shortest keeps a token of its own
    assert engines.common_prefix([[*long[:5], 1], [*long[:5], 2]]) == []  # under MIN_SHARED_PREFIX
    assert engines.common_prefix([]) == []


def test_unset_prefix_settings_stay_out_of_the_settings_and_vllm_refuses_them(tmp_path, tiny):
    from crossed_rlvr.conf.schema import EvalConf
    from crossed_rlvr.errors import ConfigError
    from crossed_rlvr.eval.generate.plan import plan
    from crossed_rlvr.eval.generate.runner import resolve_eval
    from tests.helpers import small_eval

    assert "shared_prefix" not in plan(resolve_eval(small_eval(tmp_path))).cells[0].meta["generation"]
    on = plan(resolve_eval(small_eval(tmp_path, "eval.shared_prefix=true"))).cells[0]
    assert on.meta["generation"]["shared_prefix"] is True
    assert engines.load_backend(str(tiny), EvalConf(shared_prefix=True))[0].shared_prefix is True
    with pytest.raises(ConfigError, match="vLLM caches common prefixes itself"):
        engines.load_backend(str(tiny), EvalConf(backend="vllm", shared_prefix=True))
    assert "prefix_cache" not in plan(resolve_eval(small_eval(tmp_path))).cells[0].meta["generation"]
    on = plan(resolve_eval(small_eval(tmp_path, "eval.prefix_cache=true"))).cells[0]
    assert on.meta["generation"]["prefix_cache"] is True
    assert engines.load_backend(str(tiny), EvalConf(prefix_cache=True))[0].prefix_cache is True
    with pytest.raises(ConfigError, match=r"eval.prefix_cache is the transformers backend's"):
        engines.load_backend(str(tiny), EvalConf(backend="vllm", prefix_cache=True))
