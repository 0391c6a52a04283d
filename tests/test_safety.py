"""No reader runs model text as code, and none crashes or hangs on arbitrary text (issue 2, item 6)."""

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossed_rlvr.eval.score import Item, columns, score_many, score_response
from crossed_rlvr.eval.score.readers import READERS

ATOMS = ["####", "#### ", "\\boxed{", "}", "{", "\\{", "$", "**", "-", ".", ",", "\n", " ", "1", "23", "4.5",
         '{"answer": ', "<answer>", "</answer>", "\\frac{1}{2}", "Step", "'####'"]
messy = st.lists(st.one_of(st.sampled_from(ATOMS), st.text(max_size=8)), max_size=60).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.text(max_size=400), messy), reference=st.sampled_from(["18", "-5", "0.5", "\\frac{1}{2}"]),
       request=st.sampled_from(["hash", "boxed", "json", "xml"]))
def test_fast_panel_never_raises(text, reference, request):
    row = score_response(text, reference, request, slow=False)
    assert list(row) == columns()
    assert row["category"] in {"requested_only", "other_only", "both", "neither"}
    # A1 by construction: the lenient reader keeps any strict answer.
    if row["strict_first_hash.answer"] is not None:
        assert row["lenient_hash_fallback.answer"] == row["strict_first_hash.answer"]
    # Correct implies an answer was read (except the answer-only reward, which credits any token).
    for name in READERS:
        if row[f"{name}.correct"] and name != "reward_answer_only":
            assert row[f"{name}.answer"] is not None, name


@settings(max_examples=60, deadline=None)
@given(text=messy)
def test_math_verify_never_raises_in_process(text):
    row = score_response(text, "18", "boxed")
    assert isinstance(row["math_verify.correct"], bool)


def test_injection_payload_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "pwned"
    payloads = [
        f"\\boxed{{__import__('os').system('touch {target}')}}",
        f"#### __import__('os').system('touch {target}')",
        f"$__import__('os').system('touch {target}')$",
        f'{{"answer": __import__("os").system("touch {target}")}}',
        "\\boxed{__import__('os').system('touch pwned')}",
    ]
    rows = score_many([Item(p, "0", r) for p in payloads for r in ("hash", "boxed")], workers=1)
    rows += [score_response(p, "0", "boxed") for p in payloads]
    assert not target.exists() and not Path("pwned").exists()
    assert not any(r["math_verify.correct"] for r in rows)


def test_multi_megabyte_and_deeply_nested_responses_are_fast():
    huge = ("We add 3 and 4 to get 7. " * 200_000) + "\n#### 7"  # ~5 MB
    nested = "\\boxed{" * 100_000 + "7" + "}" * 100_000
    unclosed = "\\boxed{" * 200_000 + "7"
    braces = "{" * 500_000 + "\\boxed{18}" + "}" * 10
    for text, expected in [(huge, "7"), (nested, "7"), (unclosed, None), (braces, "18")]:
        start = time.monotonic()
        row = score_response(text, "7", "hash", slow=False)
        assert time.monotonic() - start < 5, len(text)
        assert row["boxed_first.answer"] == expected or row["strict_first_hash.answer"] == expected
    # Through the pool with Math-Verify, a huge response finishes within the hard limit.
    start = time.monotonic()
    rows = score_many([Item(huge, "7"), Item(nested, "7", "boxed")], workers=2, limit_s=5.0)
    assert time.monotonic() - start < 40
    assert rows[0]["strict_first_hash.correct"] is True
    assert rows[1]["boxed_first.answer"] == "7"


@settings(max_examples=500, deadline=None)
@given(text=st.lists(st.sampled_from(["1", "23", ",", ".", "-", "x", " ", "4,567", "$", "\n", "a.5"]), max_size=80)
       .map("".join))
def test_fast_last_number_equals_full_scan(text):
    from crossed_rlvr import text as tx

    full = tx.numbers(text)
    assert tx.last_number(text) == (full[-1] if full else None)
    long = "0 " * 400 + text  # past the tail window
    full = tx.numbers(long)
    assert tx.last_number(long) == full[-1]


@pytest.mark.parametrize("text", ["#### " * 200_000, "\\boxed{" * 140_000 + "}" * 140_000])
def test_first_payloads_copy_one_payload_not_one_per_marker(text):
    """Issue 33: a response that degenerates into one long line of markers (1 MB) or nested boxes: the strict
    symbolic readers take the first payload only, so memory stays linear (before: one copy of the rest of
    the line per marker, 2.2 GB at 150 KB)."""
    import tracemalloc

    from crossed_rlvr.eval.score.symbolic import first_box_payload, first_hash_payload

    tracemalloc.start()
    first_hash_payload(text)
    first_box_payload(text)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 40 * len(text), peak  # linear: ~9 (markers) and ~27 (boxes) bytes per character measured
