"""The SFT warm start turns a fresh tiny model into an initial policy that follows both requests.

A reduced version of ``crossed-sft mode=warmstart`` (fewer items, fewer epochs) so that it fits the
test suite; the full run is what ``make study`` does. Held-out probe items, sampled at T=0.6.
"""

import pytest
from hydra import compose, initialize_config_module

from crossed_rlvr.eval.generate.engines import GenParams, HFBackend
from crossed_rlvr.eval.score.panel import score_response
from crossed_rlvr.policies.loading import load_policy
from crossed_rlvr.prompts import messages, render
from crossed_rlvr.sft.run import warmstart
from crossed_rlvr.tasks.arith import make_splits


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_warm_start_follows_both_requests(tmp_path):
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_sft", overrides=[
            "mode=warmstart", "sft=warmstart_tiny", f"run_dir={tmp_path}", f"model.path={tmp_path}/initial",
            "task=arith_tiny", "train_items.n=1800", "sft.epochs=2", "tracking=off"])
    summary = warmstart(cfg)
    assert summary["examples"] == 1800 and summary["train_loss"] < 2.0
    model, tok = load_policy(tmp_path / "initial")
    # Held out: the training items exclude every item of this probe (the arith_tiny task).
    items = make_splits(200, 20, 20260908, (1, 2), 9, ("+", "-"))["test"][::5]
    backend = HFBackend(model, tok, batch_size=20)
    for request, _reader in (("hash", "strict_first_hash"), ("boxed", "boxed_first")):
        ids = [render(tok, messages(it["question"], request))[1] for it in items]
        outs = backend.generate(ids, [20260908 + k for k in range(len(items))], GenParams(0.6, 0.95, 200, 1024))
        rows = [score_response(o.text, it["reference"], request, slow=False) for o, it in zip(outs, items)]
        payload = sum(r["requested_payload"] for r in rows) / len(rows)
        assert payload >= 0.9, (request, payload, [o.text for o in outs[:3]])
    assert warmstart(cfg) == {"skipped": str(tmp_path / "initial")}  # a finished warm start is reused
