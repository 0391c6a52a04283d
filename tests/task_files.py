"""Local GSM8K- and MATH-shaped files with only train and test splits (as the hub datasets have), and one row of
each multiple-choice benchmark in its hub format."""

from __future__ import annotations

import json
import random
from pathlib import Path


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def gsm8k_files(folder: Path, n_train: int = 120, n_test: int = 40, seed: int = 0) -> tuple[Path, Path]:
    """(train.jsonl, test.jsonl) with GSM8K's fields: ``question`` and an ``answer`` ending in ``#### n``."""
    rng = random.Random(seed)

    def row(k: int, split: str) -> dict:
        a, b = rng.randint(2, 90), rng.randint(2, 90)
        return {"question": f"[{split} {k}] Ann has {a} apples and buys {b} more. How many apples does she have?",
                "answer": f"She has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b:,}"}

    return (_write(folder / "gsm8k" / "train.jsonl", [row(k, "train") for k in range(n_train)]),
            _write(folder / "gsm8k" / "test.jsonl", [row(k, "test") for k in range(n_test)]))


def math_files(folder: Path, n_train: int = 120, n_test: int = 40, seed: int = 0) -> tuple[Path, Path]:
    """(train.jsonl, test.jsonl): MATH's train rows (``problem``, ``solution`` with the answer boxed, no
    ``answer``) and MATH-500's test rows (``problem``, ``answer``, ``unique_id``)."""
    rng = random.Random(seed)
    train = []
    for k in range(n_train):
        a = rng.randint(2, 30)
        train.append({"problem": f"[train {k}] Simplify $\\frac{{{a}}}{{{2 * a}}}$.", "level": "Level 1",
                      "type": "Prealgebra", "solution": f"Divide by ${a}$: $\\boxed{{\\frac{{1}}{{2}}}}$."})
    test = [{"problem": f"[test {k}] What is $\\sqrt{{{(k + 2) ** 2}}}$?", "answer": str(k + 2),
             "solution": f"$\\boxed{{{k + 2}}}$", "subject": "Algebra", "level": 1,
             "unique_id": f"test/algebra/{k}.json"} for k in range(n_test)]
    return _write(folder / "math" / "train.jsonl", train), _write(folder / "math" / "test.jsonl", test)


# one row of each multiple-choice benchmark in its hub format (tasks/choice.py reads them)
ROWS = {
    "mmlu": {"question": "2 + 2?", "choices": ["3", "4", "5", "6"], "answer": 1, "subject": "math"},
    "mmlu_pro": {"question_id": 70, "question": "Pick J.", "options": [str(k) for k in range(10)], "answer": "J",
                 "answer_index": 9},
    "arc_challenge": {"id": "Mercury_1", "question": "Which is a gas?",
                      "choices": {"text": ["rock", "steam", "ice"], "label": ["A", "B", "C"]}, "answerKey": "B"},
    "aqua_rat": {"question": "x = 21?", "options": ["A)21", "B)22", "C)23", "D)24", "E)25"], "rationale": "...",
                 "correct": "A"},
    "sat_math": {"query": "Q: What is 5? Answer Choices: (A)5 (B)6 (C)7 (D)8\nA: Among A through D, the answer is",
                 "choices": ["(A)5", "(B)6", "(C)7", "(D)8"], "gold": [0]},
}
BBH = {"input": "Today is Monday. What day is tomorrow?\nOptions:\n(A) Tuesday\n(B) Sunday", "target": "(A)"}
