"""verl's vLLM worker extension in vLLM's CPU workers, with the actor's weights loadable more than once.

verl syncs the actor's weights into vLLM after every update by loading them in place (``model.load_weights``, then
``process_weights_after_loading``: ``verl/workers/rollout/vllm_rollout/utils.py``). On the CPU, vLLM's linear layers
pack their weight for oneDNN after loading and drop the weight itself
(``UnquantizedLinearMethod.process_weights_after_loading`` calls ``dispatch_cpu_unquantized_gemm(layer,
remove_weight=True)``, ``vllm/model_executor/layers/linear.py``): the layer then holds an empty parameter without
its loader, and the first sync fails (``'Parameter' object has no attribute 'weight_loader'``). A GPU keeps the
weight. Here the weight is kept (``remove_weight=False``, as vLLM's embedding layers already do), so each sync
loads into it and the packing after the sync is made again from the new weights. The rollout server
(train/verl_vllm.py) names this class as vLLM's worker extension, so only vLLM's CPU workers under verl import it.
tests/test_verl_cpu.py fails when vLLM changes the call this relies on.
"""

from __future__ import annotations

import functools
import inspect

import torch

import crossed_rlvr.train.verl_cpu  # noqa: F401  (verl's lookup of vLLM's CPU build, before verl's vLLM rollout)

# isort: split
import vllm.model_executor.layers.linear as vllm_linear
import vllm.model_executor.layers.utils as vllm_layer_utils
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

DROPPING_CALL = "dispatch_cpu_unquantized_gemm(layer, remove_weight=True)"
ORIGINAL = vllm_layer_utils.dispatch_cpu_unquantized_gemm


@functools.wraps(ORIGINAL)
def dispatch_keeping_weight(layer: torch.nn.Module, remove_weight: bool) -> None:
    return ORIGINAL(layer, remove_weight=False)


def patched_source_matches() -> bool:
    """Whether vLLM's CPU linear layers still drop their weight through the function this module replaces (looked up
    in its module at call time)."""
    source = inspect.getsource(vllm_linear.UnquantizedLinearMethod.process_weights_after_loading)
    return DROPPING_CALL in source and "from vllm.model_executor.layers.utils import" in source


vllm_layer_utils.dispatch_cpu_unquantized_gemm = dispatch_keeping_weight


class CPUWorkerExtension(vLLMColocateWorkerExtension):
    """verl's colocated worker extension, imported where the patch above must hold: vLLM's CPU workers."""
