"""Which process of a ``torchrun`` launch this is, and the command that starts a module on N processes:
one definition for the SFT and GRPO workers and trainers."""

from __future__ import annotations

import os
import sys


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def launch(module: str, *args: str, nproc: int = 1) -> list[str]:
    """``python -m module args`` on one process, through ``torch.distributed.run`` on several."""
    runner = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc > 1 else []
    return [sys.executable, *runner, "-m", module, *args]
