"""wandb logging of an analysis folder: tables, figures, headline contrasts in the summary, and the
report and scores as an artifact (offline by default: nothing leaves the machine until synced)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.layout import AnalysisLayout

if TYPE_CHECKING:
    import pandas as pd

    from crossed_rlvr.tracking import TrackingConf

HEADLINE = {"payload": "I_P", "acc.strict": "I_S", "acc.math_verify": "I_MV"}


def headline_contrasts(contrasts: pd.DataFrame) -> dict[str, float]:
    """I_P, I_S, I_MV (§3, Table 10) per seed and seed mean, with their paired-bootstrap intervals, keyed
    ``<task>/<template>/<pair>/<policy>/<I_x>`` (and ``..._lo`` / ``..._hi``)."""
    part = contrasts[(contrasts.name == "interaction") & contrasts.measure.isin(list(HEADLINE))]
    out: dict[str, float] = {}
    for row in part.itertuples(index=False):
        key = f"{row.task}/{row.template}/{row.request}/{row.policy}/{HEADLINE[row.measure]}"
        out[key] = float(row.estimate)
        out[f"{key}_lo"] = float(row.ci_low)
        out[f"{key}_hi"] = float(row.ci_high)
    return out


def log_analysis(out: Path, tracking: TrackingConf | Mapping[str, Any], study: str | None = None, scores: Path | None = None,
                 run_dir: Path | None = None, config: dict[str, Any] | None = None) -> str | None:
    """Log one analysis folder as a run (job type ``analysis``); returns the wandb run folder."""
    import pandas as pd
    import wandb

    from crossed_rlvr.analysis.analyze import read_contrasts
    from crossed_rlvr.tracking import start_run

    out = Path(out)
    files = AnalysisLayout(out)
    manifest = json.loads(files.manifest.read_text())
    run = start_run(tracking, name="analysis", job_type="analysis", run_dir=run_dir or out, study=study,
                    config={**(config or {}), "n_resamples": manifest["n_resamples"],
                            "rng_seed": manifest["rng_seed"], "inputs": manifest["inputs"]})
    if run is None:
        return None
    try:
        for name in ("cells", "contrasts", "coverage", "paired_tests", "over_training"):
            path = files.table(name)
            if path.exists() and path.stat().st_size > 1:
                run.log({name: wandb.Table(dataframe=pd.read_csv(path))})
        for fig in sorted(files.figures.glob("*.png")):
            run.log({f"figures/{fig.stem}": wandb.Image(str(fig))})
        run.summary.update(manifest["checks"])
        run.summary.update(headline_contrasts(read_contrasts(files.contrasts)))
        artifact = wandb.Artifact(f"analysis-{run.id}", type="analysis")
        artifact.add_file(str(files.report))
        if scores is not None and Path(scores).exists():
            artifact.add_file(str(scores))
        run.log_artifact(artifact)
        return str(run.dir)
    finally:
        run.finish()
