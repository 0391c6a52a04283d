"""The reader panel: fixed functions from response text to an answer or nothing (paper 001 §2.2).

Each reader is a small registered unit (lm-eval-harness filter style), looked up by name. A reader
returns a :class:`Reading`: the answer it extracted (``None`` = bottom) and whether that answer is
credited against the reference. Readers are frozen: never tuned on outputs, never evaluate text
as code.

Evaluation readers (App. C.1, B.2), each convention's own declared with it (``Convention.readers``):
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

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from crossed_rlvr.rewards import text as tx
from crossed_rlvr.rewards.conventions import Convention, LiveMap, RewardProgram, on_register, requests


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


class ConventionReader(Reader):
    """A convention's own reader (``Convention.readers``): its extraction, credited numerically."""

    def __init__(self, name: str, extract: Callable[[str], str | None]) -> None:
        self.name, self._extract = name, extract

    def extract(self, response: str, request: str | None = None) -> str | None:
        return self._extract(response)


class LastNumber(Reader):
    name = "last_number"

    def extract(self, response: str, request: str | None = None) -> str | None:
        return tx.last_number(response)


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


def _add_readers_of(conv: Convention) -> None:
    """A registered convention's readers, then its reward program's reader (a program shared by several
    conventions once; the symbolic program is read by the symbolic readers)."""
    for name, extract in conv.readers:
        if name not in READERS:
            register(ConventionReader(name, extract))
    if isinstance(conv.program, RewardProgram) and f"reward_{conv.program.name}" not in READERS:
        register(RewardReader(conv.program))


# The panel's columns in the order every scores table has had them: each request's readers (the last number after
# the first's), then the reward programs; a convention registered later adds its own at the end.
for _k, _conv in enumerate(requests()):
    for _name, _extract in _conv.readers:
        register(ConventionReader(_name, _extract))
    if _k == 0:
        register(LastNumber())
on_register(_add_readers_of)


def _by_request(pick: Callable[[Convention], str]) -> Mapping[str, str]:
    """A reader name per request, read from the registry (``Convention.strict``, ``.lenient``, ...)."""
    return LiveMap(lambda: {c.name: name for c in requests() if (name := pick(c))})


# The reader maps used by scoring, the scores-table checks, validation and the analysis.
# The frozen requested-convention (strict) reader per request: extractability q_c = Pr[reader returns a value].
STRICT: Mapping[str, str] = _by_request(lambda c: c.strict)
# The lenient reader per request (the strict answer, else a fallback: A1 by construction).
LENIENT: Mapping[str, str] = _by_request(lambda c: c.lenient)
# Tasks whose answers are symbolic (MATH500): task-aware readers (App. B.4, D.3.1), see symbolic.is_symbolic_task.
SYMBOLIC_STRICT: Mapping[str, str] = _by_request(lambda c: c.symbolic[0] if c.symbolic else "")
SYMBOLIC_LENIENT: Mapping[str, str] = _by_request(lambda c: c.symbolic[1] if c.symbolic else "")
SYMBOLIC_PAYLOAD: Mapping[str, str] = _by_request(lambda c: c.symbolic[2] if c.symbolic else "")
