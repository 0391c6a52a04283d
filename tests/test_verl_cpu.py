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


def test_canary_verls_value_head_import_is_still_guarded_by_the_patched_check():
    """verl 0.9.1 builds no actor beside TRL 1.16 unless its "is TRL available" check asks for the value-head
    model (train/verl_compat.py); this fails when a verl release changes the guarded import."""
    import verl.models.transformers.monkey_patch as monkey_patch

    from crossed_rlvr.train import verl_compat

    assert verl_compat.patched_source_matches(), inspect.getsource(monkey_patch.apply_monkey_patch)
    assert monkey_patch.is_trl_available is verl_compat.value_head_available
    try:
        from trl import AutoModelForCausalLMWithValueHead  # noqa: F401
        has_value_head = True
    except ImportError:
        has_value_head = False
    assert verl_compat.value_head_available() is has_value_head


def test_the_launchers_plugin_variables_are_the_platforms():
    from crossed_rlvr.train.verl_cpu import ENV
    from crossed_rlvr.train.verl_launch import PLUGINS, cpu_env

    assert cpu_env() == ENV and ENV["VERL_USE_EXTERNAL_MODULES"].startswith(PLUGINS + ",")


def test_rollout_tokens_are_seeded_and_carry_the_actors_log_probs():
    """The transformers rollout: the same (seed, update, prompt, sample) draws the same token; another sample
    draws from another stream; each log-prob is log_softmax(logits / T) of the token; greedy is the argmax."""
    import torch

    from crossed_rlvr.train.verl_rollout import next_token, sample_seed

    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))
    seeds = [sample_seed(83, 2, [1, 2, 3], k) for k in range(8)]
    assert len(set(seeds)) == 8 and seeds[0] == sample_seed(83, 2, [1, 2, 3], 0) != sample_seed(83, 3, [1, 2, 3], 0)

    def draw(seed: int, temperature: float = 0.7, top_p: float = 1.0) -> list[tuple[int, float]]:
        g = torch.Generator().manual_seed(seed)
        return [next_token(logits, temperature, top_p, -1, g) for _ in range(20)]

    assert draw(seeds[0]) == draw(seeds[0]) and draw(seeds[0]) != draw(seeds[1])
    for token, logp in draw(seeds[0]):
        assert abs(logp - float(torch.log_softmax(logits / 0.7, -1)[token])) < 1e-6
    kept = torch.sort(torch.softmax(logits / 0.7, -1), descending=True)
    nucleus = set(kept.indices[: int((torch.cumsum(kept.values, -1) < 0.5).sum()) + 1].tolist())
    assert {t for t, _ in draw(seeds[2], top_p=0.5)} <= nucleus
    token, logp = next_token(logits, 0.0, 1.0, -1, torch.Generator())
    assert token == int(torch.argmax(logits)) and abs(logp - float(torch.log_softmax(logits, -1)[token])) < 1e-6
