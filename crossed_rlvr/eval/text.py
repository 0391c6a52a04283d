"""Shared text primitives for the readers and the payload detector.

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
NUMBER_AT_START = re.compile(r"-?(?:\d{1,3}(?:,\d{3})++|\d++)(?:\.\d++)?+|-?\.\d++")
# An exact four-hash marker (not part of a longer run of #).
HASH_MARKER = re.compile(r"(?<!#)####(?!#)")
# Strict hash reading: the marker, spaces, then a number immediately (App. C.1 / B.2: the frozen
# numeric reader misses a currency-prefixed payload such as "#### $18").
HASH_NUMBER = re.compile(r"(?<!#)####(?!#)[ \t]*+(-?(?:\d{1,3}(?:,\d{3})++|\d++)(?:\.\d++)?+|-?\.\d++)")
BOXED_OPEN = re.compile(r"\\boxed\s*+\{")
_BRACE = re.compile(r"(?<!\\)[{}]")
_NONSPACE = re.compile(r"\S")

TOLERANCE = 1e-3


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
    """The last number token anywhere in the text."""
    # Look in the tail first; a tail token that is not the tail's first is whole (only the first
    # can be cut by the window edge), so the full scan is needed only for short or sparse tails.
    if len(text) > 512:
        found = NUMBER.findall(text, len(text) - 512)
        if len(found) > 1:
            return found[-1]
    all_found = numbers(text)
    return all_found[-1] if all_found else None


@lru_cache(maxsize=8)  # only shared between readers of the same response
def hash_numbers(text: str) -> tuple[str, ...]:
    """Numbers read by the strict hash readers: each ``####`` immediately followed by a number."""
    if "####" not in text:
        return ()
    return tuple(HASH_NUMBER.findall(text))


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
