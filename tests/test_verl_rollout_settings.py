"""verl's rollout as an arm runs it: the rollout log-probs the importance correction needs, engine seeds of its
own for every arm seed (shared by the hash and boxed arms of one seed), and the evaluation's prompts."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from hydra import compose, initialize_config_module

from crossed_rlvr.conf.schema import TrainConf, conf_of
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.train.translate import VerlArm, verl_overrides
from crossed_rlvr.train.verl_engine import compose_verl

# the 7B preset prepared once with tests/test_gpu_path.py and tests/test_launch.py (tests/gpu_fixtures.py)
WORKER_GROUP = "gpu_path"
SHARED_FIXTURES = ("local", "paper_gsm8k")

ROLLOUT = "actor_rollout_ref.rollout"


def cfg_for(*overrides: str) -> Any:
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_train", overrides=["tracking=off", "engine=verl", *overrides])


def arm_overrides(cfg: Any) -> list[str]:
    """verl's overrides of the arm ``cfg`` with its folder at ``out`` and a stand-in reward entry."""
    return verl_overrides(VerlArm.of(cfg, ArmLayout(Path("out")), "r.py"))


def test_the_rollout_returns_the_log_probs_the_importance_correction_needs():
    """verl skips the rollout correction silently without the rollout's log-probs; its YAML asks for them and its
    RolloutConfig does not, so the overrides say so whatever default the composition starts from."""
    from verl.utils.config import omega_conf_to_dataclass

    overrides = arm_overrides(cfg_for("model=qwen2.5-7b-instruct"))
    composed = compose_verl([f"{ROLLOUT}.calculate_log_probs=False", *overrides])  # the dataclass's default
    assert composed.algorithm.rollout_correction.rollout_is == "token"
    assert composed.actor_rollout_ref.rollout.calculate_log_probs is True
    assert omega_conf_to_dataclass(composed.actor_rollout_ref.rollout).calculate_log_probs is True


def engine_seeds(overrides: list[str]) -> set[int]:
    """The seeds verl gives an arm's vLLM engines: replica r of n_gpus x nnodes / tensor-parallel size gets
    rollout.seed + r (verl 0.9.1, vllm_async_server.py)."""
    o = dict(x.split("=", 1) for x in overrides)
    gpus = int(o["trainer.n_gpus_per_node"]) * int(o["trainer.nnodes"])
    replicas = gpus // int(o[f"{ROLLOUT}.tensor_model_parallel_size"])
    return {int(o[f"{ROLLOUT}.seed"]) + r for r in range(replicas)}


def test_no_two_arm_seeds_share_an_engine_seed_and_matched_arms_share_theirs(paper_gsm8k):
    arms = json.loads((paper_gsm8k / "prepare_summary.json").read_text())["arms"]
    by_seed: dict[str, list[set[int]]] = {}
    for name, arm in arms.items():
        overrides = (Path(arm["run_dir"]) / "verl_overrides.txt").read_text().split("\n")[:-1]
        by_seed.setdefault(name.rsplit("/", 1)[-1], []).append(engine_seeds(overrides))
    assert sorted(by_seed) == ["s83", "s84", "s85", "s86", "s87"]
    for seeds in by_seed.values():
        assert len(seeds) == 2 and seeds[0] == seeds[1] and len(seeds[0]) == 4  # hash and boxed, four replicas
    firsts = [seeds[0] for seeds in by_seed.values()]
    assert sum(map(len, firsts)) == len(set().union(*firsts))


def test_one_replica_keeps_the_arm_seed():
    """One replica (the CPU route's, or one GPU) spreads nothing: the rollout is seeded with the arm seed."""
    for layout in (["engine.device=cpu", "engine.n_gpus_per_node=2"], ["engine.n_gpus_per_node=2",
                                                                         "engine.rollout_tp=2"]):
        assert compose_verl(arm_overrides(cfg_for("seed=85", *layout))).actor_rollout_ref.rollout.seed == 85


class Recorder:
    """A tokenizer and a backend for the evaluation's generation loop that keep the messages it renders."""

    def __init__(self) -> None:
        self.messages: list[list[dict[str, str]]] = []

    def apply_chat_template(self, msgs: list[dict[str, str]], tokenize: bool, add_generation_prompt: bool) -> str:
        self.messages.append(msgs)
        return json.dumps(msgs)

    def __call__(self, text: str, add_special_tokens: bool) -> dict[str, list[int]]:
        return {"input_ids": [len(text)]}

    def stream(self, prompts: list[list[int]], seeds: list[int], params: Any) -> Iterator[tuple[int, None]]:
        yield from ((k, None) for k in range(len(prompts)))


def evaluation_messages(item: dict[str, Any], request: str, system: str) -> list[dict[str, str]]:
    """The messages crossed-eval renders for ``item`` under ``request`` (eval/generate/plan.py's loop)."""
    from crossed_rlvr.eval.generate.engines import GenParams
    from crossed_rlvr.eval.generate.plan import generate

    rec = Recorder()
    list(generate(rec, rec, [(0, item, 0)], request, "original", system, 1, 1, GenParams()))
    return rec.messages[0]


def test_the_system_message_reaches_training_prompts_as_it_reaches_the_evaluation(tmp_path):
    from crossed_rlvr.train.recipe import chat_prompt, training_rows
    from crossed_rlvr.train.verl_engine import validation_rows, verl_rows, write_parquet

    system = "You are a careful solver."
    cfg = conf_of(TrainConf, cfg_for("recipe=tiny", "task=arith_tiny", "convention=boxed", f"model.system='{system}'"))
    rows, val_rows = training_rows(cfg), validation_rows(cfg)  # the training rows serve both engines
    write_parquet(verl_rows(rows, "src"), tmp_path / "train.parquet")
    write_parquet(verl_rows(val_rows, "src", per_request=True), tmp_path / "val.parquet")
    train, val = pd.read_parquet(tmp_path / "train.parquet"), pd.read_parquet(tmp_path / "val.parquet")
    boxed = evaluation_messages(rows[0], "boxed", system)
    assert boxed[0] == {"role": "system", "content": system} and rows[0]["system"] == system
    assert chat_prompt(rows[0]) == boxed
    assert [dict(m) for m in train.loc[0, "prompt"]] == boxed  # verl's parquet, as verl reads it
    for row, prompt in zip(val_rows, val["prompt"], strict=True):  # verl's crossed validation, every request
        assert [dict(m) for m in prompt] == evaluation_messages(row, row["request"], system)
