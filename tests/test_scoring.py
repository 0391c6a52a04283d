"""crossed-score: deterministic bytes, resumption after interruption, no silent overwrite."""

import json

import pandas as pd
import pytest

from crossed_rlvr.eval.score.scoring import main as score_main
from crossed_rlvr.eval.score.scoring import manifest_path, score_files
from crossed_rlvr.records import write_responses
from tests.helpers import rec

TEXTS = ["#### 18", "#### $18", "\\boxed{18}", "\\boxed{}\\boxed{18}", "18", "#### 17\n\\boxed{18}"]


def make_run(tmp_path, n_items=40):
    run = tmp_path / "run"
    (run / "responses").mkdir(parents=True)
    for policy in ("initial", "grpo-hash/s83", "grpo-boxed/s83"):
        for request in ("hash", "boxed"):
            records = [rec(i, policy, request, response=TEXTS[(i + len(policy)) % len(TEXTS)]) for i in range(n_items)]
            write_responses(run / "responses" / f"{policy.replace('/', '_')}__{request}.jsonl", records)
    return run


def test_same_inputs_same_bytes(tmp_path):
    run = make_run(tmp_path)
    a = score_files([run / "responses"], tmp_path / "a.parquet", workers=2, progress=False)
    b = score_files([run / "responses"], tmp_path / "b.parquet", workers=0, progress=False, shard_size=7)
    assert a.read_bytes() == b.read_bytes()
    table = pd.read_parquet(a)
    assert len(table) == 240 and not table.duplicated(["policy", "request", "item_id", "sample_idx"]).any()
    assert table.loc[(table.policy == "initial") & (table.request == "hash"), "item_id"].tolist() == [
        str(i) for i in range(40)]
    manifest = json.loads(manifest_path(a).read_text())
    assert len(manifest["inputs"]) == 6 and all(len(x["sha256"]) == 64 for x in manifest["inputs"])


def test_interrupted_run_resumes_without_loss_or_duplicates(tmp_path):
    run = make_run(tmp_path)
    full = score_files([run / "responses"], tmp_path / "full.parquet", workers=0, progress=False, shard_size=50)
    out = tmp_path / "resumed.parquet"
    score_files([run / "responses"], out, workers=0, progress=False, shard_size=50, stop_after_shards=2)
    assert not out.exists()
    partial = sorted(p.name for p in (tmp_path / "resumed.parquet.partial").glob("shard-*.parquet"))
    assert partial == ["shard-00000.parquet", "shard-00001.parquet"]
    score_files([run / "responses"], out, workers=0, progress=False, shard_size=50)
    assert out.read_bytes() == full.read_bytes()
    assert not (tmp_path / "resumed.parquet.partial").exists()


def test_existing_output_is_kept_or_refused(tmp_path, capsys):
    run = make_run(tmp_path)
    assert score_main([str(run), "--workers", "0"]) == 0
    out = run / "scores.parquet"
    before = out.read_bytes()
    assert score_main([str(run), "--workers", "0"]) == 0  # up to date: nothing rewritten
    assert "up to date" in capsys.readouterr().err
    # Different inputs: refused, and the existing table is untouched.
    write_responses(run / "responses" / "initial__hash.jsonl",
                    [rec(i, "initial", "hash", response="#### 1") for i in range(40)])
    assert score_main([str(run), "--workers", "0"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert score_main([str(run), "--workers", "0", "--overwrite"]) == 0
    assert out.read_bytes() != before


def test_bad_input_exit_code_and_message(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": 1}\n')
    assert score_main([str(bad), "-o", str(tmp_path / "s.parquet")]) == 2
    assert "bad.jsonl:1: missing field 'task'" in capsys.readouterr().err
    assert not (tmp_path / "s.parquet").exists()


@pytest.mark.parametrize("workers", [0, 2])
def test_scores_columns(tmp_path, workers):
    run = make_run(tmp_path, n_items=6)
    table = pd.read_parquet(score_files([run], tmp_path / "s.parquet", workers=workers, progress=False))
    for col in ("strict_first_hash.answer", "math_verify.correct", "payload.hash", "payload.boxed", "category",
                "reward_hash.correct", "item_id", "policy", "request", "template", "sample_idx"):
        assert col in table.columns


def test_identical_responses_are_scored_once_and_each_gets_its_own_row():
    """Greedy decoding repeats itself: the pool scores each distinct (response, reference, request, task) once and
    copies the row back to every response that wrote it; the rows equal those of scoring each one in process."""
    from crossed_rlvr.eval.score.panel import Item, Scorer, score_many

    items = [Item("18 apples\n#### 18", "18", "hash"), Item("\\boxed{18}", "18", "boxed"),
             Item("18 apples\n#### 18", "18", "hash"), Item("18 apples\n#### 18", "18", "boxed"),
             Item("\\boxed{18}", "18", "boxed"), Item("18 apples\n#### 18", "18", "hash")]
    sent: list[int] = []

    class Counting(Scorer):
        def _score_unique(self, unique, weight, progress):
            sent.append(len(unique))
            return super()._score_unique(unique, weight, progress)

    class Bar:
        n = 0

        def update(self, k: int) -> None:
            Bar.n += k

    with Counting(workers=2) as scorer:
        rows = scorer.score(items, Bar())
    assert sent == [3] and Bar.n == len(items)
    assert rows == score_many(items, workers=0)
    assert rows[0] is not rows[2] and rows[0] == rows[2]
