"""Shared text primitives for the conventions' payload detectors, readers and reward programs.

Everything here is linear-time: regexes without nested ambiguous quantifiers (possessive where a
class repeats), and one stack pass for brace matching, so multi-MB responses and deeply nested
braces cost milliseconds, never a hang. Results are cached per text because the panel asks the
same question (where are the boxes?) from several readers.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

# GSM8K-style number: sign, digits with optional thousands separators, optional decimals.
NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})++|\d++)(?:\.\d++)?+|(?<![\w.])-?\.\d++")
# Strict hash reading: the marker, spaces, then a number immediately (App. C.1 / B.2: the frozen
# numeric reader misses a currency-prefixed payload such as "#### $18").
_AFTER_HASH = re.compile(r"[ \t]*+(-?(?:\d{1,3}(?:,\d{3})++|\d++)(?:\.\d++)?+|-?\.\d++)")
_DIGIT = re.compile(r"\d")
_HASH_RUN = re.compile(r"#++")
_NUMBER_RUN = re.compile(r"[0-9,.\-]*+")
BOXED_OPEN = re.compile(r"\\boxed\s*+\{")
_BRACE = re.compile(r"(?<!\\)[{}]")
_NONSPACE = re.compile(r"\S")

TOLERANCE = 1e-3

# Readers see at most this many characters of a response: its head and its tail, half each (paper 001
# App. D.1: the training reward programs read the final 300 characters, first-marker readers the start).
# A degenerate response (10^5 repeated markers, 10^5 nested boxes) is then read in bounded time and
# memory; real responses (<= 2,048 tokens, ~10k characters) are read whole. Scores record it per response.
READ_CAP_CHARS = 32_768
_CUT = "\n\n"  # between head and tail: no marker's line or number runs across the cut


def read_window(text: str) -> str:
    """The part of a response the readers see: all of it up to READ_CAP_CHARS, else head and tail."""
    if len(text) <= READ_CAP_CHARS:
        return text
    half = READ_CAP_CHARS // 2
    return text[:half] + _CUT + text[-half:]


def to_float(token: str | None) -> float | None:
    """Parse a numeric token (commas, dollar signs and a trailing period ignored); None if not numeric."""
    if token is None:
        return None
    s = token.replace(",", "").replace("$", "").strip().rstrip(".")
    if not s or len(s) > 400:
        return None
    try:
        value = float(s)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def numeric_equal(answer: str | None, reference: str) -> bool:
    """GSM8K-style comparison: |answer - reference| <= 1e-3, else exact normalised string match."""
    if answer is None:
        return False
    a, r = to_float(answer), to_float(str(reference))
    if a is not None and r is not None:
        return abs(a - r) <= TOLERANCE
    return _norm(answer) == _norm(str(reference))


def _norm(s: str) -> str:
    return s.replace(",", "").replace("$", "").replace(" ", "").strip().rstrip(".")


@lru_cache(maxsize=8)  # only shared between readers of the same response
def numbers(text: str) -> tuple[str, ...]:
    """Every number token in the text, in order."""
    return tuple(NUMBER.findall(text))


def last_number(text: str) -> str | None:
    """The last number token anywhere in the text (same result as ``numbers(text)[-1]``)."""
    # Find the last digit from the end, then tokenise only the run of number characters around it:
    # tokens never cross a character outside [0-9,.-], so the run tokenises as in a full scan.
    rev = text[::-1]
    m = _DIGIT.search(rev)
    if m is None:
        return None
    end = len(text) - m.start()
    run = _NUMBER_RUN.match(rev, m.start())
    assert run is not None  # the pattern admits the empty string: it matches everywhere
    start = end - run.end() + m.start()
    found = NUMBER.findall(text, start, end)
    if found:
        return found[-1]
    all_found = numbers(text)  # the last digit was not a token (e.g. "x2"): full scan
    return all_found[-1] if all_found else None


def exact_markers(text: str, marker: str = "####") -> list[int]:
    """End positions of every exact four-hash marker (not part of a longer run of #)."""
    ends, at, n = [], text.find(marker), len(marker)
    while at != -1:
        run = _HASH_RUN.match(text, at)
        assert run is not None  # text[at] is a '#'
        run_end = run.end()
        if run_end - at == n and (at == 0 or text[at - 1] != "#"):
            ends.append(run_end)
        at = text.find(marker, run_end)
    return ends


@lru_cache(maxsize=8)  # only shared between readers of the same response
def hash_numbers(text: str) -> tuple[str, ...]:
    """Numbers read by the strict hash readers: each ``####`` immediately followed by a number."""
    found = []
    for end in exact_markers(text):
        m = _AFTER_HASH.match(text, end)
        if m:
            found.append(m.group(1))
    return tuple(found)


@lru_cache(maxsize=8)  # only shared between readers of the same response
def box_spans(text: str) -> tuple[tuple[int, int], ...]:
    """(start, end) of the content of every balanced ``\\boxed{...}``, in order of opening.

    Spans, not strings: nested boxes would otherwise copy the text once per level. Escaped braces
    (``\\{``) are literal. One stack pass over the braces after the first box: linear time.
    """
    if "\\boxed" not in text:
        return ()
    opens = [m.end() - 1 for m in BOXED_OPEN.finditer(text)]
    if not opens:
        return ()
    close_of: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE.finditer(text, opens[0]):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            close_of[stack.pop()] = m.start()
    return tuple((o + 1, close_of[o]) for o in opens if o in close_of)


def box_is_nonempty(text: str, span: tuple[int, int]) -> bool:
    return _NONSPACE.search(text, span[0], span[1]) is not None


def box_number(text: str, span: tuple[int, int] | None) -> str | None:
    """The last numeric token inside a box (the frozen GSM8K box reader, App. B.2)."""
    if span is None:
        return None
    found = NUMBER.findall(text, span[0], span[1])
    return found[-1] if found else None


def last_number_in(fragment: str) -> str | None:
    found = numbers(fragment)
    return found[-1] if found else None
