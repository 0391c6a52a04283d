"""Matched-arm check (paper 001 §3 "matched controls", App. D.1 "Matched factors").

Two arms pair only if their resolved configs and training data (row order included) differ in
nothing but the intervention: the convention (its prompt suffix and reward program), output names
and the declared seed fields. The verdict is written to both run directories.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crossed_rlvr.files import json_lines
from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.rewards.conventions import get_convention

ALLOWED_CONFIG = ("convention.", "run_dir", "arm", "seed", "data_seed")  # intervention, outputs, seeds
ROW_INTERVENTION = ("prompt", "convention", "request")


def _flatten(d: object, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def _allowed(key: str) -> bool:
    return any(key == a or key.startswith(a) for a in ALLOWED_CONFIG)


def request_suffix(convention: str, template: str) -> str:
    """The request an arm's prompts end in: its answer convention's, or its code delimiter's (rewards/code.py)."""
    from crossed_rlvr.rewards.code import CODE_CONVENTIONS, code_request

    if convention in CODE_CONVENTIONS:
        return code_request(convention, template)
    return get_convention(convention).suffix(template)


def compare_arms(run_a: str | Path, run_b: str | Path) -> dict[str, Any]:
    """Verdict on whether two training runs form a matched pair."""
    a, b = Path(run_a), Path(run_b)
    cfg_a = json.loads(ArmLayout(a).resolved_config.read_text())
    cfg_b = json.loads(ArmLayout(b).resolved_config.read_text())
    fa, fb = _flatten(cfg_a), _flatten(cfg_b)
    config_diffs = [
        {"key": k, "a": fa.get(k), "b": fb.get(k)}
        for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k) and not _allowed(k)
    ]
    rows_a = [row for row, _where in json_lines(ArmLayout(a).train_rows)]
    rows_b = [row for row, _where in json_lines(ArmLayout(b).train_rows)]
    data_diffs: list[dict[str, Any]] = []
    if len(rows_a) != len(rows_b):
        data_diffs.append({"row": None, "field": "n_rows", "a": len(rows_a), "b": len(rows_b)})
    for ra, rb in zip(rows_a, rows_b):
        for k in sorted(set(ra) | set(rb)):
            if k not in ROW_INTERVENTION and ra.get(k) != rb.get(k):
                data_diffs.append({"row": ra.get("row"), "field": k, "a": ra.get(k), "b": rb.get(k)})
        # The prompt may differ only by the arm's own request suffix.
        for row, cfg in ((ra, cfg_a), (rb, cfg_b)):
            if row["prompt"] != f"{row['question']}\n{request_suffix(cfg['convention']['name'], cfg['template'])}":
                data_diffs.append({"row": row.get("row"), "field": "prompt", "a": ra["prompt"], "b": rb["prompt"]})
        if len(data_diffs) > 20:
            break
    intervention = {"a": cfg_a["convention"]["name"], "b": cfg_b["convention"]["name"]}
    matched = not config_diffs and not data_diffs and intervention["a"] != intervention["b"]
    return {
        "matched": matched, "runs": [str(a), str(b)], "intervention": intervention,
        "config_differences": config_diffs, "data_differences": data_diffs[:20], "rows": len(rows_a),
    }


def check_and_record(run_a: str | Path, run_b: str | Path) -> dict[str, Any]:
    verdict = compare_arms(run_a, run_b)
    text = json.dumps(verdict, indent=2, default=str) + "\n"
    for run in (run_a, run_b):
        ArmLayout(Path(run)).matched_check.write_text(text)
    return verdict


def parser() -> Any:
    """crossed-match's arguments, each with its help (ArgumentDefaultsHelpFormatter shows any default)."""
    import argparse

    p = argparse.ArgumentParser(prog="crossed-match", description="Check that two training runs are matched arms; "
                                "the verdict is written to both as matched_check.json. Exit 0: matched, 1: not.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("run_a", help="one arm's run directory (crossed-train's run_dir, holding its resolved config)")
    p.add_argument("run_b", help="the other arm's run directory, trained under the other convention")
    return p


@stops_cleanly("crossed-match")
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    verdict = check_and_record(args.run_a, args.run_b)
    if verdict["matched"]:
        print(f"matched: {verdict['intervention']['a']} vs {verdict['intervention']['b']}, {verdict['rows']} rows")
        return 0
    for d in verdict["config_differences"][:10]:
        print(f"config {d['key']}: {d['a']!r} != {d['b']!r}")
    for d in verdict["data_differences"][:10]:
        print(f"data row {d['row']} field {d['field']}: {str(d['a'])[:60]!r} != {str(d['b'])[:60]!r}")
    if verdict["intervention"]["a"] == verdict["intervention"]["b"]:
        print("both runs train the same convention: no intervention to compare")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
