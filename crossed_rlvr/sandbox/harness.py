"""The program that runs inside the sandbox: it defines a sample's code, calls its entry point on each input and
writes each output, encoded, to the results pipe (file descriptor 3). It gives no verdict: the scoring process
compares the outputs with the expected ones outside the sandbox, so code that prints "passed", or forges a results
line, gains nothing it could not gain by computing the right answer.

Standard library only, and no project import: the sandbox runs Debian's system ``python3 -I -S`` (an interpreter
an unprivileged uid can read), which sees nothing of the project's environment. The scoring process imports
:func:`encode` and :func:`decode` from here, so both ends speak one codec.

Job (the file the second argument names, ``/job/job.json`` as the sandbox mounts it): ``code``, ``entry_point``,
``inputs`` (encoded argument lists; or ``inputs_file``, a read-only file that holds them), ``time_limits``
(seconds, one per input). Results, one JSON object per line:
``{"ready": 1}`` before the sample's code runs (its absence means the sandbox itself failed), ``{"defined": 1}``
once it is defined (the scorer's clock of the first input starts there), then per input ``{"i": k, "out": ...,
"s": seconds}`` or ``{"i": k, "error": kind}`` with kind ``define`` (the code did not define the entry point),
``exception``, ``timeout``, ``memory`` or ``encode``; the harness stops at the first error, as EvalPlus's fast
check does. Every line after the ready line is the sample's to forge: the scorer trusts none of them beyond what
matching the expected output proves, and times each input itself, from outside.

Recording (``test`` in the job: a dataset's own test script, such as HumanEval's ``def check(candidate): assert
...``, run only on the dataset's canonical solution): the script's ``check`` is called with a stand-in for the entry
point that writes each call's arguments (``"in"``, encoded before the call, which may change them) with its output;
``random`` is seeded first, so scripts that draw inputs at random draw the same ones every time. A failed assertion
ends the run with ``{"error": "check"}``. Samples are then run on the recorded inputs, their outputs compared
outside: the test script itself never runs beside model code.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from types import FrameType

RESULTS_FD = 3  # the default; the sandbox passes the pipe's number as the first argument, the job file as the second
SITE = "/site"  # the read-only folder of the packages a sample may import (numpy), where one was installed


# ---------------------------------------------------------------- codec
# JSON with tags for what JSON cannot say: tuples, sets, dicts with other keys, non-finite floats, complex numbers,
# bytes, and the numbers that equal a Python number under ``==`` as EvalPlus compares (numpy scalars, Fraction,
# Decimal). Anything else is carried as its type name and repr, and equals nothing but an identical stand-in.

MAX_SAME_HASH = 64  # elements of one decoded set or dict that may share a hash (see _hashable)


def encode(x: Any, depth: int = 0) -> Any:  # Any: a sample's value, read by its type's name (numpy's, no import)
    if depth > 200:
        raise ValueError("nested too deeply")
    if type(x) in (int, float, bool, str, list, tuple, dict, set, frozenset, complex, bytes, bytearray, type(None)):
        pass
    elif type(x).__module__ == "numpy" and type(x).__name__ in NUMPY_SCALARS:
        x = NUMPY_SCALARS[type(x).__name__](x)  # numpy.int64(3) == 3, as EvalPlus's == says
    elif type(x).__module__ == "fractions" and type(x).__name__ == "Fraction":
        return {"t": "fraction", "v": [str(x.numerator), str(x.denominator)]}
    elif type(x).__module__ == "decimal" and type(x).__name__ == "Decimal":
        return {"t": "decimal", "v": str(x)}
    if isinstance(x, int) and not isinstance(x, bool) and x.bit_length() > 4000:
        return {"t": "int", "v": hex(x)}  # past the decimal digits json may write or read
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"t": "float", "v": repr(x)}
    if isinstance(x, list):
        return [encode(v, depth + 1) for v in x]
    if isinstance(x, tuple):
        return {"t": "tuple", "v": [encode(v, depth + 1) for v in x]}
    if isinstance(x, (set, frozenset)):
        items = [encode(v, depth + 1) for v in x]
        return {"t": type(x).__name__ if type(x) in (set, frozenset) else "set", "v": items}
    if isinstance(x, dict):
        return {"t": "dict", "v": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    if isinstance(x, complex):
        return {"t": "complex", "v": [encode(x.real), encode(x.imag)]}
    if isinstance(x, (bytes, bytearray)):
        return {"t": "bytes", "v": x.hex()}
    return {"t": "other", "v": [type(x).__name__, repr(x)[:1000]]}


# numpy's scalar types by name (numpy is never imported here): the Python number each converts to exactly
NUMPY_SCALARS = {**{f"{p}int{b}": int for p in ("", "u") for b in (8, 16, 32, 64)},
                 **{f"float{b}": float for b in (16, 32, 64)}, "bool_": bool, "bool": bool, "longlong": int,
                 "ulonglong": int, "intc": int, "uintc": int, "double": float, "single": float, "half": float}


def _hashable(items: list) -> list:
    """Items about to be hashed into one set or dict, refused when more than MAX_SAME_HASH of them share a hash:
    Python's ints hash alike modulo 2**61 - 1, so a set of such multiples costs quadratic time to build (40,000 of
    them took 19.5 s), and a thread cannot be stopped in the middle of it. Counting the hashes costs linear time:
    distinct hash values never collide as dict keys."""
    counts: dict = {}
    for h in map(hash, items):
        n = counts[h] = counts.get(h, 0) + 1
        if n > MAX_SAME_HASH:
            raise ValueError("too many elements with one hash")
    return items


class Other:
    """A value of a type the codec does not carry: equal only to a stand-in of the same type and repr."""

    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Other) and (self.name, self.text) == (other.name, other.text)

    def __hash__(self) -> int:
        return hash((self.name, self.text))

    def __repr__(self) -> str:
        return f"<{self.name} {self.text}>"


def decode(x: object) -> Any:  # the value an encoded JSON value stands for: any Python value
    if isinstance(x, list):
        return [decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    tag = x.get("t")
    v: Any = x.get("v")  # a tag's payload, of the shape its tag says
    if tag == "float":
        return float(v)
    if tag == "int":
        return int(v, 16)
    if tag == "tuple":
        return tuple(decode(i) for i in v)
    if tag == "set":
        return set(_hashable([decode(i) for i in v]))
    if tag == "frozenset":
        return frozenset(_hashable([decode(i) for i in v]))
    if tag == "dict":
        pairs = [(decode(k), decode(val)) for k, val in v]
        _hashable([k for k, _ in pairs])
        return dict(pairs)
    if tag == "fraction":
        from fractions import Fraction

        return Fraction(int(v[0]), int(v[1]))
    if tag == "decimal":
        from decimal import Decimal

        return Decimal(str(v))
    if tag == "complex":
        return complex(decode(v[0]), decode(v[1]))
    if tag == "bytes":
        return bytes.fromhex(v)
    if tag == "other":
        return Other(str(v[0]), str(v[1]))
    raise ValueError(f"unknown tag {tag!r}")


# ---------------------------------------------------------------- the run

class _Timeout(BaseException):
    """Raised by the interval timer; a BaseException so that a sample's ``except Exception`` cannot swallow it."""


