"""One set of weights the project evaluates, with the facts the crossed design reads of it (paper 001 §2): the
initial model, an arm's final policy or one of its checkpoints, or a policy trained elsewhere.

The same :class:`Policy` goes from the study's plan to the report: the study's stamps store it
(:meth:`Policy.record`), ``crossed-eval`` reads its config's ``policies`` into it once, where the command starts
(:meth:`Policy.from_entry`), every response record carries its facts (:meth:`Policy.facts`), the evaluation's
``run.json`` keeps it beside its weights hash (:meth:`Policy.entry`), and the importers make one from their flags.
No stage reads a fact back from a policy's name: the name is only a name. Records, stamps and configs written
before the method and checkpoint were stored are read with ``names.legacy_policy_parts``, the one reader of an
old name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from crossed_rlvr.names import (
    INITIAL,
    checkpoint_name,
    checkpoint_step,
    legacy_policy_parts,
    policy_name,
    step_checkpoint,
)


def weights_of(path: str, hash_tree: Callable[[str], str]) -> str:
    """What identifies a policy's weights in a fingerprint: the sha256 of a local folder's files (``hash_tree``),
    or a hub name as it stands (nothing local to hash)."""
    return hash_tree(path) if Path(path).exists() else path


@dataclass(frozen=True)
class Policy:
    """One set of weights and what the crossed design needs to know of it."""

    name: str
    path: str  # a local folder, or a hub name
    convention: str = INITIAL  # its training convention; ``initial`` for the initial policy
    seed: int | None = None  # its training seed; None for the initial policy
    method: str = INITIAL  # ``initial``, ``grpo``, ``sft``, or the method of a policy trained elsewhere
    checkpoint: str = ""  # empty for an arm's final policy; ``step<K>`` for its checkpoint of update K
    weights: str = ""  # :func:`weights_of` its path, once hashed (:meth:`hashed`); empty until then

    @classmethod
    def initial(cls, path: str | Path) -> Policy:
        return cls(INITIAL, str(path))

    @classmethod
    def trained(cls, method: str, convention: str, seed: int, path: str | Path) -> Policy:
        """An arm's final policy, named by ``names.policy_name`` (``grpo-hash/s83``)."""
        return cls(policy_name(method, convention, int(seed)), str(path), convention, int(seed), method)

    @property
    def step(self) -> int | None:
        """K of a ``step<K>`` checkpoint; None for a final policy."""
        return checkpoint_step(self.checkpoint)

    def at_step(self, step: int, path: str | Path | None = None) -> Policy:
        """This arm's checkpoint of update ``step`` (named ``<arm>@step<K>``), at ``path`` (default: the same)."""
        return replace(self, name=checkpoint_name(self.name, step), checkpoint=step_checkpoint(step),
                       path=self.path if path is None else str(path), weights="")

    def hashed(self, hash_tree: Callable[[str], str]) -> Policy:
        """The policy with its :attr:`weights` taken (``hash_tree``: a folder's sha256, e.g. ``Stamps.hash``)."""
        return replace(self, weights=weights_of(self.path, hash_tree))

    def facts(self) -> dict[str, Any]:
        """What a response record stores of its policy (docs/formats.md), in the records' key order."""
        return {"policy": self.name, "training_convention": self.convention, "train_seed": self.seed,
                "method": self.method, "checkpoint": self.checkpoint}

    def identity(self) -> dict[str, Any]:
        """Name, convention and seed, as a stage's fingerprint and a cell's settings hold them (the keys they have
        always held, so a finished stage or cell is reused)."""
        return {"name": self.name, "training_convention": self.convention, "train_seed": self.seed}

    def cell_settings(self) -> dict[str, Any]:
        """What a crossed-eval cell's settings record of its policy: :meth:`identity` with its path."""
        return {"name": self.name, "path": self.path, "training_convention": self.convention,
                "train_seed": self.seed}

    def entry(self) -> dict[str, Any]:
        """The policy as a crossed-eval config lists it, and as the evaluation's ``run.json`` keeps it: every fact,
        so :meth:`from_entry` gives it back whole."""
        return {**self.cell_settings(), "method": self.method, "checkpoint": self.checkpoint}

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any], name: str | None = None) -> Policy:
        """A crossed-eval config's entry (or a ``run.json`` policy, keyed by ``name``). An entry that does not give
        its method (written before it was stored) has it read from its name (``names.legacy_policy_parts``)."""
        name = str(entry["name"] if name is None else name)
        seed = entry.get("train_seed")
        return cls.given(name, str(entry["path"]), str(entry.get("training_convention") or INITIAL),
                         None if seed is None else int(seed), entry.get("method"), entry.get("checkpoint"))

    @classmethod
    def given(cls, name: str, path: str, convention: str, seed: int | None, method: str | None = None,
              checkpoint: str | None = None) -> Policy:
        """A policy given by its facts (a config's entry, an importer's flags); a method not given is read from an
        old name (``names.legacy_policy_parts``), as are a checkpoint not given beside it."""
        if method is None:
            method, old = legacy_policy_parts(name, convention)
            checkpoint = old if checkpoint is None else checkpoint
        return cls(name, path, convention, seed, str(method), str(checkpoint or ""))

    def record(self) -> dict[str, Any]:
        """What a study's stage stamp keeps of it (keyed by its name, beside the arm's training figures)."""
        out = {"path": self.path, "convention": self.convention, "seed": self.seed, "method": self.method,
               "checkpoint": self.checkpoint}
        return {**out, "weights": self.weights} if self.weights else out

    @classmethod
    def from_record(cls, name: str, record: Mapping[str, Any]) -> Policy:
        """A policy read back from a stamp; a stamp written before the method was stored has it read from the
        arm's name (``names.legacy_policy_parts``)."""
        seed = record.get("seed")
        policy = cls.given(name, str(record["path"]), str(record["convention"]), None if seed is None else int(seed),
                           record.get("method"), record.get("checkpoint"))
        return replace(policy, weights=str(record.get("weights") or ""))
