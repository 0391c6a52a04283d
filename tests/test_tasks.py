"""Tasks: the arithmetic probe, its AST/Fraction checker, loaders and frozen item files."""

import json
from collections import Counter
from fractions import Fraction

import pytest

from crossed_rlvr.tasks import (
    ItemFileError,
    exact_value,
    load_gsm8k,
    load_math500,
    make_splits,
    read_items,
    write_items,
)
from crossed_rlvr.tasks.arith import UnsafeExpression


def test_probe_strata_bounds_and_disjoint_splits():
    splits = make_splits(500, 32, seed=20260908)
    test, dev = splits["test"], splits["dev"]
    assert Counter(it["stratum"] for it in test) == {"2ops": 167, "3ops": 167, "4ops": 166}
    assert len(dev) == 32
    assert not {it["expression"] for it in test} & {it["expression"] for it in dev}
    for it in test + dev:
        value = exact_value(it["expression"])
        assert value.denominator == 1 and abs(value) <= 10_000
        assert str(int(value)) == it["reference"]
        ops = sum(it["expression"].count(f" {op} ") for op in "+-*/")
        assert f"{ops}ops" == it["stratum"]
        last = it["solution"].splitlines()[-1]
        assert last.endswith(f"= {it['reference']}")


def test_probe_is_seeded():
    assert make_splits(30, 6, seed=1) == make_splits(30, 6, seed=1)
    assert make_splits(30, 6, seed=1) != make_splits(30, 6, seed=2)


@pytest.mark.parametrize(("expr", "value"), [("(3 + 4) * 5", 35), ("7 / 2", Fraction(7, 2)), ("-3 - -4", 1),
                                             ("12 × 3 ÷ 4", 9)])
def test_exact_value(expr, value):
    assert exact_value(expr) == value


@pytest.mark.parametrize("expr", ["__import__('os').system('echo hi')", "2 ** 10", "x + 1", "1.5 + 2", "[1][0]",
                                  "(lambda: 1)()", "1 if 1 else 2", "1; 2"])
def test_exact_value_refuses_anything_else(expr):
    with pytest.raises(UnsafeExpression):
        exact_value(expr)


def test_gsm8k_local_loader(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    rows = [{"question": "Janet has 16 eggs...", "answer": "She has 16 - 3 = <<16-3=13>>13.\n13 * 2 = <<13*2=26>>26\n#### 1,026"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (item,) = load_gsm8k(path)
    assert item["reference"] == "1026"
    assert item["solution"] == "She has 16 - 3 = 13.\n13 * 2 = 26"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ItemFileError, match="lacks field 'answer'"):
        load_gsm8k(bad)


def test_math500_local_parquet(tmp_path):
    import pandas as pd

    path = tmp_path / "m.parquet"
    pd.DataFrame([{"problem": "Find x.", "answer": "\\frac{1}{2}", "solution": "...", "unique_id": "test/a/1.json"}]
                 ).to_parquet(path)
    (item,) = load_math500(path)
    assert item["reference"] == "\\frac{1}{2}" and item["item_id"] == "test/a/1.json"


def test_item_file_hash_and_refusal(tmp_path):
    items = make_splits(9, 3)["test"]
    path = tmp_path / "items.jsonl"
    sha = write_items(path, items)
    back, sha2 = read_items(path, sha)
    assert sha == sha2 and [i["item_id"] for i in back] == [i["item_id"] for i in items]
    path.write_text(path.read_text().replace(items[0]["reference"], "999999", 1))
    with pytest.raises(ItemFileError, match="item file changed"):
        read_items(path, sha)
    path.write_text('{"item_id": 1, "question": "q"}\n')
    with pytest.raises(ItemFileError, match=r"items\.jsonl:1: missing field 'reference'"):
        read_items(path)


def test_hub_tasks_get_a_seeded_dev_split_disjoint_from_train_and_test(tmp_path):
    """GSM8K has only train and test: dev is a seeded held-out part of the train rows (issue: 'dev' split)."""
    import json

    from crossed_rlvr.conf.schema import TaskConf, conf_of
    from crossed_rlvr.tasks.build import build_items
    from crossed_rlvr.tasks.items import ItemFileError
    from tests.task_files import gsm8k_files

    train, test = gsm8k_files(tmp_path, n_train=30, n_test=10)
    rows = [json.loads(x) for x in train.read_text().splitlines()]
    rows[3]["question"] = json.loads(test.read_text().splitlines()[0])["question"]  # a test question in train
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def split(name, **kw):
        return build_items(conf_of(TaskConf, {"name": "gsm8k", "source": "gsm8k", "split": name, "path": str(test),
                                             "train_path": str(train), "dev_items": 5, "dev_seed": 1, **kw}))

    dev, tr, te = split("dev"), split("train"), split("test")
    assert len(dev) == 5 and len(tr) == 30 - 1 - 5 and len(te) == 10
    assert [it["item_id"] for it in dev] == [it["item_id"] for it in split("dev")]  # same seed, same items
    assert [it["item_id"] for it in dev] != [it["item_id"] for it in split("dev", dev_seed=2)]
    assert not {it["item_id"] for it in dev} & {it["item_id"] for it in tr}
    assert "train-3" not in {it["item_id"] for it in dev + tr}  # the test question is dropped from both
    assert not {it["question"] for it in dev + tr} & {it["question"] for it in te}
    with pytest.raises(ItemFileError, match="split='val'"):
        split("val")
    with pytest.raises(ItemFileError, match="dev_items=40 leaves no training rows"):
        split("dev", dev_items=40)


def test_math_train_rows_take_their_answer_from_the_last_box():
    from crossed_rlvr.tasks.loaders import math500_item

    row = {"problem": "p", "solution": "First $\\boxed{1}$, then $\\boxed{\\frac{3}{4}}$.", "type": "Algebra"}
    item = math500_item(row, 0)
    assert item["reference"] == "\\frac{3}{4}" and item["subject"] == "Algebra"
