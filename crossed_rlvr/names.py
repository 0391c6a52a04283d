"""The names of policies, one way to read and write them (paper 001 §2: policies are the initial model and
the arms trained from it, one per convention and seed).

- A **policy** is one set of weights that generates responses: ``initial``, or a trained one named
  ``<method>-<convention>/s<seed>``, e.g. ``grpo-hash/s83`` (GRPO rewarded for ``####``, seed 83) or
  ``sft-boxed/s1``.
- An **arm** is the training run that makes such a policy: ``grpo-hash`` is the arm family over seeds,
  ``grpo-hash/s83`` one arm; an arm's final policy carries the arm's name.
- A **checkpoint** is a policy an arm wrote on its way, named ``<arm>@step<K>`` (``grpo-hash/s83@step10``);
  the final policy has no checkpoint part. Names from elsewhere may carry any other checkpoint text after
  ``@`` (or after ``-``, the older spelling), which is kept as it is.
- A **pair** is what a crossed interaction compares within one seed: the arms of one method and seed that
  differ only in their convention, named ``<method>/s<seed>`` (``grpo/s83``), or ``<method>/mean`` for the
  mean over seeds, with the checkpoint after ``@``.

Only this module parses or formats these names; everything else holds a :class:`PolicyName` or asks it. A
policy's facts (method, convention, seed, checkpoint) travel with it (``policies.policy.Policy``): a name is read
for them only where something was written before they were stored (:func:`legacy_policy_parts`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from crossed_rlvr.rewards.conventions import MARKER_DROPPED, MARKER_PAIR

INITIAL = "initial"
# the methods a study trains: its own names are checked against the records' convention and seed
STUDY_METHODS = ("grpo", "sft")

_NAME = re.compile(r"(?P<method>[A-Za-z0-9_.]+)-(?P<convention>[a-z_]+)/s(?P<seed>\d+)"
                   r"(?:(?P<sep>[@-])(?P<checkpoint>.+))?")
# a name whose arm part need not split on the convention: read with the convention the records give
_LOOSE = re.compile(r"(?P<arm>[^/@]+)/s(?P<seed>\d+)(?:[@-](?P<checkpoint>.+))?")
_PAIR = re.compile(r"(?P<method>[^/@]+)/(?P<seed>[^/@]+)(?:@(?P<checkpoint>.+))?")
_STEP = re.compile(r"step(?P<step>\d+)")


@dataclass(frozen=True)
class PolicyName:
    """A trained policy's name, ``<method>-<convention>/s<seed>[@<checkpoint>]`` (module docstring)."""

    method: str
    convention: str
    seed: int
    checkpoint: str = ""
    sep: str = "@"  # "-" only in names read in the older spelling; kept so that a name reads back as given

    def __str__(self) -> str:
        tail = f"{self.sep}{self.checkpoint}" if self.checkpoint else ""
        return f"{self.method}-{self.convention}/s{self.seed}{tail}"

    @classmethod
    def parse(cls, text: str, convention: str | None = None) -> PolicyName | None:
        """The name's parts, or None for a name of another form (``initial``, a user's own name). With the
        ``convention`` its records give, a name whose arm part does not split on it is read too
        (``grpo_hash/s83``: method ``grpo``): the one reader of a policy name."""
        m = _NAME.fullmatch(text)
        if m is not None and convention in (None, m["convention"]):
            return cls(m["method"], m["convention"], int(m["seed"]), m["checkpoint"] or "", m["sep"] or "@")
        loose = _LOOSE.fullmatch(text) if convention not in (None, INITIAL) else None
        if loose is None:
            return None
        return cls(_method_of(loose["arm"], str(convention)), str(convention), int(loose["seed"]),
                   loose["checkpoint"] or "", "@")

    @property
    def step(self) -> int | None:
        """K of a ``@step<K>`` checkpoint; None for the final policy or another checkpoint text."""
        m = _STEP.fullmatch(self.checkpoint) if self.sep == "@" else None
        return int(m["step"]) if m else None

    def at_step(self, step: int) -> PolicyName:
        """The checkpoint this arm wrote at update ``step``."""
        return replace(self, checkpoint=step_checkpoint(step), sep="@")

    @property
    def is_study_name(self) -> bool:
        """A name a study gives: a study method, and no checkpoint other than ``@step<K>``."""
        return self.method in STUDY_METHODS and (not self.checkpoint or self.step is not None)

    @property
    def pair(self) -> str:
        """The crossed pair this policy belongs to: ``grpo/s83`` (``grpo/s83@step10`` for a checkpoint)."""
        return pair_name(self.method, self.seed, self.checkpoint)


def policy_name(method: str, convention: str, seed: int, step: int | None = None) -> str:
    """``grpo-hash/s83``, or ``grpo-hash/s83@step10`` with ``step``."""
    name = PolicyName(method, convention, int(seed))
    return str(name if step is None else name.at_step(step))


def legacy_policy_parts(policy: str, convention: str) -> tuple[str, str]:
    """(method, checkpoint) of a policy of the given training convention, read from its name: only for what was
    written before a policy's method and checkpoint were stored beside its name (response records and scores
    tables, stage stamps, crossed-eval configs and crossed-import's flags without a method). Everything made since
    carries a ``policies.policy.Policy``, whose facts are stored, never read from the name.

    ``grpo-hash/s83`` -> (grpo, ""), ``grpo-hash/s83@step50`` -> (grpo, step50); the older
    ``grpo-hash/s83-step50`` reads the same way, as does an arm joined with ``_`` (``grpo_hash/s83``). Any
    other name is its own checkpoint, so two differently named policies never share a slot of the crossed
    design by accident."""
    if convention == INITIAL:
        return INITIAL, ""
    named = PolicyName.parse(policy, convention)
    if named is None:
        return _method_of(policy, convention), policy
    return named.method, named.checkpoint


