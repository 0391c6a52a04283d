"""Run Qwen2.5-Math's own evaluation code at paper 000's pinned commit (cb098e1) on a table of responses and
write what it extracts to tests/data/pinned_qwen.json: ``extract_answer`` for the benchmark's data name,
then ``math_eval.py``'s letter step (on an item keyed A-E whose answer is not such a letter,
``choice_answer_clean`` on the whole response), and ``strip_string`` of each key. Run it with a Python that
has the evaluation code's own dependencies (word2number, latex2sympy2, regex, sympy, numpy):

    git -C Qwen2.5-Math show cb098e1:evaluation/parser.py > DIR/parser.py   # and utils.py, examples.py
    python scripts/pinned_qwen_table.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "pinned_qwen.json"
ALIAS = {"mmlu": "mmlu_stem", "aqua_rat": "aqua"}  # our task names as the paper ran them
BENCHMARKS = ["mmlu", "mmlu_pro", "arc_challenge", "aqua_rat", "sat_math", "gsm8k", "math"]
RESPONSES = [
    "The answer is B.", "So the answer is B. Therefore, the answer is \\boxed{B}", "\\boxed{C}", "\\boxed{(D)}",
    "First \\boxed{B}, on reflection the answer is C", "I choose option A", "Answer: E", "B", "(C)",
    "The final answer is $12$. I hope it is correct.", "so \\boxed{\\frac{1}{2}}", "\\boxed 7$ and more",
    "Thus the answer is 42", "My final answer is 9", "3 apples and 1,234 pears", "no digits here", "",
    "The answer is $18.", "The answer is 50\\%", "\\boxed{\\text{(C)}}", "the choice is d", "a) 5 b) 6 answer is b",
    "The answer is A.\n\nThe answer is B.", "\\boxed{x=3}", "\\boxed{0.5}", "\\boxed{.5}", "\\boxed{30^\\circ}",
    "\\boxed{\\left(1,2\\right)}", "\\boxed{\\dfrac{3}{4}}", "Final answer: F", "\\boxed{J}", "The answer is J",
]
KEYS = {"mmlu": "B", "mmlu_pro": "J", "arc_challenge": "C", "aqua_rat": "E", "sat_math": "D", "gsm8k": "42",
        "math": "\\dfrac{1}{2}"}
KEY_TABLE = ["\\dfrac{1}{2}", "\\left(1,2\\right)", "30^\\circ", "\\text{(C)}", "0.5", ".5", "x=3", "\\$18", "50\\%",
             "\\tfrac{3}{4}", "10", "B"]


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    import parser as qwen  # the repository's evaluation/parser.py

    rows = []
    for bench in BENCHMARKS:
        data = ALIAS.get(bench, bench)
        key = KEYS[bench]
        for text in RESPONSES:
            pred = qwen.extract_answer(text, data)
            alone = pred
            if key in ["A", "B", "C", "D", "E"] and pred not in ["A", "B", "C", "D", "E"]:  # math_eval.py
                pred = qwen.choice_answer_clean(text)
            rows.append({"benchmark": bench, "key": key, "response": text, "extract_answer": alone,
                         "with_letter_step": pred})
    keys = {k: qwen.strip_string(k) for k in KEY_TABLE}
    OUT.write_text(json.dumps({"commit": "cb098e1", "alias": ALIAS, "rows": rows, "keys": keys}, indent=1,
                              ensure_ascii=False) + "\n")
    print(f"{OUT}: {len(rows)} responses, {len(keys)} keys")


if __name__ == "__main__":
    main()
