"""The format share on a synthetic grid whose answer is known by hand (paper 000 §2)."""

import numpy as np
import pytest

from crossed_rlvr.rescore.share import Outputs, comparisons, pooled, spread

N = 200
KEYS = ["ABCD"[k % 4] for k in range(N)]


def wrong(key):
    return "ABCD"[("ABCD".index(key) + 1) % 4]


def outputs(style, right, readable=N):
    """A model that states its letter as text ("The answer is X") or in a box, correct on the first ``right``
    items, and states no letter at all after the first ``readable`` items."""
    texts = []
    for k, key in enumerate(KEYS):
        letter = key if k < right else wrong(key)
        stated = f"The answer is {letter}." if style == "text" else f"\\boxed{{{letter}}}"
        texts.append(f"Reasoning.\n{stated}" if k < readable else "Reasoning, no letter given.")
    return Outputs(items=[str(k) for k in range(N)], keys=KEYS, responses=texts, kind="mc", n_options=[4] * N)


def grid():
    runs = {
        # pair 1: the RL model only moves the answer into a box: all of the reported gain is format
        ("base1", "arc", "boxed", "mc"): outputs("text", 120), ("rl1", "arc", "boxed", "mc"): outputs("box", 120),
        # pair 2: it boxes and also answers 40 more items right
        ("base2", "arc", "boxed", "mc"): outputs("text", 100), ("rl2", "arc", "boxed", "mc"): outputs("box", 140),
        # pair 3: omega reads only 30% of the RL model's outputs: not admitted
        ("base3", "arc", "boxed", "mc"): outputs("text", 100), ("rl3", "arc", "boxed", "mc"): outputs("box", 60, readable=60),
    }
    return comparisons(runs, [("base1", "rl1"), ("base2", "rl2"), ("base3", "rl3")], ["math-boxed"], resamples=500)


def test_shares_and_criteria_known_by_hand():
    table, extra = grid()
    t = table.set_index("base")
    # pair 1: boxed-only h reads nothing of the base model: g_rep = 60, omega finds 60% for both: D = 60
    assert (t.loc["base1", "g_rep"], t.loc["base1", "g_fix"], t.loc["base1", "D"]) == (60.0, 0.0, 60.0)
    assert t.loc["base1", "share"] == 1.0
    # pair 2: g_rep = 70, g_fix = 70 - 50 = 20, D = 50
    assert (t.loc["base2", "g_rep"], t.loc["base2", "g_fix"], t.loc["base2", "D"]) == (70.0, 20.0, 50.0)
    assert t.loc["base1", "admitted"] and t.loc["base2", "admitted"]
    assert t.loc["base3", "read_omega_rl"] == 30.0 and not t.loc["base3", "readable"] and not t.loc["base3", "admitted"]
    assert t.loc["base1", "omega_text_base"] == 100.0 and t.loc["base1", "omega_box_rl"] == 100.0  # Fig. 3
    result = pooled(table, extra)
    assert result["comparisons"] == 2
    assert result["share"] == pytest.approx(110 / 130)
    assert result["low"] <= result["share"] <= result["high"] and result["high"] - result["low"] < 0.2
    assert result["leave_one_pair_out_min"] == pytest.approx(50 / 70) and result["leave_one_pair_out_max"] == 1.0
    assert np.isnan(result["leave_one_benchmark_out_min"])  # one benchmark: nothing left when it is left out


def test_spread_of_harness_gains():
    table, _ = grid()
    s = spread(table)
    assert (s.spread == 0).all()  # one harness: no spread
