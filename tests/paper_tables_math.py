"""Response files built to have the counts of paper 001 Tables 15-17 (MATH500 transfer, seed 83, 500 items).

Items 0-319 have nonnegative-integer references, items 320-499 fractions (Table 17's two groups). For each
cell the builder places responses so that at once: the requested payload is present on q^pay items,
readable (symbolic parse) on q, the strict reader is right on S; under hash requests the digit-only, hash-
correct and Math-Verify-correct counts of each reference group hold; truncation counts hold; and the full-
response Math-Verify reading is right on MV items (hash cells end in a ``$value$`` line that Math-Verify reads
last; boxed cells reach MV > S through responses without a box that state the value in ``$...$``).
"""

from __future__ import annotations

import hashlib
from typing import Any

N, N_INT = 500, 320
POLICIES = {"initial": ("initial", None), "hash": ("grpo-hash/s83", 83), "boxed": ("grpo-boxed/s83", 83)}

# Table 15 (accuracy %) and Table 16 (q^pay %, q %, Trunc. %): (S, MV, q_pay, q, trunc), as counts of 500
TABLE_15_16 = {
    ("initial", "hash"): (265, 367, 317, 300, 3), ("hash", "hash"): (259, 333, 497, 491, 5),
    ("boxed", "hash"): (213, 371, 243, 239, 3), ("initial", "boxed"): (375, 377, 495, 494, 2),
    ("hash", "boxed"): (383, 384, 497, 497, 2), ("boxed", "boxed"): (384, 386, 497, 497, 1),
}
# Table 17 (hash requests): group -> checkpoint -> (digit-only hash, hash correct, MV correct)
TABLE_17 = {
    "integer": {"initial": (191, 178, 246), "hash": (314, 246, 245), "boxed": (149, 138, 243)},
    "other": {"initial": (3, 87, 121), "hash": (159, 13, 88), "boxed": (4, 75, 128)},
}
# Table 16's paired changes (points), which the counts above determine
TABLE_16_CHANGES = {("hash", "hash"): (-1.2, -6.8), ("boxed", "hash"): (-10.4, 0.8),
                    ("hash", "boxed"): (1.6, 1.4), ("boxed", "boxed"): (1.8, 1.8)}


def reference(item: int) -> str:
    return str(item + 2) if item < N_INT else f"\\frac{{1}}{{{item}}}"


def wrong(item: int) -> str:
    return str(item + 1000) if item < N_INT else "\\frac{1}{9999}"


def hash_cell(ckpt: str) -> list[str]:
    _, mv, pay, q, _ = TABLE_15_16[(ckpt, "hash")]
    kinds: list[tuple[str | None, bool]] = []  # (hash payload or None, MV right)
    payloads: list[str | None] = [None] * N
    readable_left = q
    groups = {"integer": range(N_INT), "other": range(N_INT, N)}
    for group, span in groups.items():
        digit, correct, _ = TABLE_17[group][ckpt]
        items = list(span)
        if group == "integer":  # right answers are digit-only; the rest of the digit-only ones are wrong
            for k, item in enumerate(items[:digit]):
                payloads[item] = reference(item) if k < correct else wrong(item)
            readable_left -= digit
        else:  # right answers are fractions; digit-only ones are wrong here
            for item in items[:correct]:
                payloads[item] = reference(item)
            for item in items[correct:correct + digit]:
                payloads[item] = "7"
            readable_left -= correct + digit
    free = [i for i in range(N) if payloads[i] is None]
    for item in free[:readable_left]:  # readable, wrong, not digit-only
        payloads[item] = "\\frac{2}{3}"
    for item in free[readable_left:readable_left + pay - q]:  # present but unreadable
        payloads[item] = "?"
    assert sum(p is not None for p in payloads) == pay
    texts = []
    mv_right = {g: TABLE_17[g][ckpt][2] for g in groups}
    for item in range(N):
        group = "integer" if item < N_INT else "other"
        right = mv_right[group] > 0
        mv_right[group] -= right
        value = reference(item) if right else wrong(item)
        head = f"Work on item {item}.\n#### {payloads[item]}" if payloads[item] is not None else f"Work on item {item}."
        texts.append(f"{head}\nThe value is ${value}$.")
        kinds.append((payloads[item], right))
    assert sum(r for _, r in kinds) == mv
    return texts


def boxed_cell(ckpt: str) -> list[str]:
    s, mv, pay, q, _ = TABLE_15_16[(ckpt, "boxed")]
    texts = []
    for item in range(N):
        if item < s:
            texts.append(f"Work on item {item}. \\boxed{{{reference(item)}}}")
        elif item < q:
            texts.append(f"Work on item {item}. \\boxed{{{wrong(item)}}}")
        elif item < pay:
            texts.append(f"Work on item {item}. \\boxed{{?}}")
        elif item < pay + (mv - s):
            texts.append(f"Work on item {item}. The value is ${reference(item)}$.")
        else:
            texts.append(f"Work on item {item}. No answer.")
    return texts


