"""A Stage 1 pack: what one annotator's laptop needs to commit answers blind (paper 001 App. A), nothing more.

A calibration folder holds the sample with each observation's policy, reference and reader candidates, and
``roles.json`` with every person's link. Stage 1 must not see any of them, so the folder itself never
travels. ``crossed-calibrate pack cal/ -o ann-stage1/ --annotator ann`` writes a folder of its own: each
observation's anonymous id, question and response (``sample.jsonl``), that annotator's link only
(``roles.json``), an empty ``labels.sqlite``, all 0600. The pack serves Stage 1 only; its labels come home
with ``crossed-calibrate export ann-stage1/ ann.jsonl`` and ``crossed-calibrate import cal/ ann.jsonl --lock``,
after which Stage 2 opens in the calibration folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from crossed_rlvr.calibration.sample import CalibrationError, load_calibration
from crossed_rlvr.files import sha256_file
from crossed_rlvr.layout import CalibrationLayout

STAGE1_FIELDS = ("sample_id", "question", "response")  # what Stage 1's page shows (server.item_view)


def _private_write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def make_pack(folder: Path, out: Path, annotator: str) -> Path:
    """Write the Stage 1 pack of ``annotator`` into the new folder ``out``."""
    from crossed_rlvr.calibration.roles import load_roles

    head, rows = load_calibration(folder, check_scores=False)
    roles = load_roles(folder)
    if roles is None:
        raise CalibrationError(f"{folder}: no declared roles; declare them first (crossed-calibrate annotate {folder} "
                               "--annotators A,B --adjudicator C)")
    if annotator not in roles.annotators:
        raise CalibrationError(f"--annotator {annotator!r} is not one of this calibration's annotators "
                               f"({', '.join(roles.annotators)})")
    if out.exists():
        raise FileExistsError(f"{out} exists; a pack is written into a new folder")
    out.mkdir(parents=True)
    os.chmod(out, 0o700)
    files = CalibrationLayout(out)  # a pack is a calibration folder of its own
    sample = "".join(json.dumps({k: r[k] for k in STAGE1_FIELDS} | {"candidates": {}}) + "\n" for r in rows)
    _private_write(files.sample, sample)
    pack_head: dict[str, Any] = {k: head[k] for k in ("seed",) if k in head}
    pack_head.update(sample_sha256=sha256_file(files.sample), scores=None, scores_sha256=None,
                     pack={"stage": "stage1", "annotator": annotator, "from_sample_sha256": head["sample_sha256"]})
    _private_write(files.head, json.dumps(pack_head, indent=2) + "\n")
    token = roles.token_of(annotator)
    _private_write(files.roles, json.dumps({"annotators": list(roles.annotators), "adjudicators": [],
                                            "tokens": {token: annotator}}, indent=2) + "\n")
    return out


def pack_of(head: dict[str, Any]) -> dict[str, Any] | None:
    """The pack record of a calibration header (None for a full calibration folder)."""
    return head.get("pack")
