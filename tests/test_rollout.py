"""``engine.sampler=stream``: a TRL arm's GRPO completions from the evaluator's decoder (train/rollout.py).

The sampler decodes a copy of the trained weights, refreshed before every generation, in the stream that batches
continuously; identical prompts (a GRPO group) are prefilled once and sample as if each were alone; the completions
are reproducible from torch's seed, which TRL sets from the arm's."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_module

from crossed_rlvr.conf.schema import EngineConf
from crossed_rlvr.errors import CrossedError
from crossed_rlvr.eval.generate.engines import GenParams, HFBackend
from crossed_rlvr.files import settings
from crossed_rlvr.policies.loading import load_policy
from crossed_rlvr.prompts import messages, render
from crossed_rlvr.tasks.arith import make_splits
from crossed_rlvr.train.checks import checked_train
from crossed_rlvr.train.rollout import StreamSampler

SAMPLED = GenParams(temperature=1.0, top_p=1.0, max_new_tokens=20, context_limit=512)


def group_prompts(tok: Any, groups: int, size: int) -> list[list[int]]:
    items = make_splits(groups, 3)["test"][:groups]
    return [render(tok, messages(it["question"], "hash"))[1] for it in items for _ in range(size)]


def sampler(tok: Any, batch_size: int = 8) -> StreamSampler:
    return StreamSampler(tok, max_new_tokens=SAMPLED.max_new_tokens, temperature=1.0, top_p=1.0, bf16=False,
                         batch_size=batch_size, context_limit=512)


def test_identical_prompts_are_prefilled_once_and_sample_as_if_alone(tiny, monkeypatch):
    model, tok = load_policy(tiny)
    ids = group_prompts(tok, 2, 4)
    seeds = [11 * k + 5 for k in range(len(ids))]
    alone = HFBackend(model, tok, batch_size=1).generate(ids, seeds, SAMPLED)
    rows: list[int] = []
    forward = model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        if kwargs["input_ids"].shape[1] > 1:  # a prefill
            rows.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counted)
    together = HFBackend(model, tok, batch_size=len(ids)).generate(ids, seeds, SAMPLED)
    assert [g.text for g in together] == [g.text for g in alone]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert rows[0] == 2  # the first join: eight rows, two distinct prompts
    assert len({g.text for g in together}) > 2  # the group's rows drew their own samples


def test_completions_are_the_token_ids_made_and_repeat_under_the_same_seed(tiny):
    model, tok = load_policy(tiny)
    ids = group_prompts(tok, 2, 4)
    s = sampler(tok)
    torch.manual_seed(3)
    first = s.sample(model, ids)
    torch.manual_seed(3)
    assert s.sample(model, ids) == first
    torch.manual_seed(4)
    assert s.sample(model, ids) != first
    stops = HFBackend(model, tok).stop_ids
    for completion in first:  # ends at its first stop token (kept, as TRL's generate path keeps it) or at the budget
        ends = [k for k, t in enumerate(completion) if t in stops]
        assert ends == [len(completion) - 1] or (not ends and len(completion) == SAMPLED.max_new_tokens)


def test_the_sampling_copy_follows_the_trained_weights(tiny):
    model, tok = load_policy(tiny)
    model.train()
    s = sampler(tok)
    copy = s.refresh(model)
    ids = torch.tensor([group_prompts(tok, 1, 1)[0]])
    with torch.no_grad():
        for p in model.parameters():  # an optimizer step, in place as the trainer's
            p.add_(torch.randn_like(p) * 0.05)
        expected = model.eval()(input_ids=ids).logits
        assert not torch.allclose(copy(input_ids=ids).logits, expected, atol=1e-3)  # stale before the refresh
        got = s.refresh(model)(input_ids=ids).logits  # packed layers read the new weights
    assert s.refresh(model) is copy
    assert torch.allclose(got, expected, atol=1e-4)
    assert all(not p.requires_grad for p in copy.parameters())


def test_the_trainer_takes_its_completions_from_the_sampler(tiny):
    from accelerate import Accelerator

    from crossed_rlvr.train.trl_engine import weighted_trainer

    model, tok = load_policy(tiny)
    ids = group_prompts(tok, 1, 4)
    s = sampler(tok)
    trainer = object.__new__(weighted_trainer([], s))  # the override alone
    trainer.use_vllm, trainer.accelerator, trainer.model = False, Accelerator(cpu=True), model
    torch.manual_seed(9)
    completions, logprobs = trainer._generate_single_turn(ids, None, {}, 4)
    torch.manual_seed(9)
    assert logprobs is None and completions == s.sample(model, ids)


def arm_cfg(tmp_path: Any, *extra: str) -> Any:
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_train", overrides=[
            "tracking=off", "recipe=tiny", f"run_dir={tmp_path}/arm", f"model.path={tmp_path}", "convention=hash",
            *extra])


@pytest.mark.parametrize(("extra", "says"), [
    (["engine.sampler=fast"], "engine.sampler='fast' is unknown"),
    (["engine.sampler=stream", "engine.use_vllm=true"], "set one"),
    (["engine.sampler=stream", "recipe.lora.enabled=true"], "recipe.lora.enabled=true"),
])
def test_a_sampler_trl_cannot_use_is_refused(tmp_path, extra, says):
    """An unknown sampler by the field's declared choices, the others by the arm's checks: one line each."""
    with pytest.raises(CrossedError, match=says):
        checked_train(arm_cfg(tmp_path, *extra))


def test_the_unset_sampler_stays_out_of_an_arms_settings(tmp_path):
    assert "sampler" not in settings(EngineConf(name="trl"))  # every arm's config hash as before the setting
    assert settings(EngineConf(name="trl", sampler="stream"))["sampler"] == "stream"
    assert checked_train(arm_cfg(tmp_path, "engine.sampler=stream")).engine.sampler == "stream"


def test_a_forward_trl_patched_onto_the_model_is_not_what_the_copy_runs(tiny):
    """TRL patches its fused log-prob head onto the trained model's instance, calling that instance's own forward:
    a copy keeping the patch would decode the trained fp32 model in training mode (no cache) instead of itself."""
    from trl.trainer.utils import add_fused_lm_head

    model, tok = load_policy(tiny)
    ids = group_prompts(tok, 1, 4)
    torch.manual_seed(5)
    plain = sampler(tok).sample(model, ids)
    add_fused_lm_head(model)
    model.gradient_checkpointing_enable()
    model.train()
    s = sampler(tok)
    torch.manual_seed(5)
    assert s.sample(model, ids) == plain
    assert "forward" not in vars(s.refresh(model))


def test_a_failed_arm_closes_its_validation_scorer(tmp_path, tiny, monkeypatch):
    """Training that raises still shuts the validation's scoring process down; otherwise the arm's process waits for
    it at exit and the study waits for the arm."""
    import shutil

    from trl import GRPOTrainer

    from crossed_rlvr.train.run import run_train
    from crossed_rlvr.train.validation_scores import StepScorer

    shutil.copytree(tiny, tmp_path / "model")
    closed: list[bool] = []
    close = StepScorer.close
    monkeypatch.setattr(StepScorer, "close", lambda self: closed.append(True) or close(self))

    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("an update failed")

    monkeypatch.setattr(GRPOTrainer, "train", broken)
    cfg = checked_train(arm_cfg(tmp_path / "model", "validation.every=1", "recipe.updates=1"))
    with pytest.raises(RuntimeError, match="an update failed"):
        run_train(cfg)
    assert closed
