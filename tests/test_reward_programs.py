"""Training reward programs (paper 001 App. D.1) and their verl / TRL entries."""

import pytest

from crossed_rlvr.rewards import REWARD_PROGRAMS, reward
from crossed_rlvr.train.trl_reward import make_trl_reward
from crossed_rlvr.train.verl_reward import compute_score

FILLER = " and that is the end of the explanation." * 10  # 400 characters

CASES = [
    # convention, response, reference, expected reward
    ("hash", "9*2 = 18\n#### 18", "18", 1.0),
    ("hash", "#### 1,234", "1234", 1.0),  # commas removed
    ("hash", "#### $1,234.50", "1234.50", 0.0),  # a signed number must follow the space
    ("hash", "#### **18**", "18", 0.0),
    ("hash", "#### 12.0", "12", 0.0),  # exact string, unlike the strict evaluation reader
    ("hash", "#### -5", "-5", 1.0),
    ("hash", "####18", "18", 0.0),  # the space is part of the pattern
    ("hash", "#### 17\n#### 18", "18", 1.0),  # last match
    ("hash", "#### 18\n#### 17", "18", 0.0),
    ("hash", "#### 18" + FILLER, "18", 0.0),  # outside the final 300 characters
    ("hash", FILLER + "#### 18", "18", 1.0),
    ("hash", "\\boxed{18}", "18", 0.0),
    ("boxed", "so \\boxed{18}.", "18", 1.0),
    ("boxed", "\\boxed{ 18 }", "18", 1.0),  # trimmed
    ("boxed", "\\boxed{$1,234}", "1234", 1.0),
    ("boxed", "\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 0.0),  # nested braces are refused
    ("boxed", "\\boxed{3} then \\boxed{18}", "18", 1.0),
    ("boxed", "\\boxed{18} then \\boxed{3}", "18", 0.0),
    ("boxed", "\\boxed{18", "18", 0.0),  # needs the closing brace
    ("boxed", "\\boxed{}\\boxed{18}", "18", 1.0),
    ("boxed", "\\boxed{18}" + FILLER, "18", 0.0),
    ("boxed", "#### 18", "18", 0.0),
    ("json", 'Done. {"answer": 18}', "18", 1.0),
    ("json", '{"answer": "1,234"}', "1234", 1.0),
    ("json", "#### 18", "18", 0.0),
    ("xml", "<answer>18</answer>", "18", 1.0),
    ("xml", "<answer> 18 </answer>", "18", 1.0),
    ("xml", "<answer></answer>", "18", 0.0),
    ("answer_only", "the total is 18 eggs", "18", 1.0),
    ("answer_only", "18 eggs, 3 left", "18", 1.0),  # the right value anywhere in the window
    ("answer_only", "#### 1,234", "1234", 1.0),
    ("answer_only", "18" + FILLER, "18", 0.0),
    ("answer_only", "the total is 181", "18", 0.0),
]


@pytest.mark.parametrize(("convention", "response", "reference", "expected"), CASES)
def test_program(convention, response, reference, expected):
    assert reward(convention, response, reference) == expected


@pytest.mark.parametrize(("convention", "response", "reference", "expected"), CASES)
def test_verl_entry_matches_program(convention, response, reference, expected):
    score = compute_score(
        data_source="gsm8k", solution_str=response, ground_truth=reference, extra_info={"convention": convention}
    )
    assert score == {"score": expected, "acc": expected, "is_weight": 1.0}
    weighted = compute_score("gsm8k", response, reference, {"convention": convention, "is_weight": 2.5})
    assert weighted["is_weight"] == 2.5 and weighted["score"] == expected


def test_verl_entry_adds_payload_and_strict_for_validation_rows():
    """A validation row names its request: the boxed arm's reward on a hash request, plus the requested payload
    and the hash strict reader, which verl logs per request at every validation step."""
    info = {"convention": "boxed", "request": "hash"}
    assert compute_score("gsm8k", "so #### 18", "18", info) == {"score": 0.0, "acc": 0.0, "is_weight": 1.0,
                                                               "payload": 1.0, "strict": 1.0}
    assert compute_score("gsm8k", "\\boxed{18}", "18", info) == {"score": 1.0, "acc": 1.0, "is_weight": 1.0,
                                                                  "payload": 0.0, "strict": 0.0}
    assert compute_score("gsm8k", "#### 17", "18", info)["strict"] == 0.0


def test_verl_entry_refuses_row_without_convention():
    with pytest.raises(ValueError, match="extra_info\\['convention'\\]"):
        compute_score("gsm8k", "#### 18", "18", {})


def test_verl_entry_takes_the_convention_from_reward_kwargs():
    """verl passes ``reward.custom_reward_function.reward_kwargs`` as keyword arguments: rows written elsewhere
    (verl's own GSM8K preprocessing) name no convention, so it is given there once."""
    stock = {"split": "train", "index": 0, "answer": "9 + 9 = 18\n#### 18", "question": "q"}
    assert compute_score("openai/gsm8k", "#### 18", "18", stock, convention="hash")["score"] == 1.0
    assert compute_score("openai/gsm8k", "#### 18", "18", stock, convention="boxed")["score"] == 0.0
    assert compute_score("d", "#### 18", "18", {"convention": "hash"}, convention="hash")["score"] == 1.0
    with pytest.raises(ValueError, match=r"'boxed' but reward_kwargs\.convention='hash'"):  # never silently one of them
        compute_score("d", "#### 18", "18", {"convention": "boxed"}, convention="hash")


def test_verl_entry_refuses_unknown_conventions_and_keywords():
    with pytest.raises(ValueError, match=r"unknown convention 'latex' \(reward_kwargs"):
        compute_score("d", "#### 18", "18", {}, convention="latex")
    with pytest.raises(ValueError, match=r"unknown convention 'latex' \(extra_info"):
        compute_score("d", "#### 18", "18", {"convention": "latex"})
    with pytest.raises(TypeError, match="convetion"):  # a misspelt reward_kwargs key is not dropped
        compute_score("d", "#### 18", "18", {}, convetion="hash")
    # the keywords verl's reward managers add themselves are accepted
    assert compute_score("d", "#### 18", "18", {}, convention="hash", reward_router_address=None,
                         reward_model_tokenizer=None)["score"] == 1.0


def test_trl_reward_fixed_convention_and_messages():
    fn = make_trl_reward("boxed")
    assert fn.__name__ == "boxed_reward"
    completions = ["\\boxed{18}", [{"role": "assistant", "content": "#### 18"}], "\\boxed{7}"]
    assert fn(prompts=["p"] * 3, completions=completions, reference=["18", "18", "18"]) == [1.0, 0.0, 0.0]


def test_trl_reward_reads_convention_column():
    fn = make_trl_reward()
    out = fn(prompts=["p", "p"], completions=["#### 18", "#### 18"], reference=["18", "18"], convention=["hash", "boxed"])
    assert out == [1.0, 0.0]


def test_trl_reward_unknown_convention_fails_early():
    with pytest.raises(KeyError, match=r"unknown|no training reward"):
        make_trl_reward("latex")


def test_every_convention_has_a_program():
    """One program per convention; the answer-only arms of either request share one (App. D.2)."""
    assert set(REWARD_PROGRAMS) == {"hash", "boxed", "json", "xml", "answer_only", "boxed_math"}


# ---------------------------------------------------------------- native-boxed MATH training (App. D.3.1)
MATH_CASES = [
    ("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),  # symbolic equivalence, not string equality
    ("\\boxed{\\dfrac{2}{4}}", "\\frac{1}{2}", 1.0),
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}", 1.0),
    ("\\boxed{\\sqrt{3}}", "2\\sqrt{3}", 0.0),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", 1.0),  # two levels of nested braces
    ("\\boxed{(1, 2]}", "(1,2]", 1.0),  # intervals keep their open and closed ends
    ("\\boxed{[1, 2]}", "(1,2]", 0.0),
    ("\\boxed{\\{1, 2\\}}", "\\{1,2\\}", 1.0),  # escaped braces are literal, not structure
    ("\\boxed{3} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),  # the last box
    ("\\boxed{\\frac{1}{2}} then \\boxed{3}", "\\frac{1}{2}", 0.0),
    ("\\boxed{\\frac{1}{2}", "\\frac{1}{2}", 0.0),  # never closed
    ("#### \\frac{1}{2}", "\\frac{1}{2}", 0.0),  # the box is the marker
    ("The answer is 1/2.", "\\frac{1}{2}", 0.0),  # no numeric fallback
    ("\\boxed{\\frac{1}{2}}" + FILLER, "\\frac{1}{2}", 0.0),  # outside the final 300 characters
    ("\\boxed{}", "0", 0.0),
]


@pytest.mark.parametrize("response, reference, expected", MATH_CASES)
def test_boxed_math_reward(response, reference, expected):
    assert reward("boxed_math", response, reference) == expected


def test_boxed_math_reward_reads_nested_boxes_whole():
    from crossed_rlvr.rewards.symbolic import box_payloads, last_box

    assert box_payloads("\\boxed{\\frac{1}{\\boxed{2}}}") == ["\\frac{1}{\\boxed{2}}", "2"]
    assert last_box("x \\boxed{ \\frac{a}{b} } y") == "\\frac{a}{b}"
    assert box_payloads("\\boxed{" * 5000 + "1") == []  # never closed: nothing, in one pass


@pytest.mark.exclusive
def test_a_pathological_answer_times_out_without_hanging_the_trainer():
    """A power tower Math-Verify cannot settle: its comparison is killed at the hard limit, scores 0, and the
    next rollout is scored normally, also from a thread that is not the main one (where Math-Verify's own
    signal-based limits cannot work)."""
    import threading
    import time

    from crossed_rlvr.rewards.symbolic import SymbolicBoxedProgram

    program = SymbolicBoxedProgram(limit_s=2.0)
    program.score("\\boxed{1}", "1")  # the worker's start-up (spawn and Math-Verify's import) is not timed
    results: list[tuple[float, float]] = []

    def trainer_thread():
        for response in ("\\boxed{9^{9^{9^{9^{9}}}}}", "\\boxed{\\frac{1}{2}}"):
            start = time.perf_counter()
            results.append((program.score(response, "\\frac{1}{2}" if "frac" in response else "1"),
                            time.perf_counter() - start))

    worker = threading.Thread(target=trainer_thread)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    (tower, tower_s), (half, _) = results
    assert tower == 0.0 and 1.5 < tower_s < 10, tower_s
    assert half == 1.0


def test_boxed_math_through_trl_and_verl_entries():
    fn = make_trl_reward("boxed_math")
    assert fn(completions=["\\boxed{\\frac{3}{4}}", "\\boxed{3/5}"], reference=["0.75", "\\frac{3}{4}"]) == [1.0, 0.0]
    out = compute_score("math", "so \\boxed{\\sqrt{4}}", "2", {"convention": "boxed_math"})
    assert out["score"] == 1.0
