"""Reader audit: disagreement per cell and reader pair, examples of each kind, timeouts apart."""

import pandas as pd

from crossed_rlvr.analysis.audit import audit
from crossed_rlvr.analysis.report.audit import audit_section


def test_disagreements_examples_and_timeouts():
    rows = []
    for k in range(8):
        # strict credits "#### 18." while the training program rewards 0 on items 0-2; Math-Verify times out on 7
        rows.append({"task": "t", "template": "original", "policy": "grpo-hash/s83", "request": "hash",
                     "item_id": str(k), "sample_idx": 0, "reference": "18",
                     "strict_first_hash.correct": True, "strict_first_hash.answer": "18",
                     "reward_hash.correct": k >= 3, "reward_hash.answer": "18" if k >= 3 else None,
                     "math_verify.correct": k != 7, "math_verify.answer": "18", "timed_out": k == 7})
    scores = pd.DataFrame(rows)
    rates, examples = audit(scores, ["strict_first_hash", "reward_hash", "math_verify"],
                            ["task", "template", "policy", "request"], ["policy", "request", "item_id"])
    r = rates.set_index(["reader_a", "reader_b"])
    assert r.loc[("strict_first_hash", "reward_hash"), "disagreement"] == 3 / 8
    assert r.loc[("strict_first_hash", "reward_hash"), "a_only"] == 3
    # the timed-out response is its own outcome, not a disagreement with Math-Verify
    assert r.loc[("strict_first_hash", "math_verify"), "disagreement"] == 0
    assert r.loc[("strict_first_hash", "math_verify"), "timeouts"] == 1
    ex = examples[(examples.reader_a == "strict_first_hash") & (examples.reader_b == "reward_hash")]
    assert list(ex.item_id) == ["0", "1", "2"] and set(ex.kind) == {"strict_first_hash credits, reward_hash does not"}
    assert "| strict_first_hash | reward_hash | 37.5 |" in audit_section(rates, examples)
