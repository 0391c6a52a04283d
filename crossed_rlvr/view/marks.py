"""A response cut into text segments, each convention's payload marked (paper 001 App. B.2).

Each registered request convention whose detector (``Convention.count``) finds a payload has its last qualifying
payload (``Convention.last_payload``, what the payload-only readers read) marked where it last occurs in the text:
inside its marked form (``Convention.mark``: ``#### 7``) where the text holds that, else its last bare occurrence.
The page gets segments of plain text, never markup: it puts each into the page as text, so a response holding
``<script>`` is shown, not run.
"""

from __future__ import annotations

from typing import Any

from crossed_rlvr.rewards.conventions import requests


def _where(text: str, payload: str, marked: str, taken: list[tuple[int, int, str]]) -> int:
    """Where a convention's last payload stands: inside its last marked form (``#### 7``, ``{"answer": 7}``) when the
    text holds one, else its last occurrence that no other convention's mark holds, else its last occurrence."""
    at = text.rfind(marked) if payload in marked else -1
    if at >= 0:
        return at + marked.rindex(payload)
    end = len(text)
    while (at := text.rfind(payload, 0, end)) >= 0:
        if not any(a < at + len(payload) and at < b for a, b, _ in taken):
            return at
        end = at + len(payload) - 1
    return text.rfind(payload)


def payload_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, convention) of each convention's last payload in ``text``, by start; where two overlap (a hash
    payload runs to its line's end), the first ends where the second starts."""
    found = []
    for conv in requests():
        if conv.count is None or conv.last_payload is None or not conv.count(text):
            continue
        payload = conv.last_payload(text)
        if payload:
            found.append((conv, payload, conv.mark(payload)))
    spans: list[tuple[int, int, str]] = []
    # a payload found in its marked form first: a bare "7" must not take the place of another convention's "7"
    for conv, payload, marked in sorted(found, key=lambda f: f[2] not in text):
        at = _where(text, payload, marked, spans)
        if at >= 0:
            spans.append((at, at + len(payload), conv.name))
    spans.sort()
    kept: list[tuple[int, int, str]] = []
    for start, end, name in spans:  # one mark per character
        if kept and start < kept[-1][1]:
            if start == kept[-1][0]:
                continue  # the same start: the first found keeps it
            kept[-1] = (kept[-1][0], start, kept[-1][2])
        kept.append((start, end, name))
    return kept


def segments(text: str, request: str) -> list[dict[str, Any]]:
    """``text`` as segments ``{"text", "mark"}``; ``mark`` names the convention of a payload (None: plain text) and
    ``requested`` says whether it is the requested convention's."""
    out: list[dict[str, Any]] = []
    at = 0
    for start, end, name in payload_spans(text):
        if start > at:
            out.append({"text": text[at:start], "mark": None})
        out.append({"text": text[start:end], "mark": name, "requested": name == request})
        at = end
    if at < len(text):
        out.append({"text": text[at:], "mark": None})
    return out