def _alarm(signum: int, frame: FrameType | None) -> NoReturn:
    raise _Timeout


def main() -> None:
    out = os.fdopen(int(sys.argv[1]) if len(sys.argv) > 1 else RESULTS_FD, "w", buffering=1)

    def say(obj: dict[str, object]) -> None:
        out.write(json.dumps(obj) + "\n")

    with open(sys.argv[2], encoding="utf-8") as fh:  # the job file, as the sandbox mounts it
        job = json.load(fh)
    if "inputs_file" in job:  # shared by every sample of the task (Sandbox.shared)
        with open(job["inputs_file"], encoding="utf-8") as fh:
            job["inputs"] = json.load(fh)
    inputs = [decode(i) for i in job["inputs"]]
    if os.path.isdir(SITE):  # numpy, as EvalPlus's samples have it (sandbox/site.py); nothing else is importable
        sys.path.append(SITE)
    say({"ready": 1})
    # the sample's prints go nowhere; what it writes to fd 3 itself is checked (and distrusted) outside
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    # EvalPlus's stack limit, set as EvalPlus sets it: in the running process, up to its address-space limit (set
    # before exec, glibc would give every new thread a stack that size, and the first thread would not fit)
    import resource

    memory = resource.getrlimit(resource.RLIMIT_AS)[0]
    if memory != resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_STACK, (memory, memory))
    signal.signal(signal.SIGALRM, _alarm)
    scope: dict = {"__name__": "__sample__"}
    try:
        signal.setitimer(signal.ITIMER_REAL, float(job.get("define_limit", 10.0)))
        exec(job["code"], scope)  # inside the operating-system sandbox, the only place model code runs
        signal.setitimer(signal.ITIMER_REAL, 0)
        fn = scope[job["entry_point"]]
        say({"defined": 1})
    except _Timeout:
        say({"i": 0, "error": "timeout"})
        return
    except MemoryError:
        say({"i": 0, "error": "memory"})
        return
    except BaseException:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too: the sample failed, not us
        signal.setitimer(signal.ITIMER_REAL, 0)
        say({"i": 0, "error": "define"})
        return
    if "test" in job:
        _record(job, fn, scope, say)
        return
    for k, (args, limit) in enumerate(zip(inputs, job["time_limits"])):
        try:
            signal.setitimer(signal.ITIMER_REAL, float(limit))
            began = time.perf_counter()
            value = fn(*args)
            took = time.perf_counter() - began
            signal.setitimer(signal.ITIMER_REAL, 0)
        except _Timeout:
            say({"i": k, "error": "timeout"})
            return
        except MemoryError:
            signal.setitimer(signal.ITIMER_REAL, 0)
            say({"i": k, "error": "memory"})
            return
        except BaseException:  # noqa: BLE001
            signal.setitimer(signal.ITIMER_REAL, 0)
            say({"i": k, "error": "exception"})
            return
        try:
            line = json.dumps({"i": k, "out": encode(value), "s": round(took, 6)})
        except BaseException:  # noqa: BLE001 - an output the codec cannot carry (a cycle, say) fails the input
            say({"i": k, "error": "encode"})
            return
        out.write(line + "\n")


def _record(job: dict[str, Any], fn: Callable[..., object], scope: dict[str, Any],
            say: Callable[[dict[str, object]], None]) -> None:
    """Call the test script's ``check`` on a stand-in for ``fn`` that records every call (dataset code only)."""
    calls: list = []

    def candidate(*args: object) -> object:
        k = len(calls)
        calls.append(k)
        shown = encode(copy.deepcopy(list(args)))
        began = time.perf_counter()
        value = fn(*args)
        say({"i": k, "in": shown, "out": encode(value), "s": round(time.perf_counter() - began, 6)})
        return value

    try:
        signal.setitimer(signal.ITIMER_REAL, float(job.get("define_limit", 10.0)))
        exec(job["test"], scope)
        random.seed(0)
        scope["check"](candidate)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException as err:  # noqa: BLE001 - whatever stopped the script, the reference did not pass it
        signal.setitimer(signal.ITIMER_REAL, 0)
        say({"i": len(calls), "error": "check", "why": f"{type(err).__name__}: {err}"[:500]})


if __name__ == "__main__":
    main()
