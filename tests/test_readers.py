"""Table-driven tests of every evaluation reader (paper 001 §2.2, App. B.2, C.1, D.1)."""

import pytest

from crossed_rlvr.eval.score import READERS, get_reader, score_response

FILLER = " and that is the end of the explanation." * 10  # 400 characters
QUOTED = 'You asked me to output the final answer after "####".'

# response, reference, {reader: (answer, correct)}
CASES = [
    (
        "#### $1,234.50",
        "1234.5",
        {
            "strict_first_hash": (None, False),  # the frozen numeric reader misses a currency prefix
            "lenient_hash_fallback": ("1,234.50", True),
            "last_number": ("1,234.50", True),
            "reward_hash": (None, False),
            "math_verify": (None, True),  # answer text not checked here (None = skip)
        },
    ),
    ("#### **18**", "18", {"strict_first_hash": (None, False), "lenient_hash_fallback": ("18", True)}),
    ("#### \\$18", "18", {"strict_first_hash": (None, False), "last_number": ("18", True)}),
    (
        "so 12 in all.\n#### 12.0",
        "12",
        {"strict_first_hash": ("12.0", True), "strict_last_hash": ("12.0", True), "reward_hash": ("12.0", False)},
    ),
    ("#### -5", "-5", {"strict_first_hash": ("-5", True), "reward_hash": ("-5", True), "last_number": ("-5", True)}),
    (
        "#### Step 1: add 3 and 4\n7\n#### Step 2\n#### 7",
        "7",
        {"strict_first_hash": ("7", True), "strict_last_hash": ("7", True), "lenient_hash_fallback": ("7", True)},
    ),
    (
        QUOTED + " The sum is 9.",
        "9",
        {"strict_first_hash": (None, False), "lenient_hash_fallback": ("9", True), "last_number": ("9", True)},
    ),
    (
        "The answer is \\boxed{\\frac{1}{2}}.",
        "\\frac{1}{2}",
        {
            "boxed_first": ("2", False),  # the frozen numeric box reader takes the last numeric token
            "reward_boxed": (None, False),  # nested braces are refused by the training program
            "math_verify": (None, True),
            "math_verify_payload": (None, True),
        },
    ),
    ("\\boxed{2^{10}}", "10", {"boxed_first": ("10", True), "boxed_last": ("10", True)}),
    (
        "Template: \\boxed{}. Answer: \\boxed{18}",
        "18",
        {"boxed_first": (None, False), "boxed_last": ("18", True), "reward_boxed": ("18", True)},
    ),
    ("\\boxed{3} and later \\boxed{18}", "18", {"boxed_first": ("3", False), "boxed_last": ("18", True)}),
    (
        "#### 17\nActually \\boxed{18}",
        "18",
        {
            "strict_first_hash": ("17", False),
            "boxed_first": ("18", True),
            "lenient_hash_fallback": ("17", False),  # A1: lenient keeps the strict answer
            "last_number": ("18", True),
        },
    ),
    (
        "#### 18" + FILLER,
        "18",
        {"strict_first_hash": ("18", True), "reward_hash": (None, False), "reward_answer_only": (None, False)},
    ),
    ("#### 17\n#### 18", "18", {"strict_first_hash": ("17", False), "strict_last_hash": ("18", True)}),
    ("##### 18", "18", {"strict_first_hash": (None, False)}),  # exact four-hash marker only
    ("There are 1,000 apples and 3 pears.", "3", {"last_number": ("3", True), "lenient_hash_fallback": ("3", True)}),
    ("It is 18.", "18", {"last_number": ("18", True)}),
    ("Value 0.5", ".5", {"last_number": ("0.5", True)}),
    ("18.0004", "18", {"last_number": ("18.0004", True)}),  # tolerance 1e-3
    ("18.002", "18", {"last_number": ("18.002", False)}),
    ('Result: {"answer": 42}', "42", {"json_first": ("42", True), "reward_json": ("42", True)}),
    ("<answer>42</answer>", "42", {"xml_first": ("42", True), "reward_xml": ("42", True)}),
    ("no numbers here", "1", dict.fromkeys(["strict_first_hash", "last_number", "boxed_first"], (None, False))),
]


@pytest.mark.parametrize(("response", "reference", "expected"), CASES)
def test_reader_table(response, reference, expected):
    for name, (answer, correct) in expected.items():
        reading = get_reader(name)(response, reference, "boxed" if "boxed" in response else "hash")
        if answer is not None or not get_reader(name).slow:
            assert reading.answer == answer, name
        assert reading.correct is correct, name


def test_panel_names_match_design():
    expected = {
        "strict_first_hash", "strict_last_hash", "lenient_hash_fallback", "last_number", "boxed_first",
        "boxed_last", "math_verify", "math_verify_payload", "reward_hash", "reward_boxed", "reward_answer_only",
        "reward_json", "reward_xml",
    }
    assert expected <= set(READERS)


def test_math_verify_payload_has_no_fallback():
    # Under the hash request a boxed-only response has no requested payload: unreadable.
    row = score_response("So \\boxed{18}", "18", "hash")
    assert row["math_verify.correct"] is True
    assert row["math_verify_payload.answer"] is None and row["math_verify_payload.correct"] is False
    row = score_response("So \\boxed{18}", "18", "boxed")
    assert row["math_verify_payload.correct"] is True


def test_math_verify_payload_reads_last_hash_payload():
    row = score_response("#### 17\nWait.\n#### **18**", "18", "hash")
    assert row["math_verify_payload.correct"] is True


def test_lenient_satisfies_fidelity_A1():
    # Whenever the strict reader returns a value, the lenient reader returns the same value (eq. A1).
    for response, _, _ in CASES:
        strict = get_reader("strict_first_hash").extract(response)
        if strict is not None:
            assert get_reader("lenient_hash_fallback").extract(response) == strict


def test_unknown_reader_is_named():
    with pytest.raises(KeyError, match="unknown reader 'nope'"):
        get_reader("nope")
