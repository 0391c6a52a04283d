"""Reporting conventions: each one object holding everything its name means (paper 001 §2.1, App. B.2-B.3, C.1,
D.1, D.2.1).

Paper 001 §2.1 crosses the *training convention* t (what the reward wanted) with the *request* r (what the
evaluation prompt asks for). A :class:`Convention` keeps together what the rest of the project asks of one:

- its request wording (App. B.3): the question, chat template and system message stay fixed and only the final
  request suffix changes, its marker phrase set in each wording's sentence frame;
- its payload detector (App. B.2: every qualifying occurrence counts) and its last payload's text;
- its evaluation readers (App. C.1: the strict reader first, the lenient one where it has one);
- its training reward program (App. D.1) and the final marker of a content-matched SFT target (App. D.2.1);
- its crossed partner (the matched arm of §2.1, eq. 1, and the "other" convention of Table 11).

Every other module asks the registry (:func:`get_convention`, :func:`requests`, :data:`CONVENTIONS`); a new
convention is one :func:`register` call (CONTRIBUTING.md, "Adding a convention"). One pattern per payload syntax:
the detector, the readers and the reward program read the same match, each with the paper's own rule.

Standard library only (and :mod:`crossed_rlvr.rewards.text`), so verl and TRL can load the reward programs alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, overload

from crossed_rlvr.rewards import text as tx
from crossed_rlvr.rewards.symbolic import SymbolicBoxedProgram

WINDOW_CHARS = 300  # the reward programs read the final 300 characters (App. D.1)

# The three wordings of App. B.3, then Table 1's fixed prompt variants (§3): the paper does not print the last two,
# so they are ours. ``one_shot`` keeps the original suffix and puts one worked example, reported in the request's
# own convention, before the question (:data:`ONE_SHOT_EXAMPLE`, :func:`crossed_rlvr.prompts.user_content`).
WORDINGS: tuple[str, ...] = ("original", "para_a", "para_b")
TEMPLATES: tuple[str, ...] = (*WORDINGS, "rephrased", "one_shot")
FRAMES: dict[str, str] = {  # {marker} is replaced by each request's marker phrase
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


def normalise(payload: str) -> str:
    """App. D.1: commas and dollar signs removed before the exact comparison."""
    return payload.replace(",", "").replace("$", "").strip()


class Program(Protocol):
    """What a training reward program offers (:class:`RewardProgram`, the symbolic boxed program)."""

    @property
    def name(self) -> str: ...

    def read(self, response: str, reference: str) -> tuple[str | None, float]: ...
    def extract(self, response: str) -> str | None: ...
    def score(self, response: str, reference: str) -> float: ...


@dataclass(frozen=True)
class RewardProgram:
    """A training reward program (App. D.1): the final 300 characters, the payloads ``find`` gives (the convention's
    own pattern), normalised; the last one compared with the reference as an exact string (any of them with
    ``any_match``, the answer-only control). ``anchor``: a substring every payload's text contains, tested first."""

    name: str
    find: Callable[[str], list[str]]
    anchor: str = ""
    any_match: bool = False

    def candidates(self, response: str) -> list[str]:
        window = response[-WINDOW_CHARS:]
        if self.anchor and self.anchor not in window:
            return []
        return [normalise(p) for p in self.find(window)]

    def read(self, response: str, reference: str) -> tuple[str | None, float]:
        """The payload this program compares (its last match) and the reward, in one pass."""
        found = self.candidates(response)
        answer = found[-1] if found else None
        target = str(reference).strip()
        hit = target in found if self.any_match else answer == target
        return answer, 1.0 if hit else 0.0

    def extract(self, response: str) -> str | None:
        return self.read(response, "")[0]

    def score(self, response: str, reference: str) -> float:
        return self.read(response, reference)[1]


