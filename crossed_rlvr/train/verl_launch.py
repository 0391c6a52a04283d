"""The launch scripts' entry into verl: preflight, a watchdog on Ray's waits, then verl's own ``run_ppo``.

    python -m crossed_rlvr.train.verl_launch [--weighted] [--rehearse GPUS | --cpu RANKS] [--wait-limit S] -- OVERRIDES...

It composes verl's ``ppo_trainer`` config with the arm's overrides exactly as ``verl.trainer.main_ppo``
does, runs verl's ``validate_config``, and then:

1. **Preflight**: on a real launch, torch must see the GPUs (else it says why: driver too old for the
   locked CUDA 13 stack, no driver, a CPU build of torch); the CPUs and GPUs Ray is given (the local
   ``ray_kwargs.ray_init`` values, or every node of the cluster at ``RAY_ADDRESS``) must cover what verl
   will reserve (``crossed_rlvr.train.budget``); otherwise it stops at once with the budget named.
2. **Watchdog**: verl waits on Ray without timeouts; a thread in this driver watches Ray's placement
   groups and actors and ends the run, with the budget and what Ray still has free, when any of them
   has waited for resources longer than ``--wait-limit`` seconds.
3. **verl**: ``run_ppo`` with our task runner (verl's ``TaskRunnerV1``, train/verl_weighted.py), which builds
   ``ImportanceWeightedTrainer`` (``--weighted``) or ``CrossedSyncTrainer`` in verl's sync mode.

Every launch makes verl load ``crossed_rlvr.train.verl_compat`` in each of its processes (the TRL fix every verl
0.9.1 launch needs); ``--cpu N`` trains on this CPU instead of GPUs, through verl's plugin seams
(``crossed_rlvr.train.verl_cpu``: N gloo ranks, FSDP2, verl's vLLM rollout on vLLM's CPU build). The arm a launch
trains is read from verl's composed config, as verl will run it (``launched_arm``: the arm whose checkpoints folder
is ``trainer.default_local_dir``), never by splitting an override; its files are the layout's (ArmLayout: verl's
tracker file and step folders, the memory plan, the metrics). Each launch's per-update metrics go to a file of its
own in the arm's ``verl_metrics`` folder (``read_metrics`` merges them), and the preflight refuses a latest
checkpoint whose optimizer state is gone (``unresumable``) before Ray starts.

``--rehearse N`` is the launch rehearsal on a machine without GPUs: Ray is started locally with the
preset's CPUs and N logical GPUs, verl starts for real (TransferQueue, resource pools, placement groups,
trainer class, worker construction), and the first error that needs a CUDA device is reported as the
point reached (``REACHED ...``, exit 0). Any other error, or a wait past the limit, fails (exit 1 or 3).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.cluster import say
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.limits import Parser, add_number
from crossed_rlvr.train.budget import Budget, BudgetError, verl_budget

if TYPE_CHECKING:
    from crossed_rlvr.train.budget import VerlConfig

# Errors that mean "this needs a CUDA device" (torch on a CPU machine, verl's workers, vLLM).
CUDA_NEEDED = (r"doesn't have NCCL built in", r"Torch not compiled with CUDA enabled", r"No CUDA GPUs are available",
               r"Found no NVIDIA driver", r"CUDA driver version is insufficient", r"no CUDA-capable device",
               r"ProcessGroupNCCL", r"torch\.cuda\.\w+.*(not available|no device)")
WAIT_EXIT = 3
# ------------------------------------------------------------------ preflight
def gpu_problem() -> str | None:
    """None when torch sees a GPU; else what is wrong, as exactly as this node lets us tell."""
    import shutil
    import subprocess

    import torch

    if torch.cuda.is_available():
        return None
    built = torch.version.cuda
    if built is None:
        return (f"torch {torch.__version__} is a CPU build: install the project's GPU stack "
                "(pip install -e '.[gpu]', torch 2.11.0 for CUDA 13)")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return (f"torch {torch.__version__} (CUDA {built}) sees no GPU and nvidia-smi is not on PATH: no NVIDIA "
                "driver on this node, or no GPU allocated to this job")
    out = subprocess.run([smi, "--query-gpu=driver_version,name", "--format=csv,noheader"], capture_output=True,
                         text=True, check=False, timeout=30)
    if out.returncode != 0:
        return f"nvidia-smi failed ({out.stderr.strip() or out.stdout.strip()}): the NVIDIA driver is not working"
    driver = out.stdout.strip().splitlines()[0].split(",")[0].strip() if out.stdout.strip() else "unknown"
    need = minimum_driver(built)
    major = int(driver.split(".")[0]) if driver[:1].isdigit() else 0
    if need and major < need:
        return (f"NVIDIA driver {driver} is too old for torch {torch.__version__} built for CUDA {built}: the locked "
                f"GPU stack needs driver >= {need}. Update the driver, or install a torch built for an older CUDA")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (f"driver {driver} and torch {torch.__version__} (CUDA {built}) look compatible, but torch sees no GPU"
            + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""))


def launch_problem(composed: VerlConfig) -> str | None:
    """wandb credentials when verl will log online, the model in the local cache when it is a hub id, and a C
    compiler with Python's headers for the kernels Triton and vLLM build (train/preflight.py): what fails minutes
    into a run on a GPU node, checked before Ray starts."""
    from crossed_rlvr.train.preflight import compiler_problem, problems

    online = "wandb" in list(composed.trainer.logger) and os.environ.get("WANDB_MODE") not in ("offline", "disabled")
    launch = {"tracking": {"mode": "online" if online else "off"},
              "model": {"source": "hub", "path": str(composed.actor_rollout_ref.model.path)}}
    found = problems(launch)
    return found[0] if found else compiler_problem()


def minimum_driver(cuda: str) -> int | None:
    """The oldest Linux driver branch for a CUDA major version (NVIDIA's compatibility table)."""
    return {"13": 580, "12": 525, "11": 450}.get(cuda.split(".")[0])


def offered(composed: VerlConfig, rehearse_gpus: int | None) -> list[tuple[str, float, float]]:
    """(node, CPUs, GPUs) that Ray will offer: each live node of the cluster at RAY_ADDRESS, or the
    local Ray that verl will start with ``ray_kwargs.ray_init``."""
    if os.environ.get("RAY_ADDRESS", "local") != "local" and rehearse_gpus is None:
        import ray

        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        try:
            return [(n["NodeManagerAddress"], n["Resources"].get("CPU", 0), n["Resources"].get("GPU", 0))
                    for n in ray.nodes() if n["Alive"]]
        finally:
            ray.shutdown()
    init = composed.ray_kwargs.ray_init
    cpus = init.get("num_cpus") or os.cpu_count() or 1
    if rehearse_gpus is not None:
        gpus = rehearse_gpus
    elif init.get("num_gpus") is not None:  # a CPU run's logical GPUs
        gpus = init.num_gpus
    else:
        import torch

        gpus = torch.cuda.device_count()
    return [("this node", float(cpus), float(gpus))]


def check_nodes(budget: Budget, nodes: list[tuple[str, float, float]]) -> None:
    if len(nodes) < budget.nnodes:
        raise BudgetError(f"Ray has {len(nodes)} live node(s), verl asks for trainer.nnodes={budget.nnodes}. "
                          + budget.describe())
    ranked = sorted(nodes, key=lambda n: (-n[2], -n[1]))[: budget.nnodes]
    for name, cpus, gpus in ranked:
        budget.check(cpus, gpus, where=name)


# Modules verl imports in every process (VERL_USE_EXTERNAL_MODULES): the TRL fix on every launch (train/verl_compat.py),
# the CPU platform on a CPU run (train/verl_cpu.py).
PLUGINS = "crossed_rlvr.train.verl_compat"
CPU_PLUGINS = f"{PLUGINS},crossed_rlvr.train.verl_cpu"


def cpu_env() -> dict[str, str]:
    """The variables that make verl load its CPU platform: train/verl_cpu.py's ``ENV`` (a test keeps the two
    equal), written again here because importing verl_cpu imports verl, which must not happen before they are
    set, and verl_cpu cannot import this module (an import circle)."""
    return {"VERL_USE_EXTERNAL_MODULES": CPU_PLUGINS, "VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda"}


def launched_arm(composed: VerlConfig) -> ArmLayout | None:
    """The prepared arm this launch trains: the arm whose checkpoints folder is verl's ``trainer.default_local_dir``
    in the composed config (train/translate.py writes it so), read as verl will run it; None for a launch by hand
    into a folder that is no arm's (verl's default, or a folder of the user's own)."""
    where = composed.trainer.get("default_local_dir")
    if not where:
        return None
    folder = Path(str(where))
    arm = ArmLayout(folder.parent)
    return arm if arm.checkpoints == folder else None


def metrics_file(arm: ArmLayout | None, composed: VerlConfig) -> str | None:
    """Where verl's file logger writes this launch's metrics: one file a launch in the arm's ``verl_metrics`` folder
    (ArmLayout.verl_launch_metrics), because verl's logger truncates its file when it opens it: a resumed arm would
    lose the updates before the resume. None without the ``file`` logger or a prepared arm."""
    if arm is None or "file" not in list(composed.trainer.logger):
        return None
    path = arm.verl_launch_metrics(f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def read_metrics(run_dir: Path | str) -> list[dict[str, Any]]:
    """Every update's metrics of an arm over all its launches, one row per step (a later launch's value of a
    metric wins)."""
    import json

    rows: dict[int, dict[str, Any]] = {}
    for path in ArmLayout(Path(run_dir)).verl_launches_metrics():
        for line in path.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)  # a resumed launch logs its first validation under the step it resumed
                rows.setdefault(int(entry["step"]), {"step": int(entry["step"])}).update(entry["data"])
    return [rows[k] for k in sorted(rows)]


def resumed_actor(arm: ArmLayout | None, trainer: VerlConfig) -> tuple[int, Path] | None:
    """(step, the step's actor folder) that verl's ``resume_mode=auto`` will load from the arm, else None."""
    if arm is None or trainer.get("resume_mode") != "auto" or not arm.verl_latest.is_file():
        return None
    step = int(arm.verl_latest.read_text().strip())
    return step, arm.verl_shards(step)


def unresumable(arm: ArmLayout | None, composed: VerlConfig) -> str | None:
    """Why verl's ``resume_mode=auto`` would crash on this arm's latest checkpoint, else None: a step whose
    optimizer state was removed after its merge (train/checkpoints.py) cannot be resumed, and verl would load
    it and raise FileNotFoundError minutes into the launch."""
    loads = list(composed.actor_rollout_ref.actor.checkpoint.get("load_contents") or [])
    latest = resumed_actor(arm, composed.trainer)
    if arm is None or latest is None or "optimizer" not in loads:
        return None  # a model-only checkpoint (save_contents=[model]) is resumed from its weights alone
    step, actor = latest
    if actor.is_dir() and not any(actor.glob("optim_world_size_*")):
        return (f"{actor} has no optimizer state (removed once its merge was verified): verl cannot resume from "
                f"step {step}. Its merged model is {arm.checkpoint(step)}; move {arm.checkpoints} away to "
                "train the arm again")
    return None


def saved_world_size(actor: Path) -> int | None:
    """The world size a step's FSDP shards were saved with (``model_world_size_{W}_rank_{R}.pt``), or None."""
    sizes = {int(m.group(1)) for f in actor.glob("model_world_size_*_rank_*.pt")
             if (m := re.match(r"model_world_size_(\d+)_rank_\d+\.pt$", f.name))}
    return max(sizes) if sizes else None


def world_size_problem(arm: ArmLayout | None, composed: VerlConfig) -> str | None:
    """Why verl's ``resume_mode=auto`` would crash on this arm's latest checkpoint at this launch's world size, else
    None. verl's FSDP checkpoint manager loads ``model_world_size_{W}_rank_{R}.pt`` for its own W and R, so a step
    saved on 4 GPUs and relaunched on 8 dies after the workers (and vLLM) have started; refused here before Ray."""
    trainer = composed.trainer
    latest = resumed_actor(arm, trainer)
    if latest is None:
        return None
    actor = latest[1]
    saved = saved_world_size(actor)
    ranks = int(trainer.nnodes) * int(trainer.n_gpus_per_node)
    if saved is None or saved == ranks:
        return None
    return (f"{actor} was saved by {saved} ranks (model_world_size_{saved}_rank_*.pt) and this launch runs {ranks} "
            f"(trainer.nnodes x trainer.n_gpus_per_node): verl resumes a step only at the world size that saved it. "
            f"Relaunch on {saved} GPUs (engine.n_gpus_per_node={saved} for one node), or merge the step "
            f"(python -m verl.model_merger merge --backend fsdp --local_dir {actor} --target_dir DIR) and start a "
            "new arm from it (model.path=DIR)")


def node_short(arm: ArmLayout | None, gpus: list[tuple[str, float]] | None = None) -> str | None:
    """The prepared plan (``memory_plan.json`` beside the checkpoints) against this node: the arm planned again
    on the GPUs torch reads here (``gpus``: memory.gpu_table() unless given), then its available memory and the
    free space of the checkpoints' file system (train/memory.py: replan_problem, node_problem)."""
    import json
    import shutil

    from crossed_rlvr.train.memory import gpu_table, node_problem, replan_problem
    from crossed_rlvr.train.run import read_resolved

    if arm is None or not arm.memory_plan_json.is_file():
        return None  # launched by hand, without a prepared plan
    plan_file, root = arm.memory_plan_json, arm.checkpoints
    resolved = arm.resolved_config  # the arm's crossed-train config, as prepared
    if resolved.is_file():
        problem, said = replan_problem(read_resolved(resolved), gpu_table() if gpus is None else gpus)
        say(said)
        if problem is not None:
            return problem
    planned = json.loads(plan_file.read_text())
    existing = next(p for p in (root, *root.parents) if p.exists())
    already = resumed_step_gb(arm)
    return node_problem(planned, available_memory_gib(), shutil.disk_usage(existing).free / 1e9, already, str(existing))


def resumed_step_gb(arm: ArmLayout) -> float:
    """GB of the step this launch resumes from: one of the two checkpoints the plan allows at a save (it is removed
    once the first new step replaces it, train/verl_weighted.py). Any other step on disk stays there and is already
    out of the free space; counting it as one of the two would let a launch pass that runs out of disk."""
    if not arm.verl_latest.is_file():
        return 0.0
    step = arm.verl_shards(int(arm.verl_latest.read_text().strip())).parent
    if not step.is_dir():
        return 0.0
    return sum(f.stat().st_size for f in step.rglob("*") if f.is_file()) / 1e9


def available_memory_gib(meminfo: str = "/proc/meminfo") -> float:
    """MemAvailable (what can be allocated without swapping), in GiB."""
    for line in Path(meminfo).read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024 / 2**30
    return float("inf")


# ------------------------------------------------------------------ watchdog
EXPIRED = threading.Event()  # set when the watchdog ended a wait: the run exits with WAIT_EXIT


def pending_waits() -> dict[str, str]:
    """Ray waits that lack resources (what verl's ``ray.get`` calls would wait on forever), keyed by the
    placement group's or actor's id: placement groups not placed, and actors pending while no CPU is free to
    schedule them. An actor whose process is merely starting, with CPUs free, is not a resource wait. Keys are
    ids, not descriptions: Ray's tables come from protobuf maps whose key order changes from call to call, so
    a description is not a stable name for the same wait."""
    import ray
    from ray._private.state import state

    out = {}
    for pg_id, pg in ray.util.placement_group_table().items():
        if pg.get("state") in ("PENDING", "RESCHEDULING"):
            bundles = [dict(sorted(b.items())) for _, b in sorted(pg.get("bundles", {}).items())]
            out[f"pg:{pg_id}"] = f"placement group {pg.get('name') or pg_id} {bundles}"
    free_cpu = ray.available_resources().get("CPU", 0.0)
    if free_cpu < 1:
        for actor_id, actor in state.actor_table(None).items():
            if actor.get("State") == "PENDING_CREATION":
                name = actor.get("ActorClassName") or actor_id
                out[f"actor:{actor_id}"] = (f"actor {name}" + (f" ({actor['Name']})" if actor.get("Name") else "")
                                            + " (no CPU free to schedule it)")
    return out


def watchdog(budget: Budget, limit: float, interval: float = 1.0) -> None:
    """End the run when the same resource wait has lasted ``limit`` seconds."""
    import ray

    while not ray.is_initialized():
        time.sleep(0.2)
    since: dict[str, float] = {}
    while True:
        time.sleep(interval)
        if not ray.is_initialized():  # the run shut Ray down: Ray's calls below would start a new local Ray
            return
        try:
            waits = pending_waits()
        except Exception:  # noqa: BLE001  (Ray shutting down: nothing left to watch)
            return
        now = time.monotonic()
        since = {key: since.get(key, now) for key in waits}
        stuck = [waits[key] for key, t in since.items() if now - t >= limit]
        if stuck:
            free = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
            total = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
            say(f"WAIT LIMIT: Ray could not place {'; '.join(stuck)} in {limit:g} s (Ray has {total}, free {free}). "
                f"{budget.describe()}.")
            EXPIRED.set()
            stop_local_ray()
            os._exit(WAIT_EXIT)  # verl's ray.get cannot be interrupted from here: end the driver


def stop_local_ray() -> None:
    """Stop the Ray daemons this driver started (a local ``ray.init``); a cluster's are left alone, and
    this job's actors end with the driver."""
    import contextlib

    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    if node is not None and getattr(node, "head", False):
        with contextlib.suppress(Exception):
            node.kill_all_processes(check_alive=False, allow_graceful=False)


# ------------------------------------------------------------------ verl
def no_nccl() -> None:
    """Ray worker set-up hook of a rehearsal on a node with GPUs: the NCCL process group, where a CPU
    machine's torch stops by itself ("doesn't have NCCL built in"), is refused the same way."""
    import torch.distributed as dist

    real = dist.init_process_group

    def refuse(*args: Any, **kwargs: Any) -> Any:
        backend = str(kwargs.get("backend") or (args[0] if args else "") or "")
        if "nccl" in backend or backend in ("", "None"):
            raise RuntimeError("Distributed package doesn't have NCCL built in (refused: launch rehearsal)")
        return real(*args, **kwargs)

    dist.init_process_group = refuse


def cuda_point(err: BaseException) -> str | None:
    """'<actor>.<method>: <message>' when ``err`` is the first thing that needed a CUDA device."""
    text = str(err)
    hit = next((m for p in CUDA_NEEDED if (m := re.search(p, text))), None)
    if hit is None:
        return None
    where = re.findall(r"ray::([\w.]+)", text)
    line = next((x.strip() for x in text.splitlines() if hit.group(0) in x), hit.group(0))
    return f"{where[-1] if where else 'driver'}: {line[:200]}"


def preflight_problem(composed: VerlConfig, arm: ArmLayout | None, budget: Budget, rehearse: int | None,
                      cpu: int | None) -> str | None:
    """What stops this launch before Ray starts, else None: on a GPU node its GPUs, credentials, cache and compiler;
    the folder Ray's sockets go under; Ray's CPUs and GPUs against verl's budget; then the arm's latest checkpoint
    (resumable at this world size) and, on a GPU node, its prepared memory plan against the node."""
    from crossed_rlvr.train.preflight import socket_path_problem

    if rehearse is None and cpu is None and (problem := gpu_problem() or launch_problem(composed)) is not None:
        return problem
    if os.environ.get("RAY_ADDRESS", "local") == "local" and (problem := socket_path_problem()) is not None:
        return problem  # verl starts Ray here, under this machine's temporary folder
    try:
        check_nodes(budget, offered(composed, rehearse))
    except BudgetError as err:
        return str(err)
    if rehearse is None and (problem := unresumable(arm, composed) or world_size_problem(arm, composed)):
        return problem
    return node_short(arm) if rehearse is None and cpu is None else None


def run(overrides: list[str], weighted: bool, rehearse: int | None, wait_limit: float, preflight: bool,
        cpu: int | None = None) -> int:
    from crossed_rlvr.train.verl_engine import compose_verl, env_overrides, validate_verl  # none imports verl

    # A wandb-core service of the process that started this launch (a study logging its own stages) is named by
    # WANDB_SERVICE, which Ray's workers would inherit: verl's wandb.init would join that service, where a killed
    # launch's run stays "in use" and the relaunch's init of the same id fails. Each launch gets its own service.
    os.environ.pop("WANDB_SERVICE", None)
    # verl reads these when first imported: set before anything imports verl (Ray's workers get them too)
    plugins = cpu_env() if cpu is not None else {"VERL_USE_EXTERNAL_MODULES": PLUGINS}
    os.environ.update(plugins)
    overrides = [*overrides, *env_overrides(plugins)]
    if cpu is not None:  # verl on this CPU (train/verl_cpu.py), for the model verl's config names
        from crossed_rlvr.train.verl_cpu import launch_overrides

        model = compose_verl(overrides).actor_rollout_ref.model.path
        overrides = [*overrides, *launch_overrides(cpu, str(model))]

    if rehearse is not None:
        # N logical GPUs on a local Ray: verl places its workers as on a GPU node. No dashboard: nobody reads a
        # rehearsal's, and it starts ten Python processes of its own (its head and nine modules)
        overrides = [*overrides, f"+ray_kwargs.ray_init.num_gpus={rehearse}", "+ray_kwargs.ray_init.include_dashboard=False"]
        import torch

        if torch.cuda.is_available():  # on a GPU node the workers would really start: stop them at NCCL
            overrides.append(f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={__name__}.no_nccl")
    composed = validate_verl(overrides)  # verl's own validate_config, as main_ppo runs it
    if not composed.trainer.use_v1:  # a setting this launch cannot run: one line and exit 2, before Ray starts
        say("trainer.use_v1=False: crossed-rlvr launches verl's v1 trainer only (remove the override)")
        return 2
    arm = launched_arm(composed)  # the arm's own files: its checkpoints, memory plan, metrics
    if (path := metrics_file(arm, composed)) is not None:  # read by verl's file logger in its task runner
        from omegaconf import OmegaConf

        OmegaConf.update(composed, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH", path,
                         force_add=True)
    budget = verl_budget(composed, weighted)
    say(budget.describe())
    if preflight:
        if (problem := preflight_problem(composed, arm, budget, rehearse, cpu)) is not None:
            say(f"PREFLIGHT FAILED: {problem}")
            return 2
        say("preflight passed: Ray's CPUs and GPUs cover verl's budget")
    threading.Thread(target=watchdog, args=(budget, wait_limit), daemon=True).start()

    from verl.trainer.main_ppo import run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(composed)
    from crossed_rlvr.train.verl_weighted import task_runner_class

    runner = task_runner_class(weighted)  # verl's task runner, building our sync trainer (weighted or not)
    _reclaim_after_ray_init()
    start = time.perf_counter()
    try:
        run_ppo(composed, task_runner_class=runner)
    except Exception as err:
        if EXPIRED.is_set():
            return WAIT_EXIT
        point = cuda_point(err) if rehearse is not None else None
        if point is None:
            raise
        say(f"REACHED {point} ({time.perf_counter() - start:.0f} s after verl started)")
        return 0
    if rehearse is not None:
        say("FAILED: verl ran to the end without a GPU, which the rehearsal does not expect")
        return 1
    return 0


def _reclaim_after_ray_init() -> None:
    """``ray.init`` (which verl's ``run_ppo`` calls) followed by the launch's own signal handlers again: Ray's driver
    installs its own on SIGTERM (crossed_rlvr/interrupt.py: ``reclaim``)."""
    import ray

    from crossed_rlvr.interrupt import reclaim

    real = ray.init
    if getattr(real, "reclaims", False):
        return

    def init(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        reclaim()
        return out

    init.reclaims = True  # type: ignore[attr-defined]
    ray.init = init


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="verl_launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--weighted", action="store_true", help="importance-weighted GRPO (frozen proposal)")
    rehearse = os.environ.get("CROSSED_REHEARSE")
    add_number(parser, "--rehearse", 1, 64, metavar="GPUS", default=int(rehearse) if rehearse else None,
                        help="rehearse on a CPU with GPUS logical GPUs (default: $CROSSED_REHEARSE)")
    add_number(parser, "--wait-limit", 1, 86_400, integer=False, default=300.0,
                        help="seconds a Ray resource wait may last before the run is ended (default 300; "
                        "$CROSSED_WAIT_LIMIT wins)")
    cpu = os.environ.get("CROSSED_VERL_CPU")
    add_number(parser, "--cpu", 1, 64, metavar="RANKS", default=int(cpu) if cpu else None,
               help="train on this CPU through verl's plugin seams, on RANKS gloo ranks (default: $CROSSED_VERL_CPU)")
    parser.add_argument("--no-preflight", action="store_true", help="skip the GPU and budget checks")
    add_number(parser, "--wait-nodes", 1, 4096, metavar="N", help="only wait until N Ray nodes joined, then exit")
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="Ray address for --wait-nodes")
    add_number(parser, "--join-timeout", 1, 86_400, integer=False, default=300.0, help="seconds --wait-nodes waits (default 300)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    if args.wait_nodes is not None:
        if not args.address:
            parser.error("--wait-nodes needs --address or RAY_ADDRESS")
        from crossed_rlvr.cluster import wait_for_nodes

        return wait_for_nodes(args.address, args.wait_nodes, args.join_timeout)
    limit = float(os.environ.get("CROSSED_WAIT_LIMIT") or args.wait_limit)
    from crossed_rlvr.interrupt import handle_signals

    # SIGTERM and SLURM's warning (SIGUSR1) stop the launch and every process it started (its local Ray included):
    # verl's trainer saves only at its cadence, so the requeued launch goes on from its last resumable checkpoint
    handle_signals(pass_usr1=False)
    from crossed_rlvr.scratch import own_tmp

    with own_tmp():  # Ray's session, vLLM's and torch's files: removed when the launch ends (scratch.py)
        return _launch(args, limit)


def _launch(args: Any, limit: float) -> int:  # Any: argparse's namespace
    from crossed_rlvr.interrupt import STATUS, WHY, Stopped, stop_descendants

    try:
        code = run(args.overrides, args.weighted, args.rehearse, limit, not args.no_preflight, args.cpu)
    except Stopped as err:
        print(f"verl_launch: {WHY[err.signum].split(' (')[0]}; run the launch script again: verl goes on from its last "
              "resumable checkpoint (recipe.save_every; 0: from the initial policy)", file=sys.stderr, flush=True)
        code = STATUS[err.signum]
        stop_descendants()  # what its own handlers did not stop: nothing of the launch is left running
    finally:
        import contextlib

        import ray

        with contextlib.suppress(Exception):  # Ray half shut down already: nothing left to stop
            if ray.is_initialized():
                ray.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
