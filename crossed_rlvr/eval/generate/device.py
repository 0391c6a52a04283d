"""Where and in which precision an evaluation generates: ``eval.device`` and an unset ``eval.dtype``.

``eval.device``: ``auto`` (the default) is CUDA where torch sees a GPU, else the CPU; ``cuda`` where no GPU is
seen is refused. Under Ray workers (``distribute.workers`` > 0) the workers' GPUs decide, not the driver's:
``auto`` is CUDA exactly when each worker is given one (``distribute.gpus_per_worker`` > 0).

``eval.dtype`` left unset (null) is bfloat16 on a GPU and float32 on the CPU, where bfloat16 is mostly emulated
and slow. Both are resolved once, before a cell's settings are hashed, so the hash holds what ran.

Every cell made before ``eval.device`` existed ran on the CPU: the device is left out of a cell's settings when it
is the CPU (and for vLLM, which places itself), so those cells keep their hash and stay finished.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from crossed_rlvr.errors import ConfigError

if TYPE_CHECKING:  # a bare GPU image has torch alone: no OmegaConf, which the schema imports
    from crossed_rlvr.conf.schema import EvalConf

DEVICES = ("auto", "cpu", "cuda")


def gpu_visible() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(requested: str | None, gpu_workers: bool | None = None) -> str:
    """``cpu`` or ``cuda`` for ``eval.device``. ``gpu_workers``: None generates here; True/False on Ray workers
    that are/are not given a GPU each."""
    value = str(requested or "auto")
    if value not in DEVICES:
        raise ConfigError(f"eval.device={value!r} is unknown; expected one of {', '.join(DEVICES)}")
    has_gpu = gpu_visible() if gpu_workers is None else gpu_workers
    if value == "cuda" and not has_gpu:
        where = ("torch sees no GPU here (torch.cuda.is_available() is False)" if gpu_workers is None
                 else "the Ray workers get no GPU (distribute.gpus_per_worker=0)")
        raise ConfigError(f"eval.device=cuda but {where}; use eval.device=auto or eval.device=cpu")
    if value == "auto":
        return "cuda" if has_gpu else "cpu"
    return value


def resolve_dtype(requested: str | None, device: str) -> str:
    """The generation dtype: unset is bfloat16 on a GPU, float32 on the CPU; ``auto`` as ``machine.eval_dtype``."""
    from crossed_rlvr.machine import eval_dtype

    if requested is None:
        return "bfloat16" if device == "cuda" else "float32"
    return eval_dtype(str(requested))


def placed(gen: EvalConf, gpu_workers: bool | None = None) -> EvalConf:
    """A copy of the ``eval`` settings placed where they run: ``device`` and ``dtype`` resolved (the caller's are left
    as given)."""
    device = resolve_device(gen.device, gpu_workers)
    return dataclasses.replace(gen, device=device, dtype=resolve_dtype(gen.dtype, device))


def hashed_settings(gen: EvalConf) -> dict[str, Any]:
    """The resolved ``eval`` settings as a cell's meta holds and hashes them: the device only where it is not the CPU
    every earlier cell ran on, and never for vLLM (it places its engine itself)."""
    from crossed_rlvr.files import settings

    out = settings(gen)
    if out.get("device") in (None, "cpu") or out.get("backend") == "vllm":
        out.pop("device", None)
    return out
