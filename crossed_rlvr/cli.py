"""``crossed-rlvr``: small tools around the crossed evaluation.

``crossed-rlvr panel`` scores responses with the whole reader panel and the payload detector. Without ``--input`` it scores a
built-in set of example responses covering the reporting cases of paper 001 App. B.2.
``crossed-rlvr lm-eval-tasks`` prints the folder of the shipped lm-eval tasks (``lm_eval --include_path``), or with
``--data`` writes tasks that read local copies of the data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from crossed_rlvr.files import json_lines
from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.limits import Parser, add_number

EXAMPLES: list[dict[str, str]] = [
    {"response": "16 - 3 - 4 = 9 eggs, sold at $2 each: 9 * 2 = 18.\n#### 18", "reference": "18", "request": "hash"},
    {"response": "9 * 2 = 18 dollars.\n#### $18", "reference": "18", "request": "hash"},
    {"response": "9 * 2 = 18 dollars.\n#### **18**", "reference": "18", "request": "hash"},
    {"response": "So she makes 18 dollars.\n#### 18.0", "reference": "18", "request": "hash"},
    {"response": "#### Step 1: count eggs\n9 eggs remain, 9*2 = 18.\n\\boxed{18}", "reference": "18", "request": "hash"},
    {"response": "The answer is \\boxed{18}.", "reference": "18", "request": "boxed"},
    {"response": "Format: \\boxed{}. Result: \\boxed{18}", "reference": "18", "request": "boxed"},
    {"response": "#### 17\nOn reflection \\boxed{18}", "reference": "18", "request": "boxed"},
    {"response": "Half of it: \\boxed{\\frac{1}{2}}", "reference": "\\frac{1}{2}", "request": "boxed"},
    {"response": "The total is 18 dollars.", "reference": "18", "request": "hash"},
]

SHOWN = ["strict_first_hash", "lenient_hash_fallback", "boxed_first", "math_verify", "reward_hash", "reward_boxed"]


def _panel(args: argparse.Namespace) -> int:
    import pandas as pd

    from crossed_rlvr.eval.score import Item, score_many

    if args.input:
        path = Path(args.input)
        records = []
        try:
            for rec, where in json_lines(path):
                if not isinstance(rec, dict) or "response" not in rec or "reference" not in rec:
                    raise ValueError(f"{where}: cannot read record (a JSON object with response and reference)")
                records.append({"response": str(rec["response"]), "reference": str(rec["reference"]),
                                "request": str(rec.get("request", "hash"))})
        except ValueError as err:
            print(f"crossed-rlvr: {err}", file=sys.stderr)
            return 2
    else:
        records = EXAMPLES
    rows = score_many([Item(r["response"], r["reference"], r["request"]) for r in records],
                      workers=args.workers, progress=len(records) > 200)
    table = pd.DataFrame([{**r, **row} for r, row in zip(records, rows)])
    if args.output:
        out = Path(args.output)
        if out.exists() and not args.force:
            print(f"{out} exists; pass --force to replace it", file=sys.stderr)
            return 2
        table.to_json(out, orient="records", lines=True)
        print(f"wrote {len(table)} scored rows to {out}")
    view = table[["request", "reference", "category", "requested_payload", "extractable"]].copy()
    for name in SHOWN:
        view[name] = table[f"{name}.answer"].fillna("⊥") + table[f"{name}.correct"].map({True: " ✓", False: " ✗"})
    view.insert(0, "response", table["response"].str.replace("\n", "⏎").str.slice(0, 38))
    with pd.option_context("display.width", 250, "display.max_columns", 20, "display.max_colwidth", 40):
        print(view.to_string(index=False))
    accuracy = {name: float(table[f"{name}.correct"].mean()) for name in SHOWN}
    print("\naccuracy by reader:", json.dumps({k: round(v, 3) for k, v in accuracy.items()}))
    return 0


def _lm_eval_tasks(args: argparse.Namespace) -> int:
    from crossed_rlvr.lm_eval_tasks import FOLDER, localize

    if not args.data:
        if args.out:
            print("crossed-rlvr: --out needs --data (the shipped tasks stay where they are)", file=sys.stderr)
            return 2
        print(FOLDER)
        return 0
    if not args.out:
        print("crossed-rlvr: --data needs --out, the folder to write the local tasks to", file=sys.stderr)
        return 2
    data = {}
    for pair in args.data:
        dataset, sep, file = pair.partition("=")
        if not sep or not file:
            print(f"crossed-rlvr: --data {pair!r}: expected DATASET=FILE (gsm8k=test.jsonl)", file=sys.stderr)
            return 2
        if not Path(file).is_file():
            print(f"crossed-rlvr: --data {pair!r}: no such file", file=sys.stderr)
            return 2
        data[dataset] = Path(file)
    try:
        localize(Path(args.out), data)
    except ValueError as err:
        print(f"crossed-rlvr: {err}", file=sys.stderr)
        return 2
    print(Path(args.out).resolve())
    return 0


# plain text: --help once printed the module docstring's first line, markup and all
DESCRIPTION = ("Small tools around the crossed evaluation: score responses with the reader panel, and find the "
               "shipped lm-eval tasks. The stages have their own commands (crossed-study, crossed-eval, "
               "crossed-score, crossed-analyze, crossed-import, ...).")


@stops_cleanly("crossed-rlvr")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="crossed-rlvr", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    p = sub.add_parser("panel", help="score responses with every reader and the payload detector (default: built-in "
                                        "examples)")
    p.add_argument("--input", help="JSON Lines with response, reference and request (default: built-in examples)")
    p.add_argument("--output", help="write the scored rows as JSON Lines here")
    p.add_argument("--force", action="store_true", help="replace an existing --output file")
    add_number(p, "--workers", 0, 1024, default=None, why="0: score in this process",
               help="worker processes (default: all cores; 0 = in-process)")
    p.set_defaults(func=_panel)
    t = sub.add_parser("lm-eval-tasks", help="print the folder of the shipped lm-eval tasks",
                       description="Print the folder of the shipped lm-eval tasks (GSM8K and MATH-500 under the hash "
                                   "and boxed requests in three wordings), for lm_eval --include_path; with --data, "
                                   "write tasks that read local JSON Lines copies of the data into --out and print it.")
    t.add_argument("--data", action="append", metavar="DATASET=FILE",
                   help="a local copy of a dataset with its hub fields (gsm8k: question, answer; math500: problem, "
                        "answer); repeat for both")
    t.add_argument("--out", help="folder for the local tasks (with --data)")
    t.set_defaults(func=_lm_eval_tasks)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
