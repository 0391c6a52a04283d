"""Harness extractors (paper 000 App. E): installed packages called as they are, the written ones on
tables of documented cases."""

import pytest

from crossed_rlvr.rescore.harness import REGISTRY, correct


def run(name, text):
    return REGISTRY[name].extract(text)


def test_lm_eval_filters_are_the_installed_packages():
    from lm_eval.filters.extraction import RegexFilter

    texts = ["so #### 18", "#### 1,234\n#### 5", "no digits at all", "The total is $1,234.50 dollars.",
             "3 apples and 45 pears", "#### -7", "a . b , c", "x 7"]
    strict = RegexFilter(regex_pattern=r"#### (\-?[0-9\.\,]+)", group_select=0)
    flexible = RegexFilter(regex_pattern=r"(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select=-1)
    for t in texts:  # the same answers as the package's filter with the task file's patterns
        assert run("lm-eval-gsm8k-strict", t) == strict.apply([[t]], [{}])[0][0]
        assert run("lm-eval-gsm8k-flexible", t) == flexible.apply([[t]], [{}])[0][0]
    # and what they are today (fails if the package's behaviour changes)
    assert [run("lm-eval-gsm8k-strict", t) for t in texts[:3]] == ["18", "1,234", "[invalid]"]
    assert [run("lm-eval-gsm8k-flexible", t) for t in texts[2:6]] == ["[invalid]", "$1,234.50", "45", "-7"]
    assert run("lm-eval-gsm8k-flexible", "a . b , c") == "[invalid]" and run("lm-eval-gsm8k-flexible", "x 7") == "7"
    assert REGISTRY["lm-eval-gsm8k-strict"].source.startswith("lm-evaluation-harness 0.4")


def test_verl_gsm8k_is_the_installed_package():
    from verl.utils.reward_score.gsm8k import extract_solution

    texts = ["#### 1,234", "#### 5 then #### 6", "no number", "the answer is 42.", ". . 7 .", "x" * 400 + " 9",
             "#### 3" + "y" * 400]
    for t in texts:
        assert run("verl-gsm8k-strict", t) == extract_solution(t, "strict")
        assert run("verl-gsm8k-flexible", t) == extract_solution(t, "flexible")
    assert [run("verl-gsm8k-strict", t) for t in texts] == ["1234", "6", None, None, None, None, None]
    assert [run("verl-gsm8k-flexible", t) for t in texts] == ["1,234", "6", None, "42.", "7", "9", None]


MATH_BOXED = [  # the MATH evaluation code (hendrycks/math util.py), as verl ships it
    ("\\boxed{5}", "5"), ("a \\boxed{1} b \\boxed{2}", "2"), ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{x^{2}+1}", "x^{2}+1"), ("no box", None), ("\\boxed{unclosed", None), ("\\fbox{7}", None),
    ("\\boxed 9$ end", "9"), ("\\boxed{}", ""), ("\\boxed{\\text{B}}", "\\text{B}"), ("\\boxed{(C)}", "(C)"),
    ("$\\boxed{12}$.", "12"), ("\\boxed{1,000}", "1,000"), ("\\boxed{-3}", "-3"), ("\\boxed{ 4 }", " 4 "),
    ("\\boxed{a}\\boxed{b}\\boxed{c}", "c"), ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"), ("text \\boxed{A} text", "A"),
    ("\\boxed{\\sqrt{2}}", "\\sqrt{2}"), ("\\boxed{3.14}", "3.14"), ("boxed{B} without backslash", None),
]
ORZ = [  # Open-Reasoner-Zero's reader on the whole response: the last box, else the whole response
    ("\\boxed{5}", "5"), ("a \\boxed{1} b \\boxed{2}", "2"), ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("no box", "no box"), ("Answer: B", "Answer: B"), ("", ""), ("\\boxed{}", ""), ("\\boxed{\\text{B}}", "\\text{B}"),
    ("\\boxed{(C)}", "(C)"), ("$\\boxed{12}$.", "12"), ("\\boxed{1,000}", "1,000"), ("\\boxed{-3}", "-3"),
    ("\\boxed{a}\\boxed{b}", "b"), ("\\boxed{\\sqrt{2}}", "\\sqrt{2}"), ("B) is right", "B) is right"),
    ("The answer is C", "The answer is C"), ("\\boxed{x^{2}}", "x^{2}"), ("end \\boxed{D}", "D"),
    ("\\boxed{A} and then \\boxed{unclosed", "A"), ("boxed{B} without backslash", "boxed{B} without backslash"),
]
SIMPLE_MC = [  # simple-evals: the first "Answer: X", X one of A-D, case-insensitive cue
    ("Answer: B", "B"), ("answer: c", "c"), ("ANSWER: D", "D"), ("Answer:A", "A"), ("Answer : B", "B"),
    ("Answer: $C$", "C"), ("Answer: E", None), ("Answer: B\nAnswer: C", "B"), ("The answer is B", None),
    ("\\boxed{B}", None), ("Final Answer: A", "A"), ("Answer:\tD", "D"), ("Answer: (B)", None), ("", None),
    ("Answer: Because", "B"), ("My answer: C.", "C"), ("answer:A and answer:B", "A"), ("Answer -> B", None),
    ("Answer:\nB", None), ("**Answer: D**", "D"),
]
SIMPLE_MATH = [  # simple-evals math: the text after the first "Answer:", to the line end
    ("Answer: 42", "42"), ("answer: x+1", "x+1"), ("Answer:7\nAnswer: 8", "7"), ("The answer is 5", None),
    ("Answer: \\frac{1}{2}", "\\frac{1}{2}"), ("Answer:   12  ", "12"), ("", None), ("\\boxed{3}", None),
    ("Final Answer: 9", "9"), ("Answer: $18", "$18"), ("ANSWER: 1,000", "1,000"), ("Answer:\n5", None),
    ("Answer: 3 apples\nmore", "3 apples"), ("Answer: -4", "-4"), ("Answer: \\boxed{6}", "\\boxed{6}"),
    ("So Answer: 10.", "10."), ("Answer: 2, 3", "2, 3"), ("Answer:x", "x"), ("answer : 5", "5"),
    ("**Answer:** 7", "** 7"),
]


@pytest.mark.parametrize(("name", "cases"), [("math-boxed", MATH_BOXED), ("orz-boxed", ORZ),
                                             ("simple-evals-mc", SIMPLE_MC), ("simple-evals-math", SIMPLE_MATH)])
def test_documented_cases(name, cases):
    assert len(cases) >= 20
    got = [(text, run(name, text)) for text, _ in cases]
    assert got == [(text, want) for text, want in cases]


def test_scoring_is_shared_by_every_extractor():
    assert correct("Answer: B", "A", "mc")  # first character: a whole response opening "Answer" is option A
    assert correct("B", "B", "mc") and not correct(None, "B", "mc")
    assert correct("$1,234", "1234", "free") and not correct("[invalid]", "3", "free")
