"""Crossed evaluation spread over Ray workers: every GPU of a node, or every node of a Ray cluster.

Each worker is a Ray actor holding one engine (vLLM on a GPU, transformers on CPUs) for one policy
at a time; the driver splits every unfinished cell into shards of ``distribute.shard_size``
responses, gives each idle worker a shard of the policy it already holds (else of the policy with
the most work left), and writes every finished shard whole into the cell's scratch folder. Records
are built by the driver with the serial run's own code (``runner.make_record``) from what the
workers return, and every response depends only on its item seed, so in float32 the files are byte for
byte those of a serial run (in bfloat16 a row's arithmetic depends on its batch-mates: docs/cluster-eval.md);
resumable per shard after a worker or the driver is killed. A worker that
dies is replaced and its shard retried (``distribute.max_retries``); a shard that still fails is
reported with its cell, and its cell is not written.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crossed_rlvr.cluster import WARNING_S
from crossed_rlvr.eval.generate.engines import load_backend, release
from crossed_rlvr.eval.generate.plan import (
    Cell,
    Plan,
    Prompt,
    RunError,
    cell_writes,
    finish_cell,
    generate,
    make_record,
    todo_of,
    unfinished,
)
from crossed_rlvr.files import atomic_write_jsonl, settings
from crossed_rlvr.layout import EvalLayout
from crossed_rlvr.limits import Parser, add_number

if TYPE_CHECKING:
    from ray.actor import ActorHandle
    from tqdm import tqdm
    from transformers import PreTrainedTokenizerBase

    from crossed_rlvr.conf.schema import DistributeConf, EvalCommandConf
    from crossed_rlvr.eval.generate.engines import Backend, Generation, GenParams
    from crossed_rlvr.tracking import Tracker

# told of worker starts and finished shards (tests, monitoring)
OnEvent = Callable[[str, dict[str, Any]], None]


class CellWorker:
    """One worker: an engine for one policy at a time, serving shards of its cells (a Ray actor)."""

    def __init__(self, gen: dict[str, Any], threads: int | None):
        from crossed_rlvr.conf.schema import EvalConf, conf_of

        if threads:  # each worker its share of the node's cores, as the serial run has all of them
            import torch

            torch.set_num_threads(int(threads))
        self.gen = conf_of(EvalConf, gen)  # sent as plain values (a Ray actor's arguments), typed here once
        self.loaded: dict[str, tuple[Backend, PreTrainedTokenizerBase]] = {}

    def info(self) -> dict[str, Any]:
        import ray
        import torch  # noqa: F401  (so the machine record names the torch threads and the GPU)
        import transformers  # noqa: F401  (imported while the workers start side by side, not in the first shard)

        from crossed_rlvr.machine import machine

        return {"pid": os.getpid(), "node": ray.util.get_node_ip_address(), "gpus": ray.get_gpu_ids(),
                "machine": machine()}

    def run(self, path: str, request: str, template: str, system: str | None,
            todo: list[tuple[int, dict[str, Any], int]], params: GenParams, prompt: Prompt
            ) -> list[tuple[int, str, Generation]]:
        if path not in self.loaded:
            release(self.loaded)  # one policy in memory: the scheduler keeps a worker on its policy
            self.loaded[path] = load_backend(path, self.gen)
        backend, tokenizer = self.loaded[path]
        out: dict[int, tuple[int, str, Generation]] = {}
        for batch in generate(backend, tokenizer, todo, request, template, system, int(self.gen.base_seed),
                              int(self.gen.batch_size), params, prompt):
            for at, seed, sha, gen in batch:
                out[at] = (seed, sha, gen)
        return [out[at] for at in range(len(todo))]  # in the shard's order


@dataclass
class Shard:
    cell: Cell
    todo: list[tuple[int, dict[str, Any], int]]
    tries: int = 0

    @property
    def file_name(self) -> str:
        k, _it, s = self.todo[0]
        return EvalLayout.shard_name(k, s)


def shards_of(cell: Cell, todo: list[tuple[int, dict[str, Any], int]], size: int) -> list[Shard]:
    return [Shard(cell, todo[b : b + size]) for b in range(0, len(todo), size)]


def _connect(dist: DistributeConf, need: dict[str, float]) -> bool:
    """Join the Ray cluster at ``distribute.address`` or start a local one; True when connected here (the
    run disconnects at its end: a local Ray stops, a cluster stays up). Refuses a request the cluster
    cannot hold (Ray would wait for it forever)."""
    import ray

    started = False
    if not ray.is_initialized():
        kw: dict[str, Any] = {"log_to_driver": bool(dist.log_to_driver)}
        if dist.address:
            from crossed_rlvr.cluster import ray_auth_for_driver

            ray_auth_for_driver()
            ray.init(address=str(dist.address), **kw)
        else:  # "local": a new Ray here, never the cluster a leftover /tmp/ray/ray_current_cluster names
            ray.init(address="local", include_dashboard=False, **kw)
        from crossed_rlvr.interrupt import reclaim

        reclaim()  # SIGTERM is the command's to handle (Ray's driver took it over)
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


def _check(cfg: EvalCommandConf) -> None:
    from crossed_rlvr.conf.checks import ConfigError, check_distribute

    try:  # the command's own check, again for callers of run_eval that composed no command
        check_distribute(cfg)
    except ConfigError as err:
        raise RunError(str(err)) from None


def queue_shards(cfg: EvalCommandConf, p: Plan, summary: dict[str, Any], bar: tqdm
                 ) -> tuple[dict[str, deque[Shard]], dict[str, int], dict[str, dict]]:
    """What is left: every unfinished cell's missing responses in shards, queued per policy; cells already
    whole on disk (every shard written before a kill) are finished here."""
    size = int(cfg.distribute.shard_size) if cfg.distribute.shard_size is not None else 4 * int(cfg.eval.batch_size)
    queues: dict[str, deque[Shard]] = defaultdict(deque)
    remaining: dict[str, int] = {}
    done_of: dict[str, dict] = {}
    for cell, done in unfinished(p, bool(cfg.overwrite), bar, summary):
        done_of[cell.name] = done
        shards = shards_of(cell, todo_of(cell, done), size)
        remaining[cell.name] = len(shards)
        queues[cell.pol.path].extend(shards)
    for cell in p.cells:
        if cell.name in remaining and remaining[cell.name] == 0:
            with cell_writes(cell):
                summary[cell.name] = finish_cell(cell, done_of.pop(cell.name), 0.0, p.measures)
    return queues, remaining, done_of


class Driver:
    """The scheduling loop of a distributed run: workers started side by side, each given a shard of the
    policy its engine holds (else of the policy with most work left), dead workers replaced and their
    shards retried, finished shards written whole and finished cells written."""

    def __init__(self, cfg: EvalCommandConf, p: Plan, summary: dict[str, Any], bar: tqdm, tracker: Tracker | None,
                 on_event: OnEvent | None, queues: dict[str, deque[Shard]], remaining: dict[str, int], done_of: dict[str, dict]):
        import ray

        self.dist, self.p, self.summary, self.bar, self.tracker = cfg.distribute, p, summary, bar, tracker
        self.tell = on_event or (lambda kind, info: None)
        self.queues, self.remaining, self.done_of = queues, remaining, done_of
        cpus, gpus = float(self.dist.cpus_per_worker), float(self.dist.gpus_per_worker)
        self.gen: dict[str, Any] = settings(cfg.eval)  # plain values: what a Ray actor is sent
        self.remote = ray.remote(CellWorker).options(num_cpus=cpus, num_gpus=gpus)
        self.threads = int(cpus) if cpus >= 1 and not gpus else None
        self.failed: list[tuple[Shard, str]] = []
        self.machines: list[dict[str, Any]] = []
        self.pids: dict[Any, int] = {}
        self.holds: dict[Any, str | None] = {}  # worker -> the policy its engine holds
        self.in_flight: dict[Any, tuple[Any, Shard]] = {}
        self.started_at: dict[str, float] = {}

    def start_workers(self, k: int) -> list[Any]:
        """k new workers, started side by side; those not up within the timeout are given up."""
        import ray

        actors = [self.remote.remote(self.gen, self.threads) for _ in range(k)]
        refs = {a.info.remote(): a for a in actors}
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=float(self.dist.start_timeout_s))
        for ref in late:
            ray.kill(refs[ref])
        up = []
        for ref in ready:
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # died while starting
            if info["machine"] not in self.machines:
                self.machines.append(info["machine"])
            self.pids[refs[ref]] = info["pid"]
            self.tell("worker", info)
            up.append(refs[ref])
        return up

    def next_shard(self, worker: ActorHandle) -> Shard | None:
        mine = self.holds[worker]
        if mine is not None and self.queues.get(mine):
            return self.queues[mine].popleft()
        busy = {self.holds[w] for w, _ in self.in_flight.values()}
        left = [(len(q), path not in busy, path) for path, q in self.queues.items() if q]
        if not left:
            return None
        _n, _free, path = max(left)  # the policy with most work, preferably one nobody holds
        return self.queues[path].popleft()

    def submit(self, worker: ActorHandle) -> None:
        shard = self.next_shard(worker)
        if shard is None:
            return
        c = shard.cell
        self.started_at.setdefault(c.name, time.perf_counter())
        self.holds[worker] = c.pol.path
        ref = worker.run.remote(c.pol.path, c.request, c.template, self.p.system, shard.todo, self.p.params,
                                self.p.prompt)
        self.in_flight[ref] = (worker, shard)

    def worker_died(self, worker: ActorHandle, shard: Shard, err: Exception) -> None:
        """Replace a dead worker (or one whose node died) and give its shard to whoever is free."""
        self.holds.pop(worker, None)
        shard.tries += 1
        self.tell("worker_died", {"cell": shard.cell.name, "shard": shard.file_name, "tries": shard.tries,
                                  "pid": self.pids.get(worker)})
        if shard.tries > int(self.dist.max_retries):
            self.failed.append((shard, type(err).__name__))
        else:
            self.queues[shard.cell.pol.path].appendleft(shard)
        for fresh in self.start_workers(1):
            self.holds[fresh] = None
            self.submit(fresh)
        for w in [w for w in self.holds if w not in {x for x, _ in self.in_flight.values()}]:
            self.submit(w)  # a worker idle because the queues were empty may take the requeued shard

    def shard_done(self, worker: ActorHandle, shard: Shard, outs: list[tuple[int, str, Generation]]) -> None:
        """Write a finished shard whole (resume per shard), and its cell when that was the last one."""
        with cell_writes(shard.cell):  # a fault of the machine here: its one line names the cell
            self.write_shard(worker, shard, outs)

    def write_shard(self, worker: ActorHandle, shard: Shard, outs: list[tuple[int, str, Generation]]) -> None:
        cell = shard.cell
        records = [make_record(self.p, cell, it, s, seed, sha, out)
                   for (_k, it, s), (seed, sha, out) in zip(shard.todo, outs, strict=True)]
        cell.shards.mkdir(parents=True, exist_ok=True)
        atomic_write_jsonl(cell.shards / shard.file_name, records)
        done = self.done_of[cell.name]
        for rec in records:
            done[(rec["item_id"], rec["sample_idx"])] = rec
        self.bar.update(len(records))
        self.tell("shard", {"cell": cell.name, "shard": shard.file_name, "responses": len(records),
                            "pid": self.pids.get(worker)})
        self.remaining[cell.name] -= 1
        if self.remaining[cell.name] == 0 and not any(f.cell is cell for f, _ in self.failed):
            seconds = time.perf_counter() - self.started_at.get(cell.name, time.perf_counter())
            self.summary[cell.name] = finish_cell(cell, self.done_of.pop(cell.name), seconds, self.p.measures)
            if self.tracker is not None:
                self.tracker.log({f"{cell.name}/{k}": v for k, v in self.summary[cell.name].items()})

    def run(self) -> None:
        import ray

        self.holds.update(dict.fromkeys(self.start_workers(int(self.dist.workers))))
        if not self.holds:
            raise RunError(f"no Ray worker started within {self.dist.start_timeout_s} s (distribute.start_timeout_s)")
        for w in list(self.holds):
            self.submit(w)
        while self.in_flight:
            [ref], _ = ray.wait(list(self.in_flight), num_returns=1)
            worker, shard = self.in_flight.pop(ref)
            try:
                outs = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                    ray.exceptions.ObjectLostError) as err:
                self.worker_died(worker, shard, err)
                continue
            except ray.exceptions.RayTaskError as err:  # the generation itself failed: as in a serial run
                cause = err.cause if isinstance(err.cause, Exception) else None
                if isinstance(cause, ValueError):  # RunError, ContextLengthError, ...: the user's to fix
                    raise cause from None
                raise RunError(f"{shard.cell.name}: a worker failed: {err}") from None
            self.shard_done(worker, shard, outs)
            self.submit(worker)

    def stop(self) -> None:
        import ray

        for w in self.holds:
            ray.kill(w)

    def check_complete(self) -> None:
        """Say which shards were not generated (the others are kept for a re-run)."""
        lost = [q for qs in self.queues.values() for q in qs]  # left when every worker died and none could start
        if self.failed or lost:
            cells = sorted({s.cell.name for s, _ in self.failed} | {s.cell.name for s in lost})
            n_resp = sum(len(s.todo) for s, _ in self.failed) + sum(len(s.todo) for s in lost)
            why = ", ".join(sorted({w for _, w in self.failed})) or "none left"
            raise RunError(f"{len(self.failed) + len(lost)} shards ({n_resp} responses) not generated after "
                           f"{int(self.dist.max_retries)} retries (workers died: {why}) in cells {', '.join(cells)}; "
                           "the other shards are kept: re-run to generate the rest")


def run_distributed(cfg: EvalCommandConf, p: Plan, summary: dict[str, Any], bar: tqdm, tracker: Tracker | None,
                    on_event: OnEvent | None = None) -> list[dict[str, Any]]:
    """Generate every missing response of ``p`` on Ray workers; returns the workers' machines."""
    import ray

    _check(cfg)
    queues, remaining, done_of = queue_shards(cfg, p, summary, bar)
    if not any(queues.values()):
        return []
    dist = cfg.distribute
    n, cpus, gpus = int(dist.workers), float(dist.cpus_per_worker), float(dist.gpus_per_worker)
    started = _connect(dist, {"CPU": n * cpus, **({"GPU": n * gpus} if gpus else {})})
    driver = Driver(cfg, p, summary, bar, tracker, on_event, queues, remaining, done_of)
    try:
        driver.run()
    finally:
        driver.stop()
        if started:
            ray.shutdown()
    driver.check_complete()
    return driver.machines


