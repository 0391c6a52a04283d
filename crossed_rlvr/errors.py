"""The error contract of every command.

An input a command cannot use (a setting, a config, a file's line or field) raises a subclass of ``CrossedError``
whose message says what is wrong and how to fix it; every command prints it as one line, ``<command>: <message>``,
on stderr and exits with ``BAD_INPUT`` (2), the status argparse and Hydra give a bad command line. A run that went
wrong in a way its message explains (matched arms that turn out not to be matched) raises a subclass of
``RunFailure``: one line the same way, and exit ``RUN_FAILED`` (1). Anything else is a failure of the run or a bug
and keeps its own status (a traceback for a bug).
"""

from __future__ import annotations

BAD_INPUT = 2
RUN_FAILED = 1


class CrossedError(Exception):
    """Bad input, said in one line: the command exits with ``BAD_INPUT``."""


class ConfigError(CrossedError, ValueError):
    """A config value that no stage could run with; the message starts with the dotted key."""


class RecipeError(CrossedError, ValueError):
    """A GRPO recipe that cannot train (raised before any model is loaded)."""


class RunFailure(Exception):
    """A run that failed in a way its message explains, said in one line: the command exits with ``RUN_FAILED``.
    Library code raises it instead of ``SystemExit``, so a caller (the GPU smoke's stages) can catch it without
    catching an interrupt or an exit."""
