"""The report sections only a study can write, handed to the analysis so that the report is written once with
complete Contents: the crossed interactions over training (from the arms' validation steps), the arms' training
curves, and the warm start that built the initial policy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crossed_rlvr.conf.schema import AnalysisConf
from crossed_rlvr.layout import AnalysisLayout


def study_sections(folder: Path, analysis: AnalysisConf, validation_scores: Path | None, metrics: dict[str, Path],
                   warmstart: Path | None, conventions: dict[str, str]) -> list[str]:
    """The sections (their tables and figures written into ``folder``, the analysis folder being written);
    ``conventions``: the training convention of each arm whose ``metrics`` are given, by its policy's name."""
    from crossed_rlvr.analysis.report.document import initial_section, training_section

    out = []
    if validation_scores is not None and (over := over_training(validation_scores, folder, analysis)) is not None:
        out.append(over)
    if metrics:
        out.append(training_section(folder, {k: _read_metrics(v) for k, v in metrics.items()}, conventions))
    if warmstart is not None:
        out.append(initial_section(json.loads(warmstart.read_text())))
    return out


def over_training(validation_scores: Path, folder: Path, analysis: AnalysisConf) -> str | None:
    """The validation steps analysed like any crossed set (``analysis/validation/``), and the report section
    of their interactions over training (its table and figure written into ``folder``); None with fewer than
    two validated steps."""

    from crossed_rlvr.analysis.analyze import read_contrasts
    from crossed_rlvr.analysis.report.folder import analyze
    from crossed_rlvr.analysis.report.over_training import write_over_training

    sub = AnalysisLayout(folder).validation
    # its tables in full; its figures would repeat the main ones (the over-training figure is drawn below)
    analyze(validation_scores, sub.root, n_resamples=int(analysis.resamples), rng_seed=int(analysis.rng_seed),
            overwrite=True, figures=False, tracking="off")
    section = write_over_training(read_contrasts(sub.contrasts), folder)
    if section is None:
        return None
    return ("\n" + section + "\n\nThe whole analysis of the validation steps: "
            "[validation/report.md](validation/report.md).\n")


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
