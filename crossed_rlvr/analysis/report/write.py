"""The analysis folder (docs/formats.md): ``cells.csv``, ``contrasts.csv`` and the other tables,
``report.md``, ``figures/*.png`` and ``manifest.json`` with the sha256 of every input, written from what
``analysis.analyze.compute`` returned."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from crossed_rlvr import __version__
from crossed_rlvr.analysis.analyze import Analysis
from crossed_rlvr.analysis.criteria import criteria_section, sft_criteria
from crossed_rlvr.analysis.report.audit import audit_section
from crossed_rlvr.analysis.report.document import (
    examples_section,
    length_table,
    sampling_table,
    significance_table,
    write_report,
)
from crossed_rlvr.analysis.report.figures import write_figures
from crossed_rlvr.analysis.report.headline import add_contents
from crossed_rlvr.analysis.report.over_training import write_over_training
from crossed_rlvr.files import sha256_file
from crossed_rlvr.layout import AnalysisLayout
from crossed_rlvr.machine import machine


def write_tables(a: Analysis, folder: Path) -> None:
    """The CSV and JSON Lines outputs, one per table."""
    for name, table in (("cells", a.cells), ("contrasts", a.contrasts), ("coverage", a.coverage),
                        ("paired_tests", a.paired), ("lengths", a.lengths), ("sampling_runs", a.sampling),
                        ("reader_audit", a.audit_rates)):
        table.to_csv(AnalysisLayout(folder).table(name), index=False, float_format="%.10g")
    for name, table in (("examples", a.examples), ("reader_audit_examples", a.audit_examples)):
        table.to_json(AnalysisLayout(folder).rows(name), orient="records", lines=True, force_ascii=False)


def write_document(a: Analysis, folder: Path, figures: bool) -> None:
    """report.md (with its figures): the paper's tables, then over training, the reader audit, contents."""
    files = AnalysisLayout(folder)
    figs = write_figures(a.cells, a.contrasts, files) if figures else []
    criteria = sft_criteria(a.cells)
    if not criteria.empty:
        criteria.to_csv(files.table("sft_criteria"), index=False)
    extra = [criteria_section(criteria), "\n## Significance of the gains (paper 002 §4.2)\n", significance_table(a.paired),
             "\n## Sampling runs (paper 002 §4.1)\n", sampling_table(a.sampling, a.df),
             "\n## Appendix: response length by correctness (paper 002 §5.2)\n", length_table(a.lengths),
             "\n## Appendix: example responses per crossed cell\n", examples_section(a.examples)]
    write_report(files.report, a.cells, a.contrasts, a.coverage, a.paired, a.checks, figs,
                 n_resamples=a.n_resamples, rng_seed=a.rng_seed, protocol=a.protocol, extra_sections=extra)
    over = write_over_training(a.contrasts, folder, figure=figures)
    with files.report.open("a", encoding="utf-8") as fh:
        if over is not None:  # validation checkpoints <arm>@step<K>: the interactions over training
            fh.write("\n" + over + "\n")
        fh.write("\n## Reader audit\n\nEvery pair of readers and every training reward program against its "
                 "evaluation reader: disagreement per cell in `reader_audit.csv`, up to five examples of each "
                 "kind in `reader_audit_examples.jsonl`; Math-Verify timeouts are counted apart.\n\n"
                 + audit_section(a.audit_rates, a.audit_examples) + "\n")


def write_manifest(a: Analysis, folder: Path) -> None:
    """manifest.json: inputs with their sha256, settings, checks, machine, protocol and every output."""
    manifest = {
        "kind": "crossed-rlvr analysis", "crossed_rlvr_version": __version__,
        "inputs": [{"path": str(a.scores_path), "sha256": sha256_file(a.scores_path)}],
        "n_resamples": a.n_resamples, "rng_seed": a.rng_seed, "checks": a.checks, "machine": machine(),
        "protocol": a.protocol,
        "outputs": sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()),
    }
    AnalysisLayout(folder).manifest.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def write_outputs(a: Analysis, folder: Path, figures: bool = True,
                  sections: Callable[[Path], list[str]] | None = None) -> None:
    """The whole analysis folder, written once: the tables, report.md, then the sections a caller adds
    (``sections(folder)`` writes its own files into the folder and returns its markdown: a study's over-training,
    training and warm-start sections), the manifest of every output, and the contents of the whole report."""
    write_tables(a, folder)
    write_document(a, folder, figures)
    if sections is not None:
        with AnalysisLayout(folder).report.open("a", encoding="utf-8") as fh:
            for text in sections(folder):
                fh.write(text)
    write_manifest(a, folder)
    add_contents(AnalysisLayout(folder).report)
