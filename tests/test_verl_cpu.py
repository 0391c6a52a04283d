"""verl's CPU platform (crossed_rlvr/train/verl_cpu.py): loaded by verl itself through its plugin variables,
chosen only when asked for, gloo collectives through verl's own process-group function, and a canary on
the one function it patches."""

from __future__ import annotations

import inspect
import json
import os
import socket
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import json, os
    import torch
    import verl  # imports crossed_rlvr.train.verl_cpu itself (VERL_USE_EXTERNAL_MODULES)
    from verl.plugin.platform import PlatformRegistry, get_platform
    from verl.utils.device import get_device_id, get_device_name, get_nccl_backend, get_torch_device
    import verl.utils.distributed as dist
    from verl.workers import engine_workers
    from crossed_rlvr.train import verl_cpu

    dist.initialize_global_process_group_ray(timeout_second=60)
    free, total = get_torch_device().mem_get_info()
    x = torch.ones(3).to(get_device_id())
    torch.distributed.all_reduce(x)
    print(json.dumps({
        "platform": type(get_platform()).__name__, "device": get_device_name(), "backend": get_nccl_backend(),
        "group": torch.distributed.get_backend(), "sum": x.tolist(), "tensor_device": str(x.device),
        "memory": [free, total], "stats": get_torch_device().max_memory_allocated(),
        "engine_workers_patched": engine_workers.initialize_global_process_group_ray is verl_cpu.initialize_global_process_group_ray,
        "auto_detects_cpu": PlatformRegistry.get("cpu")().is_platform_available(use_smi_check=True),
    }))
""")


def test_verl_loads_the_cpu_platform_and_runs_gloo_through_its_own_function():
    from crossed_rlvr.train.verl_cpu import ENV

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1"}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=False,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["platform"] == "PlatformCPU" and out["device"] == "cpu" and out["backend"] == "gloo"
    assert out["group"] == "gloo" and out["sum"] == [1.0, 1.0, 1.0] and out["tensor_device"] == "cpu"
    assert 0 < out["memory"][0] <= out["memory"][1] and out["stats"] == 0
    assert out["engine_workers_patched"] is True  # patched before engine_workers took the name
    assert out["auto_detects_cpu"] is False  # never picked on a GPU node without VERL_PLATFORM=cpu


def test_canary_the_patched_verl_function_is_the_one_the_patch_was_written_for():
    """When a verl release changes ``initialize_global_process_group_ray``, this fails: re-read the function and
    decide whether the CPU platform still needs the patch (train/verl_cpu.py)."""
    from crossed_rlvr.train import verl_cpu

    assert verl_cpu.patched_source_matches(), inspect.getsource(verl_cpu.ORIGINAL)
    assert list(inspect.signature(verl_cpu.ORIGINAL).parameters) == ["timeout_second", "backend"]