def _method_of(policy: str, convention: str) -> str:
    """``grpo-hash/s83`` -> ``grpo``: the arm family that pairs conventions within a seed."""
    if convention == INITIAL:
        return INITIAL
    arm = policy.split("/")[0]
    for sep in ("-", "_"):
        suffix = f"{sep}{convention}"
        if arm.endswith(suffix):
            return arm[: -len(suffix)] or "arm"
    return arm.replace(convention, "").strip("-_") or "arm"


def seed_slot(seed: int | str) -> str:
    """A pair's seed slot: ``s83`` for a training seed, ``mean`` or ``sd`` for a seed summary."""
    return f"s{seed}" if isinstance(seed, int) else str(seed)


def pair_name(method: str, seed: int | str, checkpoint: str = "") -> str:
    """``grpo/s83`` for a seed, ``grpo/mean`` (or ``grpo/sd``) over seeds; ``@<checkpoint>`` after either."""
    head = f"{method}/{seed_slot(seed)}"
    return f"{head}@{checkpoint}" if checkpoint else head


SUMMARIES = ("mean", "sd")  # the seed summaries' names in a pair's seed slot


def checkpoint_step(checkpoint: str) -> int | None:
    """K of a ``step<K>`` checkpoint; None for the final policy or another checkpoint text."""
    m = _STEP.fullmatch(checkpoint)
    return int(m["step"]) if m else None


@dataclass(frozen=True)
class PairName:
    """A pair's name, ``<method>/<seed>[@<checkpoint>]`` with ``<seed>`` ``s83``, ``mean`` or ``sd``."""

    method: str
    seed: str
    checkpoint: str = ""

    @classmethod
    def parse(cls, text: str) -> PairName | None:
        m = _PAIR.fullmatch(text)
        return None if m is None else cls(m["method"], m["seed"], m["checkpoint"] or "")

    def __str__(self) -> str:
        return pair_name(self.method, self.seed, self.checkpoint)

    @property
    def is_summary(self) -> bool:
        """A seed summary (``grpo/mean``, ``grpo/sd@step50``) rather than one seed's pair."""
        return self.seed in SUMMARIES

    @property
    def step(self) -> int | None:
        m = _STEP.fullmatch(self.checkpoint)
        return int(m["step"]) if m else None


def pair_of(name: str) -> PairName:
    """The parts of a pair name; a name without ``/`` is all method (its seed slot empty)."""
    found = PairName.parse(name)
    if found is not None:
        return found
    head, _, checkpoint = name.partition("@")
    method, _, seed = head.partition("/")
    return PairName(method, seed, checkpoint)


# the arms of the contrasts whose request does not name them (analysis/contrasts.py)
_FIXED_ARMS = {"attenuation_reward": MARKER_DROPPED, "attenuation_convention": MARKER_PAIR,
               "arm_to_arm_D": MARKER_PAIR, "arm_to_arm_D_sd": MARKER_PAIR}


def contrast_parts(name: str, policy: str, request: str) -> dict[str, str]:
    """The parts a contrasts row stores beside its ``policy`` (method, seed slot, checkpoint, the conventions of
    its arms), read back for a contrasts table written before they were stored. A policy's row (``initial``, a
    study's ``grpo-hash/s83``) has its own parts and its convention as ``arm_h``; a pair's (``grpo/s83``,
    ``grpo/mean@step10``) has its arms from its request (a pair label, ``hashxboxed``) or its contrast; one arm's
    ΔP seed summary (``grpo-hash/mean``) has the arm's convention after the method's last ``-``."""
    from crossed_rlvr.rewards.conventions import CROSSED_PAIRS, pair_label

    if policy == INITIAL:
        return {"method": INITIAL, "seed": "", "checkpoint": "", "arm_h": "", "arm_b": ""}
    named = PolicyName.parse(policy)
    if named is not None:
        return {"method": named.method, "seed": seed_slot(named.seed), "checkpoint": named.checkpoint,
                "arm_h": named.convention, "arm_b": ""}
    pair = pair_of(policy)
    labels = {pair_label(h, b): (h, b) for h, b in CROSSED_PAIRS}
    arms = _FIXED_ARMS.get(name) or labels.get(request) or labels.get(request.removesuffix(f"-{MARKER_DROPPED[1]}"), ("", ""))
    if name in ("delta_P", "delta_P_sd"):  # convention names hold no "-"
        arms = (pair.method.rsplit("-", 1)[-1], "")
    return {"method": pair.method, "seed": pair.seed, "checkpoint": pair.checkpoint, "arm_h": arms[0],
            "arm_b": arms[1]}


def step_checkpoint(step: int) -> str:
    """The checkpoint part of an arm's checkpoint of update ``step``: ``step10``."""
    return f"step{int(step)}"


def checkpoint_name(arm: str, step: int) -> str:
    """The name of the checkpoint an arm (any arm name, e.g. crossed-train's ``arm``) wrote at update ``step``."""
    return f"{arm}@{step_checkpoint(step)}"
