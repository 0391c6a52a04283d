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


def test_installed_verl_gsm8k_is_the_installed_package():
    from verl.utils.reward_score.gsm8k import extract_solution

    texts = ["#### 1,234", "#### 5 then #### 6", "no number", "the answer is 42.", ". . 7 .", "x" * 400 + " 9",
             "#### 3" + "y" * 400]
    for t in texts:
        assert run("verl-installed-gsm8k-strict", t) == extract_solution(t, "strict")
        assert run("verl-installed-gsm8k-flexible", t) == extract_solution(t, "flexible")
    assert [run("verl-installed-gsm8k-strict", t) for t in texts] == ["1234", "6", None, None, None, None, None]
    assert [run("verl-installed-gsm8k-flexible", t) for t in texts] == ["1,234", "6", None, "42.", "7", "9", None]
    # the copy paper 000's pairs were trained with (simpleRL-reason 2204dd1) reads the first '####' anywhere
    assert [run("verl-gsm8k-strict", t) for t in texts] == ["1234", "5", None, None, None, None, "3"]


def test_pinned_extractors_equal_the_upstream_files():
    """Our transcriptions against the upstream files' own outputs at paper 000's pinned commits
    (tests/data/pinned_harness.json, written by scripts/pinned_harness_table.py): zero differences."""
    import json
    from pathlib import Path

    table = json.loads((Path(__file__).parent / "data" / "pinned_harness.json").read_text())
    assert len(table["strings"]) >= 40 and len(table["outputs"]) == 6
    diffs = [(name, text, want, run(name, text)) for name, outs in table["outputs"].items()
             for text, want in zip(table["strings"], outs, strict=True) if run(name, text) != want]
    assert diffs == []


