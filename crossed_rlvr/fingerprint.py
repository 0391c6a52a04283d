"""The one fingerprint: what decides whether an output is fresh, for every output the project reuses — a study's
stage (its stamp, ``study/stamps.py``), a GRPO arm (its summary, ``train/run.py``) and an evaluation cell (its
settings record, ``eval/generate/plan.py``).

An output declares its inputs once, as settings (typed configs as :func:`files.settings` gives them: an unset
optional setting left out, so adding a setting edits its field alone) with a :class:`Read` wherever it reads a file
or folder; :func:`fingerprint` puts each file's content hash in its place and adds the CPU numerics the process
runs. As in ``make`` or Bazel's action keys, what an output reads is named where it is made, so an input cannot be
left out of one output's freshness and in another's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossed_rlvr.files import (
    atomic_write_json,
    config_sha256,
    policy_sha256,
    settings,
    sha256_file,
    tree_sha256,
)

digest = config_sha256  # a fingerprint's hash: the project's one config hash


@dataclass(frozen=True)
class Read:
    """A file or folder an output reads, standing in its inputs where its content hash goes (:func:`fingerprint`).
    ``policy``: a policy's folder (or a hub name, which stands as it is: nothing local to hash), hashed by its
    weights, tokenizer and config, never its run records."""

    path: str
    policy: bool = False

    @classmethod
    def weights(cls, path: str | Path) -> Read:
        return cls(str(path), policy=True)


def content_sha256(read: Read, file_sha256: Callable[[Path], str] = sha256_file) -> str:
    """The content hash of what ``read`` names: a policy by :func:`files.policy_sha256`, anything else by all of its
    bytes; a hub name (no such local folder) as it is."""
    if read.policy and not Path(read.path).exists():
        return read.path
    return (policy_sha256 if read.policy else tree_sha256)(read.path, file_sha256)


def fingerprint(inputs: dict[str, Any], content: Callable[[Read], str] = content_sha256,
                numerics: bool = True) -> tuple[dict[str, Any], str]:
    """The fingerprint of an output: its declared ``inputs`` with every :class:`Read` replaced by ``content`` of it
    (a content hash) and, with ``numerics``, the CPU numerics this process runs (:func:`with_numerics`; a GPU's
    kernels have no such choice), and their hash. Returns both: a record keeps the inputs, so an output made again
    can say which changed."""
    resolved = _resolve(inputs, content)
    resolved = with_numerics(resolved) if numerics else resolved
    return resolved, digest(resolved)


def _resolve(value: Any, content: Callable[[Read], str]) -> Any:  # Any: the settings' own JSON shape
    if isinstance(value, Read):
        return content(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a typed config: its settings' one form
        return _resolve(settings(value), content)
    if isinstance(value, dict):
        return {k: _resolve(v, content) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_resolve(v, content) for v in value]
    return value


def with_numerics(inputs: dict[str, Any]) -> dict[str, Any]:
    """Inputs with the CPU numerics this process runs (crossed_rlvr/numerics.py) where they are portable: the same
    seeds give other files under the machine's own kernels, which every output made before numerics were recorded
    ran (so their records, which name none, still match a native run)."""
    from crossed_rlvr.numerics import recorded

    return {**inputs, **recorded()}


class HashCache:
    """File hashes keyed by (path, size, mtime): a file is read again only when one of those changed, so a
    rerun over 7B checkpoints does not re-read ~90 GB to find every output unchanged."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.entries: dict[str, list] = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            self.entries = {}
        self.dirty = False

    def __call__(self, f: Path) -> str:
        st = f.stat()
        key, stamp = str(f.resolve()), [st.st_size, st.st_mtime_ns]
        hit = self.entries.get(key)
        if hit is not None and hit[:2] == stamp:
            return hit[2]
        digest_ = sha256_file(f)
        self.entries[key] = [*stamp, digest_]
        self.dirty = True
        return digest_

    def save(self) -> None:
        if self.dirty:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path, self.entries)
            self.dirty = False