Extract = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Convention:
    """One reporting convention, registered once (:func:`register`).

    name: vocabulary name (``hash``, ``boxed``, ...).
    marker_phrase: how the request suffix names the payload (``after "####"``), set in each wording's frame;
        empty for a convention that is a reward only (the answer-only controls), whose prompts carry ``request``'s.
    final_marker: how a worked solution ends in it (``{answer}`` substituted): content-matched SFT (App. D.2.1).
    payload_syntax: a payload described for docs and reports.
    program: the training reward program its rollouts are scored by.
    request: the request its training prompts carry (default: its own name).
    partner: the crossed partner, declared on one side of the pair (the registry makes it mutual); the first
        registered of the two is the pair's H arm (§2.1, eq. 1).
    count: the payload detector d_r: qualifying occurrences in a text (App. B.2); None for a reward-only convention.
    last_payload: the text of the last qualifying payload (the payload-only readers).
    readers: (name, extract) of its evaluation readers, the strict (requested-convention) reader first (App. C.1).
    lenient: the name of its lenient reader (the strict answer, else a fallback: A1 by construction), if any.
    symbolic: the (strict, lenient, payload column) readers of a symbolic (MATH) task under this request (App. B.4).
    wordings: a request's own full suffix per wording, where it does not fit the frames.
    """

    name: str
    marker_phrase: str
    final_marker: str
    payload_syntax: str
    program: Program
    request: str = ""
    partner: str = ""
    count: Callable[[str], int] | None = None
    last_payload: Extract | None = None
    readers: tuple[tuple[str, Extract], ...] = ()
    lenient: str = ""
    symbolic: tuple[str, str, str] | None = None
    wordings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.request:
            object.__setattr__(self, "request", self.name)

    @property
    def is_request(self) -> bool:
        """Whether a prompt can ask for it: it has a payload syntax to detect."""
        return self.count is not None

    @property
    def strict(self) -> str:
        return self.readers[0][0] if self.readers else ""

    def suffix(self, template: str = "original") -> str:
        """The request suffix in one of the wordings (a reward-only convention's is its request's)."""
        if template not in TEMPLATES:
            raise KeyError(f"unknown template {template!r}; expected one of {', '.join(TEMPLATES)}")
        if self.request != self.name:
            return get_convention(self.request).suffix(template)
        return self.wordings.get(template) or FRAMES[template].format(marker=self.marker_phrase)

    def mark(self, answer: str) -> str:
        """The final line that reports ``answer`` in this convention."""
        return self.final_marker.format(answer=answer)


T = TypeVar("T")
V = TypeVar("V")
R = TypeVar("R")
CONVENTIONS: dict[str, Convention] = {}
PARTNER: dict[str, str] = {}  # each convention's crossed partner, both ways
_listeners: list[Callable[[Convention], None]] = []
_registered = [0]  # how many registrations so far: the live views below read the registry again when it changes


def register(conv: Convention) -> Convention:
    """Add a convention to the registry: its partner made mutual, and every listener (the reader panel) told."""
    if not conv.name or conv.name in CONVENTIONS:
        raise ValueError(f"convention name {conv.name!r} is empty or taken")
    if conv.request not in (conv.name, *CONVENTIONS):
        raise ValueError(f"convention {conv.name!r}: its request {conv.request!r} is no registered convention")
    if conv.partner and (conv.partner not in CONVENTIONS or conv.partner in PARTNER):
        raise ValueError(f"convention {conv.name!r}: partner {conv.partner!r} is unknown or paired already")
    CONVENTIONS[conv.name] = conv
    if conv.partner:
        PARTNER[conv.name], PARTNER[conv.partner] = conv.partner, conv.name
    _registered[0] += 1
    for tell in _listeners:
        tell(conv)
    return conv


def on_register(tell: Callable[[Convention], None]) -> None:
    """Call ``tell`` for every registered convention, now and as each is registered."""
    _listeners.append(tell)
    for conv in list(CONVENTIONS.values()):
        tell(conv)


class _Read(Generic[R]):
    """What a live view holds: the registry read once per registration (``read``), not once per lookup (the
    scorer asks for a request's strict reader once a response)."""

    def __init__(self, read: Callable[[], R]) -> None:
        self._read, self._at = read, -1
        self._value: R | None = None

    def now(self) -> R:
        if self._value is None or self._at != _registered[0]:
            self._value, self._at = self._read(), _registered[0]
        return self._value


