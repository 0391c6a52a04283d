"""``eval.linear=onednn``: the transformers backend's linear layers on oneDNN's packed weights, a setting that stays out
of every cell's settings until it is set (a cell finished before the option existed keeps its hash and is reused);
``eval.attention`` likewise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from crossed_rlvr.conf.ranges import check_ranges
from crossed_rlvr.errors import ConfigError
from crossed_rlvr.eval.generate.engines import GenParams, HFBackend
from crossed_rlvr.eval.generate.onednn import pack_linears
from crossed_rlvr.eval.generate.plan import plan, predates_numerics
from crossed_rlvr.eval.generate.runner import resolve_eval, run_eval
from crossed_rlvr.policies.loading import load_policy
from crossed_rlvr.prompts import messages, render
from crossed_rlvr.tasks.arith import make_splits
from tests.helpers import BEFORE_DEVICE, cfg_for, small_eval

GREEDY = GenParams(temperature=0.0, top_p=1.0, max_new_tokens=24, context_limit=512)


def test_packed_layers_compute_what_torchs_do(tiny):
    model, tok = load_policy(tiny)
    items = make_splits(6, 3)["test"][:6]
    ids = [render(tok, messages(it["question"], "boxed"))[1] for it in items]
    batch = torch.tensor([ids[0]])
    with torch.inference_mode():
        before = model(input_ids=batch).logits
    want = HFBackend(model, tok, batch_size=4).generate(ids, list(range(6)), GREEDY)
    linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert pack_linears(model, 4) == linears > 0
    with torch.inference_mode():
        after = model(input_ids=batch).logits
    assert torch.allclose(before, after, atol=1e-4)
    assert HFBackend(model, tok, batch_size=4).generate(ids, list(range(6)), GREEDY) == want
    # the layers read their packed copies from now on: the stored weights are no longer what is multiplied
    proj = next(m for m in model.modules() if type(m) is torch.nn.Linear and m.weight is not model.get_input_embeddings().weight)
    with torch.no_grad():
        proj.weight.add_(1.0)
    with torch.inference_mode():
        assert torch.equal(model(input_ids=batch).logits, after)


def test_weights_it_cannot_pack_are_refused_in_one_line(tiny):
    model, _tok = load_policy(tiny)
    model.to(torch.float16)
    with pytest.raises(ConfigError, match=r"^eval\.linear=onednn packs float32 or bfloat16 weights on the CPU; this "
                                          r"model's are torch\.float16 on cpu"):
        pack_linears(model, 4)
    with pytest.raises(ConfigError, match=r"^eval\.linear='fast' is unknown; expected one of onednn$"):
        check_ranges(cfg_for("eval.linear=fast"), "crossed_eval")


def test_unset_it_stays_out_of_the_settings_and_a_cell_made_before_it_is_reused(tmp_path: Path):
    unset = plan(resolve_eval(small_eval(tmp_path))).cells[0]
    # the hash of then, less the CPU numerics records hold since (carried over: test_runner.py)
    assert "linear" not in unset.meta["generation"] and predates_numerics({"sha256": BEFORE_DEVICE}, unset.meta)
    packed = plan(resolve_eval(small_eval(tmp_path, "eval.linear=onednn"))).cells[0]
    assert packed.meta["generation"]["linear"] == "onednn" and not predates_numerics({"sha256": BEFORE_DEVICE},
                                                                                      packed.meta)
    # the cell as the code before the option wrote it: its settings under the hash of then, no records hash yet
    unset.final.parent.mkdir(parents=True, exist_ok=True)
    record = {"item_id": "0", "request": "hash", "template": "original", "sample_idx": 0, "response": "#### 1"}
    records = "".join(json.dumps({**record, "item_id": str(k)}) + "\n" for k in range(2))
    unset.final.write_text(records)
    then = {k: v for k, v in unset.meta.items() if k != "numerics"}
    unset.meta_path.write_text(json.dumps({**then, "sha256": BEFORE_DEVICE}))
    # the policy is a hub name never loaded: nothing generates
    summary = run_eval(small_eval(tmp_path, "numerics_before=portable"), progress=False)
    assert summary == {unset.name: {"skipped": True}} and unset.final.read_text() == records


def test_eval_attention_sets_the_models_attention_and_stays_out_of_the_settings_unset(tmp_path: Path, tiny):
    from crossed_rlvr.conf.schema import EvalConf
    from crossed_rlvr.eval.generate.engines import load_backend

    backend, _tok = load_backend(str(tiny), EvalConf(attention="eager"))
    assert backend.model.config._attn_implementation == "eager"
    backend, _tok = load_backend(str(tiny), EvalConf())
    assert backend.model.config._attn_implementation != "eager"
    eager = plan(resolve_eval(small_eval(tmp_path, "eval.attention=eager"))).cells[0]
    assert eager.meta["generation"]["attention"] == "eager" and eager.meta["sha256"] != BEFORE_DEVICE
    assert "attention" not in plan(resolve_eval(small_eval(tmp_path))).cells[0].meta["generation"]
    with pytest.raises(ConfigError, match=r"^eval\.attention='flash' is unknown; expected one of eager, sdpa, sdpa_gqa$"):
        check_ranges(cfg_for("eval.attention=flash"), "crossed_eval")
    with pytest.raises(ConfigError, match=r"^eval\.attention=eager sets the transformers backend's attention; vLLM"):
        load_backend(str(tiny), EvalConf(backend="vllm", attention="eager"))
