"""omega's rules (paper 000 App. B), one row per rule and edge case."""

import pytest

from crossed_rlvr.rescore.omega import free, mc, same

MC = [  # (response, options, variant, expected)
    ("So the result is \\boxed{B}", 4, "omega", "B"),                        # 1. a letter alone in a box
    ("\\boxed{(C)}", 4, "omega", "C"),                                       # 1. with parentheses
    ("\\boxed{\\text{D}}", 4, "omega", "D"),                                 # 2. inside \text{}
    ("\\boxed{\\text{(B)}}", 4, "omega", "B"),                               # 2. \text{(B)}
    ("The answer is Because of the heat.", 4, "omega", None),                # a letter followed by a letter
    ("So the answer is: **C**", 4, "omega", "C"),                            # 3. colon and bold
    ("The correct answer is (A).", 4, "omega", "A"),                         # 3. parentheses
    ("THE ANSWER IS d", 4, "omega", "D"),                                    # 3. ignores case
    ("Answer: D", 4, "omega", "D"),                                          # 4.
    ("answer: b", 4, "omega", "B"),                                          # 4. ignores case
    ("Let me think.\nB)\n", 4, "omega", "B"),                                # 5. a line with only "B)"
    ("Reasoning...\nB.", 4, "omega", "B"),                                   # 5. "B."
    ("Reasoning...\n(C)\nthat's it", 4, "omega", "C"),                       # 5. "(C)"
    ("Reasoning...\nb\n", 4, "omega", None),                                 # 5. is case-sensitive
    ("I pick option C", 4, "omega", "C"),                                    # 6.
    ("choice: (A)", 4, "omega", "A"),                                        # 6. colon, parentheses
    ("The answer is E", 4, "omega", None),                                   # not one of the item's letters
    ("The answer is E", 5, "omega", "E"),                                    # five options: A-E
    ("Answer: J", 10, "omega", "J"),                                         # ten options: A-J
    ("Answer: A. On reflection \\boxed{B}", 4, "omega", "B"),                # position 1 before position 4
    ("\\boxed{A} ... no, \\boxed{C}", 4, "omega", "C"),                      # last occurrence of the position
    ("The answer is A. Wait, the answer is C.", 4, "omega", "C"),            # last occurrence
    ("Answer: B, so the answer is C", 4, "omega", "C"),                      # position 3 before position 4
    ("\\boxed{AB}", 4, "omega", None),                                       # not a letter alone
    ("B is fine, but the best option before D", 4, "omega", None),          # "option before": letter + letter
    ("No answer here.", 4, "omega", None),
    ("Answer: B", 4, "strict", None),                                        # strict: only the last box
    ("\\boxed{\\text{(B)}} then text", 4, "strict", "B"),
    ("So answer = C", 4, "omega", None),                                     # not one of omega's positions
    ("So answer = C", 4, "permissive", "C"),                                 # permissive: looser cue
    ("Considering all of it, C", 4, "permissive", "C"),                      # a letter at the very end
    ("I think B is right, maybe", 4, "permissive", None),
    ("I think B is right, maybe", 4, "maximal", "B"),                        # maximal: last option letter
]


@pytest.mark.parametrize(("text", "n", "variant", "expected"), MC)
def test_multiple_choice_positions(text, n, variant, expected):
    assert mc(text, n, variant) == expected


FREE = [  # (response, variant, expected answer)
    ("so \\boxed{\\frac{1}{2}}", "omega", "\\frac{1}{2}"),                   # balanced nested braces
    ("\\boxed{\\text{yes}}", "omega", "yes"),                                # \text{} removed
    ("\\boxed{3} then \\boxed{4}", "omega", "4"),                            # the last box
    ("So the answer is 42. Done", "omega", "42"),                            # up to the period
    ("The final answer is 3.5 meters.\nok", "omega", "3.5 meters"),          # a decimal point is not the end
    ("Answer: 17\nmore text", "omega", "17"),                                # answer:
    ("The answer is 5. Answer: 6", "omega", "5"),                            # "the answer is" before "answer:"
    ("It is twelve apples", "omega", None),
    ("It is 12 apples", "omega", None),
    ("It is 12 apples", "permissive", "12"),                                 # permissive: last number
    ("Answer: 9 but \\boxed{8}", "strict", "8"),
    ("Answer: 9", "strict", None),
]


@pytest.mark.parametrize(("text", "variant", "expected"), FREE)
def test_free_form_rules(text, variant, expected):
    assert free(text, variant) == expected


@pytest.mark.parametrize(("answer", "key", "equal"), [
    ("$18.00", "18", True), ("1,234", "1234", True), ("50%", "50", True), ("7.", "7", True),
    ("0.5", "1/2", False), ("x = 3", "3", False), (None, "3", False), ("\\frac{1}{2}", "\\frac{1}{2}", True),
])
def test_light_normalisation(answer, key, equal):
    assert same(answer, key) is equal


# App. B's rules where omega used to differ from them
APP_B = [
    ("mc", "So the answer is \\boxed {B}.", "B"),           # a space before the brace is still a box
    ("mc", "Thinking.\r\nB\r\n", "B"),                       # position 5 with CRLF line ends
    ("free", "The answer is\n7", None),                      # "up to the next period or line end": nothing
    ("free", "The answer is 7\nand more", "7"),
]


@pytest.mark.parametrize(("kind", "text", "expected"), APP_B)
def test_app_b_rules(kind, text, expected):
    from crossed_rlvr.rescore import omega

    assert (omega.mc(text, 4) if kind == "mc" else omega.free(text)) == expected


def test_app_b_normalisation():
    from crossed_rlvr.rescore import omega

    assert omega.same(omega.free("\\boxed{\\$18}"), "18")     # an escaped dollar sign is a dollar sign
    assert not omega.same("1e3", "1000") and not omega.same("inf", "Infinity")
    assert omega.same("1,000", "1000") and omega.same("2.50", "2.5") and omega.same("40%", "40")


def test_strict_variant_nests_inside_omega():
    """Whatever the strict variant reads, omega reads the same (the variants are nested, App. B)."""
    from crossed_rlvr.rescore import omega

    for text in ("\\boxed {B}", "\\boxed{ (C) }", "\\boxed{\\text{D}}", "x \\boxed {\\text {A}} y"):
        strict = omega.mc(text, 4, "strict")
        assert strict is not None and omega.mc(text, 4) == strict, text


def test_fig3_categories_as_the_paper_counts_them():
    """Box: the output contains a \\boxed{} anywhere; other: a line with only the letter or a letter after
    "option"/"choice"; text: the rest of what omega reads (paper 000 Fig. 3)."""
    from crossed_rlvr.rescore import omega

    assert omega.where("Speed is \\boxed{5 m/s}, so the answer is B", "mc") == "box"
    assert omega.where("The correct choice is option C", "mc") == "other"
    assert omega.where("Reasoning.\nC", "mc") == "other"
    assert omega.where("The answer is C.", "mc") == "text" and omega.where("Answer: C", "mc") == "text"
    assert omega.where("No letter here", "mc") is None
    assert omega.where("so \\boxed{12}", "free") == "box" and omega.where("The answer is 12.", "free") == "text"
