"""wandb logging of an analysis folder (offline by default: nothing leaves the machine until synced)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def log_analysis(out: Path, mode: str = "offline", project: str = "crossed-rlvr") -> str:
    """Log cells, contrasts, checks and figures of an analysis folder; returns the wandb run folder."""
    import pandas as pd
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    manifest = json.loads((out / "manifest.json").read_text())
    run = wandb.init(project=project, job_type="analysis", mode=mode, dir=str(out),
                     config={"n_resamples": manifest["n_resamples"], "rng_seed": manifest["rng_seed"],
                             "inputs": manifest["inputs"]})
    try:
        for name in ("cells", "contrasts", "coverage", "paired_tests"):
            path = out / f"{name}.csv"
            if path.exists() and path.stat().st_size > 1:
                run.log({name: wandb.Table(dataframe=pd.read_csv(path))})
        for fig in sorted((out / "figures").glob("*.png")):
            run.log({f"figures/{fig.stem}": wandb.Image(str(fig))})
        run.summary.update(manifest["checks"])
        return str(run.dir)
    finally:
        run.finish()
