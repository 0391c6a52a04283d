"""Training items shared by every training stage, and the warm start's partial request following."""

import random

from crossed_rlvr.conf.schema import TaskConf, conf_of
from crossed_rlvr.eval.generate.plan import recorded_path
from crossed_rlvr.records import find_response_files
from crossed_rlvr.sft.run import warmstart_target
from crossed_rlvr.tasks.arith import make_splits
from crossed_rlvr.tasks.training import stratum_counts, train_items

TINY = conf_of(TaskConf, {"name": "arith_tiny", "source": "arith", "n_test": 200, "n_dev": 20, "seed": 20260908,
                         "strata": [1, 2], "max_operand": 9, "ops": ["+", "-"],
                         "train_per_stratum": {1: 40, 2: 3960}})


def test_stratum_counts():
    assert stratum_counts([2, 3, 4], 10, None) == {2: 4, 3: 3, 4: 3}
    assert stratum_counts([1, 2], None, {1: 40, 2: 3960}) == {1: 40, 2: 3960}
    assert stratum_counts([1, 2], 5000, {1: 40, 2: 3960}) == {1: 40, 2: 3960}  # never more than the task sets
    scaled = stratum_counts([1, 2], 200, {1: 40, 2: 3960})
    assert scaled == {1: 2, 2: 198} and sum(scaled.values()) == 200


def test_train_items_exclude_the_probe_and_depend_on_seed():
    items = train_items(TINY, 300, seed=7)
    probe = make_splits(200, 20, 20260908, (1, 2), 9, ("+", "-"))
    held_out = {it["expression"] for split in probe.values() for it in split}
    assert len(items) == 300 and not held_out & {it["expression"] for it in items}
    assert [it["item_id"] for it in items[:2]] == ["train-0", "train-1"]
    assert train_items(TINY, 300, seed=7) == items
    assert train_items(TINY, 300, seed=101) != items


def test_warmstart_targets_follow_the_request_at_the_set_rate():
    item = {"solution": "Step 1: 2 + 3 = 5", "reference": "5"}
    rng = random.Random(0)
    endings = [warmstart_target(item, "hash", 0.5, rng) for _ in range(4000)]
    share = {e: sum(1 for _, x in endings if x == e) / len(endings) for e in ("hash", "boxed", "plain")}
    assert abs(share["hash"] - 0.5) < 0.03 and abs(share["boxed"] - 0.25) < 0.03 and abs(share["plain"] - 0.25) < 0.03
    texts = {x: t for t, x in endings}
    assert texts["hash"].endswith("#### 5") and texts["boxed"].endswith("\\boxed{5}")
    assert texts["plain"].endswith("The answer is 5.") and all(t.startswith("Step 1: 2 + 3 = 5\n") for t in texts.values())
    assert {x for _, x in (warmstart_target(item, "boxed", 1.0, rng) for _ in range(50))} == {"boxed"}


def test_model_path_recorded_relative_to_the_run(tmp_path):
    (tmp_path / "models" / "initial").mkdir(parents=True)
    assert recorded_path(str(tmp_path / "models" / "initial"), tmp_path / "eval") == "../models/initial"
    assert recorded_path("Qwen/Qwen2.5-7B-Instruct", tmp_path / "eval") == "Qwen/Qwen2.5-7B-Instruct"


def test_a_run_directory_contributes_its_response_files_only(tmp_path):
    (tmp_path / "responses" / ".partial").mkdir(parents=True)
    (tmp_path / "items").mkdir()
    for p in ("responses/a.jsonl", "responses/.partial/a.jsonl", "items/arith-test.jsonl"):
        (tmp_path / p).write_text("{}\n")
    assert find_response_files([tmp_path]) == [tmp_path / "responses" / "a.jsonl"]