class _Live(Sequence[T]):
    """A read-only view of the registry that follows it (a convention registered later is in it), as a tuple."""

    def __init__(self, read: Callable[[], tuple[T, ...]]) -> None:
        self._read = _Read(read).now

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[T, ...]: ...
    def __getitem__(self, i: int | slice) -> T | tuple[T, ...]:
        return self._read()[i]

    def __len__(self) -> int:
        return len(self._read())

    def __iter__(self) -> Iterator[T]:
        return iter(self._read())

    def __contains__(self, value: object) -> bool:
        return value in self._read()

    def __eq__(self, other: object) -> bool:
        return self._read() == (tuple(other) if isinstance(other, Sequence) else other)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return repr(self._read())


class LiveMap(Mapping[str, V]):
    """A read-only mapping made from the registry that follows it, as :class:`_Live` (a request's strict reader,
    every program by name)."""

    def __init__(self, read: Callable[[], dict[str, V]]) -> None:
        self._read = _Read(read).now

    def __getitem__(self, key: str) -> V:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def _pairs() -> tuple[tuple[str, str], ...]:
    names = list(CONVENTIONS)
    return tuple((a, b) for a, b in PARTNER.items() if names.index(a) < names.index(b))


# Requests an evaluation prompt can make (a reward-only convention is not one), in registration order.
REQUESTS: Sequence[str] = _Live(lambda: tuple(c.name for c in CONVENTIONS.values() if c.is_request))
# The matched arm pairs (H, B) of the crossed design (§2.1, eq. 1), the first registered of each as H.
CROSSED_PAIRS: Sequence[tuple[str, str]] = _Live(_pairs)
ARM_PARTNER: Mapping[str, str] = PARTNER  # arm pairs and request pairs are one relation

# the paper's matched pair (§2): the arm rewarded for ``#### <answer>`` and the one for ``\boxed{}``; the defaults
MARKER_PAIR: tuple[str, str] = ("hash", "boxed")
# the reward-requirement control (§2.4, I1): the marker arm, and the arm whose reward drops its marker
MARKER_DROPPED: tuple[str, str] = ("hash", "answer_only")


def pair_label(arm_h: str, arm_b: str) -> str:
    """The request column of a pair's interaction: ``hashxboxed``, ``jsonxxml``."""
    return f"{arm_h}x{arm_b}"


def get_convention(name: str) -> Convention:
    """Look up a convention by name with an error that lists the valid names."""
    try:
        return CONVENTIONS[name]
    except KeyError:
        raise KeyError(f"unknown convention {name!r}; expected one of {', '.join(CONVENTIONS)}") from None


def requests() -> list[Convention]:
    """The conventions a prompt can ask for, in registration order."""
    return [c for c in CONVENTIONS.values() if c.is_request]


def request_suffix(request: str, template: str = "original") -> str:
    """The suffix an evaluation prompt appends for ``request`` in wording ``template``."""
    if request not in REQUESTS:
        raise KeyError(f"unknown request {request!r}; expected one of {', '.join(REQUESTS)}")
    return CONVENTIONS[request].suffix(template)


def request_order(request: str) -> int:
    """A request's place in tables: registration order, then anything else (a prompt name, a code request)."""
    names = list(REQUESTS)
    return names.index(request) if request in names else len(names)


# ---------------------------------------------------------------------------------------------------------------
# hash: ``#### <answer>`` (GSM8K's own convention)

# Delimiters the detector allows between the marker and the number: spaces, Markdown emphasis/code, currency, math
# openers (``$``, ``\\(``, ``\\[``) and escaped dollars (App. B.2). A possessive class keeps it linear; whether a marker
# qualifies reads only up to its number (reading its rest of line at every marker of a long line is quadratic).
_HASH_START = re.compile(r"[ \t*_~`$\\(\[{€£¥]*+[-+−]?\.?\d")
_HASH_PAYLOAD = re.compile(_HASH_START.pattern + r"[^\n]*+")  # the payload: its rest of line, read once
# the training reward: verl's GSM8K pattern, a signed number right after ``#### `` (App. D.1)
_HASH_REWARD = re.compile(r"#### (-?[0-9.,]+)")


def _hash_count(text: str) -> int:
    """Exact four-hash markers followed on the line by a numeric prefix: ``#### $18`` and ``#### **18**`` are
    payloads, a heading (``#### Step 1``) and the quoted request (``after "####".``) are not."""
    return sum(1 for end in tx.exact_markers(text) if _HASH_START.match(text, end))


