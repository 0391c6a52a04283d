"""``eval.linear=onednn``: the transformers backend's linear layers on oneDNN's prepacked weights (CPU only).

A decoding step of a small batch multiplies a few rows by every weight matrix, so its time is the reading of the
weights. torch's own matrix product reads a ``Linear`` weight in its stored layout; oneDNN reads a copy reordered once
into its blocked layout about twice as fast on this project's CPUs (SmolLM2-135M, 8 rows, float32, 2 threads: the
211 linear layers 88 ms a step through torch, 41 ms packed; ``scripts/bench_vs_lmeval.py``). This is the packing
torch's own compiler (Inductor, ``freezing``) applies on the CPU, done here without compiling. The results differ
from torch's product in the last bits (a different order of summation), so it is a setting, recorded in each cell's
settings when set.

Only for inference on a model whose weights no longer change: a packed copy is taken once, and the layer reads the
copy from then on (the evaluation's policies; never a model being trained).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crossed_rlvr.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

PACKABLE = ("float32", "bfloat16")


def pack_linears(model: torch.nn.Module, batch_hint: int) -> int:
    """Give every ``torch.nn.Linear`` of ``model`` a forward on a oneDNN-packed copy of its weight (the layout chosen
    for ``batch_hint`` rows); returns how many were packed."""
    import torch

    if not torch.backends.mkldnn.is_available():
        raise ConfigError("eval.linear=onednn needs torch built with oneDNN (torch.backends.mkldnn.is_available() "
                          "is False here); leave eval.linear unset")
    n = 0
    for module in model.modules():
        if type(module) is not torch.nn.Linear:  # a subclass may do more in its forward than the product
            continue
        weight = module.weight.detach()
        if weight.device.type != "cpu" or str(weight.dtype).removeprefix("torch.") not in PACKABLE:
            raise ConfigError(f"eval.linear=onednn packs float32 or bfloat16 weights on the CPU; this model's are "
                              f"{weight.dtype} on {weight.device} (leave eval.linear unset there)")
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, batch_hint)
        bias = None if module.bias is None else module.bias.detach()
        module.forward = _packed_forward(packed, bias)
        n += 1
    return n


def _packed_forward(packed: torch.Tensor, bias: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    import torch

    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    return forward
