"""Requested-payload detector (paper 001 §2.1, App. B.2).

d_r(y) says whether a response carries a syntactically valid payload in convention r, independently of
correctness. Every occurrence is scanned and one qualifying occurrence suffices; each convention's own detector
(``Convention.count``, :mod:`crossed_rlvr.rewards.conventions`) says what qualifies: a hash marker followed on its
line by a numeric prefix, not a heading or the quoted request; a balanced nonempty box, not the empty template; ...

The four categories of Table 11 partition responses for a request by requested and partner payloads.
"""

from __future__ import annotations

from dataclasses import dataclass

from crossed_rlvr.rewards.conventions import PARTNER, get_convention, requests

CATEGORIES: tuple[str, ...] = ("requested_only", "other_only", "both", "neither")


@dataclass(frozen=True)
class PayloadReport:
    """Payload occurrence counts per convention for one response."""

    counts: dict[str, int]

    def present(self, convention: str) -> bool:
        return self.counts[convention] > 0

    def category(self, request: str, other: str | None = None) -> str:
        """Table 11 category for ``request``. The other convention defaults to its crossed partner; a request with
        no partner counts any other convention's payload as the other one."""
        requested = self.present(request)
        other = other or PARTNER.get(request)
        partner = self.present(other) if other else any(n > 0 for c, n in self.counts.items() if c != request)
        if requested and partner:
            return "both"
        if requested:
            return "requested_only"
        return "other_only" if partner else "neither"


def detect(text: str) -> PayloadReport:
    """Scan every occurrence of every convention's payload."""
    return PayloadReport({c.name: c.count(text) for c in requests() if c.count is not None})


def last_payload(text: str, convention: str) -> str | None:
    """The text of the last qualifying payload in ``convention`` (for payload-only readers): a box whole, so that a
    LaTeX parser sees it; another convention's payload body after its marker, Markdown emphasis removed."""
    conv = get_convention(convention)
    if conv.last_payload is None:
        raise KeyError(f"no payload syntax for convention {convention!r}")
    return conv.last_payload(text)
