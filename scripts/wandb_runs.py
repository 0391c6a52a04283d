"""List the offline wandb runs under a folder: name, group, job type, and config / history keys.

    python scripts/wandb_runs.py runs/study
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from crossed_rlvr.tracking import offline_runs


def main(folder: str) -> None:
    runs = offline_runs(folder)
    table = Table(title=f"{len(runs)} offline wandb runs under {folder}")
    for col in ("name", "group", "job type", "id", "config (of which the study's keys)", "logged keys (examples)"):
        table.add_column(col, overflow="fold")
    ours = {"model", "task", "convention", "recipe", "engine", "eval", "sft", "seed", "arm", "policies", "requests",
            "n_resamples"}
    for r in runs:
        logged = sorted(k for k in set(r["history"]) | set(r["summary"]) if not k.startswith("profiling/"))
        table.add_row(r.get("name", "?"), r.get("group", ""), r.get("job_type", ""), r.get("id", ""),
                      f"{len(r['config'])} ({', '.join(k for k in r['config'] if k in ours)})",
                      f"{len(logged)}: " + ", ".join(logged[:3]) + (" ..." if len(logged) > 3 else ""))
    Console(width=200).print(table)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs")