def build_math_records() -> list[dict[str, Any]]:
    records = []
    for (ckpt, request), (*_, trunc) in TABLE_15_16.items():
        policy, seed = POLICIES[ckpt]
        texts = hash_cell(ckpt) if request == "hash" else boxed_cell(ckpt)
        for item, text in enumerate(texts):
            prompt = f"Problem {item}. ({request})"
            records.append({
                "item_id": str(item), "task": "math500", "policy": policy,
                "training_convention": "initial" if ckpt == "initial" else ckpt, "train_seed": seed,
                "request": request, "template": "original", "sample_idx": 0, "gen_seed": 20260909 + item,
                "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest(), "response": text,
                "finish_reason": "length" if item >= N - trunc else "stop", "prompt_tokens": 30,
                "response_tokens": 50, "reference": reference(item),
            })
    return records


# Table 20: MV accuracy (%) per operation stratum, 32 samples per item; strata of 167/167/166 items
TABLE_20 = {"qwen-initial": (99.64, 98.75, 95.67), "qwen-rl": (99.48, 98.56, 97.21)}
STRATA = (("2ops", 167), ("3ops", 167), ("4ops", 166))
SAMPLES = 32


def credited(pct: float, n: int) -> int:
    """The credited-response count whose percentage rounds to the table's value."""
    k = round(pct * n / 100)
    assert round(100 * k / n, 2) == pct, (pct, n, k)
    return k


def build_stratum_records() -> list[dict[str, Any]]:
    records = []
    for state, pcts in TABLE_20.items():
        policy, conv, seed = ("initial", "initial", None) if state.endswith("initial") else ("grpo-hash/s83", "hash", 83)
        first = 0
        for (stratum, n_items), pct in zip(STRATA, pcts, strict=True):
            right = credited(pct, n_items * SAMPLES)
            for j in range(n_items * SAMPLES):
                item, sample = first + j // SAMPLES, j % SAMPLES
                records.append({
                    "item_id": str(item), "task": "arith", "policy": policy, "training_convention": conv,
                    "train_seed": seed, "request": "hash", "template": "original", "sample_idx": sample,
                    "gen_seed": item + 10_000_000 * sample, "prompt_sha256": "0" * 64,
                    "response": "#### 12" if j < right else "#### 13", "finish_reason": "stop", "prompt_tokens": 9,
                    "response_tokens": 3, "reference": "12", "stratum": stratum,
                })
            first += n_items
    return records


# Table 8, GSM8K (n = 1319 per cell): checkpoint -> (hash S, hash MV, boxed S, boxed MV, trunc hash, trunc boxed)
TABLE_8_GSM8K = {"initial": (1025, 1208, 1209, 1213, 2, 3), 83: (1208, 1208, 1217, 1219, 5, 6),
                 84: (1213, 1210, 1171, 1211, 2, 3), 85: (1218, 1217, 1215, 1216, 4, 6)}
# Table 9, GSM8K hash-request gains (points): seed -> (strict, MV)
TABLE_9_GSM8K = {83: (13.87, 0.00), 84: (14.25, 0.15), 85: (14.63, 0.68)}
N_GSM8K = 1319


def build_table_8_records() -> list[dict[str, Any]]:
    """Hash cells: the first ``#### n`` (strict) and a closing ``$v$`` line (Math-Verify) are set independently;
    boxed cells: a first box (strict) and, for MV > S, answers stated in ``$...$`` without a box."""
    records = []
    for ckpt, (hs, hmv, bs, bmv, ht, bt) in TABLE_8_GSM8K.items():
        policy, conv, seed = ("initial", "initial", None) if ckpt == "initial" else (f"grpo-hash/s{ckpt}", "hash", ckpt)
        for request, s, mv, trunc in (("hash", hs, hmv, ht), ("boxed", bs, bmv, bt)):
            for item in range(N_GSM8K):
                ref = str(item + 10)
                if request == "hash":
                    strict = ref if item < s else str(item + 5000)
                    value = ref if item < mv else str(item + 7000)
                    text = f"Work.\n#### {strict}\nThe value is ${value}$."
                elif item < s:
                    text = f"Work. \\boxed{{{ref}}}"
                elif item < mv:
                    text = f"Work. The value is ${ref}$."
                else:
                    text = f"Work. \\boxed{{{item + 5000}}}"
                records.append({
                    "item_id": str(item), "task": "gsm8k", "policy": policy, "training_convention": conv,
                    "train_seed": seed, "request": request, "template": "original", "sample_idx": 0,
                    "gen_seed": 20260908 + item, "prompt_sha256": hashlib.sha256(f"{item}{request}".encode()).hexdigest(),
                    "response": text, "finish_reason": "length" if item >= N_GSM8K - trunc else "stop",
                    "prompt_tokens": 30, "response_tokens": 40, "reference": ref,
                })
    return records
