"""Response files built to have the counts of paper 001 Tables 11 and 12 (GSM8K, 1,319 items).

For each cell we know the four payload categories, q_c (frozen-reader extractability) and, for
trained cells, the same-item lost/gained counts against the initial policy. Items are assigned so
that all of these hold at once:

- the initial cell's payload items are items 0..P0-1;
- a trained cell keeps the initial payload items except ``lost`` of them and adds ``gained`` of the
  initial non-payload items;
- within payload items, ``both`` also carry the partner convention's payload and the first q_c are
  extractable (the others use a variant the frozen reader misses: ``#### $18`` for hash, an empty
  ``\\boxed{}`` before the real box for boxed); within non-payload items ``other_only`` carry the
  partner payload only.
"""

from __future__ import annotations

import hashlib
from typing import Any

N_ITEMS = 1319
REFERENCE = "18"

# seed, training, request: requested_only, other_only, both, neither, q_c   (Table 11)
TABLE_11 = {
    (None, "initial", "hash"): (1197, 31, 62, 29, 1109),
    (None, "initial", "boxed"): (1316, 0, 0, 3, 1311),
    (83, "hash", "hash"): (1009, 1, 306, 3, 1315), (83, "hash", "boxed"): (1314, 0, 0, 5, 1312),
    (83, "boxed", "hash"): (75, 523, 718, 3, 792), (83, "boxed", "boxed"): (1317, 0, 0, 2, 1315),
    (84, "hash", "hash"): (1317, 0, 0, 2, 1317), (84, "hash", "boxed"): (1316, 0, 0, 3, 1271),
    (84, "boxed", "hash"): (101, 980, 237, 1, 338), (84, "boxed", "boxed"): (1317, 0, 0, 2, 1316),
    (85, "hash", "hash"): (1315, 0, 0, 4, 1315), (85, "hash", "boxed"): (1313, 0, 0, 6, 1312),
    (85, "boxed", "hash"): (1244, 26, 48, 1, 1292), (85, "boxed", "boxed"): (1316, 0, 0, 3, 1256),
    (86, "hash", "hash"): (1318, 0, 0, 1, 1318), (86, "hash", "boxed"): (1314, 0, 0, 5, 1312),
    (86, "boxed", "hash"): (367, 530, 418, 4, 784), (86, "boxed", "boxed"): (1317, 0, 0, 2, 1317),
    (87, "hash", "hash"): (1202, 0, 116, 1, 1318), (87, "hash", "boxed"): (1318, 0, 0, 1, 1313),
    (87, "boxed", "hash"): (48, 1038, 230, 3, 277), (87, "boxed", "boxed"): (1316, 0, 0, 3, 1314),
}

# seed, training, request: payload %, q_c %, lost, gained, ΔP   (Table 12)
TABLE_12 = {
    (None, "initial", "hash"): (95.45, 84.08, None, None, None),
    (None, "initial", "boxed"): (99.77, 99.39, None, None, None),
    (83, "hash", "hash"): (99.70, 99.70, 3, 59, 4.25), (83, "hash", "boxed"): (99.62, 99.47, 4, 2, -0.15),
    (83, "boxed", "hash"): (60.12, 60.05, 495, 29, -35.33), (83, "boxed", "boxed"): (99.85, 99.70, 1, 2, 0.08),
    (84, "hash", "hash"): (99.85, 99.85, 1, 59, 4.40), (84, "hash", "boxed"): (99.77, 96.36, 2, 2, 0.00),
    (84, "boxed", "hash"): (25.63, 25.63, 932, 11, -69.83), (84, "boxed", "boxed"): (99.85, 99.77, 1, 2, 0.08),
    (85, "hash", "hash"): (99.70, 99.70, 3, 59, 4.25), (85, "hash", "boxed"): (99.55, 99.47, 4, 1, -0.23),
    (85, "boxed", "hash"): (97.95, 97.95, 27, 60, 2.50), (85, "boxed", "boxed"): (99.77, 95.22, 3, 3, 0.00),
    (86, "hash", "hash"): (99.92, 99.92, 0, 59, 4.47), (86, "hash", "boxed"): (99.62, 99.47, 3, 1, -0.15),
    (86, "boxed", "hash"): (59.51, 59.44, 503, 29, -35.94), (86, "boxed", "boxed"): (99.85, 99.85, 2, 3, 0.08),
    (87, "hash", "hash"): (99.92, 99.92, 1, 60, 4.47), (87, "hash", "boxed"): (99.92, 99.55, 1, 3, 0.15),
    (87, "boxed", "hash"): (21.08, 21.00, 994, 13, -74.37), (87, "boxed", "boxed"): (99.77, 99.62, 3, 3, 0.00),
}