def _hash_last(text: str) -> str | None:
    # the last qualifying marker's rest of line, copied once (not once per marker on a long line)
    at = next((end for end in reversed(tx.exact_markers(text)) if _HASH_START.match(text, end)), None)
    line = _HASH_PAYLOAD.match(text, at) if at is not None else None
    return line.group().strip().strip("*_`").strip() if line is not None else None


def _hash_first(text: str) -> str | None:
    found = tx.hash_numbers(text)
    return found[0] if found else None


def _hash_last_number(text: str) -> str | None:
    found = tx.hash_numbers(text)
    return found[-1] if found else None


def _hash_lenient(text: str) -> str | None:
    found = tx.hash_numbers(text)
    return found[0] if found else tx.last_number(text)


register(Convention(
    "hash", 'after "####"', "#### {answer}", "#### <signed number> on one line",
    RewardProgram("hash", _HASH_REWARD.findall, anchor="#### "),
    count=_hash_count, last_payload=_hash_last,
    readers=(("strict_first_hash", _hash_first), ("strict_last_hash", _hash_last_number),
             ("lenient_hash_fallback", _hash_lenient)),
    lenient="lenient_hash_fallback", symbolic=("math_strict", "math_lenient", "payload_any.hash")))


# ---------------------------------------------------------------------------------------------------------------
# boxed: ``\boxed{<answer>}`` (MATH's convention); every box found by the one balanced scanner, ``text.box_spans``


def _boxes(text: str) -> list[tuple[int, int]]:
    return [span for span in tx.box_spans(text) if tx.box_is_nonempty(text, span)]


def _boxed_last(text: str) -> str | None:
    boxes = _boxes(text)
    return f"\\boxed{{{text[boxes[-1][0]:boxes[-1][1]]}}}" if boxes else None  # whole, so a LaTeX parser sees it


def _boxed_reward(window: str) -> list[str]:
    """App. D.1: a box with a closing brace and no nested braces."""
    return [window[a:b] for a, b in tx.box_spans(window) if "{" not in window[a:b] and "}" not in window[a:b]]


def _boxed_first(text: str) -> str | None:
    spans = tx.box_spans(text)
    return tx.box_number(text, spans[0] if spans else None)


def _boxed_last_number(text: str) -> str | None:
    spans = tx.box_spans(text)
    return tx.box_number(text, spans[-1] if spans else None)


def _boxed_lenient(text: str) -> str | None:
    answer = _boxed_first(text)
    return answer if answer is not None else tx.last_number(text)


register(Convention(
    "boxed", "within \\boxed{}", "\\boxed{{{answer}}}", "\\boxed{<nonempty content>} with balanced braces",
    RewardProgram("boxed", _boxed_reward, anchor="\\boxed{"), partner="hash",
    count=lambda text: len(_boxes(text)), last_payload=_boxed_last,
    readers=(("boxed_first", _boxed_first), ("boxed_last", _boxed_last_number),
             ("lenient_boxed_fallback", _boxed_lenient)),
    lenient="lenient_boxed_fallback", symbolic=("math_strict", "math_lenient", "payload.boxed")))


# ---------------------------------------------------------------------------------------------------------------
# json: ``{"answer": <answer>}`` (the boundary study's pair, with xml)

# the object's opening, its key and the value's raw text up to a brace or the line's end, then the closing brace
_JSON = re.compile(r'\{\s*+"answer"\s*+:\s*+([^{}\n]*+)(\}?)')
_NUMERIC_START = re.compile(r'"?\s*+\$?[-+]?\.?\d')


def _json_payloads(text: str) -> Iterator[str]:
    """The value of every closed ``{"answer": <numeric>}`` (the request's own ``<number>`` is not a payload)."""
    if '"answer"' in text:
        for m in _JSON.finditer(text):
            if m.group(2) and _NUMERIC_START.match(m.group(1)):
                yield m.group(1)


def _json_last(text: str) -> str | None:
    *_, last = (None, *_json_payloads(text))
    return last.strip().strip("*_`\"").strip() if last is not None else None


def _json_first(text: str) -> str | None:
    m = _JSON.search(text) if '"answer"' in text else None
    if m is None:
        return None
    value = m.group(1).removeprefix('"').lstrip()
    return tx.last_number_in(value.split('"', 1)[0])


