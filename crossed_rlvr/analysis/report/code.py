"""The report of a code evaluation (paper 001 App. D.3): the cells table and the gaps, gains, coverage and
interactions, written with the tables into one analysis folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from crossed_rlvr.files import atomic_write_text
from crossed_rlvr.layout import AnalysisLayout


def report(table: pd.DataFrame, samples: int, dataset: str) -> str:
    lines = ["# Code tasks evaluated crossed", "",
             f"Code tasks ({dataset}), {samples} samples per task, policy and request; programs run in the "
             "sandbox on the base and plus tests (EvalPlus's rules). Strict: the first closed block in the "
             "requested delimiter; lenient: any block, else the response. γ = lenient − strict pass@1.", "",
             "| policy | request | payload | strict pass@1 | lenient pass@1 | γ | strict pass@" + str(samples)
             + " | lenient pass@" + str(samples) + " |", "|---|---|---|---|---|---|---|---|"]
    for r in table.to_dict("records"):
        lines.append(f"| {r['policy']} | {r['request']} | {r['payload']:.3f} | {r['strict.pass@1']:.4f} | "
                     f"{r['lenient.pass@1']:.4f} | {r['gamma']:+.4f} | {r[f'strict.pass@{samples}']:.4f} | "
                     f"{r[f'lenient.pass@{samples}']:.4f} |")
    return "\n".join(lines) + "\n"


def contrast_section(con: pd.DataFrame) -> str:
    lines = ["## Gaps, gains and coverage (App. D.3)", "",
             "Paired bootstrap over tasks (95% percentile intervals). gamma: lenient − strict pass@1; gain: pass@1 "
             "minus the initial policy's; coverage: pass@N minus the initial policy's, with the tasks lost and "
             "gained and McNemar's exact p; interaction_*: the crossed interaction of arms trained on the two code "
             "conventions, in percentage points.", "",
             "| contrast | policy | request | estimate | 95% interval | lost / gained (p) |", "|---|---|---|---|---|---|"]
    for r in con.to_dict("records"):
        cov = f"{r['lost']} / {r['gained']} ({r['mcnemar_p']:.3g})" if r["name"] == "coverage" else ""
        lines.append(f"| {r['name']} | {r['policy']} | {r['request']} | {r['estimate']:+.4f} | "
                     f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] | {cov} |")
    return "\n".join(lines) + "\n"




def write_code_analysis(scores: pd.DataFrame, out: Path, dataset: str, resamples: int = 10_000,
                        rng_seed: int = 0, about: dict[str, Any] | None = None) -> pd.DataFrame:
    """``cells.csv``, ``contrasts.csv`` and ``report.md`` of a code scores table into ``out``; returns the cells."""
    from crossed_rlvr.analysis.code import cells, contrasts, samples_drawn

    samples = samples_drawn(scores)
    out.mkdir(parents=True, exist_ok=True)
    table = cells(scores, samples)
    files = AnalysisLayout(out)
    table.to_csv(files.cells, index=False, float_format="%.10g")
    con = contrasts(scores, samples, resamples, rng_seed)
    con.to_csv(files.contrasts, index=False, float_format="%.10g")
    atomic_write_text(files.report, report(table, samples, dataset) + "\n" + contrast_section(con))
    if about is not None:
        files.summary.write_text(json.dumps({**about, "samples": samples}, indent=1) + "\n")
    return table


def code_scores(path: Path) -> bool:
    """A scores table of programs run in the sandbox (``crossed-score`` of a code evaluation): its readers'
    verdicts carry the tests' statuses."""
    import pyarrow.parquet as pq

    from crossed_rlvr.files import input_problem

    if input_problem(path) is not None:  # a FIFO would block the read: the answer-task path names the problem
        return False
    try:
        names = set(pq.read_schema(path).names)
    except Exception:  # noqa: BLE001 - not Parquet: the answer-task path names the problem
        return False
    return {"strict.status", "lenient.status", "strict.base"} <= names


def analyze_code(scores: Path, out: Path, resamples: int, rng_seed: int, overwrite: bool) -> None:
    """The code analysis (paper 001 App. D.3: pass@k, γ, gains, coverage, interactions) into ``out``."""
    import pandas as pd

    from crossed_rlvr.analysis.report.folder import replace_folder

    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass --overwrite to replace it")
    table = pd.read_parquet(scores)
    tasks = ", ".join(sorted(set(table["task"].dropna()))) or "code"
    replace_folder(out, lambda folder: write_code_analysis(table, folder, tasks, resamples, rng_seed))
