"""The warm start's band checks (sft/band.py): every request's samples in one stream, and with ``eval.linear=onednn``
from a packed copy of the weights being trained, as the evaluation samples."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from crossed_rlvr.eval.generate.engines import GenParams, HFBackend
from crossed_rlvr.eval.generate.snapshot import Snapshot
from crossed_rlvr.policies.loading import load_policy
from crossed_rlvr.sft.band import payload_rates
from crossed_rlvr.tasks.arith import make_splits

PARAMS = GenParams(temperature=0.6, top_p=0.95, max_new_tokens=24, context_limit=512)
REQUESTS = ["hash", "boxed"]


def streams(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, int]]:
    """(model, prompts) of every stream the checks open."""
    calls: list[tuple[Any, int]] = []
    stream = HFBackend.stream

    def recorded(self: HFBackend, ids: list[list[int]], *args: Any) -> Any:
        calls.append((self.model, len(ids)))
        return stream(self, ids, *args)

    monkeypatch.setattr(HFBackend, "stream", recorded)
    return calls


def test_every_requests_samples_decode_in_one_stream_with_the_rates_of_each_alone(tiny, monkeypatch):
    model, tok = load_policy(tiny)
    items = make_splits(8, 3)["dev"][:6]
    alone = {r: payload_rates(model, tok, items, [r], PARAMS, 7, batch_size=4) for r in REQUESTS}
    calls = streams(monkeypatch)
    together = payload_rates(model, tok, items, REQUESTS, PARAMS, 7, batch_size=4)
    assert together == {r: alone[r][r] for r in REQUESTS}
    assert [n for _, n in calls] == [len(items) * len(REQUESTS)]


def test_a_snapshot_samples_its_packed_copy_and_leaves_the_trained_model_as_it_was(tiny, monkeypatch):
    model, tok = load_policy(tiny)
    model.train()
    items = make_splits(8, 3)["dev"][:6]
    plain = payload_rates(model, tok, items, REQUESTS, PARAMS, 7, batch_size=4)
    snapshot = Snapshot(torch.float32, pack=True, batch_hint=4)
    calls = streams(monkeypatch)
    assert payload_rates(model, tok, items, REQUESTS, PARAMS, 7, batch_size=4, snapshot=snapshot) == plain
    assert calls[0][0] is snapshot.copy and snapshot.copy is not model
    assert model.training and all(p.requires_grad for p in model.parameters())
