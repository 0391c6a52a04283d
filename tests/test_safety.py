"""No reader runs model text as code, and none crashes or hangs on arbitrary text."""

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


@pytest.mark.exclusive
def test_multi_megabyte_and_deeply_nested_responses_are_fast():
    huge = ("We add 3 and 4 to get 7. " * 200_000) + "\n#### 7"  # ~5 MB
    nested = "\\boxed{" * 100_000 + "7" + "}" * 100_000
    unclosed = "\\boxed{" * 200_000 + "7"
    braces = "{" * 500_000 + "\\boxed{18}" + "}" * 10
    # the nested box's 7 sits in the middle, which the read window drops (and records): unreadable
    for text, expected in [(huge, "7"), (nested, None), (unclosed, None), (braces, "18")]:
        start = time.monotonic()
        row = score_response(text, "7", "hash", slow=False)
        assert time.monotonic() - start < 5, len(text)
        assert row["boxed_first.answer"] == expected or row["strict_first_hash.answer"] == expected
        assert row["read_truncated"] is True
    # Through the pool with Math-Verify, a huge response finishes within the hard limit.
    start = time.monotonic()
    rows = score_many([Item(huge, "7"), Item(nested, "7", "boxed")], workers=2, limit_s=5.0)
    assert time.monotonic() - start < 40
    assert rows[0]["strict_first_hash.correct"] is True
    assert rows[1]["boxed_first.answer"] is None and rows[1]["read_truncated"] is True


@settings(max_examples=500, deadline=None)
@given(text=st.lists(st.sampled_from(["1", "23", ",", ".", "-", "x", " ", "4,567", "$", "\n", "a.5"]), max_size=80)
       .map("".join))
def test_fast_last_number_equals_full_scan(text):
    from crossed_rlvr.rewards import text as tx

    full = tx.numbers(text)
    assert tx.last_number(text) == (full[-1] if full else None)
    long = "0 " * 400 + text  # past the tail window
    full = tx.numbers(long)
    assert tx.last_number(long) == full[-1]


@pytest.mark.parametrize("text", ["#### " * 200_000, "\\boxed{" * 140_000 + "}" * 140_000])
def test_first_payloads_copy_one_payload_not_one_per_marker(text):
    """A response that degenerates into one long line of markers (1 MB) or nested boxes: the strict
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


@pytest.fixture(scope="module")
def warm_panel():
    from crossed_rlvr.eval.score.panel import warm

    warm()  # Math-Verify imported once in this process, so forked children measure the reading only


@pytest.mark.exclusive
@pytest.mark.parametrize("case", ["nested_boxes", "repeated_hash", "nested_boxes_balanced"])
def test_pathological_responses_in_bounded_time_and_memory(case, warm_panel):
    """The whole panel (Math-Verify included) on 100 KB, 1 MB and 2 MB of a degenerate response, in a
    forked child as a scoring worker: before, 1 MB of nested boxes took 12.1 GB and 58 s, #### x 10^5 6.0 GB;
    now the readers see a head and tail of text.READ_CAP_CHARS and record that they did."""
    from crossed_rlvr.eval.score.stress import CASES, PATHOLOGICAL, measure

    assert case in PATHOLOGICAL
    for n in (100_000, 1_000_000, 2_000_000):
        for request in ("hash", "boxed"):
            m = measure(CASES[case](n), request)
            assert m["exitcode"] == 0, (case, n, m)
            assert m["truncated"] is True
            assert m["seconds"] < 3.0, (case, n, m)  # measured 0.02-0.05 s
            assert m["peak_bytes"] < 64 * 2**20, (case, n, m)  # measured 1-3 MB


ADVERSARIAL = ["\\boxed{", "}", "{", "#### ", "####", "1", "12345", "$", "**", "\n", " ", "Step", "\\{", ",", "-"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pattern=st.lists(st.sampled_from(ADVERSARIAL), min_size=1, max_size=6).map("".join),
       size=st.sampled_from([200_000, 1_000_000]))
@pytest.mark.exclusive
def test_readers_are_linear_without_the_cap(pattern, size):
    """With the read cap lifted, the fast panel (every reader but Math-Verify, and the payload detector)
    still reads a repeated adversarial pattern in time and memory linear in its length: no backtracking regex, no
    recursion over nesting, no copy of the rest of a line per marker (measured <= 30 bytes and ~1.4 us a char)."""
    import tracemalloc

    from crossed_rlvr.rewards import text as tx

    text = pattern * (size // len(pattern))
    old, tx.READ_CAP_CHARS = tx.READ_CAP_CHARS, 10**9
    try:
        tracemalloc.start()
        start = time.perf_counter()
        row = score_response(text, "7", "hash", slow=False, task="gsm8k")
        seconds = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        tx.READ_CAP_CHARS = old
    assert row["read_truncated"] is False
    assert peak < 64 * len(text) + 2**20, (pattern, peak)
    assert seconds < 10e-6 * len(text) + 1, (pattern, seconds)


def test_read_window_keeps_head_and_tail_and_is_recorded():
    from crossed_rlvr.rewards import text as tx

    filler = "We add the numbers one by one. " * 2_000  # ~62 KB
    long = "#### 5\n" + filler + "\nSo the answer is \\boxed{7}"
    row = score_response(long, "7", "boxed", slow=False)
    assert (row["read_truncated"], row["read_cap_chars"]) == (True, tx.READ_CAP_CHARS)
    assert row["strict_first_hash.answer"] == "5"  # the head is read
    assert row["boxed_last.answer"] == "7" and row["reward_boxed.correct"] is True  # the tail (App. D.1's 300)
    short = score_response("#### 5", "5", "hash", slow=False)
    assert short["read_truncated"] is False
    assert len(tx.read_window(long)) == tx.READ_CAP_CHARS + 2


def test_hash_payload_ends_at_the_next_marker_on_its_line():
    from crossed_rlvr.eval.score.symbolic import _unwrap, first_hash_payload, hash_payloads, last_hash_payload

    assert hash_payloads("#### 18 #### $19$.\n#### Step 2: add\n#### **\\frac{1}{2}**") == ["18", "19", "\\frac{1}{2}"]
    assert first_hash_payload("#### 18 #### 19") == "18"
    assert last_hash_payload("#### 18 #### 19 ####") == "19"
    assert _unwrap("$" * 100_001 + "7" + "$" * 100_001) == "7"  # one move per layer, no copy per layer