# the driver runs in the batch script, on the head: a job step would ask for GPUs that `ray start` holds; in the
# background of the batch shell, which passes SLURM's warning and SIGTERM on and requeues the job after a warned
# stop (crossed_rlvr/cluster.py: REQUEUE)
EVAL_SLURM_RUN = """{command} \\
  distribute.address="$head_ip:$port" distribute.workers={workers} distribute.gpus_per_worker={per_worker}"""


def slurm_script(command: list[str], nodes: int, gpus: int, cpus: int, per_worker: int = 1,
                 warning_s: int = WARNING_S) -> str:
    """An sbatch script: Ray over ``nodes`` nodes of ``gpus`` GPUs, then ``command`` (crossed-eval or
    crossed-study with its overrides) on the head, with one worker per ``per_worker`` GPUs of the cluster; SLURM's
    warning ``warning_s`` seconds before the time limit, after which the job requeues itself (0: neither)."""
    import shlex
    import sys
    from pathlib import Path

    from crossed_rlvr.cluster import RAY_AUTH, RAY_CLUSTER, run_then_settle, slurm_header

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
    header = slurm_header(f"the crossed evaluation driven from its head: {fields['workers']} workers, {per_worker} "
                          "GPU(s) each (the same cluster start as the verl arms' scripts)", warning_s)
    token = "${{SLURM_SUBMIT_DIR:-$PWD}}/.ray_auth_token.${{SLURM_JOB_ID:-local}}"  # the submit folder: shared
    return (header + RAY_AUTH.replace("{token}", token) + RAY_CLUSTER + run_then_settle(EVAL_SLURM_RUN)).format(**fields)


