"""Symbolic payload readers for MATH-style answers (paper 001 App. B.4, D.3.1; Tables 15-17).

GSM8K's readers take numbers; MATH500's answers are LaTeX (``\\frac{1}{2}``, ``2\\sqrt{3}``, tuples).
These readers take the requested payload as text and check it with Math-Verify against the
reference, inside LaTeX math delimiters, with no numeric fallback:

- ``math_first_hash``: the first exact ``####`` marker's same-line payload (any nonempty text, outer
  ``$``/``\\(``/``**`` delimiters and a final period removed); ``math_first_boxed``: the first
  nonempty balanced ``\\boxed{}``. An answer is returned only when Math-Verify parses the payload, so
  "answer is not None" is the symbolic readability q of Table 16.
- ``math_strict``: the primary strict reader of App. B.4: ``math_first_hash`` under a hash request,
  ``math_first_boxed`` under a boxed one.
- ``math_lenient``: D.3.1's lenient MATH path: Math-Verify on the last nonempty line, else the last number.
- ``math_verify_payload``: the last-payload diagnostic (the last nonempty, non-prose payload), for every task.

Diagnostics for Tables 16-17 (:func:`diagnostics`): nonempty hash payload presence (q^pay), a
digit-only first hash payload, and first hash and first box both readable but unequal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from crossed_rlvr.eval.score.mathverify import answer_text, parse, parse_reference, verify
from crossed_rlvr.eval.score.readers import Reader, Reading, reader
from crossed_rlvr.rewards import text as tx

# Outer wrappers a model puts around a reported answer: Markdown emphasis/code and math delimiters.
_WRAPPERS = (("**", "**"), ("__", "__"), ("`", "`"), ("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"),
             ("*", "*"), ("_", "_"))
_DIGITS = re.compile(r"\d+")
_MARKER = re.compile(r"^\s*#{4}(?!#)")
_PROSE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")  # a word of 3+ letters that is not a LaTeX command
_SPACE = re.compile(r"\s*+")
# A payload longer than this is not an answer: it is unreadable rather than handed to Math-Verify (whose
# LaTeX parser is superlinear in the length of what it is given).
# The lenient path's last line is bounded the same way.
PAYLOAD_MAX_CHARS = 4_000


def _strip(text: str, a: int, b: int) -> tuple[int, int]:
    space = _SPACE.match(text, a, b)  # zero or more spaces: it always matches
    a = space.end() if space is not None else a
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def _unwrap_span(text: str, a: int, b: int) -> tuple[int, int]:
    """``_unwrap`` on ``text[a:b]`` by moving the ends, never copying (``$$$$...`` would cost one copy per layer)."""
    a, b = _strip(text, a, b)
    changed = True
    while changed and b > a:
        changed = False
        if text[b - 1] == "." and not text.endswith("..", a, b):
            a, b = _strip(text, a, b - 1)
            changed = True
        for left, right in _WRAPPERS:
            if b - a > len(left) + len(right) and text.startswith(left, a, b) and text.endswith(right, a, b):
                a, b = _strip(text, a + len(left), b - len(right))
                changed = True
                break
    return a, b


def _unwrap(payload: str) -> str:
    a, b = _unwrap_span(payload, 0, len(payload))
    return payload[a:b]


_TEXT_GROUP = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}")


def is_prose(payload: str) -> bool:
    """A heading or sentence (``Step 1: add``), not an answer: a word of 3+ letters outside LaTeX commands
    and ``\\text{}`` groups (so ``\\text{Tuesday}`` and ``\\sqrt{2}`` are answers)."""
    return _PROSE.search(_TEXT_GROUP.sub("", payload)) is not None


def _marker_spans(text: str) -> Iterator[tuple[int, int]]:
    """The unwrapped span after every exact ``####`` marker, in order (possibly empty). A marker's payload
    runs to the end of its line or to the next marker on that line, whichever comes first: the spans are
    disjoint, so a line of 10^5 markers costs one pass, not one copy of the rest of the line per marker."""
    ends = tx.exact_markers(text)
    for k, end in enumerate(ends):
        line_end = text.find("\n", end)
        stop = len(text) if line_end == -1 else line_end
        if k + 1 < len(ends):
            stop = min(stop, ends[k + 1] - 4)
        yield _unwrap_span(text, end, stop)


def _hash_bodies(text: str) -> Iterator[str]:
    """The answers after exact ``####`` markers, lazily: empty payloads, over-long ones and prose headings
    (``#### Step 1: add``) are left out."""
    for a, b in _marker_spans(text):
        if 0 < b - a <= PAYLOAD_MAX_CHARS and not is_prose(body := text[a:b]):
            yield body


def hash_payloads(text: str) -> list[str]:
    """Every answer after an exact ``####`` marker (see ``_hash_bodies``)."""
    return list(_hash_bodies(text))


def last_hash_payload(text: str) -> str | None:
    """``hash_payloads(text)[-1]`` holding one payload at a time."""
    last = None
    for last in _hash_bodies(text):  # noqa: B007 - the loop keeps the last one
        pass
    return last


def first_hash_payload(text: str) -> str | None:
    """The first marker's payload, literally (None when there is no marker, its payload is empty or longer
    than PAYLOAD_MAX_CHARS)."""
    for a, b in _marker_spans(text):
        return text[a:b] if 0 < b - a <= PAYLOAD_MAX_CHARS else None
    return None


def _box_spans(text: str) -> Iterator[tuple[int, int]]:
    """Spans of every nonempty balanced box, stripped, in order of opening (spans: nested boxes would
    otherwise copy the text once per level)."""
    for a, b in tx.box_spans(text):
        if tx.box_is_nonempty(text, (a, b)):
            yield _strip(text, a, b)


def box_payloads(text: str) -> list[str]:
    return [text[a:b] for a, b in _box_spans(text)]


def first_box_payload(text: str) -> str | None:
    """``box_payloads(text)[0]`` without copying the other boxes."""
    for a, b in _box_spans(text):
        return text[a:b]
    return None


def last_box_payload(text: str) -> str | None:
    """``box_payloads(text)[-1]`` copying only the last box."""
    for span in reversed(tx.box_spans(text)):
        if tx.box_is_nonempty(text, span):
            a, b = _strip(text, *span)
            return text[a:b]
    return None


def is_symbolic_task(task: str | None) -> bool:
    """MATH-style tasks (``math500``, ``math``, ``math-*``, ``math_*``) get the symbolic readers."""
    return task is not None and (task == "math" or task.startswith(("math500", "math-", "math_")))


def symbolic(payload: str | None) -> list:
    """Math-Verify's parse of a payload inside math delimiters ([] when unreadable). A parse that yields
    only Math-Verify's raw-string fallback (``?``, ``---``) is not a symbolic reading."""
    if payload is None or len(payload) > PAYLOAD_MAX_CHARS:
        return []
    return list(_symbolic(payload))


@lru_cache(maxsize=256)  # the readers of one response parse the same payloads: parse each once
def _symbolic(payload: str) -> tuple:
    parsed = parse(f"${payload}$")
    return tuple(parsed) if any(not isinstance(x, str) for x in parsed) else ()


def verify_parsed(pred: list, reference: str) -> bool:
    gold = list(parse_reference(str(reference)))
    return bool(pred) and bool(gold) and verify(gold, pred)


@lru_cache(maxsize=256)
def read_payload(payload: str | None, reference: str) -> Reading:
    """A payload's symbolic reading and its verdict, once per (payload, reference)."""
    parsed = symbolic(payload)
    return Reading(answer_text(parsed), verify_parsed(parsed, reference))


class SymbolicPayload(Reader):
    """Math-Verify on one payload, no fallback: unreadable unless the payload parses."""

    slow = True
    symbolic_only = True  # scored for symbolic tasks only (the panel skips it for GSM8K-style tasks)

    def payload(self, response: str, request: str | None) -> str | None:
        raise NotImplementedError

    def extract(self, response: str, request: str | None = None) -> str | None:
        return answer_text(symbolic(self.payload(response, request)))

    def __call__(self, response: str, reference: str, request: str | None = None) -> Reading:
        return read_payload(self.payload(response, request), str(reference))


@reader("math_first_hash")
class MathFirstHash(SymbolicPayload):
    def payload(self, response: str, request: str | None) -> str | None:
        return first_hash_payload(response)


@reader("math_first_boxed")
class MathFirstBoxed(SymbolicPayload):
    def payload(self, response: str, request: str | None) -> str | None:
        return first_box_payload(response)


@reader("math_strict")
class MathStrict(SymbolicPayload):
    """App. B.4's primary reader: the first payload of the requested convention, symbolic."""

    def payload(self, response: str, request: str | None) -> str | None:
        if request == "boxed":
            return first_box_payload(response)
        return first_hash_payload(response) if request in (None, "hash") else None


@reader("math_lenient")
class MathLenient(Reader):
    """D.3.1's lenient MATH path: the last nonempty line through Math-Verify, else the last number."""

    slow = True
    symbolic_only = True

    def __call__(self, response: str, reference: str, request: str | None = None) -> Reading:
        lines = [line for line in response.splitlines() if line.strip()]
        parsed = []
        if lines and len(lines[-1]) <= PAYLOAD_MAX_CHARS:
            last = _unwrap(_MARKER.sub("", lines[-1], count=1))
            # a bare expression is read as LaTeX; a sentence by Math-Verify's own extraction
            parsed = parse(lines[-1]) if is_prose(last) else symbolic(last)
        if not parsed:
            number = tx.last_number(response)
            parsed = symbolic(number) if number is not None else []
        return Reading(answer_text(parsed), verify_parsed(parsed, reference))

    def extract(self, response: str, request: str | None = None) -> str | None:
        return self(response, "", request).answer


@reader("math_verify_payload")
class MathVerifyLastPayload(SymbolicPayload):
    """The last-payload diagnostic (App. B.4 compares first and last markers): the last requested payload
    (any nonempty hash line, the last box, the last JSON/XML answer), symbolic, no numeric fallback.
    Scored for every task, as before."""

    symbolic_only = False

    def payload(self, response: str, request: str | None) -> str | None:
        request = request or "hash"
        if request == "hash":
            return last_hash_payload(response)
        if request == "boxed":
            return last_box_payload(response)
        from crossed_rlvr.eval.score.payload import last_payload

        return last_payload(response, request)


DIAGNOSTICS = ("payload_any.hash", "hash_digit_only", "math_hash_box_unequal")


def diagnostics(response: str) -> dict[str, bool]:
    """Per-response counts behind Tables 16-17 (slow: Math-Verify compares the two payloads)."""
    first_hash = first_hash_payload(response)
    first_box = first_box_payload(response)
    unequal = False
    if first_hash is not None and first_box is not None:
        a, b = symbolic(first_hash), symbolic(first_box)
        if a and b:
            unequal = not verify(a, b)
    return {"payload_any.hash": next(_hash_bodies(response), None) is not None,
            "hash_digit_only": first_hash is not None and _DIGITS.fullmatch(first_hash) is not None,
            "math_hash_box_unequal": unequal}
