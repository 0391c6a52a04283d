"""Run the harness extractors' upstream files at paper 000's pinned commits on a shared table of strings
and write their outputs to tests/data/pinned_harness.json (facts the test compares our transcriptions
with). Needs the repositories cloned (any clone holding the commits):

    python scripts/pinned_harness_table.py --math REPO --orz REPO --simplerl REPO --simple-evals REPO

Only the named functions and constants are taken from each file (found with ``ast``), so the rest of the
file and its imports (torch, ray) are never needed.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
from pathlib import Path

from crossed_rlvr.rescore.pinned import PINNED

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "pinned_harness.json"

STRINGS = [
    "\\boxed{5}", "so \\boxed{12} done", "first \\boxed{1} then \\boxed{2}", "\\boxed{\\frac{1}{2}}",
    "\\boxed {B}", "\\boxed 9$ end", "x \\boxed A. Done", "\\fbox{7}", "\\boxed{A} and then \\boxed{unclosed",
    "no box at all", "", "\\boxed{}", "\\boxed{\\text{(C)}}", "a \\boxed{x} b \\boxed{{y}}",
    "Answer: B", "answer:c", "Answer : $D$", "The answer is B. Answer: A", "Answer: E", "ANSWER:\tB",
    "Answer:\n5", "Answer: \n42", "Answer:   12  ", "final Answer: 3/4\nmore", "answer: x = 2", "Answer:",
    "#### 42", "#### 1,234", "text #### -7.5 more #### 8", "####42", "#### $5", "work 3 then 4. #### 12\nok",
    "no numbers", "1,2,3", "values . and ..", "-3 and 4.", "it costs $1,000.50", "x #### . y",
    "#### 6\n" + "pad " * 100 + "#### 9", "The answer is 18.", "Speed is \\boxed{5 m/s}, so the answer is B",
    "\\boxed{\\$18}",
]

SOURCES = {  # harness -> (repo option, file, functions, how to call)
    "math-boxed": ("math", "modeling/dataset/util.py", ["last_boxed_only_string"],
                   "modeling/eval_math_gpt.py", ["remove_boxed"], "remove_boxed(last_boxed_only_string(s))"),
    "orz-boxed": ("orz", "orz/ppo/tools/math_utils.py", ["last_boxed_only_string", "remove_boxed", "get_answer_str"],
                  None, [], "get_answer_str(s)"),
    "verl-gsm8k-strict": ("simplerl", "verl/utils/reward_score/gsm8k.py", ["extract_solution"], None, [],
                          "extract_solution(s, 'strict')"),
    "verl-gsm8k-flexible": ("simplerl", "verl/utils/reward_score/gsm8k.py", ["extract_solution"], None, [],
                            "extract_solution(s, 'flexible')"),
    "simple-evals-mc": ("simple_evals", "common.py", ["ANSWER_PATTERN_MULTICHOICE"], None, [],
                        "(lambda m: m.group(1) if m else None)(re.search(ANSWER_PATTERN_MULTICHOICE, s))"),
    "simple-evals-math": ("simple_evals", "common.py", ["ANSWER_PATTERN"], None, [],
                          "(lambda m: m.group(1) if m else None)(re.search(ANSWER_PATTERN, s))"),
}
COMMIT = {"math": PINNED["hendrycks/math"], "orz": PINNED["Open-Reasoner-Zero"],
          "simplerl": PINNED["simpleRL-reason"], "simple_evals": PINNED["simple-evals"]}


def definitions(repo: str, commit: str, path: str, names: list[str]) -> str:
    """The source text of the named top-level functions and assignments of ``path`` at ``commit``."""
    text = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, text=True,
                          check=True).stdout
    keep = []
    for node in ast.parse(text).body:
        named = node.name if isinstance(node, ast.FunctionDef) else (
            node.targets[0].id if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) else None)
        if named in names:
            keep.append(ast.get_source_segment(text, node))
    missing = set(names) - {n for n in names if any(f"def {n}(" in k or k.startswith(f"{n} =") for k in keep)}
    if missing:
        raise SystemExit(f"{path}@{commit}: {', '.join(sorted(missing))} not found")
    return "\n\n".join(keep)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for opt in ("math", "orz", "simplerl", "simple-evals"):
        parser.add_argument(f"--{opt}", required=True, help="a clone holding the pinned commit")
    args = vars(parser.parse_args())
    outputs = {}
    for name, (repo_opt, path, names, path2, names2, call) in SOURCES.items():
        repo = args[repo_opt]
        commit = COMMIT[repo_opt]
        code = definitions(repo, commit, path, names)
        if path2:
            code += "\n\n" + definitions(repo, commit, path2, names2)
        scope: dict = {"re": re}
        exec(compile(code, f"{repo_opt}@{commit}", "exec"), scope)  # upstream source text, not model output
        results = []
        for s in STRINGS:
            scope["s"] = s
            try:
                results.append(eval(call, scope))  # the fixed call above, on the fixed table
            except Exception as err:  # noqa: BLE001 - an upstream function that raises is a fact too
                results.append({"raises": type(err).__name__})
        outputs[name] = results
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"commits": {k: COMMIT[k] for k in COMMIT}, "strings": STRINGS, "outputs": outputs},
                              indent=1, ensure_ascii=False) + "\n")
    print(f"{OUT}: {len(STRINGS)} strings x {len(outputs)} extractors")


if __name__ == "__main__":
    main()
