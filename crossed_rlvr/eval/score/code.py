"""Code responses scored by execution (paper 001 App. D.3): each response read by the code readers (strict: the
first closed block in the requested delimiter; lenient: any block, else the response), and each program run on the
task's base and plus tests in the sandbox, once however many responses wrote it.

One row per response: the payload of each convention, each reader's program hash (``<reader>.answer``), whether it
passed base and plus (``<reader>.correct``), base alone (``<reader>.base``), the parts' statuses
(``<reader>.status``, ``base/plus``), the requested payload and the payload category.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from crossed_rlvr.rewards.code import CODE_CONVENTIONS, lenient_block, payload_present, solution, strict_block
from crossed_rlvr.tasks.code import CodeDataset

READERS = ("strict", "lenient")
KEYS = ("item_id", "task", "policy", "training_convention", "train_seed", "method", "checkpoint", "request", "template",
        "sample_idx", "finish_reason")


def score_code(records: list[dict[str, Any]], ds: CodeDataset, slots: int, cache_dir: Path | None) -> pd.DataFrame:
    """One row per response: payloads of both conventions, each reader's program and whether it passed base and
    plus (``<reader>.correct``) and base alone (``<reader>.base``)."""
    from tqdm import tqdm

    from crossed_rlvr.eval.score.execution import Executor, code_sha256
    from crossed_rlvr.sandbox.bwrap import Sandbox

    rows, programs = [], []
    for r in records:
        task = ds.tasks[r["item_id"]]
        row = {k: r.get(k) for k in KEYS}
        for conv in CODE_CONVENTIONS:
            row[f"payload.{conv}"] = payload_present(conv, r["response"])
        blocks = {"strict": strict_block(r["request"], r["response"]),
                  "lenient": lenient_block(r["request"], r["response"])}
        for reader, code in blocks.items():
            program = None if code is None else solution(task.prompt, task.entry_point, code)
            row[f"{reader}.answer"] = None if program is None else code_sha256(program)
            if program is not None:
                programs.append((r["item_id"], program))
            row[f"_{reader}_program"] = program
        rows.append(row)
    unique = list(dict.fromkeys(programs))
    with Sandbox(slots=slots) as box:
        ex = Executor(ds, box, cache_dir)
        with tqdm(total=2 * len(unique), desc="code eval: sandbox", unit="part") as bar:
            verdicts = dict(zip(unique, ex.score(unique, progress=bar.update)))
    for row in rows:
        for reader in READERS:
            program = row.pop(f"_{reader}_program")
            v = verdicts.get((row["item_id"], program)) if program is not None else None
            row[f"{reader}.base"] = bool(v and v["base"].status == "pass")
            row[f"{reader}.correct"] = bool(v and v["base"].status == "pass" and v["plus"].status == "pass")
            row[f"{reader}.status"] = "none" if v is None else f"{v['base'].status}/{v['plus'].status}"
        req, other = row["request"], next(c for c in CODE_CONVENTIONS if c != row["request"])
        row["requested_payload"] = row[f"payload.{req}"]
        row["category"] = {(True, True): "both", (True, False): "requested_only", (False, True): "other_only",
                           (False, False): "neither"}[(bool(row[f"payload.{req}"]), bool(row[f"payload.{other}"]))]
    return pd.DataFrame(rows)
