"""Where a result was made: CPU model, thread counts, accelerator and library versions.

Float results of training and sampling differ across CPUs and thread counts (summation order in
the kernels), so two runs are comparable only when these match. Every manifest records them.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

LIBRARIES = ("crossed-rlvr", "torch", "transformers", "trl", "tokenizers", "accelerate", "numpy", "pandas", "scipy",
             "pyarrow", "math-verify", "hydra-core", "wandb", "verl", "vllm", "lm-eval")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def machine() -> dict[str, Any]:
    """The machine and software a stage ran on (for manifests and stage stamps)."""
    info: dict[str, Any] = {
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "python": sys.version.split()[0],
        "threads": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ},
        "versions": versions(),
    }
    if "torch" in sys.modules:  # never import torch just to describe the machine
        torch = sys.modules["torch"]
        info["threads"]["torch"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
                           "cuda": torch.version.cuda}
    return info
