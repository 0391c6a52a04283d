"""Reporting conventions: what a prompt asks for and how a payload in that convention looks.

Paper 001 §2.1 crosses the *training convention* t (what the reward wanted) with the *request* r
(what the evaluation prompt asks for). The wordings follow paper 001 App. B.3: the question, chat
template and system message stay fixed and only the final request suffix changes. The hash and
boxed wordings are the paper's; JSON and XML wordings swap the marker phrase in the same way.

This module is pure Python with no project imports so that verl and TRL can load it alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TEMPLATES: tuple[str, ...] = ("original", "para_a", "para_b", "rephrased", "one_shot")

# Sentence frames of App. B.3; {marker} is replaced by each request's marker phrase. ``rephrased`` and
# ``one_shot`` are Table 1's fixed prompt variants (§3): the paper does not print their wording, so these
# are ours. ``one_shot`` keeps the original suffix and puts one worked example, reported in the request's
# own convention, before the question (:data:`ONE_SHOT_EXAMPLE`, :func:`crossed_rlvr.prompts.user_content`).
_FRAMES: dict[str, str] = {
    "original": "Let's think step by step and output the final answer {marker}.",
    "para_a": "Think through the problem step by step. Give the final answer {marker}.",
    "para_b": "Work out the solution step by step and present the final answer {marker}.",
    "rephrased": "Solve this carefully, explaining each step, then state your final answer {marker}.",
    "one_shot": "Let's think step by step and output the final answer {marker}.",
}

# The one worked example of the one-shot prompt (our own problem, not from any benchmark split): its final
# line is written in the request's convention by ``Convention.mark``.
ONE_SHOT_EXAMPLE: dict[str, str] = {
    "question": "A baker makes 4 trays of 12 rolls and sells all but 9 of them. How many rolls does she sell?",
    "solution": "She makes 4 * 12 = 48 rolls. She sells 48 - 9 = 39 of them.",
    "answer": "39",
}

_MARKER_PHRASES: dict[str, str] = {
    "hash": 'after "####"',
    "boxed": "within \\boxed{}",
    "json": 'as JSON in the form {"answer": <number>}',
    "xml": "inside <answer></answer> tags",
}


@dataclass(frozen=True)
class Convention:
    """One reporting convention.

    name: vocabulary name (``hash``, ``boxed``, ``json``, ``xml``, ``answer_only``, ``answer_only_hash``,
        ``answer_only_boxed``).
    request: the request whose suffix the training prompt carries. For ``answer_only`` (the I1
        reward-requirement control of paper 001 §2.4) the prompt still asks for ``####`` and only
        the reward drops the marker requirement; ``answer_only_hash``/``answer_only_boxed`` are the
        matched crossed reward control of App. D.2: the same answer-only reward under either request.
    program: the training reward program (:mod:`crossed_rlvr.rewards.programs`) that scores its rollouts.
    payload_syntax: a human-readable description of a payload, for docs and reports.
    final_marker: how a worked solution ends in this convention (``{answer}`` is substituted);
        used by the content-matched SFT builder (App. D.2.1).
    """

    name: str
    request: str
    payload_syntax: str
    final_marker: str
    suffixes: dict[str, str] = field(default_factory=dict)
    program: str = ""

    def __post_init__(self) -> None:
        if not self.program:
            object.__setattr__(self, "program", self.name)

    def suffix(self, template: str = "original") -> str:
        """The request suffix in one of the three wordings."""
        try:
            return self.suffixes[template]
        except KeyError:
            raise KeyError(f"unknown template {template!r}; expected one of {', '.join(TEMPLATES)}") from None

    def mark(self, answer: str) -> str:
        """The final line that reports ``answer`` in this convention."""
        return self.final_marker.format(answer=answer)


def _suffixes(request: str) -> dict[str, str]:
    return {t: frame.format(marker=_MARKER_PHRASES[request]) for t, frame in _FRAMES.items()}


CONVENTIONS: dict[str, Convention] = {
    "hash": Convention("hash", "hash", "#### <signed number> on one line", "#### {answer}", _suffixes("hash")),
    "boxed": Convention(
        "boxed", "boxed", "\\boxed{<nonempty content>} with balanced braces", "\\boxed{{{answer}}}", _suffixes("boxed")
    ),
    "json": Convention("json", "json", '{"answer": <number>}', '{{"answer": {answer}}}', _suffixes("json")),
    "xml": Convention("xml", "xml", "<answer>content</answer>", "<answer>{answer}</answer>", _suffixes("xml")),
    "answer_only": Convention(
        "answer_only", "hash", "the right value anywhere in the final 300 characters", "#### {answer}",
        _suffixes("hash"), "answer_only",
    ),
    "answer_only_hash": Convention(
        "answer_only_hash", "hash", "the right value anywhere in the final 300 characters", "#### {answer}",
        _suffixes("hash"), "answer_only",
    ),
    # native-boxed MATH training (App. D.3.1): the boxed request, rewarded by symbolic equivalence
    "boxed_math": Convention(
        "boxed_math", "boxed", "\\boxed{<LaTeX answer>} with balanced braces, symbolically equal",
        "\\boxed{{{answer}}}", _suffixes("boxed"), "boxed_math",
    ),
    "answer_only_boxed": Convention(
        "answer_only_boxed", "boxed", "the right value anywhere in the final 300 characters", "\\boxed{{{answer}}}",
        _suffixes("boxed"), "answer_only",
    ),
}

# Requests an evaluation prompt can make (answer_only is a reward, not a request).
REQUESTS: tuple[str, ...] = ("hash", "boxed", "json", "xml")

# The crossed partner of each request: its "other" convention in the payload categories (Table 11).
PARTNER: dict[str, str] = {"hash": "boxed", "boxed": "hash", "json": "xml", "xml": "json"}

# Matched arm pairs of the crossed design (§2.1, eq. 1): (arm H, arm B), crossed with H's and B's requests.
# The answer-only pair is App. D.2's reward control: the interaction it gives, beside the marker pair's.
# the paper's matched pair (paper 001 §2): the arm rewarded for ``#### <answer>`` and the one for ``\boxed{}``
MARKER_PAIR: tuple[str, str] = ("hash", "boxed")
CROSSED_PAIRS: tuple[tuple[str, str], ...] = (MARKER_PAIR, ("json", "xml"),
                                              ("answer_only_hash", "answer_only_boxed"))
ARM_PARTNER: dict[str, str] = {**dict(CROSSED_PAIRS), **{b: a for a, b in CROSSED_PAIRS}}


def pair_label(arm_h: str, arm_b: str) -> str:
    """The request column of a pair's interaction: ``hashxboxed``, ``jsonxxml``,
    ``answer_only_hashxanswer_only_boxed`` (no convention name holds an x, so the first x splits it)."""
    return f"{arm_h}x{arm_b}"


def get_convention(name: str) -> Convention:
    """Look up a convention by name with an error that lists the valid names."""
    try:
        return CONVENTIONS[name]
    except KeyError:
        raise KeyError(f"unknown convention {name!r}; expected one of {', '.join(CONVENTIONS)}") from None


def request_suffix(request: str, template: str = "original") -> str:
    """The suffix an evaluation prompt appends for ``request`` in wording ``template``."""
    if request not in REQUESTS:
        raise KeyError(f"unknown request {request!r}; expected one of {', '.join(REQUESTS)}")
    return CONVENTIONS[request].suffix(template)
