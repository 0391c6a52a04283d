"""One SFT stage in a process of its own (``python -m crossed_rlvr.sft.worker SPEC.json``), or across
``sft.nproc_per_node`` processes through ``torchrun``: the study runs its GPU training stages this way, so
that the evaluation's vLLM later starts on free GPU memory (a process that trained keeps its CUDA cache)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def command(spec_file: Path, nproc: int) -> list[str]:
    if nproc <= 1:
        return [sys.executable, "-m", "crossed_rlvr.sft.worker", str(spec_file)]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "crossed_rlvr.sft.worker", str(spec_file)]


def run_stage(spec: dict[str, Any], spec_file: Path) -> dict[str, Any]:
    """Write ``spec`` (a crossed-sft config) and run its arms in a child process; returns their results."""
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(json.dumps(spec, indent=2) + "\n")
    nproc = int((spec.get("sft") or {}).get("nproc_per_node") or 1)
    subprocess.run(command(spec_file, nproc), check=True)
    return json.loads(spec_file.with_suffix(".result.json").read_text())


def main(argv: list[str] | None = None) -> int:
    import os

    from omegaconf import OmegaConf

    from crossed_rlvr.sft.cli import arms, warmstart

    spec_file = Path((argv or sys.argv[1:])[0])
    cfg = OmegaConf.create(json.loads(spec_file.read_text()))
    result = warmstart(cfg) if cfg.get("mode") == "warmstart" else arms(cfg)
    if int(os.environ.get("RANK", "0")) == 0:
        shown = {k: ({x: y for x, y in v.items() if x != "config"} if isinstance(v, dict) else v)
                 for k, v in result.items()}
        spec_file.with_suffix(".result.json").write_text(json.dumps(shown, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