# seed: I_P, I_q (Table 10)
TABLE_10 = {83: (39.80, 39.88), 84: (74.30, 77.63), 85: (1.97, -2.50), 86: (40.64, 40.86), 87: (78.70, 79.00)}

_TEXT = {
    # request -> kind -> response text
    "hash": {
        "req_x": "So she earns 9 * 2 = 18 dollars.\n#### 18",
        "req_nx": "So she earns 9 * 2 = 18 dollars.\n#### $18",
        "both_x": "So she earns 9 * 2 = 18 dollars.\n#### 18\nIn LaTeX: \\boxed{18}",
        "both_nx": "So she earns 9 * 2 = 18 dollars.\n#### $18\nIn LaTeX: \\boxed{18}",
        "other": "So she earns 9 * 2 = 18 dollars. The final answer is \\boxed{18}.",
        "neither": "So she earns 9 * 2 = 18 dollars.",
    },
    "boxed": {
        "req_x": "So she earns 9 * 2 = 18 dollars. The final answer is \\boxed{18}.",
        "req_nx": "Answer format \\boxed{}. So she earns 9 * 2 = 18 dollars: \\boxed{18}.",
        "both_x": "So she earns 9 * 2 = 18 dollars. \\boxed{18}\n#### 18",
        "both_nx": "Answer format \\boxed{}. So she earns 18 dollars: \\boxed{18}\n#### 18",
        "other": "So she earns 9 * 2 = 18 dollars.\n#### 18",
        "neither": "So she earns 9 * 2 = 18 dollars.",
    },
}


def policy_name(seed: int | None, training: str) -> str:
    return "initial" if training == "initial" else f"grpo-{training}/s{seed}"


def cell_kinds(key: tuple, initial_payload: set[int] | None) -> list[str]:
    """The kind of response for every item of one cell, meeting Tables 11 and 12 together."""
    req_only, other_only, both, neither, qc = TABLE_11[key]
    n_pay = req_only + both
    if initial_payload is None:
        payload = list(range(n_pay))
    else:
        lost, gained = TABLE_12[key][2], TABLE_12[key][3]
        kept = sorted(initial_payload)[lost:]
        added = sorted(set(range(N_ITEMS)) - initial_payload)[:gained]
        payload = sorted(kept + added)
        assert len(payload) == n_pay, (key, len(payload), n_pay)
    kinds = [""] * N_ITEMS
    for j, item in enumerate(payload):
        partner = j < both
        extractable = j < qc
        kinds[item] = ("both" if partner else "req") + ("_x" if extractable else "_nx")
    rest = [i for i in range(N_ITEMS) if i not in set(payload)]
    for j, item in enumerate(rest):
        kinds[item] = "other" if j < other_only else "neither"
    assert sum(k.startswith(("req", "both")) and k.endswith("_x") for k in kinds) == qc
    assert len(rest) == other_only + neither
    return kinds


def build_records() -> list[dict[str, Any]]:
    records = []
    initial_payload: dict[str, set[int]] = {}
    for key in sorted(TABLE_11, key=lambda k: (k[0] is not None, k[0] or 0, k[1], k[2])):
        seed, training, request = key
        kinds = cell_kinds(key, initial_payload.get(request) if training != "initial" else None)
        if training == "initial":
            initial_payload[request] = {i for i, k in enumerate(kinds) if k.startswith(("req", "both"))}
        for item, kind in enumerate(kinds):
            prompt = f"Question {item}. Let's think step by step ({request})."
            records.append({
                "item_id": str(item), "task": "gsm8k", "policy": policy_name(seed, training),
                "training_convention": training, "train_seed": seed, "request": request, "template": "original",
                "sample_idx": 0, "gen_seed": 20260908 + item,
                "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest(),
                "response": _TEXT[request][kind], "finish_reason": "stop", "prompt_tokens": 40,
                "response_tokens": 20, "reference": REFERENCE,
            })
    return records
