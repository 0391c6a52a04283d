"""Resident memory of each kind of process verl 0.9.1 starts on a node beside its GPU workers, measured here.

    python scripts/measure_worker_memory.py                       # on a local Ray (~2 min)
    python scripts/measure_worker_memory.py --vllm-python ENV/bin/python   # vLLM's processes in another env

The host-memory plan (``crossed_rlvr/train/memory.py``: ``WORKER_MIB``) counts these processes; their figures come
from this script. On a local Ray without GPUs, with a tiny Qwen2 model and its tokenizer (built here, no network),
it starts each kind as verl does, then reads each process's ``/proc/<pid>/smaps_rollup`` once it is constructed:

- agent-loop worker: ``AgentLoopWorkerTQ`` (the v1 trainer's, ``ray.remote``), with verl's composed config;
- reward-loop worker: ``ray.remote(RewardLoopWorker)``, the project's reward program loaded;
- TransferQueue: ``tq.init`` with 2 storage units (the controller and the units are Ray actors);
- task runner: verl's ``TaskRunnerV1`` actor after importing what its ``run`` imports (trainer, TransferQueue);
- GPU worker's imports: a Ray actor importing ``verl.workers.engine_workers`` (its offloaded state is planned apart);
- an idle Ray actor (the floor of every one above) and Ray's own daemons (GCS, raylet, log monitor, ...);
- data-loader worker: a ``StatefulDataLoader`` worker over verl's ``RLHFDataset``, forked from a process that
  imported verl's trainer, as the task runner's are;
- vLLM's front end (``LLM`` with ``distributed_executor_backend="mp"``, as verl's server asks), its EngineCore and
  its worker process, on a tiny model, with this interpreter's vLLM (the CPU build ``make setup`` installs: no CUDA
  context or libraries) or ``--vllm-python``'s; skipped where neither has vLLM.

Each figure is in MiB: RSS (what ``ps`` shows; a shared library's pages count in every process), PSS (shared
pages divided among the processes sharing them) and USS (pages only this process holds). Prints a table and
writes ``--out`` (JSON). On the CPU stack (torch's CPU build): a GPU node's processes map CUDA's libraries too.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MIB = 2**20


def memory_of(pid: int) -> dict[str, float]:
    """RSS, PSS and USS of one process in MiB (``/proc/<pid>/smaps_rollup``)."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0]) * 1024
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return {"rss": fields["Rss"] / MIB, "pss": fields["Pss"] / MIB, "uss": uss / MIB}


def fixture(folder: Path) -> Any:
    """A tiny model, a verl parquet of it and verl's config composed for them (the GPU route's rollout name)."""
    import pandas as pd

    from crossed_rlvr.policies.tiny import build_tiny_model
    from crossed_rlvr.train.verl_engine import compose_verl, reward_entry_path

    model = build_tiny_model(folder / "model")
    rows = [{"data_source": "crossed_rlvr/arith", "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
             "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
             "extra_info": {"convention": "hash", "item_id": str(i), "index": i}} for i in range(16)]
    data = folder / "train.parquet"
    pd.DataFrame(rows).to_parquet(data, index=False)
    return compose_verl([f"actor_rollout_ref.model.path={model}", f"data.train_files={data}", f"data.val_files={data}",
                         f"reward.custom_reward_function.path={reward_entry_path()}",
                         "reward.custom_reward_function.name=compute_score", "actor_rollout_ref.rollout.name=vllm",
                         "transfer_queue.backend.SimpleStorage.num_data_storage_units=2"])


KEEP: list[Any] = []  # Ray ends an actor whose last handle is gone: every handle lives until the end


def pid_of(actor: Any) -> int:
    import ray

    KEEP.append(actor)
    return int(ray.get(actor.__ray_call__.remote(lambda self: os.getpid())))


def imports_then_pid(modules: list[str]) -> int:
    import importlib

    for name in modules:
        importlib.import_module(name)
    return os.getpid()


def ray_actors(cfg: Any) -> dict[str, list[int]]:
    """Start each Ray-actor kind as verl does and return its processes' ids, by kind."""
    import ray
    import transfer_queue as tq
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.main_ppo import TaskRunnerV1
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    @ray.remote
    class Idle:
        pass

    tq.init(cfg.transfer_queue)
    out = {"agent-loop worker": [pid_of(AgentLoopWorkerTQ.remote(cfg, None, None, None))],
           "reward-loop worker": [pid_of(ray.remote(RewardLoopWorker).remote(cfg, None))],
           "idle Ray actor": [pid_of(Idle.remote())]}
    runner = TaskRunnerV1.remote()
    KEEP.append(runner)
    out["task runner"] = [int(ray.get(runner.__ray_call__.remote(
        lambda self: imports_then_pid(["transfer_queue", "verl.trainer.ppo.v1", "verl.trainer.ppo.v1.trainer_base"]))))]
    gpu = Idle.remote()
    KEEP.append(gpu)
    out["GPU worker's imports"] = [int(ray.get(gpu.__ray_call__.remote(
        lambda self: imports_then_pid(["verl.workers.engine_workers"]))))]
    out.update(titled({"TransferQueue storage unit": "ray::SimpleStorageUnit",
                       "TransferQueue controller": "ray::TransferQueueController"}))
    return out


def ours() -> list[Any]:
    """This script's processes: Ray's daemons and workers it started (not another Ray session's on this node)."""
    import psutil

    return psutil.Process().children(recursive=True)


