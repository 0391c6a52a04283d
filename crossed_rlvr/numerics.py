"""Portable CPU numerics: the same kernels, so the same files, on any x86-64 CPU with AVX2.

The kernels a CPU runs depend on what it offers: PyTorch dispatches its vectorised kernels by instruction set
(``ATEN_CPU_CAPABILITY``: default, avx2, avx512), MKL's matrix products pick a code path per processor unless held
to one (conditional numerical reproducibility, ``MKL_CBWR``), and oneDNN likewise (``ONEDNN_MAX_CPU_ISA``). A
reduction summed in 8 lanes or 16 rounds differently, and a few GRPO updates of a tiny model amplify the last bit
into another trajectory: the same seeds gave other weights, and another I_P, on another CPU model. Paper 002 §3.4
measures this across GPU clusters and asks that the stack be standardised and reported; on a CPU the kernels can
be pinned. ``numerics=portable`` (the default of every command) holds all three libraries to AVX2, the largest set
every x86-64 CPU of the last decade offers, so a machine with more (AVX-512, AMX) computes what one with AVX2 alone
computes. ``numerics=native`` lets each library choose, for speed (docs/results-on-cpu.md gives the cost).

The settings are environment variables each library reads once, when it first runs a kernel: they are set in
the command's own process before torch is loaded, and every process it starts (scoring and generation workers,
Ray workers, torchrun and DeepSpeed ranks, vLLM's engine) inherits them. vLLM's CPU build compiles its own
attention and cache kernels for one instruction set when it is built (no run-time switch): its runs record the
instruction set the machine offers. GPU kernels are not affected. Standard library only, so it runs before
anything imports torch.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from crossed_rlvr.errors import CrossedError

MODES: tuple[str, ...] = ("portable", "native")

# Each library's own control, held to AVX2. MKL's STRICT mode also makes its results independent of how the
# operands are aligned in memory.
PORTABLE: dict[str, str] = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}
KEYS = (*PORTABLE, "MKL_ENABLE_INSTRUCTIONS", "DNNL_MAX_CPU_ISA")  # recorded: a user's own restrictions count too
X86 = ("x86_64", "amd64", "i686", "i386")


class NumericsError(CrossedError):
    """Portable numerics asked for in a process whose torch already chose other kernels."""


def x86() -> bool:
    return platform.machine().lower() in X86


def apply(mode: str) -> None:
    """Set ``mode``'s environment for this process and every process it starts, before torch is loaded. Portable
    numerics are x86's: elsewhere (aarch64) a run keeps the machine's own and records so."""
    if mode == "portable" and x86():
        os.environ.update(PORTABLE)
    check(mode)


def check(mode: str) -> None:
    """Refuse portable numerics in a process whose torch already dispatches to other kernels (torch reads its
    setting once, when it first runs one): the process has to start with the settings in its environment."""
    if mode != "portable" or not x86() or "torch" not in sys.modules:
        return
    chosen = sys.modules["torch"].backends.cpu.get_cpu_capability()
    if chosen != "AVX2":
        env = " ".join(f"{k}={v}" for k, v in PORTABLE.items())
        raise NumericsError(f"numerics=portable: torch already runs {chosen} kernels in this process; start it with "
                            f"{env} in the environment (this CPU may lack AVX2), or set numerics=native")


def mode() -> str:
    """The numerics this process's environment gives: portable where every setting of ``PORTABLE`` is in place."""
    return "portable" if x86() and all(os.environ.get(k) == v for k, v in PORTABLE.items()) else "native"


def recorded() -> dict[str, str]:
    """The numerics as a record of what computed a file (a stage's stamp, an evaluation cell's settings): portable
    named, the machine's own kernels (native) left out, as every record made before numerics were recorded ran
    them, so such a record still matches a native run."""
    now = mode()
    return {} if now == "native" else {"numerics": now}


def in_effect() -> dict[str, Any]:
    """What a run's numbers were computed with (stage stamps, manifests, the report's protocol card)."""
    env = {k: os.environ[k] for k in KEYS if k in os.environ}
    out: dict[str, Any] = {"mode": mode(), "environment": env,
                           "instruction_sets": sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "avx512_fp16",
                                                                     "amx_bf16", "amx_tile"})}
    if "torch" in sys.modules:  # never import torch just to describe the kernels
        out["torch_kernels"] = sys.modules["torch"].backends.cpu.get_cpu_capability()
    return out


def cpu_flags() -> set[str]:
    """The instruction-set flags this CPU offers (/proc/cpuinfo; empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()
