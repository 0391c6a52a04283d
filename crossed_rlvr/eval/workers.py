"""Crossed evaluation spread over Ray workers: every GPU of a node, or every node of a Ray cluster.

Each worker is a Ray actor holding one engine (vLLM on a GPU, transformers on CPUs) for one policy
at a time; the driver splits every unfinished cell into shards of ``distribute.shard_size``
responses, gives each idle worker a shard of the policy it already holds (else of the policy with
the most work left), and writes every finished shard whole into the cell's scratch folder. Records
are built by the driver with the serial run's own code (``runner.make_record``) from what the
workers return, and every response depends only on its item seed, so the files are byte for byte
those of a serial run: resumable per shard after a worker or the driver is killed. A worker that
dies is replaced and its shard retried (``distribute.max_retries``); a shard that still fails is
reported with its cell, and its cell is not written.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

from crossed_rlvr.eval.runner import (
    Cell,
    Plan,
    RunError,
    _backend,
    _release,
    finish_cell,
    generate,
    make_record,
    todo_of,
    unfinished,
)
from crossed_rlvr.files import atomic_write_jsonl


class CellWorker:
    """One worker: an engine for one policy at a time, serving shards of its cells (a Ray actor)."""

    def __init__(self, gen: dict[str, Any], threads: int | None):
        from omegaconf import OmegaConf

        if threads:  # each worker its share of the node's cores, as the serial run has all of them
            import torch

            torch.set_num_threads(int(threads))
        self.gen = OmegaConf.create(gen)
        self.loaded: dict[str, Any] = {}

    def info(self) -> dict[str, Any]:
        import ray
        import torch  # noqa: F401  (so the machine record names the torch threads and the GPU)
        import transformers  # noqa: F401  (imported while the workers start side by side, not in the first shard)

        from crossed_rlvr.machine import machine

        return {"pid": os.getpid(), "node": ray.util.get_node_ip_address(), "gpus": ray.get_gpu_ids(),
                "machine": machine()}

    def run(self, path: str, request: str, template: str, system: str | None, todo: list, params: Any
            ) -> list[tuple[int, str, Any]]:
        if path not in self.loaded:
            _release(self.loaded)  # one policy in memory: the scheduler keeps a worker on its policy
            self.loaded[path] = _backend(path, self.gen)
        backend, tokenizer = self.loaded[path]
        out: list[tuple[int, str, Any]] = []
        for batch in generate(backend, tokenizer, todo, request, template, system, int(self.gen.base_seed),
                              int(self.gen.batch_size), params):
            out += batch
        return out


@dataclass
class Shard:
    cell: Cell
    todo: list[tuple[int, dict[str, Any], int]]
    tries: int = 0

    @property
    def file_name(self) -> str:
        k, _it, s = self.todo[0]
        return f"{k:07d}-{s:05d}.jsonl"


def shards_of(cell: Cell, todo: list, size: int) -> list[Shard]:
    return [Shard(cell, todo[b : b + size]) for b in range(0, len(todo), size)]


def _connect(dist: Any, need: dict[str, float]) -> bool:
    """Join the Ray cluster at ``distribute.address`` or start a local one; True when connected here (the
    run disconnects at its end: a local Ray stops, a cluster stays up). Refuses a request the cluster
    cannot hold (Ray would wait for it forever)."""
    import ray

    started = False
    if not ray.is_initialized():
        kw: dict[str, Any] = {"log_to_driver": bool(dist.log_to_driver)}
        if dist.address:
            ray.init(address=str(dist.address), **kw)
        else:
            ray.init(include_dashboard=False, **kw)
        started = True
    have = ray.cluster_resources()
    short = {k: (v, have.get(k, 0.0)) for k, v in need.items() if v > have.get(k, 0.0)}
    if short:
        if started:
            ray.shutdown()
        said = ", ".join(f"{v:g} {k} (the cluster has {h:g})" for k, (v, h) in short.items())
        raise RunError(f"distribute.workers={int(dist.workers)} needs {said}; lower distribute.workers or the "
                       "resources per worker (distribute.cpus_per_worker, distribute.gpus_per_worker)")
    return started


def _check(cfg: Any) -> None:
    from crossed_rlvr.conf.checks import ConfigError, check_distribute

    try:  # the command's own check, again for callers of run_eval that composed no command
        check_distribute(cfg)
    except ConfigError as err:
        raise RunError(str(err)) from None


def run_distributed(cfg: Any, p: Plan, summary: dict[str, Any], bar: Any, tracker: Any,
                    on_event: Any = None) -> list[dict[str, Any]]:
    """Generate every missing response of ``p`` on Ray workers; returns the workers' machines."""
    import ray
    from omegaconf import OmegaConf

    _check(cfg)
    dist = cfg.distribute
    tell = on_event or (lambda kind, info: None)
    # what is left: every unfinished cell's missing responses, in shards, queued per policy
    size = int(dist.shard_size) if dist.shard_size is not None else 4 * int(cfg.eval.batch_size)
    queues: dict[str, deque[Shard]] = defaultdict(deque)
    remaining: dict[str, int] = {}
    done_of: dict[str, dict] = {}
    started_at: dict[str, float] = {}
    for cell, done in unfinished(p, bool(cfg.overwrite), bar, summary):
        done_of[cell.name] = done
        shards = shards_of(cell, todo_of(cell, done), size)
        remaining[cell.name] = len(shards)
        queues[cell.pol.path].extend(shards)
    for cell in p.cells:  # cells already whole on disk (every shard written before a kill)
        if cell.name in remaining and remaining[cell.name] == 0:
            summary[cell.name] = finish_cell(cell, done_of.pop(cell.name), 0.0)
    if not any(queues.values()):
        return []

    cpus, gpus = float(dist.cpus_per_worker), float(dist.gpus_per_worker)
    n = int(dist.workers)
    started = _connect(dist, {"CPU": n * cpus, **({"GPU": n * gpus} if gpus else {})})
    gen = OmegaConf.to_container(cfg.eval, resolve=True)
    remote = ray.remote(CellWorker).options(num_cpus=cpus, num_gpus=gpus)
    threads = int(cpus) if cpus >= 1 and not gpus else None
    failed: list[tuple[Shard, str]] = []
    machines: list[dict[str, Any]] = []
    pids: dict[Any, int] = {}

    def start_workers(k: int) -> list[Any]:
        """k new workers, started side by side; those not up within the timeout are given up."""
        actors = [remote.remote(gen, threads) for _ in range(k)]
        refs = {a.info.remote(): a for a in actors}
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=float(dist.start_timeout_s))
        for ref in late:
            ray.kill(refs[ref])
        up = []
        for ref in ready:
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # died while starting
            if info["machine"] not in machines:
                machines.append(info["machine"])
            pids[refs[ref]] = info["pid"]
            tell("worker", info)
            up.append(refs[ref])
        return up

    holds: dict[Any, str | None] = {}  # worker -> the policy its engine holds
    in_flight: dict[Any, tuple[Any, Shard]] = {}
    try:
        holds.update(dict.fromkeys(start_workers(n)))
        if not holds:
            raise RunError(f"no Ray worker started within {dist.start_timeout_s} s (distribute.start_timeout_s)")

        def next_shard(worker: Any) -> Shard | None:
            mine = holds[worker]
            if mine is not None and queues.get(mine):
                return queues[mine].popleft()
            busy = {holds[w] for w, _ in in_flight.values()}
            left = [(len(q), path not in busy, path) for path, q in queues.items() if q]
            if not left:
                return None
            _n, _free, path = max(left)  # the policy with most work, preferably one nobody holds
            return queues[path].popleft()

        def submit(worker: Any) -> None:
            shard = next_shard(worker)
            if shard is None:
                return
            c = shard.cell
            started_at.setdefault(c.name, time.perf_counter())
            holds[worker] = c.pol.path
            ref = worker.run.remote(c.pol.path, c.request, c.template, p.system, shard.todo, p.params)
            in_flight[ref] = (worker, shard)

        for w in list(holds):
            submit(w)
        while in_flight:
            [ref], _ = ray.wait(list(in_flight), num_returns=1)
            worker, shard = in_flight.pop(ref)
            cell = shard.cell
            try:
                outs = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                    ray.exceptions.ObjectLostError) as err:
                # the worker (or its node) died: replace it and give its shard to whoever is free
                holds.pop(worker, None)
                shard.tries += 1
                why = type(err).__name__
                tell("worker_died", {"cell": cell.name, "shard": shard.file_name, "tries": shard.tries,
                                     "pid": pids.get(worker)})
                if shard.tries > int(dist.max_retries):
                    failed.append((shard, why))
                else:
                    queues[cell.pol.path].appendleft(shard)
                for fresh in start_workers(1):
                    holds[fresh] = None
                    submit(fresh)
                for w in [w for w in holds if w not in {x for x, _ in in_flight.values()}]:
                    submit(w)  # a worker idle because the queues were empty may take the requeued shard
                continue
            except ray.exceptions.RayTaskError as err:  # the generation itself failed: as in a serial run
                cause = err.cause if isinstance(err.cause, Exception) else None
                if isinstance(cause, ValueError):  # RunError, ContextLengthError, ...: the user's to fix
                    raise cause from None
                raise RunError(f"{cell.name}: a worker failed: {err}") from None
            records = [make_record(p, cell, it, s, seed, sha, out)
                       for (_k, it, s), (seed, sha, out) in zip(shard.todo, outs, strict=True)]
            cell.shards.mkdir(parents=True, exist_ok=True)
            atomic_write_jsonl(cell.shards / shard.file_name, records)  # whole or absent: resume per shard
            done = done_of[cell.name]
            for rec in records:
                done[(rec["item_id"], rec["sample_idx"])] = rec
            bar.update(len(records))
            tell("shard", {"cell": cell.name, "shard": shard.file_name, "responses": len(records),
                           "pid": pids.get(worker)})
            remaining[cell.name] -= 1
            if remaining[cell.name] == 0 and not any(f.cell is cell for f, _ in failed):
                summary[cell.name] = finish_cell(cell, done_of.pop(cell.name),
                                                 time.perf_counter() - started_at.get(cell.name, time.perf_counter()))
                if tracker is not None:
                    tracker.log({f"{cell.name}/{k}": v for k, v in summary[cell.name].items()})
            submit(worker)
    finally:
        for w in holds:
            ray.kill(w)
        if started:
            ray.shutdown()
    lost = [q for qs in queues.values() for q in qs]  # left when every worker died and none could start
    if failed or lost:
        cells = sorted({s.cell.name for s, _ in failed} | {s.cell.name for s in lost})
        n_resp = sum(len(s.todo) for s, _ in failed) + sum(len(s.todo) for s in lost)
        raise RunError(f"{len(failed) + len(lost)} shards ({n_resp} responses) not generated after "
                       f"{int(dist.max_retries)} retries (workers died: "
                       f"{', '.join(sorted({w for _, w in failed})) or 'none left'}) in cells {', '.join(cells)}; "
                       "the other shards are kept: re-run to generate the rest")
    return machines