def titled(titles: dict[str, str]) -> dict[str, list[int]]:
    """Process ids by kind, found by their process title (Ray names an actor's process ``ray::<Class>``)."""
    found: dict[str, list[int]] = {kind: [] for kind in titles}
    for proc in ours():
        line = " ".join(proc.cmdline())
        for kind, title in titles.items():
            if line.startswith(title):
                found[kind].append(proc.pid)
    return found


def ray_daemons() -> list[int]:
    """Ray's own processes (GCS, raylet, dashboard, log monitor, ...): those it started but its workers."""
    return [p.pid for p in ours() if "/ray/" in " ".join(p.cmdline()) and "default_worker.py" not in
            " ".join(p.cmdline())]


def dataloader_worker(cfg: Any) -> list[int]:
    """One worker of verl's train data loader, forked from this process (verl's trainer imported, as in the task
    runner), kept alive while it is measured."""
    import gc

    import psutil
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import collate_fn

    tokenizer = hf_tokenizer(cfg.actor_rollout_ref.model.path)
    dataset = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None, is_train=True)
    # a full collection in the worker writes to every tracked object it inherited, as the first one of a long run
    # does: the pages it shared with its parent become its own (copy-on-write)
    loader = StatefulDataLoader(dataset, batch_size=4, num_workers=1, collate_fn=collate_fn,
                                worker_init_fn=lambda _: gc.collect())
    it = iter(loader)
    next(it)
    KEEP.append(it)  # its worker lives as long as the iterator
    return [c.pid for c in psutil.Process().children() if "ray" not in " ".join(c.cmdline())]


VLLM_PROBE = r"""
import json, sys

import psutil


def main():
    from vllm import LLM

    # a 16 MiB KV cache: on a GPU it lives on the card, not in the worker's host memory
    llm = LLM(model=sys.argv[1], distributed_executor_backend="mp", enforce_eager=True, max_model_len=256,
              dtype="float32", kv_cache_memory_bytes=16 * 2**20)
    llm.generate(["hello"])
    me = psutil.Process()
    kids = [[c.pid, " ".join(c.cmdline())] for c in me.children(recursive=True)]
    print(json.dumps({"front": me.pid, "children": kids}), flush=True)
    sys.stdin.read()  # measured: the caller closes stdin, and vLLM shuts its processes down on the way out


if __name__ == "__main__":  # vLLM's processes are spawned: they import this file again
    main()
"""


def vllm_processes(python: str, folder: Path) -> dict[str, dict[str, float]]:
    """vLLM's front end, EngineCore and worker on a tiny model (head_dim 32, as vLLM's CPU attention needs), each
    measured while the engine is up."""
    from crossed_rlvr.policies.tiny import TinyConfig, build_tiny_model

    model = build_tiny_model(folder / "vllm-model", TinyConfig(hidden_size=64, intermediate_size=128,
                                                               num_hidden_layers=1, num_attention_heads=2,
                                                               num_key_value_heads=1))
    probe = folder / "vllm_probe.py"
    probe.write_text(VLLM_PROBE)
    proc = subprocess.Popen([python, str(probe), str(model)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        line = next(x for x in proc.stdout if x.startswith("{"))  # type: ignore[union-attr]
        seen = json.loads(line)
        out = {"vLLM front end (verl's server actor)": memory_of(seen["front"])}
        for pid, cmd in seen["children"]:
            kind = "vLLM EngineCore" if "EngineCore" in cmd else "vLLM worker" if "Worker" in cmd else None
            if kind is not None:
                out[kind] = memory_of(pid)
        return out
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """End the probe and vLLM's processes: its own way out first, then its whole process group."""
    import signal

    proc.stdin.close()  # type: ignore[union-attr]
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # its session: vLLM's EngineCore and worker too


def measured(pids: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """The largest of each kind's processes (one per kind here)."""
    return {kind: max((memory_of(p) for p in found), key=lambda m: m["rss"]) for kind, found in pids.items() if found}


def daemons_total() -> dict[str, float]:
    total = {"rss": 0.0, "pss": 0.0, "uss": 0.0}
    for pid in ray_daemons():
        try:
            for key, value in memory_of(pid).items():
                total[key] += value
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass  # a short-lived helper gone meanwhile
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", help="an interpreter with vLLM (default: this one, if it has vLLM)")
    parser.add_argument("--out", default="worker_memory.json")
    args = parser.parse_args(argv)
    import ray

    with tempfile.TemporaryDirectory() as tmp:
        cfg = fixture(Path(tmp))
        ray.init(num_cpus=16, num_gpus=0, log_to_driver=False)  # Ray's dashboard on, as verl's GPU route starts it
        try:
            start = time.perf_counter()
            found = ray_actors(cfg)
            found["data-loader worker (forked)"] = dataloader_worker(cfg)
            time.sleep(2.0)  # let each actor settle after its constructor
            result = measured(found)
            result["Ray daemons (all of them)"] = daemons_total()
            seconds = time.perf_counter() - start
        finally:
            ray.shutdown()
        python = args.vllm_python or (sys.executable if importlib.util.find_spec("vllm") else None)
        if python:
            result.update(vllm_processes(python, Path(tmp)))
    rows = [f"{'process':<40s} {'RSS':>8s} {'PSS':>8s} {'USS':>8s}  (MiB)"]
    rows += [f"{k:<40s} {v['rss']:8.0f} {v['pss']:8.0f} {v['uss']:8.0f}" for k, v in result.items()]
    print("\n".join(rows) + f"\n(Ray actors started and measured in {seconds:.0f} s)")
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
