"""Declared roles of a calibration (paper 001 App. A: two annotators A and B, and adjudicators).

``roles.json`` in the calibration folder is written once (``crossed-calibrate annotate --annotators A,B
--adjudicator C``) and frozen: the A/B pair is the declared pair, never the first two names that happen to
lock a stage, and every person gets a secret link (a token). With roles declared, the server takes a
person's name from their token, never from a typed field: a third name cannot read Stage 2, A cannot
write B's labels, and only an adjudicator sees the adjudication queue.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from crossed_rlvr.calibration.sample import CalibrationError
from crossed_rlvr.layout import CalibrationLayout


@dataclass(frozen=True)
class Roles:
    annotators: tuple[str, str]
    adjudicators: tuple[str, ...]
    tokens: dict[str, str]  # token -> name

    def name_of(self, token: str | None) -> str | None:
        return self.tokens.get(token or "")

    def may(self, name: str, stage: str) -> bool:
        """Whether ``name`` may see and write ``stage`` (stage1, stage2: annotators; adjudication: adjudicators)."""
        return name in (self.adjudicators if stage == "adjudication" else self.annotators)

    def token_of(self, name: str) -> str:
        return next(t for t, n in self.tokens.items() if n == name)


def load_roles(folder: Path) -> Roles | None:
    path = CalibrationLayout(Path(folder)).roles
    if not path.exists():
        return None
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:  # its tokens are the links' only credentials: readable by others, anyone could label as anyone
        raise CalibrationError(f"{path}: readable by other users (mode {mode:o}); its tokens are the annotators' "
                               f"credentials. Run: chmod 600 {path}")
    data = json.loads(path.read_text())
    return Roles(tuple(data["annotators"]), tuple(data["adjudicators"]), dict(data["tokens"]))


def declare_roles(folder: Path, annotators: list[str], adjudicators: list[str]) -> Roles:
    """Write the roles once; the same declaration again returns them, another one is refused."""
    names = [*annotators, *adjudicators]
    if len(annotators) != 2:
        raise CalibrationError(f"--annotators {','.join(annotators)}: App. A's protocol has exactly two annotators")
    if not adjudicators:
        raise CalibrationError("--adjudicator: at least one adjudicator is needed for the disagreements")
    if any(not n or n != n.strip() or "," in n for n in names) or len(set(names)) != len(names):
        raise CalibrationError(f"roles {', '.join(names)}: names must be distinct, non-empty and without commas; "
                               "an adjudicator is never one of the two annotators")
    current = load_roles(folder)
    if current is not None:
        if (list(current.annotators), list(current.adjudicators)) != (annotators, adjudicators):
            raise CalibrationError(f"{CalibrationLayout(Path(folder)).roles}: roles are already declared (annotators "
                                   f"{', '.join(current.annotators)}; adjudicators {', '.join(current.adjudicators)}) "
                                   "and never change")
        return current
    roles = Roles((annotators[0], annotators[1]), tuple(adjudicators), {secrets.token_urlsafe(18): n for n in names})
    path = CalibrationLayout(Path(folder)).roles
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"annotators": annotators, "adjudicators": adjudicators, "tokens": roles.tokens},
                              indent=1) + "\n")
    os.chmod(tmp, 0o600)  # the links are the only credentials
    tmp.replace(path)
    return roles
