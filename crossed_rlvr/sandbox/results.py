"""What comes back from one sandboxed run: the harness's result lines, read as the sample's to forge.

The harness writes its ready line before the sample's code runs; everything after it may be the sample's own
writing, to the results pipe or to any descriptor it finds. So each line is read under a byte cap, parsed as the
sample's (any error is that sample's failure, never the scorer's), handed to the caller's judge (whose errors
are the sample's too), and each input is timed here, from outside the sandbox.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Run:
    """What came back from one run: the results lines after the harness's ready line, and how the run ended.
    ``ended`` is ``exited`` (the harness ran to its end or the code ended it), ``stopped`` (the caller stopped it
    early), ``wall`` (killed at the wall-clock limit), ``output`` (it wrote more than the cap) or ``sandbox-error``
    (no ready line: the sandbox itself failed, and ``detail`` holds its stderr)."""

    ended: str
    lines: list[dict[str, Any]] = field(default_factory=list)
    bad_line: bool = False
    returncode: int | None = None
    detail: str = ""
    seconds: float = 0.0


class Results:
    """The harness's result lines as they arrive through the pipe: the first must be its ready line, each later one
    a JSON object. Everything after the ready line is the sample's to forge, so nothing it writes may cost more
    than its own verdict: a line longer than ``line_cap`` bytes, one that does not parse (5,000 ``[`` raise
    RecursionError in ``json``) or one that makes ``stop`` raise ends the run as a broken line, and each input is
    timed here, from outside (``input_limits``: the clock of input k starts when line k - 1, or the ``defined``
    line, has been read). Lines are kept only when no ``stop`` reads them as they come (the canonical solution's
    runs): a sample's outputs are judged and dropped."""

    def __init__(self, run: Run, stop: Callable[[dict[str, Any]], bool] | None, line_cap: int,
                 input_limits: Sequence[float] | None = None) -> None:
        self.run, self.stop, self.line_cap = run, stop, line_cap
        self.limits = list(input_limits) if input_limits is not None else None
        self.buf = bytearray()
        self.ready = False
        self.answered = 0
        self.clock = 0.0  # when the current input's time began (monotonic)

    def deadline(self) -> float | None:
        """When the current input's time is up (its limit with room for the harness's own encoding and writing),
        or None before the sample is defined or without per-input limits."""
        if self.limits is None or not self.clock or self.answered >= len(self.limits):
            return None
        return self.clock + input_wall(self.limits[self.answered])

    def feed(self, chunk: bytes) -> bool:
        """Take one chunk; True when the run is to end (a line that breaks the protocol, an input past its time, or
        ``stop`` said so)."""
        self.buf += chunk
        if b"\n" not in chunk:  # no line ended: nothing to split (a long line is not rescanned)
            if len(self.buf) > self.line_cap:
                return self._broken("a result line over the cap")
            return False
        *complete, rest = self.buf.split(b"\n")
        self.buf = bytearray(rest)
        for raw in complete:
            if len(raw) > self.line_cap:
                return self._broken("a result line over the cap")
            try:
                line = json.loads(raw)
            except Exception:  # noqa: BLE001 - ValueError, RecursionError, MemoryError: the sample's line
                return self._broken("an unreadable result line")
            if not isinstance(line, dict) or (not self.ready and line != {"ready": 1}):
                return self._broken("an unreadable result line")
            if not self.ready:
                self.ready = True
                continue
            if line == {"defined": 1}:
                self.clock = self.clock or time.monotonic()
                continue
            if (limit := self.deadline()) is not None and time.monotonic() > limit:
                self.run.ended = "input-timeout"
                return True
            if self.stop is None:
                self.run.lines.append(line)
            else:
                try:
                    done = bool(self.stop(line))
                except Exception:  # noqa: BLE001 - a line no judge can read is the sample's failure, never ours
                    return self._broken("a result line the judge could not read")
                if done:
                    self.run.ended = "stopped"
                    return True
            self.answered += 1
            self.clock = time.monotonic()
        if len(self.buf) > self.line_cap:
            return self._broken("a result line over the cap")
        return False

    def _broken(self, why: str) -> bool:
        self.run.bad_line, self.run.detail = True, why
        return True


def input_wall(limit: float) -> float:
    """An input's time measured from outside: its limit (which the harness's alarm enforces inside, unless the
    sample ignores the alarm) with a quarter more and half a second for encoding, writing and reading its line."""
    return 1.25 * float(limit) + 0.5
