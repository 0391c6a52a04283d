"""One SFT stage in a process of its own (``python -m crossed_rlvr.sft.worker SPEC.json``), or across
``sft.nproc_per_node`` processes through ``torchrun``: the study runs its GPU training stages this way, so
that the evaluation's vLLM later starts on free GPU memory (a process that trained keeps its CUDA cache)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.layout import WorkerFiles
from crossed_rlvr.ranks import launch, rank


def command(spec_file: Path, nproc: int) -> list[str]:
    return launch("crossed_rlvr.sft.worker", str(spec_file), nproc=nproc)


def run_stage(spec: dict[str, Any], spec_file: Path) -> dict[str, Any]:
    """Write ``spec`` (a crossed-sft config) and run its arms in child processes; returns their results.

    ``sft.parallel_arms`` = K > 1 trains K arms at a time side by side, one process each on its own GPU
    (``CUDA_VISIBLE_DEVICES``; App. D.2.1: one GPU per arm); else all arms in one child, across
    ``sft.nproc_per_node`` processes (torchrun) when that is > 1."""
    from crossed_rlvr.sft.run import SFTJob, write_arm_pairs

    job = SFTJob.of(spec)
    nproc, parallel = job.cfg.sft.nproc_per_node, job.cfg.sft.parallel_arms
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    if parallel <= 1:
        spec_file.write_text(json.dumps(spec, indent=2) + "\n")
        from crossed_rlvr.interrupt import stopped_by

        done = subprocess.run(command(spec_file, nproc), check=False)
        stopped_by(done.returncode)  # ended by a signal this process passed on: stop as it did
        done.check_returncode()
        return json.loads(WorkerFiles(spec_file).result.read_text())
    if nproc > 1:
        raise ValueError("sft.parallel_arms > 1 runs one process per arm: set sft.nproc_per_node=1")
    import os

    write_arm_pairs(job.cfg)  # once, before the arms read them side by side
    from crossed_rlvr.names import policy_name

    names = [policy_name("sft", conv, seed) for seed in spec["seeds"] for conv in (spec["arm"], spec["control"])]
    results: dict[str, Any] = {}
    for start in range(0, len(names), parallel):
        running = []
        for slot, name in enumerate(names[start:start + parallel]):
            one = WorkerFiles(spec_file).one(name).spec
            one.write_text(json.dumps({**spec, "only": name}, indent=2) + "\n")
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(slot)}
            running.append((name, one, subprocess.Popen(command(one, 1), env=env)))
        codes = {name: proc.wait() for name, _, proc in running}
        from crossed_rlvr.interrupt import stopped_by

        for code in codes.values():
            stopped_by(code)  # ended by a signal this process passed on: stop as they did
        failed = [name for name, code in codes.items() if code != 0]
        if failed:
            raise RuntimeError(f"SFT arm(s) {', '.join(failed)} failed (see their output above)")
        for _name, one, _ in running:
            results.update(json.loads(WorkerFiles(one).result.read_text()))
    return results


@stops_cleanly("crossed-sft", quiet=True)
def main(argv: list[str] | None = None) -> int:
    from crossed_rlvr.sft.run import SFTJob, arms, warmstart

    spec_file = Path((argv or sys.argv[1:])[0])
    job = SFTJob.of(json.loads(spec_file.read_text()))  # the worker's door: its spec typed once, here
    result = warmstart(job) if job.cfg.mode == "warmstart" else arms(job)
    if rank() == 0:
        shown = {k: ({x: y for x, y in v.items() if x != "config"} if isinstance(v, dict) else v)
                 for k, v in result.items()}
        WorkerFiles(spec_file).result.write_text(json.dumps(shown, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
