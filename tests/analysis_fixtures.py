"""Hand-built scores tables with known answers for the analysis tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

READERS = ["strict_first_hash", "boxed_first", "lenient_hash_fallback", "lenient_boxed_fallback", "math_verify",
           "reward_hash", "reward_boxed", "last_number", "json_first", "xml_first", "reward_json", "reward_xml"]
STRICT = {"hash": "strict_first_hash", "boxed": "boxed_first", "json": "json_first", "xml": "xml_first"}
LENIENT = {"hash": "lenient_hash_fallback", "boxed": "lenient_boxed_fallback"}


def cell(policy, request, payload, strict, lenient=None, mv=None, seed=None, convention=None, samples=1,
         template="original", truncated=None):
    """Rows of one cell; per-response arrays of length n_items * samples (item-major)."""
    payload = np.asarray(payload, bool)
    n = len(payload)
    strict = np.asarray(strict, bool)
    lenient = strict if lenient is None else np.asarray(lenient, bool)
    mv = lenient if mv is None else np.asarray(mv, bool)
    conv = convention or ("initial" if policy == "initial" else policy.split("/")[0].split("-")[1])
    rows = []
    for k in range(n):
        row = {
            "task": "t", "policy": policy, "training_convention": conv,
            "train_seed": seed if conv != "initial" else None, "request": request, "template": template,
            "item_id": str(k // samples), "sample_idx": k % samples, "gen_seed": 0,
            "finish_reason": "length" if truncated is not None and truncated[k] else "stop",
            "prompt_tokens": 1, "response_tokens": 1, "reference": "1",
            "requested_payload": bool(payload[k]), "extractable": bool(strict[k] or payload[k]),
            "category": "requested_only" if payload[k] else "neither", "timed_out": False,
        }
        for r in READERS:
            row[f"{r}.answer"], row[f"{r}.correct"] = None, False
        s_reader = STRICT[request]
        row[f"{s_reader}.correct"] = bool(strict[k])
        row[f"{s_reader}.answer"] = "1" if strict[k] else None
        if request in LENIENT:  # JSON and XML requests have no lenient reader (paper 001 App. D.3)
            l_reader = LENIENT[request]
            row[f"{l_reader}.correct"] = bool(lenient[k])
            row[f"{l_reader}.answer"] = row[f"{s_reader}.answer"] if strict[k] else ("1" if lenient[k] else "0")
        row["math_verify.correct"] = bool(mv[k])
        row[f"reward_{request}.correct"] = bool(strict[k])
        row["last_number.correct"] = bool(lenient[k])
        rows.append(row)
    return rows


def write(tmp_path, rows, name="scores.parquet"):
    df = pd.DataFrame([r for cell_rows in rows for r in cell_rows])
    df["train_seed"] = df["train_seed"].astype("Int64")
    path = tmp_path / name
    df.to_parquet(path, index=False)
    return path
