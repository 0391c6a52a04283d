"""List the offline wandb runs under a folder: name, group, job type, and config / history keys; with
``--tables``, the schema of every wandb.Table each run logged (e.g. an arm's crossed validation).

    python scripts/wandb_runs.py runs/study
    python scripts/wandb_runs.py runs/study/train/hash/s83 --tables
"""

from __future__ import annotations

import json
from pathlib import Path

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


def tables(folder: str) -> None:
    """Each logged table: its key and step, rows, and columns (one per reader for crossed validation)."""
    console = Console(width=200)
    for r in offline_runs(folder):
        for path in sorted(Path(r["path"]).rglob("*.table.json"), key=lambda p: int(p.name.split("_")[-2])):
            data = json.loads(path.read_text())
            key = str(path.relative_to(Path(r["path"]) / "files" / "media" / "table")).rsplit("_", 2)[0]
            cols = data["columns"]
            at = f"training step {data['data'][0][cols.index('step')]}" if "step" in cols and data["data"] else (
                f"wandb step {path.name.split('_')[-2]}")
            console.print(f"[bold]{r.get('name')}[/bold] {key} ({at}): {len(data['data'])} rows x {len(cols)} columns")
        if any(Path(r["path"]).rglob("*.table.json")):
            console.print("columns: " + ", ".join(data["columns"]))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="runs", help="the folder to search (default: runs)")
    parser.add_argument("--tables", action="store_true", help="the schema of every wandb.Table each run logged")
    args = parser.parse_args()
    (tables if args.tables else main)(args.folder)
