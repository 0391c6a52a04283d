"""Math-Verify readers (paper 001 App. C.1/C.2; paper 000 App. E).

- ``math_verify``: Math-Verify 0.9 with its default extraction on the full response, against the
  reference, as in the paper's re-scoring.
- ``math_verify_payload`` (in :mod:`crossed_rlvr.eval.score.symbolic`): Math-Verify on the last requested
  payload only, with no numeric fallback (a response without a requested payload is unreadable).

Math-Verify's own timeouts count wall-clock seconds (``signal.alarm``), so on a busy machine the same
response can be read on a quiet run and time out on a loaded one. A score must not depend on the load:
we turn its timeouts off and limit each parse and each verification by the CPU time it uses instead
(``cpu_limit``). Signals only work in a main thread, so the panel runs these readers in worker
processes, with a wall-clock limit enforced from outside for a reader stuck in C code (see
:mod:`crossed_rlvr.eval.score.panel`). Math-Verify hands sympy only strings its regexes restrict to
digits and arithmetic operators, or LaTeX parsed by antlr; none of our code evaluates text.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from types import FrameType
from typing import TypeVar

from crossed_rlvr.eval.score.readers import Reader, Reading, reader

# CPU seconds one parse / one verification may use (Math-Verify's defaults were 3 wall-clock seconds).
PARSE_TIMEOUT = 3.0
VERIFY_TIMEOUT = 3.0
MAX_CHARS = 200_000  # longer texts are unreadable rather than handed to the parser

T = TypeVar("T")


class CpuTimeExceeded(BaseException):
    """Raised inside a reading that used up its CPU time (a BaseException, like Math-Verify's own
    TimeoutException, so that Math-Verify's ``except Exception`` handlers do not swallow it)."""


def _on_cpu_limit(signum: int, frame: FrameType | None) -> None:
    raise CpuTimeExceeded


@contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Raise ``CpuTimeExceeded`` once this process has used ``seconds`` of CPU time inside the block.

    ITIMER_PROF counts the process's user and system time, so time spent waiting for a busy core
    does not count. Off the main thread (where signals cannot be handled) the block runs unlimited
    and the panel's process-level limit is the only one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGPROF, _on_cpu_limit)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def limited(seconds: float, fn: Callable[[], T], on_timeout: T) -> T:
    """``fn()`` under ``cpu_limit(seconds)``; ``on_timeout`` when it runs out (Math-Verify's own outcome)."""
    try:
        with cpu_limit(seconds):
            return fn()
    except CpuTimeExceeded:
        return on_timeout


class _NoTimeoutWarning(logging.Filter):
    # Math-Verify warns once that with its own timeouts off the caller must limit time: we do.
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_NoTimeoutWarning())


def parse(text: str) -> list:
    """Math-Verify's parse of ``text`` under the CPU-time limit ([] when it runs out, as Math-Verify does)."""
    import math_verify  # imported lazily: sympy/antlr are slow to import

    return limited(PARSE_TIMEOUT, lambda: math_verify.parse(text, parsing_timeout=None), [])


def verify(gold: list, pred: list) -> bool:
    """Math-Verify's verdict under the CPU-time limit (False when it runs out, as Math-Verify does)."""
    import math_verify

    return limited(VERIFY_TIMEOUT, lambda: bool(math_verify.verify(gold, pred, timeout_seconds=None)), False)


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
    if text is None or len(text) > MAX_CHARS:
        return Reading(None, False)
    pred = parse(text)
    if not pred:
        return Reading(None, False)
    gold = list(parse_reference(str(reference)))
    return Reading(answer_text(pred), bool(gold) and verify(gold, pred))


@reader("math_verify")
class MathVerifyFull(Reader):
    slow = True

    def extract(self, response: str, request: str | None = None) -> str | None:
        return answer_text(parse(response)) if len(response) <= MAX_CHARS else None

    def __call__(self, response: str, reference: str, request: str | None = None) -> Reading:
        return verify_text(response, reference)
