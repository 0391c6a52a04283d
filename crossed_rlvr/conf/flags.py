"""Numeric command-line flags of the argparse commands, checked against declared ranges (issue 33).

``crossed-analyze --resamples 0`` once printed an empty interval as "includes 0"; ``--rng-seed -1`` ended
in a traceback. Each numeric flag is added with :func:`add_number`, which declares its
:class:`~crossed_rlvr.conf.schema.Range` (registered in ``FLAGS`` for the generated test) and converts
the text itself, and :class:`Parser` prints an error as one line, exit 2, before any work.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, NoReturn

from crossed_rlvr.conf.schema import Range

# prog -> flag -> (range, whole numbers only)
FLAGS: dict[str, dict[str, tuple[Range, bool]]] = {}


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (``prog: message``) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def add_number(parser: argparse.ArgumentParser, flag: str, low: float, high: float, *, integer: bool = True,
               low_open: bool = False, why: str = "", **kwargs: Any) -> None:
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
        if integer and not (math.isfinite(value) and float(value).is_integer()):
            raise argparse.ArgumentTypeError(f"{text}: expected {kind} in {rng.text()}")
        if not rng.admits(value):
            raise argparse.ArgumentTypeError(f"{text} is outside its range {rng.text()}{note}")
        return int(value) if integer else value

    convert.__name__ = kind  # argparse names the type in its own messages
    parser.add_argument(flag, type=convert, **kwargs)
