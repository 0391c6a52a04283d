"""Where a test run's time went, from the timeline its workers wrote (``CROSSED_SUITE_TIMELINE=DIR make test``;
``scripts/bench_suite.sh`` sets it): each worker's busy and idle time, each xdist group's wall and CPU time
(the group of a test is the part of its id after ``@``), and the tests that took the most CPU.

    python scripts/suite_timeline.py DIR [--top N]

CPU time is a test's own process and the commands it waited for; daemons it leaves to others (Ray's) are not
counted, so a Ray test's CPU is a lower bound.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd


def load(folder: Path) -> pd.DataFrame:
    rows = [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()]
    if not rows:
        raise SystemExit(f"{folder}: no timeline files (*.jsonl); run the tests with CROSSED_SUITE_TIMELINE={folder}")
    frame = pd.DataFrame(rows)
    frame["seconds"] = frame["end"] - frame["start"]
    frame["group"] = frame["test"].str.rpartition("@")[2].where(frame["test"].str.contains("@"), "(none)")
    return frame


def summary(frame: pd.DataFrame, top: int = 15) -> str:
    start, end = frame["start"].min(), frame["end"].max()
    wall = end - start
    lines = [f"{len(frame)} tests in {wall / 60:.1f} min on {frame['worker'].nunique()} worker(s); "
             f"CPU {frame['cpu'].sum() / 60:.1f} min (tests and the commands they waited for)", "", "worker  busy  idle  tests"]
    for worker, rows in frame.groupby("worker"):
        busy = rows["seconds"].sum()
        lines.append(f"{worker:6} {busy / 60:5.1f} {(wall - busy) / 60:5.1f} {len(rows):6d}   (min)")
    lines += ["", "group                 wall   CPU  tests  workers"]
    groups = frame.groupby("group").agg(wall=("seconds", "sum"), cpu=("cpu", "sum"), tests=("test", "size"),
                                        workers=("worker", "nunique")).sort_values("wall", ascending=False)
    for name, g in groups.iterrows():
        lines.append(f"{name[:20]:20} {g.wall / 60:5.1f} {g.cpu / 60:5.1f} {int(g.tests):6d} {int(g.workers):8d}")
    lines += ["", f"the {top} tests with the most CPU (s): CPU, wall, test"]
    for _, row in frame.sort_values("cpu", ascending=False).head(top).iterrows():
        lines.append(f"{row.cpu:7.1f} {row.seconds:7.1f}  {row.test}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    print(summary(load(args.folder), args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
