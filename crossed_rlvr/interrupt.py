"""Ctrl-C ends every command with one line that says how to go on, never a traceback; so does a
file-system error that names its path (a full or read-only disk: exit 1; a path that cannot be used: exit 2),
and bad input (``crossed_rlvr.errors.CrossedError``: exit 2).

A terminal's Ctrl-C reaches the whole foreground process group: the command's own worker processes
ignore it (``ignore_interrupts`` as their initializer) and are stopped by their parent, which prints the
one line. Exit status 130, the shell's convention for a SIGINT.
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from crossed_rlvr.errors import BAD_INPUT, CrossedError
from crossed_rlvr.faults import MachineFault

F = TypeVar("F", bound=Callable[..., Any])

# How each command goes on after an interruption: what it keeps and what a rerun does.
RESUME = {
    "crossed-score": "run the same command again: the chunks already scored are kept and the rest scored "
                     "(the table is written only when complete)",
    "crossed-eval": "run the same command again: finished response files are kept, the rest generated",
    "crossed-study": "run the same command again: every finished stage is reused",
    "crossed-train": "run the same command again: the arm starts again from its initial policy",
    "crossed-sft": "run the same command again: a model is saved only when complete, so it starts again",
    "crossed-analyze": "run the same command again: nothing is written until the analysis is complete",
    "crossed-import": "run the same command again: the output is written only when complete",
    "crossed-calibrate": "run the same command again: every saved label is kept",
    "crossed-rescore": "run the same command again: the output is written only when complete",
    "crossed-match": "run the same command again",
    "crossed-rlvr": "run the same command again",
}


def ignore_interrupts() -> None:
    """Initializer of worker processes: the parent handles Ctrl-C and stops them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stops_cleanly(command: str, quiet: bool = False) -> Callable[[F], F]:
    """Wrap a command's ``main``: a KeyboardInterrupt becomes one line on stderr and exit status 130.
    ``quiet`` for worker programs whose parent prints the line."""

    def wrap(main: F) -> F:
        @functools.wraps(main)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return main(*args, **kwargs)
            except CrossedError as err:  # bad input: its one line (errors.py)
                if quiet:
                    raise
                print(f"{command}: {err}", file=sys.stderr, flush=True)
                raise SystemExit(BAD_INPUT) from None
            except MachineFault as err:  # a fault of the machine (faults.py): one line, exit 1
                if quiet:
                    raise
                print(f"{command}: {err}", file=sys.stderr, flush=True)
                raise SystemExit(1) from None
            except KeyboardInterrupt:
                if not quiet:
                    print(f"{command}: interrupted; {RESUME.get(command, 'run the same command again')}.",
                          file=sys.stderr, flush=True)
                raise SystemExit(130) from None
            except OSError as err:  # a file-system error with its path (full or read-only disk, a bad path)
                if quiet or err.filename is None:
                    raise
                from crossed_rlvr.files import describe_os_error

                line, status = describe_os_error(err)
                print(f"{command}: {line}", file=sys.stderr, flush=True)
                raise SystemExit(status) from None

        return run  # type: ignore[return-value]

    return wrap
