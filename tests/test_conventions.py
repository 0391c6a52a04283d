"""Reporting conventions: suffix wordings (paper 001 App. B.3) and payload syntax."""

import pytest

from crossed_rlvr.eval.score.payload import detect
from crossed_rlvr.rewards import CONVENTIONS, REQUESTS, TEMPLATES, get_convention, request_suffix, reward


def test_paper_wordings():
    assert request_suffix("hash", "original") == "Let's think step by step and output the final answer after \"####\"."
    assert request_suffix("hash", "para_a") == 'Think through the problem step by step. Give the final answer after "####".'
    assert request_suffix("boxed", "para_b") == (
        "Work out the solution step by step and present the final answer within \\boxed{}."
    )


@pytest.mark.parametrize("request_name", REQUESTS)
def test_templates_differ_only_in_wording_and_mention_marker(request_name):
    suffixes = [request_suffix(request_name, t) for t in TEMPLATES]
    assert len(set(suffixes)) == 3
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