MATH_BOXED = [  # the MATH evaluation code (hendrycks/math 940d1bf util.py): no "\\boxed " branch
    ("\\boxed{5}", "5"), ("a \\boxed{1} b \\boxed{2}", "2"), ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{x^{2}+1}", "x^{2}+1"), ("no box", None), ("\\boxed{unclosed", None), ("\\fbox{7}", None),
    ("\\boxed 9$ end", None), ("\\boxed{}", ""), ("\\boxed{\\text{B}}", "\\text{B}"), ("\\boxed{(C)}", "(C)"),
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
    ("\\boxed{A} and then \\boxed{unclosed", "\\boxed{A} and then \\boxed{unclosed"),  # rfind: the cut-off box
    ("boxed{B} without backslash", "boxed{B} without backslash"),
]
SIMPLE_MC = [  # simple-evals: the first "Answer: X", X one of A-D, case-insensitive cue
    ("Answer: B", "B"), ("answer: c", "c"), ("ANSWER: D", "D"), ("Answer:A", "A"), ("Answer : B", "B"),
    ("Answer: $C$", "C"), ("Answer: E", None), ("Answer: B\nAnswer: C", "B"), ("The answer is B", None),
    ("\\boxed{B}", None), ("Final Answer: A", "A"), ("Answer:\tD", "D"), ("Answer: (B)", None), ("", None),
    ("Answer: Because", "B"), ("My answer: C.", "C"), ("answer:A and answer:B", "A"), ("Answer -> B", None),
    ("Answer:\nB", None), ("**Answer: D**", "D"),
]
SIMPLE_MATH = [  # simple-evals math: ANSWER_PATTERN = r"(?i)Answer\s*:\s*([^\n]+)", group 1 as it is
    ("Answer: 42", "42"), ("answer: x+1", "x+1"), ("Answer:7\nAnswer: 8", "7"), ("The answer is 5", None),
    ("Answer: \\frac{1}{2}", "\\frac{1}{2}"), ("Answer:   12  ", "12  "), ("", None), ("\\boxed{3}", None),
    ("Final Answer: 9", "9"), ("Answer: $18", "$18"), ("ANSWER: 1,000", "1,000"), ("Answer:\n5", "5"),
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


QWEN = [  # (response, benchmark, key, with the letter step, extraction function alone) from its repository's rules
    ("so \\boxed{\\frac{1}{2}}", "math", "1/2", "\\frac{1}{2}", "\\frac{1}{2}"),
    ("\\boxed{5} then \\boxed{6}", "math", "6", "6", "6"),                         # the last box
    ("\\boxed 7$ and more", "math", "7", "7", "7"),                                # "boxed" without a brace
    ("The final answer is $12$. I hope it is correct.", "math", "12", "12", "12"),  # Minerva's phrase first
    ("Thus the answer is 42", "gsm8k", "42", "42", "42"),                          # "he answer is"
    ("My final answer is 9", "gsm8k", "9", "9", "9"),                              # "final answer is"
    ("答案是 8\n\nmore", "gsm8k", "8", "8", "8"),                                   # the Chinese form
    ("3 apples and 1,234 pears", "gsm8k", "1234", "1234", "1234"),                 # the last number
    ("no digits here", "gsm8k", "1", "", ""),                                      # nothing: the empty string
    ("The answer is $18.", "gsm8k", "18", "18", "18"),                             # "$" and the final period go
    ("The answer is 50\\%", "gsm8k", "50", "50", "50"),
    ("the answer is: .5", "gsm8k", "0.5", "0.5", "0.5"),                           # ":" and ".5" -> "0.5"
    ("The answer is \\text{yes}", "gsm8k", "yes", "yes", "yes"),
    ("The answer is (B).", "mmlu_stem", "B", "B", "B"),                            # letter rule: after the trigger
    ("A is wrong. The choice is C, not D", "aqua", "C", "C", "C"),                # the first after "choice is"
    ("Maybe A, maybe d", "sat_math", "D", "D", "D"),                               # no trigger: the last, any case
    ("The answer is B.\n\nThe answer is C.", "mmlu_stem", "B", "B", "B"),          # twice: the first paragraph only
    ("It is 7 apples", "sat_math", "A", "It is 7 apples", "It is 7 apples"),      # no letter: the text itself
    ("\\boxed{C}", "mmlu_pro", "C", "C", "C"),                                     # MMLU-Pro: narrowed to A-E
    ("\\boxed{F}", "mmlu_pro", "F", "F", "F"),                                     # F is kept as it is
    ("the answer is 3, which is option B", "arc_challenge", "B", "B", "3,whichisoptionB"),  # the letter step
    ("\\boxed{4}; I choose A", "arc_challenge", "A", "A", "4"),                    # letter step on the response
]


@pytest.mark.parametrize(("text", "bench", "key", "with_step", "alone"), QWEN)
def test_qwen_math_documented_cases(text, bench, key, with_step, alone):
    assert REGISTRY["qwen2.5-math"].read(text, bench, key) == with_step
    assert REGISTRY["qwen2.5-math-no-letter-step"].read(text, bench, key) == alone


def test_qwen_cases_are_enough():
    assert len(QWEN) >= 20


def test_qwen_runs_mmlu_as_mmlu_stem_and_normalises_keys():
    """Paper 000 ran MMLU as Qwen2.5-Math's MMLU-STEM (its letter rule) and its parse_ground_truth strips the
    key as it strips answers."""
    from crossed_rlvr.rescore.harness import qwen_extract
    from crossed_rlvr.rescore.share import Outputs, credited

    text = "First \\boxed{B}, on reflection the answer is C"
    assert qwen_extract(text, "mmlu") == qwen_extract(text, "mmlu_stem") == "C"  # the letter rule after the cue
    assert qwen_extract(text, "math") == "B"  # the box path (what "mmlu" used to get)
    keys = ["\\dfrac{1}{2}", "\\left(1,2\\right)", "30^\\circ", "\\text{(C)}"]
    responses = ["\\boxed{\\frac{1}{2}}", "\\boxed{(1,2)}", "\\boxed{30}", "\\boxed{\\text{(C)}}"]
    out = Outputs(items=list("0123"), keys=keys, responses=responses, kind="free", n_options=[4] * 4,
                  benchmark="math500")
    assert credited(out, "qwen2.5-math") == [True, True, True, True]
    assert credited(out, "math-boxed")[:3] == [False, False, False]  # the MATH reader compares as written


def test_qwen_equals_its_repository_at_the_pinned_commit():
    """Qwen2.5-Math's own evaluation code at cb098e1 (extract_answer with the benchmark's data name as paper 000
    ran it, math_eval.py's letter step, strip_string of keys), run by scripts/pinned_qwen_table.py:
    224 responses x 2 and 12 keys, zero differences."""
    import json
    from pathlib import Path

    from crossed_rlvr.rescore.harness import qwen_key

    table = json.loads((Path(__file__).parent / "data" / "pinned_qwen.json").read_text())
    diffs = []
    for r in table["rows"]:
        full = REGISTRY["qwen2.5-math"].read(r["response"], r["benchmark"], r["key"])
        alone = REGISTRY["qwen2.5-math-no-letter-step"].read(r["response"], r["benchmark"], r["key"])
        if (alone, full) != (r["extract_answer"], r["with_letter_step"]):
            diffs.append((r["benchmark"], r["response"], alone, full))
    assert len(table["rows"]) == 224 and diffs == []
    assert {k: qwen_key(k) for k in table["keys"]} == table["keys"]
