"""The boxed training reward for symbolic answers: native-``\\boxed{}`` MATH training (paper 001 App. D.3.1).

The paper trains a native-boxed MATH arm but does not print its reward program; this rule is ours
(docs/configs.md says so), built to agree with App. D.1's programs where they overlap:

- the window is the response's final 300 characters, as in App. D.1;
- the payload is the last ``\\boxed{...}`` that opens and closes inside the window, with balanced
  braces, so ``\\boxed{\\frac{1}{2}}`` is read whole (the GSM8K program forbids nested braces, which
  would leave every MATH answer with a brace unrewardable); ``\\{``/``\\}`` are literal braces;
- the payload and the reference are compared by Math-Verify (both parsed as LaTeX math, then
  ``verify``): 1.0 when equivalent, else 0.0. No numeric fallback and no other marker earns credit.

Math-Verify's own time limits use ``signal.alarm``, which works only in a main thread, and the trainer
calls its rewards from wherever it likes (TRL's main thread, verl's reward workers, a thread). So the
comparison runs in a worker process (pebble, spawned) under a hard limit enforced from outside: a
comparison that overruns (``9^{9^{9^{9^{9}}}}`` against 1) is killed, its worker replaced, and the
response earns 0.0. Nothing in the response is evaluated as code; sympy sees only what Math-Verify's
LaTeX parser built.
"""

from __future__ import annotations

import atexit
import os
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from crossed_rlvr.rewards import text as tx

WINDOW_CHARS = 300
PAYLOAD_MAX_CHARS = 4_000  # as the evaluation's symbolic readers: longer is not an answer
HARD_LIMIT_S = 10.0  # per comparison, parse and verify together (Math-Verify's own limits are 3 s + 3 s)
WORKERS = min(4, os.cpu_count() or 1)  # a batch of rollouts is compared in parallel (score_many)


def box_payloads(text: str) -> list[str]:
    """The content of every balanced ``\\boxed{...}`` of ``text`` that closes, in order of opening (the one
    balanced scanner, :func:`crossed_rlvr.rewards.text.box_spans`: escaped braces are literal)."""
    return [text[a:b] for a, b in tx.box_spans(text)]


def last_box(response: str) -> str | None:
    """The payload this reward compares: the last nonempty balanced box of the final 300 characters."""
    found = [p.strip() for p in box_payloads(response[-WINDOW_CHARS:])]
    found = [p for p in found if p]
    return found[-1] if found else None


def _equivalent(payload: str, reference: str) -> bool:
    """Math-Verify's verdict, in the worker process's main thread (so its own signal limits work too)."""
    from math_verify import parse, verify

    gold = parse(f"${reference}$") or parse(reference)
    pred = parse(f"${payload}$")
    return bool(gold) and bool(pred) and bool(verify(gold, pred))


class _Pool:
    """One spawned worker per process that uses the reward, made on first use and replaced when killed."""

    def __init__(self) -> None:
        self._pool: Any = None
        self._pid = -1
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                import multiprocessing

                from pebble import ProcessPool

                # spawn, not fork: the trainer holds torch's threads and CUDA, which a fork would copy
                self._pool = ProcessPool(max_workers=WORKERS, context=multiprocessing.get_context("spawn"))
                self._pid = os.getpid()
            return self._pool

    def stop(self) -> None:
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.stop()
                self._pool.join()
            self._pool = None


_POOL = _Pool()
atexit.register(_POOL.stop)


def equivalent_many(pairs: list[tuple[str, str]], limit_s: float | None = None) -> list[bool]:
    """Math-Verify's verdict on each (payload, reference), in parallel workers, each under the hard limit."""
    from pebble import ProcessExpired

    pool = _POOL.get()
    futures = [pool.schedule(_equivalent, args=pair, timeout=HARD_LIMIT_S if limit_s is None else limit_s)
               for pair in pairs]
    out = []
    for future in futures:
        try:
            out.append(bool(future.result()))
        except (FutureTimeout, ProcessExpired):
            out.append(False)  # killed at the limit (pebble replaces the worker): no credit, the trainer goes on
        except Exception:  # noqa: BLE001 - a parser error in the worker is an unreadable answer, not a crash
            out.append(False)
    return out


def equivalent(payload: str, reference: str, limit_s: float | None = None) -> bool:
    """Whether Math-Verify finds ``payload`` equivalent to ``reference`` within the hard limit (else False)."""
    return equivalent_many([(payload, reference)], limit_s)[0]


@dataclass(frozen=True)
class SymbolicBoxedProgram:
    """The ``boxed_math`` program, with the interface of :class:`crossed_rlvr.rewards.conventions.RewardProgram`."""

    name: str = "boxed_math"
    limit_s: float | None = None

    def candidates(self, response: str) -> list[str]:
        payload = last_box(response)
        return [] if payload is None else [payload]

    def read(self, response: str, reference: str) -> tuple[str | None, float]:
        answer = last_box(response)
        if answer is None or len(answer) > PAYLOAD_MAX_CHARS or not str(reference).strip():
            return answer, 0.0
        return answer, 1.0 if equivalent(answer, str(reference).strip(), self.limit_s) else 0.0

    def extract(self, response: str) -> str | None:
        return last_box(response)

    def score(self, response: str, reference: str) -> float:
        return self.read(response, reference)[1]

    def score_many(self, responses: list[str], references: list[str]) -> list[float]:
        """The rewards of a batch of rollouts, their comparisons run side by side."""
        answers = [last_box(r) for r in responses]
        todo = [(k, a, str(ref).strip()) for k, (a, ref) in enumerate(zip(answers, references, strict=True))
                if a is not None and len(a) <= PAYLOAD_MAX_CHARS and str(ref).strip()]
        verdicts = equivalent_many([(a, ref) for _k, a, ref in todo], self.limit_s)
        out = [0.0] * len(responses)
        for (k, _a, _ref), ok in zip(todo, verdicts, strict=True):
            out[k] = 1.0 if ok else 0.0
        return out
