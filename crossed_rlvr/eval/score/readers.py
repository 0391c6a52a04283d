"""The reader panel: fixed functions from response text to an answer or nothing (paper 001 §2.2).

Each reader is a small registered unit (lm-eval-harness filter style), looked up by name. A reader
returns a :class:`Reading`: the answer it extracted (``None`` = bottom) and whether that answer is
credited against the reference. Readers are frozen: never tuned on outputs, never evaluate text
as code.

Evaluation readers (App. C.1, B.2):
- ``strict_first_hash`` / ``strict_last_hash``: first / last ``####`` followed by a number.
- ``lenient_hash_fallback``: the strict answer, else the last number (satisfies A1 by construction).
- ``last_number``: the last number anywhere.
- ``boxed_first`` / ``boxed_last``: the first / last balanced box, then its last numeric token.
- ``lenient_boxed_fallback``: the ``boxed_first`` answer, else the last number (A1 by construction).
- ``json_first`` / ``xml_first``: the first JSON / XML answer payload, numeric (boundary study).
- ``math_verify`` / ``math_verify_payload``: see :mod:`crossed_rlvr.eval.score.mathverify`.
- ``reward_<convention>``: each training reward program read as a reader (App. D.1 re-scoring).

Numeric readers compare GSM8K-style with tolerance 1e-3.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from crossed_rlvr import text as tx
from crossed_rlvr.rewards.programs import REWARD_PROGRAMS, RewardProgram


@dataclass(frozen=True)
class Reading:
    answer: str | None
    correct: bool


class Reader:
    """Base reader: ``extract`` the answer, credit it with numeric comparison."""

    name: str = ""
    # Readers that must run in a worker process with a hard time limit (Math-Verify).
    slow: bool = False
    # Readers of symbolic (MATH-style) answers only: skipped for a response of another task.
    symbolic_only: bool = False

    def extract(self, response: str, request: str | None = None) -> str | None:
        raise NotImplementedError

    def __call__(self, response: str, reference: str, request: str | None = None) -> Reading:
        answer = self.extract(response, request)
        return Reading(answer, tx.numeric_equal(answer, reference))


READERS: dict[str, Reader] = {}


def register(reader: Reader) -> Reader:
    if not reader.name or reader.name in READERS:
        raise ValueError(f"reader name {reader.name!r} is empty or already registered")
    READERS[reader.name] = reader
    return reader


def get_reader(name: str) -> Reader:
    try:
        return READERS[name]
    except KeyError:
        raise KeyError(f"unknown reader {name!r}; registered: {', '.join(READERS)}") from None


def reader(name: str) -> Callable[[type[Reader]], type[Reader]]:
    """Class decorator: instantiate and register a reader under ``name``."""

    def wrap(cls: type[Reader]) -> type[Reader]:
        cls.name = name
        register(cls())
        return cls

    return wrap


@reader("strict_first_hash")
class StrictFirstHash(Reader):
    def extract(self, response: str, request: str | None = None) -> str | None:
        found = tx.hash_numbers(response)
        return found[0] if found else None


@reader("strict_last_hash")
class StrictLastHash(Reader):
    def extract(self, response: str, request: str | None = None) -> str | None:
        found = tx.hash_numbers(response)
        return found[-1] if found else None


@reader("lenient_hash_fallback")
class LenientHashFallback(Reader):
    def extract(self, response: str, request: str | None = None) -> str | None:
        found = tx.hash_numbers(response)
        return found[0] if found else tx.last_number(response)


@reader("last_number")
class LastNumber(Reader):
    def extract(self, response: str, request: str | None = None) -> str | None:
        return tx.last_number(response)


@reader("boxed_first")
class BoxedFirst(Reader):
    def extract(self, response: str, request: str | None = None) -> str | None:
        spans = tx.box_spans(response)
        return tx.box_number(response, spans[0] if spans else None)


@reader("boxed_last")
class BoxedLast(Reader):
    def extract(self, response: str, request: str | None = None) -> str | None:
        spans = tx.box_spans(response)
        return tx.box_number(response, spans[-1] if spans else None)


_JSON_ANSWER = re.compile(r'\{\s*+"answer"\s*+:\s*+"?\s*+([^"{}\n]*+)')
_XML_ANSWER = re.compile(r"<answer>([^<]*+)</answer>")


@reader("lenient_boxed_fallback")
class LenientBoxedFallback(Reader):
    """The boxed analogue of the hash-first/fallback reader: A1 holds by construction (§2.2)."""

    def extract(self, response: str, request: str | None = None) -> str | None:
        spans = tx.box_spans(response)
        answer = tx.box_number(response, spans[0] if spans else None)
        return answer if answer is not None else tx.last_number(response)


@reader("json_first")
class JsonFirst(Reader):
    def extract(self, response: str, request: str | None = None) -> str | None:
        m = _JSON_ANSWER.search(response) if '"answer"' in response else None
        return tx.last_number_in(m.group(1)) if m else None


@reader("xml_first")
class XmlFirst(Reader):
    def extract(self, response: str, request: str | None = None) -> str | None:
        m = _XML_ANSWER.search(response) if "<answer>" in response else None
        return tx.last_number_in(m.group(1)) if m else None


class RewardReader(Reader):
    """A training reward program read as a reader: its payload and its exact-string verdict."""

    def __init__(self, program: RewardProgram) -> None:
        self.program = program
        self.name = f"reward_{program.name}"

    def extract(self, response: str, request: str | None = None) -> str | None:
        return self.program.extract(response)

    def __call__(self, response: str, reference: str, request: str | None = None) -> Reading:
        answer, score = self.program.read(response, reference)
        return Reading(answer, score == 1.0)


for _program in REWARD_PROGRAMS.values():
    register(RewardReader(_program))

# The reader maps, owned here and used by scoring, the scores-table checks, validation and the analysis.
# The frozen requested-convention (strict) reader per request: extractability q_c = Pr[reader returns a value].
STRICT: dict[str, str] = {"hash": "strict_first_hash", "boxed": "boxed_first", "json": "json_first", "xml": "xml_first"}
# The lenient reader per request (the strict answer, else a fallback: A1 by construction).
LENIENT: dict[str, str] = {"hash": "lenient_hash_fallback", "boxed": "lenient_boxed_fallback"}
# Tasks whose answers are symbolic (MATH500): task-aware readers (App. B.4, D.3.1), see symbolic.is_symbolic_task.
SYMBOLIC_STRICT: dict[str, str] = {"hash": "math_strict", "boxed": "math_strict"}
SYMBOLIC_LENIENT: dict[str, str] = {"hash": "math_lenient", "boxed": "math_lenient"}
SYMBOLIC_PAYLOAD: dict[str, str] = {"hash": "payload_any.hash", "boxed": "payload.boxed"}
