"""Crossed validation during TRL training: the arm under every request at step 0, every N updates and the
end, as ordinary response records; the same responses as crossed-eval of the saved checkpoint."""

import json

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from crossed_rlvr.eval.runner import run_eval
from crossed_rlvr.policies.tiny import build_tiny_model
from crossed_rlvr.train.cli import run_train
from tests.test_generation import SMALL


def records(path):
    return [{k: v for k, v in json.loads(x).items() if k != "model_path"} for x in path.read_text().splitlines()]


def test_validation_records_equal_crossed_eval_of_the_checkpoint(tmp_path):
    build_tiny_model(tmp_path / "model", SMALL)
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_train", overrides=[
            "tracking=off", "recipe=tiny", "recipe.updates=2", "recipe.prompts_per_update=2",
            "recipe.max_response_tokens=16", "train_items.n=16", f"run_dir={tmp_path}/arm",
            f"model.path={tmp_path}/model", "validation.every=1", "validation.n_items=3", "eval.max_new_tokens=8",
            "eval.batch_size=2"])
    run_train(cfg)
    responses = tmp_path / "arm" / "validation" / "responses"
    names = sorted(p.name for p in responses.glob("*.jsonl"))
    assert names == sorted(f"grpo-hash_s83@step{k}__{r}__original.jsonl" for k in (0, 1, 2) for r in ("hash", "boxed"))
    step1 = records(responses / "grpo-hash_s83@step1__boxed__original.jsonl")
    assert len(step1) == 3 and {r["policy"] for r in step1} == {"grpo-hash/s83@step1"}
    assert all(r["item_id"].startswith("dev-") for r in step1)  # the dev split: not training, not test items
    # crossed-eval of the saved step-1 checkpoint, elsewhere, with the same settings: the same responses
    again = OmegaConf.create({
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "task": {**OmegaConf.to_container(cfg.task, resolve=True), "split": "dev", "n_items": 3},
        "eval": OmegaConf.to_container(cfg.eval, resolve=True), "tracking": {"mode": "off"},
        "run_dir": str(tmp_path / "again"), "requests": ["boxed"], "templates": ["original"],
        "policies": [{"name": "grpo-hash/s83@step1", "path": str(tmp_path / "arm" / "validation" / "checkpoints" / "step-1"),
                      "training_convention": "hash", "train_seed": 83}],
        "template_subset": None, "template_subset_seed": 0, "samples": 1, "overwrite": False})
    run_eval(again, progress=False)
    assert records(tmp_path / "again" / "responses" / "grpo-hash_s83@step1__boxed__original.jsonl") == step1
    # validation items come from the dev split, never from training or test
    items = (tmp_path / "arm" / "validation" / "items" / "arith_tiny-dev.jsonl").read_text()
    assert '"split": "dev"' in items
