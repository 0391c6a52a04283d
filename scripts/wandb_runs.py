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
    for col in ("name", "group", "job type", "id", "config keys", "logged keys"):
        table.add_column(col, overflow="fold")
    for r in runs:
        logged = sorted(set(r["history"]) | set(r["summary"]))
        table.add_row(r.get("name", "?"), r.get("group", ""), r.get("job_type", ""), r.get("id", ""),
                      ", ".join(r["config"][:12]) + (" ..." if len(r["config"]) > 12 else ""),
                      f"{len(logged)}: " + ", ".join(logged[:6]) + (" ..." if len(logged) > 6 else ""))
    Console(width=200).print(table)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs")
