"""Math-Verify readers (paper 001 App. C.1/C.2; paper 000 App. E).

- ``math_verify``: Math-Verify 0.9 with its default extraction on the full response, against the
  reference, as in the paper's re-scoring.
- ``math_verify_payload`` (in :mod:`crossed_rlvr.eval.score.symbolic`): Math-Verify on the last requested
  payload only, with no numeric fallback (a response without a requested payload is unreadable).

Math-Verify's own timeouts use ``signal.alarm`` and only work in a main thread, so the panel runs
these readers in worker processes with a hard per-response limit enforced from outside (see
:mod:`crossed_rlvr.eval.score.panel`). Math-Verify hands sympy only strings its regexes restrict to
digits and arithmetic operators, or LaTeX parsed by antlr; none of our code evaluates text.
"""

from __future__ import annotations

import threading
from functools import lru_cache

from crossed_rlvr.eval.score.readers import Reader, Reading, reader

# Math-Verify's in-process limits (seconds); the panel's process-level limit is the hard one.
PARSE_TIMEOUT = 3
VERIFY_TIMEOUT = 3
MAX_CHARS = 200_000  # longer texts are unreadable rather than handed to the parser


def time_limits() -> tuple[int | None, int | None]:
    """Math-Verify's (parse, verify) timeouts in seconds; None off the main thread."""
    # signal.alarm is unavailable off the main thread: rely on the process-level limit there.
    if threading.current_thread() is threading.main_thread():
        return PARSE_TIMEOUT, VERIFY_TIMEOUT
    return None, None


def parse(text: str) -> list:
    """Math-Verify's parse of ``text`` under the time limit."""
    import math_verify  # imported lazily: sympy/antlr are slow to import

    parse_timeout, _ = time_limits()
    return math_verify.parse(text, parsing_timeout=parse_timeout)


@lru_cache(maxsize=65536)
def parse_reference(reference: str) -> tuple:
    """The reference parsed as LaTeX math, else as plain text (cached: one parse per distinct reference)."""
    parsed = parse(f"${reference}$") or parse(reference)
    return tuple(parsed)


def answer_text(parsed: list) -> str | None:
    """The printable answer of a parse (its string form when Math-Verify gives one)."""
    if not parsed:
        return None
    return str(parsed[1]) if len(parsed) > 1 else str(parsed[0])


def verify_text(text: str | None, reference: str) -> Reading:
    """Parse ``text`` with Math-Verify and verify it against the reference."""
    from math_verify import verify

    if text is None or len(text) > MAX_CHARS:
        return Reading(None, False)
    pred = parse(text)
    if not pred:
        return Reading(None, False)
    gold = list(parse_reference(str(reference)))
    _, verify_timeout = time_limits()
    return Reading(answer_text(pred), bool(gold) and verify(gold, pred, timeout_seconds=verify_timeout))


@reader("math_verify")
class MathVerifyFull(Reader):
    slow = True

    def extract(self, response: str, request: str | None = None) -> str | None:
        return answer_text(parse(response)) if len(response) <= MAX_CHARS else None

    def __call__(self, response: str, reference: str, request: str | None = None) -> Reading:
        return verify_text(response, reference)
