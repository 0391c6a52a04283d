"""``crossed-rlvr``: command-line entry.

``crossed-rlvr panel`` scores responses with the whole reader panel and the payload detector. Without ``--input`` it scores a
built-in set of example responses covering the reporting cases of paper 001 App. B.2.
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


@stops_cleanly("crossed-rlvr")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="crossed-rlvr", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("panel", help="score responses with the whole reader panel and payload detector")
    p.add_argument("--input", help="JSON Lines with response, reference and request (default: built-in examples)")
    p.add_argument("--output", help="write the scored rows as JSON Lines here")
    p.add_argument("--force", action="store_true", help="replace an existing --output file")
    add_number(p, "--workers", 0, 1024, default=None, why="0: score in this process",
               help="worker processes (default: all cores; 0 = in-process)")
    p.set_defaults(func=_panel)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
