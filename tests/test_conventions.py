"""Reporting conventions: suffix wordings (paper 001 App. B.3) and payload syntax."""

import pytest

from crossed_rlvr.eval.score.payload import detect
from crossed_rlvr.prompts import user_content
from crossed_rlvr.rewards import CONVENTIONS, REQUESTS, TEMPLATES, get_convention, request_suffix, reward
from crossed_rlvr.rewards.conventions import ONE_SHOT_EXAMPLE


def test_paper_wordings():
    assert request_suffix("hash", "original") == "Let's think step by step and output the final answer after \"####\"."
    assert request_suffix("hash", "para_a") == 'Think through the problem step by step. Give the final answer after "####".'
    assert request_suffix("boxed", "para_b") == (
        "Work out the solution step by step and present the final answer within \\boxed{}."
    )


@pytest.mark.parametrize("request_name", REQUESTS)
def test_templates_differ_only_in_wording_and_mention_marker(request_name):
    suffixes = [request_suffix(request_name, t) for t in TEMPLATES]
    # one_shot keeps the original suffix: it differs by the worked example before the question
    assert len(set(suffixes)) == len(TEMPLATES) - 1
    assert request_suffix(request_name, "one_shot") == request_suffix(request_name, "original")
    hash_versions = [request_suffix("hash", t) for t in TEMPLATES]
    for own, hashed in zip(suffixes, hash_versions):
        # Same sentence frame as the hash wording: only the marker phrase differs.
        assert own.split("final answer")[0] == hashed.split("final answer")[0]


@pytest.mark.parametrize("request_name", REQUESTS)
@pytest.mark.parametrize("template", TEMPLATES)
def test_request_text_is_not_a_payload(request_name, template):
    # Quoted request text must never count as a requested payload (App. B.2).
    assert not any(detect(request_suffix(request_name, template)).counts.values())


@pytest.mark.parametrize("name", ["hash", "boxed", "json", "xml"])
def test_final_marker_is_a_payload_and_earns_the_reward(name):
    conv = get_convention(name)
    line = conv.mark("18")
    assert detect(line).present(name)
    assert reward(name, "Work.\n" + line, "18") == 1.0


def test_answer_only_keeps_the_hash_request():
    assert CONVENTIONS["answer_only"].request == "hash"
    assert CONVENTIONS["answer_only"].suffix() == request_suffix("hash")


def test_unknown_names_are_refused():
    with pytest.raises(KeyError, match="unknown convention 'latex'"):
        get_convention("latex")
    with pytest.raises(KeyError, match="unknown template"):
        get_convention("hash").suffix("para_c")
    with pytest.raises(KeyError, match="unknown request"):
        request_suffix("answer_only")


@pytest.mark.parametrize("request_name", REQUESTS)
def test_one_shot_shows_one_example_in_the_requested_convention(request_name):
    """Table 1's one-example prompt: the example's final line is a payload of the request, never of another."""
    text = user_content("What is 2 + 3?", request_name, "one_shot")
    example, _, asked = text.partition("Now solve this one.")
    assert asked.strip() == user_content("What is 2 + 3?", request_name, "original")
    found = detect(example)
    assert found.present(request_name) and ONE_SHOT_EXAMPLE["answer"] in example
    assert not any(found.present(other) for other in REQUESTS if other != request_name)
    rephrased = user_content("What is 2 + 3?", request_name, "rephrased")
    assert rephrased.startswith("What is 2 + 3?\n") and rephrased != user_content("What is 2 + 3?", request_name)


def test_answer_only_arms_of_either_request_share_the_answer_only_reward():
    """App. D.2's crossed reward control: the request decides the prompt, the reward ignores the marker."""
    h, b = CONVENTIONS["answer_only_hash"], CONVENTIONS["answer_only_boxed"]
    assert (h.request, b.request) == ("hash", "boxed") and h.program == b.program and b.program.name == "answer_only"
    assert b.suffix() == request_suffix("boxed") and b.mark("7") == "\\boxed{7}"
    for name in ("answer_only_hash", "answer_only_boxed", "answer_only"):
        assert reward(name, "so the total is 18 apples.", "18") == 1.0
        assert reward(name, "\\boxed{18}", "18") == reward(name, "#### 18", "18") == 1.0
        assert reward(name, "#### 17", "18") == 0.0
