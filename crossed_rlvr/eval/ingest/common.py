"""What every importer shares: the policy of the imported outputs (made once from the command's flags), the request
suffix found in a prompt, the reference answer of a target, and the lines of a JSON Lines file (paper 000 §2:
outputs made elsewhere)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossed_rlvr.files import Source, json_lines
from crossed_rlvr.names import PolicyName
from crossed_rlvr.policies.policy import Policy
from crossed_rlvr.records import ResponseFileError

_GSM8K_TARGET = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reference_from_target(target: object) -> str:
    """A GSM8K-style target ('... #### 1,234') becomes '1234'; anything else is kept as text."""
    text = str(target).strip()
    m = _GSM8K_TARGET.search(text)
    return m.group(1).replace(",", "").strip() if m else text


def given_policy(name: str, training_convention: str | None = None, train_seed: int | None = None,
                 method: str | None = None) -> Policy:
    """The policy whose outputs are imported, made once where the command starts: its convention and seed as
    :func:`policy_identity` settles them, its method as given (``--method``; else read from a name of the
    study's form, as crossed-import has always done). Outputs made elsewhere have no local weights: no path."""
    convention, seed = policy_identity(name, training_convention, train_seed)
    return Policy.given(name, "", convention, seed, method)


def policy_identity(policy: str, training_convention: str | None = None,
                    train_seed: int | None = None) -> tuple[str, int | None]:
    """(training convention, seed) of a policy: read from a name ``<method>-<convention>/s<seed>`` or
    ``initial``, checked against the flags; a contradiction or a name that says neither is refused."""
    from crossed_rlvr.rewards.conventions import CONVENTIONS

    parsed = PolicyName.parse(policy)
    named: tuple[str, int | None] | None = (
        (parsed.convention, parsed.seed) if parsed and parsed.convention in CONVENTIONS else None)
    if policy == "initial":
        named = ("initial", None)
    if named is None:
        if training_convention is None:
            raise ResponseFileError(
                f"policy {policy!r}: cannot tell its training convention; name it <method>-<convention>/s<seed> "
                f"(e.g. grpo-hash/s83) or initial, or pass --training-convention (and --train-seed)")
        return training_convention, train_seed
    if training_convention is not None and training_convention != named[0]:
        raise ResponseFileError(f"policy {policy!r}: the name says training convention {named[0]!r} but "
                                f"--training-convention says {training_convention!r}")
    if train_seed is not None and train_seed != named[1]:
        raise ResponseFileError(f"policy {policy!r}: the name says seed {named[1]} but --train-seed says {train_seed}")
    return named


def lines(path: Path) -> Iterator[tuple[dict[str, Any], Source]]:
    return json_lines(path, ResponseFileError)


def find_request(prompt: str) -> tuple[str, str, int] | None:
    """(request, template, position) of the last request suffix in a rendered prompt, if any."""
    from crossed_rlvr.rewards.conventions import REQUESTS, TEMPLATES, request_suffix

    best = None
    for req in REQUESTS:
        for tmpl in TEMPLATES:
            at = prompt.rfind(request_suffix(req, tmpl))
            if at >= 0 and (best is None or at > best[2]):
                best = (req, tmpl, at)
    return best


def request_of(prompt: str, request: str | None, template: str, where: Source
               ) -> tuple[str, str, tuple[str, str, int] | None]:
    """(request, template, suffix found) of one imported response: the request suffix in its prompt, else
    the ``--request`` flag; a prompt without a suffix and no flag, or a contradiction, is refused."""
    found = find_request(prompt)
    if found is None and request is None:
        raise ResponseFileError(f"{where}: the prompt carries no known request suffix; pass --request")
    if found is not None and request is not None and found[0] != request:
        raise ResponseFileError(f"{where}: the prompt asks for {found[0]!r} but --request says {request!r}")
    return (found[0], found[1], found) if found else (str(request), template, None)


def strip_request(prompt: str, found: tuple[str, str, int] | None) -> str:
    if found is None:
        return prompt
    from crossed_rlvr.rewards.conventions import request_suffix

    req, tmpl, at = found
    return prompt[:at] + prompt[at + len(request_suffix(req, tmpl)):]
