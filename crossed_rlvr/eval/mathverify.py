"""Math-Verify readers (paper 001 App. C.1/C.2; paper 000 App. E).

- ``math_verify``: Math-Verify 0.9 with its default extraction on the full response, against the
  reference, as in the paper's re-scoring.
- ``math_verify_payload`` (in :mod:`crossed_rlvr.eval.symbolic`): Math-Verify on the last requested
  payload only, with no numeric fallback (a response without a requested payload is unreadable).

Math-Verify's own timeouts use ``signal.alarm`` and only work in a main thread, so the panel runs
these readers in worker processes with a hard per-response limit enforced from outside (see
:mod:`crossed_rlvr.eval.panel`). Math-Verify hands sympy only strings its regexes restrict to
digits and arithmetic operators, or LaTeX parsed by antlr; none of our code evaluates text.
"""

from __future__ import annotations

import threading
from functools import lru_cache

from crossed_rlvr.eval.readers import Reader, Reading, reader

# Math-Verify's in-process limits (seconds); the panel's process-level limit is the hard one.
PARSE_TIMEOUT = 3
VERIFY_TIMEOUT = 3
MAX_CHARS = 200_000  # longer texts are unreadable rather than handed to the parser


def _limits() -> tuple[int | None, int | None]:
    # signal.alarm is unavailable off the main thread: rely on the process-level limit there.
    if threading.current_thread() is threading.main_thread():
        return PARSE_TIMEOUT, VERIFY_TIMEOUT
    return None, None


def _parse(text: str) -> list:
    from math_verify import parse  # imported lazily: sympy/antlr are slow to import

    parse_timeout, _ = _limits()
    return parse(text, parsing_timeout=parse_timeout)


@lru_cache(maxsize=65536)
def _gold(reference: str) -> tuple:
    parsed = _parse(f"${reference}$") or _parse(reference)
    return tuple(parsed)


def _answer(parsed: list) -> str | None:
    if not parsed:
        return None
    return str(parsed[1]) if len(parsed) > 1 else str(parsed[0])


def verify_text(text: str | None, reference: str) -> Reading:
    """Parse ``text`` with Math-Verify and verify it against the reference."""
    from math_verify import verify

    if text is None or len(text) > MAX_CHARS:
        return Reading(None, False)
    pred = _parse(text)
    if not pred:
        return Reading(None, False)
    gold = list(_gold(str(reference)))
    _, verify_timeout = _limits()
    return Reading(_answer(pred), bool(gold) and verify(gold, pred, timeout_seconds=verify_timeout))


@reader("math_verify")
class MathVerifyFull(Reader):
    slow = True

    def extract(self, response: str, request: str | None = None) -> str | None:
        return _answer(_parse(response)) if len(response) <= MAX_CHARS else None

    def __call__(self, response: str, reference: str, request: str | None = None) -> Reading:
        return verify_text(response, reference)
