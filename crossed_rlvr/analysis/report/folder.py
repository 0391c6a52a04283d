"""The whole analysis of one scores table, written as one folder: cells, contrasts, coverage, paired tests, report,
figures.

Outputs (a folder, docs/formats.md): ``cells.csv`` (one row per cell and measure, with n),
``contrasts.csv`` (one row per contrast with its paired-bootstrap interval), ``report.md``,
``figures/*.png`` and ``manifest.json`` with the sha256 of every input. The folder is written
whole into a temporary sibling and then moved into place, and an existing folder is never
replaced unless ``--overwrite`` is given.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from crossed_rlvr.analysis.analyze import DEFAULT_RESAMPLES, DEFAULT_RNG_SEED, compute
from crossed_rlvr.analysis.report.document import crossing_gaps
from crossed_rlvr.analysis.report.write import write_outputs
from crossed_rlvr.scratch import alive


def clear_abandoned(out: Path) -> None:
    """Remove the temporary siblings of ``out`` left by a killed run (named ``.<out>.<pid>.*``; a SIGKILL runs
    no cleanup), never one whose process is still writing."""
    for old in out.parent.glob(f".{out.name}.*"):
        pid = old.name[len(out.name) + 2 :].split(".", 1)[0]
        if old.is_dir() and pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)


def replace_folder(out: Path, write: Callable[[Path], None]) -> None:
    """Write a folder whole into a temporary sibling (``write(tmp)``), then move it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    clear_abandoned(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{os.getpid()}.", dir=out.parent))
    try:
        write(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def analyze(
    scores_path: str | Path,
    out_dir: str | Path,
    n_resamples: int = DEFAULT_RESAMPLES,
    rng_seed: int = DEFAULT_RNG_SEED,
    overwrite: bool = False,
    figures: bool = True,
    tracking: str = "off",
    project: str = "crossed-rlvr",
    entity: str | None = None,
    group: str | None = None,
    allow_partial: bool = False,
    sections: Callable[[Path], list[str]] | None = None,
) -> Path:
    """Run the whole analysis of one scores table into ``out_dir``; ``sections(folder)`` adds report sections
    (and their files) before the folder is finished (report/write.py: write_outputs)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} is a file; -o names the output folder")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; pass --overwrite to replace it or choose another folder")
    start = time.perf_counter()
    result = compute(scores_path, n_resamples, rng_seed, allow_partial)
    for line in result.protocol.get("left_out", []):
        print(f"crossed-analyze: left out (--allow-partial): {line}", file=sys.stderr)
    replace_folder(out, lambda tmp: write_outputs(result, tmp, figures, sections))
    if not (result.contrasts.name == "interaction").any():
        print("crossed-analyze: no crossed pair (arms of both conventions, each under both requests); missing:\n"
              + "\n".join(f"  - {g}" for g in crossing_gaps(result.cells)), file=sys.stderr)
    if tracking != "off":
        from crossed_rlvr.analysis.tracking import log_analysis

        block: dict[str, object] = {"mode": tracking, "project": project, "entity": entity, "group": group, "tags": []}
        log_analysis(out, block, study=group, scores=Path(scores_path))
    print(f"analysis of {len(result.scores):,} responses in {time.perf_counter() - start:.1f} s -> {out}",
          file=sys.stderr)
    return out