def main(argv: list[str] | None = None) -> int:
    """``python -m crossed_rlvr.eval.generate.workers slurm ... -- crossed-eval OVERRIDES``: write the sbatch script."""
    import sys
    from pathlib import Path

    top = Parser(prog="python -m crossed_rlvr.eval.generate.workers",
                 description="The crossed evaluation on Ray workers' batch scripts.")
    parser = top.add_subparsers(dest="kind", required=True).add_parser(
        "slurm", description="Write an sbatch script that runs the crossed evaluation on every GPU of a SLURM "
                             "allocation through Ray.")
    add_number(parser, "--nodes", 1, 4096, required=True)
    add_number(parser, "--gpus-per-node", 0, 64, required=True, why="0: CPU nodes")
    add_number(parser, "--cpus-per-node", 1, 4096, default=16)
    add_number(parser, "--gpus-per-worker", 0, 64, default=1, why="0: CPU workers", help="= eval.tensor_parallel_size")
    add_number(parser, "--warning-s", 0, 86_400, default=WARNING_S, why="0: no warning and no requeue",
               help=f"SLURM's warning this many seconds before the time limit: the command saves and stops, the job "
                    f"requeues itself (default {WARNING_S})")
    parser.add_argument("-o", "--output", required=True)
    parser.epilog = "after --: crossed-eval or crossed-study with its overrides"
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = top.parse_args(argv[:cut])
    command = argv[cut + 1 :]
    out = Path(args.output)
    try:
        if out.exists():
            raise ValueError(f"{out} exists; refusing to overwrite it")
        text = slurm_script(command, args.nodes, args.gpus_per_node, args.cpus_per_node, args.gpus_per_worker,
                            args.warning_s)
    except ValueError as err:
        print(f"crossed-eval slurm: {err}", file=sys.stderr)
        return 2
    out.write_text(text)
    out.chmod(0o755)
    print(f"{out}: sbatch {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
