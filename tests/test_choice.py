"""Multiple-choice benchmarks from local files in each hub format: option letters kept per item."""

import json

import pytest

from crossed_rlvr.tasks.choice import load_benchmark
from crossed_rlvr.tasks.items import ItemFileError
from tests.task_files import BBH, ROWS

EXPECTED = {"mmlu": ("B", 4, "4"), "mmlu_pro": ("J", 10, "9"), "arc_challenge": ("B", 3, "steam"),
            "aqua_rat": ("A", 5, "21"), "sat_math": ("A", 4, "5")}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_each_format_keeps_its_letters(name, tmp_path):
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps(ROWS[name]) + "\n")
    (item,) = load_benchmark(name, path)
    letter, n, key_text = EXPECTED[name]
    assert (item["reference"], item["n_options"], item["kind"]) == (letter, n, "mc")
    assert item["options"]["ABCDEFGHIJ".index(letter)] == key_text
    assert item["question"].endswith(f"{'ABCDEFGHIJ'[n - 1]}. {item['options'][-1]}")  # lettered options, in order


def test_free_form_bbh_and_bad_rows(tmp_path):
    """BBH is free form as paper 000 scores it, "(A)" targets included, options left in the question."""
    path = tmp_path / "bbh.jsonl"
    path.write_text(json.dumps(BBH) + "\n")
    (item,) = load_benchmark("bbh", path)
    assert (item["kind"], item["reference"]) == ("free", "(A)") and "(B) Sunday" in item["question"]
    path.write_text(json.dumps({"input": "not ( True )", "target": "False"}) + "\n")
    (item,) = load_benchmark("bbh", path)
    assert (item["kind"], item["reference"]) == ("free", "False")
    bad = tmp_path / "mmlu.jsonl"
    bad.write_text(json.dumps({"question": "q", "choices": ["a", "b"]}) + "\n")
    with pytest.raises(ItemFileError, match=r"mmlu\.jsonl: row 1 has no field 'answer'"):
        load_benchmark("mmlu", bad)
    with pytest.raises(ItemFileError, match="benchmark 'hellaswag' is unknown"):
        load_benchmark("hellaswag", bad)


def test_benchmarks_are_tasks_of_the_evaluator(tmp_path):
    from hydra import compose, initialize_config_module

    from crossed_rlvr.conf.checks import check_eval
    from crossed_rlvr.eval.generate.plan import frozen_items

    path = tmp_path / "mmlu_pro.jsonl"
    path.write_text(json.dumps(ROWS["mmlu_pro"]) + "\n")
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_eval", overrides=["task=mmlu_pro", f"task.path={path}",
                                                             f"run_dir={tmp_path}/run"])
    check_eval(cfg)
    items, sha, frozen = frozen_items(tmp_path / "run", cfg.task)  # frozen into the run's item file, as every task
    assert frozen.name == "mmlu_pro-test.jsonl" and items[0]["n_options"] == 10 and len(sha) == 64
