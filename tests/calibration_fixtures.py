"""A small scored study for calibration tests: two states (initial and a hash arm) x 6 items, and the
frozen calibration sample drawn from it with ``crossed-calibrate sample``."""

from __future__ import annotations

from pathlib import Path

# (item id, question, reference, initial's response, arm's response)
ITEMS = [
    ("0", "What is 31 + 47?", "78", "31 and 47 make 78.", "31 + 47 = 78\n#### 78"),
    ("1", "What is 52 - 19?", "33", "The result is 34.", "52 - 19 = 33\n#### 33"),
    ("2", "What is 6 * 7?", "42", "6 * 7 = 42\n#### 42", "6 * 7 = 42\n#### 42"),
    ("3", "What is 81 / 9?", "9", "81 / 9 = 8\n#### 8", "81 / 9 = 9, or maybe 8.\n#### 9"),
    ("4", "What is 15 + 26?", "41", "I am not sure.", "15 + 26 = 41\n#### 41"),
    ("5", "What is 70 - 23?", "47", "70 - 23 = 47. So \\boxed{47}", "70 - 23 = 47\n#### 46"),
]


def scored_study(root: Path) -> Path:
    """Response files, item file and scores of the two states; returns the scores path."""
    from crossed_rlvr.eval.score.scoring import score_files
    from crossed_rlvr.records import write_responses
    from crossed_rlvr.tasks.items import write_items

    eval_dir = root / "eval"
    write_items(eval_dir / "items" / "toy-test.jsonl",
                [{"item_id": i, "question": q, "reference": ref} for i, q, ref, _, _ in ITEMS])
    (eval_dir / "responses").mkdir(parents=True, exist_ok=True)
    for policy, conv, seed, col in (("initial", "initial", None, 3), ("grpo-hash/s83", "hash", 83, 4)):
        recs = [{"item_id": it[0], "task": "toy", "policy": policy, "training_convention": conv, "train_seed": seed,
                 "request": "hash", "template": "original", "sample_idx": 0, "gen_seed": None,
                 "prompt_sha256": "0" * 64, "response": it[col], "finish_reason": "stop", "prompt_tokens": 10,
                 "response_tokens": 10, "reference": it[2]} for it in ITEMS]
        write_responses(eval_dir / "responses" / f"{policy.replace('/', '_')}__hash__original.jsonl", recs)
    return Path(score_files([eval_dir / "responses"], eval_dir / "scores.parquet", workers=0, progress=False))