def _json_reward(window: str) -> list[str]:
    """A closed object whose value is at most quoted once: ``{"answer": "18"}`` reads 18."""
    out = []
    for m in _JSON.finditer(window):
        value = m.group(1).rstrip()
        value = value.removeprefix('"')
        value = value.removesuffix('"')
        if m.group(2) and '"' not in value:
            out.append(value)
    return out


register(Convention(
    "json", 'as JSON in the form {"answer": <number>}', '{{"answer": {answer}}}', '{"answer": <number>}',
    RewardProgram("json", _json_reward, anchor='"answer"'),
    count=lambda text: sum(1 for _ in _json_payloads(text)), last_payload=_json_last,
    readers=(("json_first", _json_first),)))


# ---------------------------------------------------------------------------------------------------------------
# xml: ``<answer><answer></answer>``

_XML = re.compile(r"<answer>([^<]*+)</answer>")


def _xml_payloads(text: str) -> list[str]:
    """The content of every ``<answer>...</answer>`` that holds something (the request's empty tags do not)."""
    return [m for m in _XML.findall(text) if m.strip()] if "<answer>" in text else []


def _xml_last(text: str) -> str | None:
    found = _xml_payloads(text)
    return found[-1].strip().strip("*_`\"").strip() if found else None


def _xml_first(text: str) -> str | None:
    m = _XML.search(text) if "<answer>" in text else None
    return tx.last_number_in(m.group(1)) if m else None


register(Convention(
    "xml", "inside <answer></answer> tags", "<answer>{answer}</answer>", "<answer>content</answer>",
    # the program as the arms were trained with it: tags holding no ">" (App. D.1's window and normalisation)
    RewardProgram("xml", lambda window: [m for m in _XML.findall(window) if ">" not in m], anchor="<answer>"),
    partner="json", count=lambda text: len(_xml_payloads(text)), last_payload=_xml_last,
    readers=(("xml_first", _xml_first),)))


# ---------------------------------------------------------------------------------------------------------------
# answer_only: the reward-requirement control (§2.4, I1): the right value anywhere in the window, no marker. The
# prompt still makes a request; only the reward drops the marker. ``answer_only`` trains under the hash request;
# ``answer_only_hash`` / ``answer_only_boxed`` are App. D.2's matched crossed control: the same reward under either.

_NUMBER = re.compile(r"-?\$?[0-9][0-9,]*(?:\.[0-9]+)?")  # sign, digits with commas, optional decimals
ANSWER_ONLY = RewardProgram("answer_only", _NUMBER.findall, any_match=True)
_ANYWHERE = "the right value anywhere in the final 300 characters"

register(Convention("answer_only", "", "#### {answer}", _ANYWHERE, ANSWER_ONLY, request="hash"))
register(Convention("answer_only_hash", "", "#### {answer}", _ANYWHERE, ANSWER_ONLY, request="hash"))

# native-boxed MATH training (App. D.3.1): the boxed request, rewarded by symbolic equivalence (rewards/symbolic.py)
register(Convention("boxed_math", "", "\\boxed{{{answer}}}",
                    "\\boxed{<LaTeX answer>} with balanced braces, symbolically equal", SymbolicBoxedProgram(),
                    request="boxed"))
register(Convention("answer_only_boxed", "", "\\boxed{{{answer}}}", _ANYWHERE, ANSWER_ONLY, request="boxed",
                    partner="answer_only_hash"))


# ---------------------------------------------------------------------------------------------------------------
# a user's own conventions

PLUGINS = "CROSSED_RLVR_CONVENTIONS"


def load_plugins() -> None:
    """Register the conventions named ``module:object`` (comma-separated; the object a :class:`Convention` or a list of
    them) in the environment variable ``CROSSED_RLVR_CONVENTIONS``. Every process of a run reads it (scoring pools,
    validation scorers, engines, Ray workers and torchrun ranks inherit the environment), where a :func:`register`
    call in a script reaches only its own process and those it forks."""
    import importlib
    import os

    for spec in filter(None, (s.strip() for s in os.environ.get(PLUGINS, "").split(","))):
        module, _, name = spec.partition(":")
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as err:
            raise ImportError(f"{PLUGINS}={spec}: {err} (give module:object, the object a Convention)") from err
        for conv in found if isinstance(found, list | tuple) else [found]:
            register(conv)


load_plugins()
