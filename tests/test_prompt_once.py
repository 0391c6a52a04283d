"""``engine.prompt_once``: each distinct prompt through the model once in a TRL arm's loss forward, its completions
continuing from its cache (train/prompt_once.py), gives TRL's own log-probabilities, entropies and gradients."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_module

from crossed_rlvr.conf.schema import EngineConf
from crossed_rlvr.errors import RecipeError
from crossed_rlvr.files import settings
from crossed_rlvr.policies.loading import load_policy
from crossed_rlvr.train.checks import checked_train
from crossed_rlvr.train.prompt_once import completion_logps, handles

TEMPERATURE = 0.7


def grpo_batch(pad: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Two prompts (left-padded, of different lengths) x three completions each (right-padded after their end)."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 90, (n,), generator=gen).tolist() for n in (7, 5)]
    lengths = [6, 4, 2, 6, 5, 1]
    width, length = max(map(len, prompts)), max(lengths)
    ids, mask = [], []
    for k, n in enumerate(lengths):
        p = prompts[k // 3]
        c = torch.randint(3, 90, (n,), generator=gen).tolist()
        ids.append([pad] * (width - len(p)) + p + c + [pad] * (length - n))
        mask.append([0] * (width - len(p)) + [1] * (len(p) + n) + [0] * (length - n))
    return torch.tensor(ids), torch.tensor(mask), length


def trls(model: Any, ids: torch.Tensor, mask: torch.Tensor, keep: int) -> tuple[torch.Tensor, torch.Tensor]:
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def grads(model: Any, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_log_probs_entropies_and_gradients_are_trls(tiny, monkeypatch):
    from trl.trainer.utils import add_fused_lm_head

    model, tok = load_policy(tiny)
    model.train()
    add_fused_lm_head(model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    ids, mask, keep = grpo_batch(tok.pad_token_id or 0)
    valid = mask[:, -keep:].bool()
    want_lp, want_ent = trls(model, ids, mask, keep)
    want = grads(model, (want_lp * valid).sum() + 0.1 * (want_ent * valid).sum())

    runs: list[int] = []
    forward = model.model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model.model, "forward", counted)
    got_lp, got_ent = completion_logps(model, ids, mask, keep, TEMPERATURE, entropy=True)
    assert runs == [2, 6]  # the two distinct prompts once, then the six completions
    assert torch.allclose(got_lp[valid], want_lp[valid], atol=1e-5)
    assert torch.allclose(got_ent[valid], want_ent[valid], atol=1e-5)
    got = grads(model, (got_lp * valid).sum() + 0.1 * (got_ent * valid).sum())
    assert set(got) == set(want)
    for name, g in want.items():
        assert torch.allclose(got[name], g, rtol=1e-4, atol=1e-6), name


def test_the_trainer_uses_it_for_text_and_trls_forward_otherwise(tiny, monkeypatch):
    from accelerate import Accelerator
    from trl import GRPOTrainer

    from crossed_rlvr.train.trl_engine import weighted_trainer

    model, tok = load_policy(tiny)
    assert handles(model)
    ids, mask, keep = grpo_batch(tok.pad_token_id or 0)
    trl_calls: list[bool] = []
    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies",
                        lambda self, *a, **k: trl_calls.append(True) or ("trl", None, None))
    trainer = object.__new__(weighted_trainer([], None, prompt_once=True))
    trainer.accelerator, trainer.temperature = Accelerator(cpu=True), TEMPERATURE
    logps, entropies, aux = trainer._get_per_token_logps_and_entropies(model, ids, mask, keep, compute_entropy=True)
    assert logps.shape == entropies.shape == (6, keep) and aux is None and not trl_calls
    assert trainer._get_per_token_logps_and_entropies(model, ids, mask, keep, pixel_values=torch.ones(1))[0] == "trl"
    assert trainer._get_per_token_logps_and_entropies(model, ids, mask, keep, compute_aux_loss=True)[0] == "trl"
    plain = object.__new__(weighted_trainer([], None))  # unset: TRL's own forward
    plain.accelerator = trainer.accelerator
    assert plain._get_per_token_logps_and_entropies(model, ids, mask, keep)[0] == "trl"


def arm_cfg(tmp_path: Any, *extra: str) -> Any:
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_train", overrides=[
            "tracking=off", "recipe=tiny", f"run_dir={tmp_path}/arm", f"model.path={tmp_path}", "convention=hash",
            *extra])


@pytest.mark.parametrize(("extra", "says"), [
    ([], "set engine.gradient_checkpointing=false"),
    (["engine.gradient_checkpointing=false", "engine.nproc_per_node=2"], "runs on one process"),
    (["engine.gradient_checkpointing=false", "recipe.lora.enabled=true"], "recipe.lora.enabled=true"),
])
def test_where_it_cannot_run_it_is_refused(tmp_path, extra, says):
    with pytest.raises(RecipeError, match=says):
        checked_train(arm_cfg(tmp_path, "engine.prompt_once=true", *extra))


def test_unset_it_stays_out_of_an_arms_settings(tmp_path):
    assert "prompt_once" not in settings(EngineConf(name="trl"))
    cfg = checked_train(arm_cfg(tmp_path, "engine.prompt_once=true", "engine.gradient_checkpointing=false"))
    assert settings(cfg.engine)["prompt_once"] is True
