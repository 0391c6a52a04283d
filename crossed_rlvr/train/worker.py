"""One GRPO arm in processes of its own (``engine=trl``): on several (``engine.nproc_per_node`` > 1) the study
runs ``torchrun -m crossed_rlvr.train.worker SPEC.json``, every rank trains its share of each update, and rank
0 writes the arm and ``SPEC.result.json`` (the same as ``torchrun ... -m crossed_rlvr.train.cli`` by hand); on
one GPU, plain ``python -m crossed_rlvr.train.worker``, so the study's process never holds training memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.layout import WorkerFiles
from crossed_rlvr.ranks import launch, rank


def run_arm(cfg: dict[str, Any], spec_file: Path, nproc: int) -> dict[str, Any]:
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(json.dumps(cfg, indent=2) + "\n")
    from crossed_rlvr.interrupt import stopped_by

    done = subprocess.run(launch("crossed_rlvr.train.worker", str(spec_file), nproc=nproc), check=False)
    stopped_by(done.returncode)  # ended by a signal this process passed on: stop as it did
    done.check_returncode()
    return json.loads(WorkerFiles(spec_file).result.read_text())


@stops_cleanly("crossed-train", quiet=True)
def main(argv: list[str] | None = None) -> int:
    from crossed_rlvr.train.checks import planned_arm
    from crossed_rlvr.train.run import run_train

    spec_file = Path((argv or sys.argv[1:])[0])
    summary = run_train(planned_arm(json.loads(spec_file.read_text())))  # a study's arm, checked where it was planned
    if rank() == 0:
        WorkerFiles(spec_file).result.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
