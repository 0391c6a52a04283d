"""Requested-payload detector (paper 001 §2.1, App. B.2).

d_r(y) says whether a response carries a syntactically valid payload in convention r, independently
of correctness. Every occurrence is scanned and one qualifying occurrence suffices:

- hash: an exact four-hash marker followed on the same line by a numeric prefix, allowing outer
  currency, math or Markdown delimiters (``#### $18``, ``#### **18**``, ``#### \\$18``). Hash
  headings (``#### Step 1``) and quoted request text (``after "####".``) are not payloads.
- boxed: a balanced ``\\boxed{}`` with nonempty content; an empty template ``\\boxed{}`` is not.
- json: ``{"answer": <numeric>}``; xml: ``<answer>content</answer>`` with nonempty content.
  The request texts (``{"answer": <number>}``, ``<answer></answer>``) are not payloads.

The four categories of Table 11 partition responses for a request by requested and partner payloads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crossed_rlvr.rewards.conventions import PARTNER
from crossed_rlvr.text import box_is_nonempty, box_spans, exact_markers

# Delimiters allowed between the marker and the number: spaces, Markdown emphasis/code, currency,
# math openers (``$``, ``\\(``, ``\\[``) and escaped dollars. A possessive class keeps it linear.
_HASH_PAYLOAD = re.compile(r"[ \t*_~`$\\(\[{€£¥]*+[-+−]?\.?\d")
_JSON_PAYLOAD = re.compile(r'\{\s*+"answer"\s*+:\s*+"?\s*+\$?[-+]?\.?\d[^{}\n]*+\}')
_XML_PAYLOAD = re.compile(r"<answer>\s*+[^<\s][^<]*+</answer>")

CATEGORIES: tuple[str, ...] = ("requested_only", "other_only", "both", "neither")


def hash_payloads(text: str) -> int:
    return sum(1 for end in exact_markers(text) if _HASH_PAYLOAD.match(text, end))


def boxed_payloads(text: str) -> int:
    return sum(1 for span in box_spans(text) if box_is_nonempty(text, span))


def json_payloads(text: str) -> int:
    if '"answer"' not in text:
        return 0
    return sum(1 for _ in _JSON_PAYLOAD.finditer(text))


def xml_payloads(text: str) -> int:
    if "<answer>" not in text:
        return 0
    return sum(1 for _ in _XML_PAYLOAD.finditer(text))


COUNTERS = {"hash": hash_payloads, "boxed": boxed_payloads, "json": json_payloads, "xml": xml_payloads}


@dataclass(frozen=True)
class PayloadReport:
    """Payload occurrence counts per convention for one response."""

    counts: dict[str, int]

    def present(self, convention: str) -> bool:
        return self.counts[convention] > 0

    def category(self, request: str, other: str | None = None) -> str:
        """Table 11 category for ``request``; the other convention defaults to its crossed partner."""
        requested = self.present(request)
        partner = self.present(other or PARTNER[request])
        if requested and partner:
            return "both"
        if requested:
            return "requested_only"
        return "other_only" if partner else "neither"


def detect(text: str) -> PayloadReport:
    """Scan every occurrence of every convention's payload."""
    return PayloadReport({name: count(text) for name, count in COUNTERS.items()})


_HASH_PAYLOAD_LINE = re.compile(r"[ \t*_~`$\\(\[{€£¥]*+[-+−]?\.?\d[^\n]*+")
_JSON_PAYLOAD_BODY = re.compile(r'\{\s*+"answer"\s*+:\s*+("?\s*+\$?[-+]?\.?\d[^{}\n]*+)\}')
_XML_PAYLOAD_BODY = re.compile(r"<answer>(\s*+[^<\s][^<]*+)</answer>")


def last_payload(text: str, convention: str) -> str | None:
    """The text of the last qualifying payload in ``convention`` (for payload-only readers).

    For boxed it is the whole ``\\boxed{...}`` so that a LaTeX parser sees the box; for the other
    conventions it is the payload body after the marker, Markdown emphasis removed.
    """
    if convention == "boxed":
        last = next((span for span in reversed(box_spans(text)) if box_is_nonempty(text, span)), None)
        return f"\\boxed{{{text[last[0] : last[1]]}}}" if last is not None else None
    if convention == "hash":
        # the last qualifying marker's rest of line, copied once (not once per marker on a long line)
        at = next((end for end in reversed(exact_markers(text)) if _HASH_PAYLOAD.match(text, end)), None)
        line = _HASH_PAYLOAD_LINE.match(text, at) if at is not None else None
        return line.group().strip().strip("*_`").strip() if line is not None else None
    pattern = {"json": _JSON_PAYLOAD_BODY, "xml": _XML_PAYLOAD_BODY}.get(convention)
    if pattern is None:
        raise KeyError(f"no payload syntax for convention {convention!r}")
    found = list(pattern.finditer(text))
    return found[-1].group(1).strip().strip("*_`\"").strip() if found else None
