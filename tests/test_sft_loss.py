"""The SFT loss with the output layer on completion positions only equals the model's own causal-LM loss
(paper 001 App. D.2.1: the loss is on the completion only), in value and in gradients, under gradient
accumulation; generation through the same model still sees every position."""

import pytest
import torch

from crossed_rlvr.policies.loading import load_tokenizer
from crossed_rlvr.policies.tiny import build_tiny_model
from crossed_rlvr.sft.trainer import _collate, _completion_loss_trainer, _Examples, completion_rows
from tests.helpers import SMALL

ROWS = [{"prompt": "What is 3 + 4?", "request": "hash", "completion": "3 + 4 = 7.\n#### 7"},
        {"prompt": "What is 12 - 5 + 1?", "request": "boxed", "completion": "12 - 5 = 7, 7 + 1 = 8. \\boxed{8}"},
        {"prompt": "What is 2 * 2?", "request": "hash", "completion": "#### 4"},
        {"prompt": "What is 9 - 1 - 1 - 1?", "request": "boxed", "completion": "9 - 3 = 6 so \\boxed{6}"}]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from transformers import AutoModelForCausalLM, TrainingArguments

    base = build_tiny_model(tmp_path_factory.mktemp("lossbase") / "m", SMALL)
    tok = load_tokenizer(base)
    data = _Examples(ROWS, tok, 512)
    collate = _collate(tok.pad_token_id)
    halves = [collate(data.features[:2]), collate(data.features[2:])]  # two accumulation steps, padded rows
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    args = TrainingArguments(output_dir=str(tmp_path_factory.mktemp("out")), use_cpu=True, report_to=[])
    trainer = _completion_loss_trainer()(model=model, args=args, train_dataset=data, data_collator=collate)
    trainer.select_completion_positions(model)
    return model, trainer, halves


def grads(model, losses) -> list[torch.Tensor]:
    model.zero_grad()
    sum(losses).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_completion_only_loss_equals_the_models_own_loss_and_gradients(setup):
    model, trainer, halves = setup
    n = sum((b["labels"] != -100).sum() for b in halves)  # Trainer's num_items_in_batch over the accumulation
    ours = [trainer.compute_loss(model, dict(b), num_items_in_batch=n) for b in halves]
    theirs = [model(**b, num_items_in_batch=n).loss for b in halves]
    assert sum(ours).item() == pytest.approx(sum(theirs).item(), rel=1e-6)
    assert sum(ours).item() > 0
    for a, b in zip(grads(model, ours), grads(model, theirs), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    # without an accumulation count: the mean over the batch's completion tokens, as the model's own loss
    assert trainer.compute_loss(model, dict(halves[0])).item() == pytest.approx(model(**halves[0]).loss.item(),
                                                                                rel=1e-6)


def test_the_output_layer_sees_completion_positions_only_during_the_loss(setup):
    model, trainer, halves = setup
    batch = halves[1]
    seen = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, a, out: seen.append(tuple(out.shape)))
    try:
        trainer.compute_loss(model, dict(batch))
        with torch.no_grad():
            full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    finally:
        hook.remove()
    targets = int((batch["labels"][:, 1:] != -100).sum())
    assert seen[0] == (targets, model.config.vocab_size)  # the loss: completion positions only
    assert targets < batch["input_ids"].numel()  # prompt and padding positions were left out
    assert tuple(full.shape) == (*batch["input_ids"].shape, model.config.vocab_size)  # generation: every position


def test_completion_rows_mark_positions_that_predict_a_completion_token():
    labels = torch.tensor([[-100, -100, 5, 6, -100], [-100, 7, 8, 9, 2]])
    assert completion_rows(labels).tolist() == [[False, True, True, False, False], [True, True, True, True, False]]


def test_the_recipes_attention_is_the_models_while_fine_tuning(tmp_path):
    """``sft.attention`` loads the model with that attention for training; unset, the model's own."""
    from transformers import TrainerCallback

    from crossed_rlvr.sft.trainer import SFTConfig, train_sft

    seen = []

    class Attention(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            seen.append(model.config._attn_implementation)

    base = build_tiny_model(tmp_path / "m", SMALL)
    for attention in ("eager", None):
        cfg = SFTConfig(epochs=1, effective_batch=4, per_device_batch=4, attention=attention)
        summary = train_sft(base, ROWS, tmp_path / f"out-{attention}", cfg, callbacks=[Attention()])
        assert summary["steps"] == 1 and summary["examples"] == len(ROWS)
    assert seen[0] == "eager" and seen[1] != "eager"