EVAL_SLURM_HEADER = """#!/usr/bin/env bash
#SBATCH --job-name={job}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus}
#SBATCH --cpus-per-task={cpus}
#SBATCH --exclusive
# A Ray cluster across the allocated nodes (the same start as the verl arms' scripts), then the crossed
# evaluation driven from its head: {workers} workers, {per_worker} GPU(s) each.
# HEAD_IP overrides the head's address; RAY_JOIN_TIMEOUT (s) bounds the wait for every node to join.
set -euo pipefail
"""
EVAL_SLURM_RUN = """srun --overlap --nodes=1 --ntasks=1 -w "$head" \\
  {command} \\
  distribute.address="$head_ip:$port" distribute.workers={workers} distribute.gpus_per_worker={per_worker}
"""


def slurm_script(command: list[str], nodes: int, gpus: int, cpus: int, per_worker: int = 1) -> str:
    """An sbatch script: Ray over ``nodes`` nodes of ``gpus`` GPUs, then ``command`` (crossed-eval or
    crossed-study with its overrides) on the head, with one worker per ``per_worker`` GPUs of the cluster."""
    import shlex
    import sys
    from pathlib import Path

    from crossed_rlvr.train.verl_engine import RAY_CLUSTER

    if nodes < 1 or gpus < 1 or cpus < 1 or per_worker < 1 or gpus % per_worker:
        raise ValueError(f"--nodes {nodes}, --gpus-per-node {gpus}, --cpus-per-node {cpus}, --gpus-per-worker "
                         f"{per_worker}: positive, and a node's GPUs a multiple of a worker's")
    if not command:
        raise ValueError("no command after --: give crossed-eval or crossed-study with its overrides")
    bin_dir = Path(sys.executable).absolute().parent
    head = str(bin_dir / command[0]) if (bin_dir / command[0]).exists() else command[0]  # this install's
    fields = {"python": shlex.quote(str(Path(sys.executable).absolute())), "ray": shlex.quote(str(bin_dir / "ray")),
              "nodes": nodes, "gpus": gpus, "cpus": cpus, "workers": nodes * gpus // per_worker,
              "per_worker": per_worker, "job": "crossed-eval",
              "command": " ".join(shlex.quote(x) for x in [head, *command[1:]])}
    return (EVAL_SLURM_HEADER + RAY_CLUSTER + EVAL_SLURM_RUN).format(**fields)


def main(argv: list[str] | None = None) -> int:
    """``python -m crossed_rlvr.eval.workers slurm ... -- crossed-eval OVERRIDES``: write the sbatch script."""
    import argparse
    import sys
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m crossed_rlvr.eval.workers",
                                     description="Write an sbatch script that runs the crossed evaluation on "
                                                 "every GPU of a SLURM allocation through Ray.")
    parser.add_argument("kind", choices=["slurm"])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, required=True)
    parser.add_argument("--cpus-per-node", type=int, default=16)
    parser.add_argument("--gpus-per-worker", type=int, default=1, help="= eval.tensor_parallel_size")
    parser.add_argument("-o", "--output", required=True)
    parser.epilog = "after --: crossed-eval or crossed-study with its overrides"
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    command = argv[cut + 1 :]
    out = Path(args.output)
    try:
        if out.exists():
            raise ValueError(f"{out} exists; refusing to overwrite it")
        text = slurm_script(command, args.nodes, args.gpus_per_node, args.cpus_per_node, args.gpus_per_worker)
    except ValueError as err:
        print(f"crossed-eval slurm: {err}", file=sys.stderr)
        return 2
    out.write_text(text)
    out.chmod(0o755)
    print(f"{out}: sbatch {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
