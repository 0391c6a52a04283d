"""Declared ranges of numeric settings, and the argparse commands' numeric flags.

A :class:`Range` is what a number may be: finite, within its bounds, with a note on what the bounds protect
(or what 0 means where 0 is admitted). The Hydra schemas (:mod:`crossed_rlvr.conf.schema`) attach one to
every numeric field; the records and scores checks use the decoding ranges; :func:`add_number` gives an
argparse flag its range and :class:`Parser` prints a refusal as one line, exit 2, before any work
(``crossed-analyze --resamples 0`` once printed an empty interval as "includes 0"). Standard library only:
every layer may import it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, overload

if TYPE_CHECKING:  # the checks of a scores table pass a column; nothing here imports numpy
    import numpy as np

# Seeds of torch, numpy and transformers' set_seed, which refuses seeds of 2**32 and above.
SEED = (0, 2**32 - 1)
BIG = 10**8  # counts of items, steps or tokens no machine gets near: a typo, not a setting


@dataclass(frozen=True)
class Range:
    """The values a numeric setting may take: within [low, high] (``low_open``: above low),
    whole for an integer field. The one declaration :mod:`crossed_rlvr.conf.ranges` checks every value against,
    from a preset file or from the command line; ``why`` says what the bounds protect."""

    low: float
    high: float
    low_open: bool = False
    why: str = ""

    def text(self) -> str:
        def show(v: float) -> str:
            if isinstance(v, int) and v >= 2**20 and (v + 1) & v == 0:
                return f"2**{(v + 1).bit_length() - 1} - 1"
            return f"{v:,}" if isinstance(v, int) else f"{v:g}"

        return f"{'(' if self.low_open else '['}{show(self.low)}, {show(self.high)}]"

    @overload
    def admits(self, value: float) -> bool: ...

    @overload
    def admits(self, value: np.ndarray) -> np.ndarray: ...

    def admits(self, value: float | np.ndarray) -> bool | np.ndarray:
        """Whether ``value`` lies in the range; elementwise on a numpy array. Comparisons only: NaN fails
        every one and the bounds are finite, so infinities fail too, and a huge int is never made a float."""
        return (value <= self.high) & ((value > self.low) if self.low_open else (value >= self.low))




@dataclass(frozen=True)
class Choices:
    """The values a string setting (each value of a list setting) may take, declared beside its field as a Range is:
    a fixed tuple, or a registry read when the value is checked (``among`` callable: the registered task sources,
    conventions, requests). ``nonempty``: a list setting needs at least one value."""

    among: Sequence[str | bool] | Callable[[], Iterable[str]]
    nonempty: bool = True

    def names(self) -> tuple[str | bool, ...]:
        return tuple(self.among() if callable(self.among) else self.among)

    def refusal(self, key: str, value: object) -> str | None:
        """One line naming the key and what it admits when ``value`` is not admitted (None, unset: admitted)."""
        if value is None:
            return None
        names = self.names()
        shown = ", ".join(str(a) for a in names if a is not False)  # YAML's `off` reads as False
        if not isinstance(value, list | tuple):
            return None if value in names else f"{key}={value!r} is unknown; expected one of {shown}"
        if self.nonempty and not value:
            return f"{key}=[] is empty; give at least one of {shown}"
        bad = [v for v in value if v not in names]
        return f"{key}: {', '.join(map(repr, bad))} unknown; expected among {shown}" if bad else None


@dataclass(frozen=True)
class Relation:
    """A rule between settings of one config section, declared on its schema beside its fields (a dataclass's
    ``relations``) and checked after every field's own range and choices (``conf.ranges.check_relations``): each
    setting in range, but not together. Keys are the section's own; a rule with an unset setting holds."""

    kind: str  # exceeds | at_most | divides (a divides b) | distinct (no value of list a twice) | some_positive
    a: str
    b: str = ""
    why: str = ""
    noun: str = ""  # distinct: what a value is called in the refusal ("seed ")

    def refusal(self, get: Callable[[str], Any], prefix: str) -> str | None:  # Any: the settings' values
        """One line naming both keys and their values where the rule does not hold, else None."""
        ka, kb, why = prefix + self.a, prefix + self.b, f" ({self.why})" if self.why else ""
        x, y = get(ka), get(kb) if self.b else None
        if x is None or (self.b and y is None):
            return None
        if self.kind == "exceeds" and x <= y:
            return f"{ka}={x} must exceed {kb}={y}{why}"
        if self.kind == "at_most" and x > y:
            return f"{ka}={x} must not exceed {kb}={y}{why}"
        if self.kind == "divides" and x and y and y % x:
            return f"{ka}={x} must divide {kb}={y}{why}"
        values = list(x) if self.kind in ("distinct", "some_positive") else []
        if self.kind == "distinct" and (twice := sorted({v for v in values if values.count(v) > 1})):
            return f"{ka}={values}: {self.noun}{twice[0]} appears twice{why}"
        if self.kind == "some_positive" and values and not sum(values) > 0:
            return f"{ka}={values}: the shares must not all be 0"
        return None


# Decoding of a response: the eval schema's fields and the records' optional fields (one definition).
DECODING: dict[str, Range] = {
    "temperature": Range(0.0, 10.0, why="0 is greedy decoding"),
    "top_p": Range(0.0, 1.0, low_open=True),
    "max_new_tokens": Range(1, 1_048_576),
}


# prog -> flag -> (range, whole numbers only)
FLAGS: dict[str, dict[str, tuple[Range, bool]]] = {}


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (``prog: message``) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def add_number(parser: argparse.ArgumentParser, flag: str, low: float, high: float, *, integer: bool = True,
               low_open: bool = False, why: str = "", **kwargs: Any) -> None:  # Any: argparse's add_argument
    """``parser.add_argument(flag, ...)`` for a number that must lie in the declared range."""
    rng = Range(low, high, low_open, why)
    FLAGS.setdefault(parser.prog, {})[flag] = (rng, integer)
    kind = "a whole number" if integer else "a number"
    note = f" ({why})" if why else ""

    def convert(text: str) -> int | float:
        try:
            value: float = int(text) if integer else float(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{text!r}: expected {kind} in {rng.text()}") from None
        if integer and isinstance(value, float) and not value.is_integer():  # NaN and infinities too
            raise argparse.ArgumentTypeError(f"{text}: expected {kind} in {rng.text()}")
        if not rng.admits(value):
            raise argparse.ArgumentTypeError(f"{text} is outside its range {rng.text()}{note}")
        return int(value) if integer else value

    convert.__name__ = kind  # argparse names the type in its own messages
    parser.add_argument(flag, type=convert, **kwargs)
