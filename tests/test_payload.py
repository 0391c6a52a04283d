"""Payload detector and categories (paper 001 §2.1, App. B.2, Table 11)."""

import pytest

from crossed_rlvr.eval.score import detect, score_response

# response, hash payload?, boxed payload?
CASES = [
    ("#### 18", True, False),
    ("#### $18", True, False),
    ("#### **18**", True, False),
    ("#### \\$18", True, False),
    ("#### $1,234.50", True, False),
    ("#### -5", True, False),
    ("#### \\(18\\)", True, False),
    ("#### `18`", True, False),
    ("####18", True, False),
    ("#### Step 1: read the problem", False, False),
    ('output the final answer after "####".', False, False),
    ("output the final answer after '####'.", False, False),
    ("####\n18", False, False),  # same line only
    ("##### 18", False, False),  # exact four hashes
    ("\\boxed{}", False, False),  # empty template
    ("\\boxed{  }", False, False),
    ("\\boxed{18}", False, True),
    ("\\boxed{\\frac{1}{2}}", False, True),
    ("\\boxed{18", False, False),  # unbalanced
    ("Template \\boxed{} then \\boxed{18}", False, True),
    ("#### 17 and \\boxed{18}", True, True),
    ("#### Step 2\n... #### 7", True, False),  # every occurrence is scanned
]


@pytest.mark.parametrize(("response", "has_hash", "has_boxed"), CASES)
def test_detector(response, has_hash, has_boxed):
    report = detect(response)
    assert report.present("hash") is has_hash
    assert report.present("boxed") is has_boxed


def test_every_occurrence_is_counted():
    assert detect("#### 1\n#### 2\n\\boxed{3}\\boxed{}\\boxed{4}").counts == {"hash": 2, "boxed": 2, "json": 0, "xml": 0}


@pytest.mark.parametrize(
    ("response", "request_name", "category"),
    [
        ("#### 18", "hash", "requested_only"),
        ("\\boxed{18}", "hash", "other_only"),
        ("#### 18 \\boxed{18}", "hash", "both"),
        ("18", "hash", "neither"),
        ("#### 18", "boxed", "other_only"),
        ("\\boxed{18}", "boxed", "requested_only"),
        ('{"answer": 18}', "json", "requested_only"),
        ("<answer>18</answer>", "json", "other_only"),
    ],
)
def test_categories(response, request_name, category):
    assert detect(response).category(request_name) == category


def test_presence_can_exceed_extractability():
    # An earlier empty box obstructs the frozen first-box reader though a later box carries content.
    row = score_response("Put it in \\boxed{}: \\boxed{18}", "18", "boxed")
    assert row["requested_payload"] is True and row["extractable"] is False
    # A currency-prefixed hash payload is present but not extractable by the frozen numeric reader.
    row = score_response("#### $18", "18", "hash")
    assert row["requested_payload"] is True and row["extractable"] is False


def test_json_and_xml_payloads():
    assert detect('{"answer": 18}').present("json")
    assert not detect('{"answer": <number>}').present("json")
    assert detect("<answer> 18 </answer>").present("xml")
    assert not detect("<answer></answer>").present("xml")
