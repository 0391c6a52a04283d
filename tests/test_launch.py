"""verl started for real on the CPU: the Ray budget, the launch preflight and watchdog, the launch
rehearsal of the 7B preset (importance-weighted trainer, 4 logical GPUs), the SLURM join wait, the
App. D.1 strata and proposal, and verl's v1 validation dumps in a study's report.

Measured on the 2-core machine: an arm's rehearsal reaches verl's first GPU worker
(``WorkerDict.actor_rollout_init_model``, where torch asks for NCCL) in ~85-110 s; an under-provisioned
node is refused by the preflight in ~10 s (composing verl's config); the watchdog ends an unsatisfiable
wait ~limit + 30 s after start.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crossed_rlvr.train.budget import Budget, BudgetError, budget_for, verl_budget
from crossed_rlvr.train.proposal import frozen_proposal
from crossed_rlvr.train.verl_engine import compose_verl
from tests.gpu_fixtures import task_overrides
from tests.helpers import arm_files, study_cfg

# with tests/test_gpu_path.py on one worker: see there
WORKER_GROUP = "gpu_path"
SHARED_FIXTURES = ("local", "paper_gsm8k")

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- budget
def test_budget_of_each_preset_node():
    """What verl 0.9.1 holds per node (train/budget.py): 3 CPUs per GPU bundle, TransferQueue's storage units
    (2 per node) + 1 controller, the weighted task runner's own CPU, one free CPU for default-resource actors."""
    assert budget_for(1).cpus_per_node() == 7             # gpu-smoke on a 1-GPU node
    assert budget_for(4, weighted=True).cpus_per_node() == 17   # the 7B preset (App. D.1: four GPUs)
    assert budget_for(8, weighted=True).cpus_per_node() == 29   # the 7B preset on an 8-GPU node
    assert budget_for(8, nnodes=2, weighted=True).cpus_per_node() == 24 + 2 + 3
    assert budget_for(1, storage_units=8).cpus_per_node() == 13  # verl's own default of 8 units
    with pytest.raises(BudgetError, match=r"5 CPUs < 7.*TransferQueue 2 storage unit"):
        budget_for(1).check(5, 1)
    with pytest.raises(BudgetError, match=r"0 GPUs < 1"):
        budget_for(1).check(64, 0)
    budget_for(1).check(7, 1)


def test_budget_is_read_from_verls_composed_config(paper_gsm8k):
    overrides = arm_files(paper_gsm8k)[2]
    assert verl_budget(compose_verl(overrides), weighted=True) == Budget(1, 4, 2, 1)
    larger = verl_budget(compose_verl([*overrides, "transfer_queue.backend.SimpleStorage.num_data_storage_units=8",
                                       "trainer.n_gpus_per_node=8"]), weighted=False)
    assert larger.cpus_per_node() == 24 + 8 + 2


def test_configured_cpus_below_the_budget_are_refused_before_any_script(local, tmp_path):
    from crossed_rlvr.errors import RecipeError
    from crossed_rlvr.study.pipeline import Study

    with pytest.raises(RecipeError, match=r"engine.cpus_per_node=5 offers Ray 5 CPUs .*5 CPUs < 7"):
        Study(study_cfg(tmp_path / "r", "experiment=gpu-smoke", "stages=prepare", "engine.cpus_per_node=5",
                        f"model.path={local['model']}", *task_overrides(local, "gsm8k"))).prepare()
    assert not (tmp_path / "r" / "train" / "hash" / "s83" / "launch_single_node.sh").exists()


# ---------------------------------------------------------------- preflight and watchdog
def launch(overrides: list[str], *flags: str, timeout: float = 300, env: dict[str, str] | None = None,
           before_cleanup=None) -> tuple[subprocess.CompletedProcess, float]:
    """verl_launch in a session of its own, tagged as a rehearsal is, so that whatever a failing launch might
    leave is killed after it, as ``rehearse_arm`` does (``before_cleanup`` looks first)."""
    from crossed_rlvr.train.rehearsal import TAG, kill_group

    tag = f"test-{os.getpid()}-{time.monotonic_ns()}"
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "crossed_rlvr.train.verl_launch", *flags, "--", *overrides]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, **(env or {}), TAG: tag}, start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout)
        if before_cleanup is not None:
            before_cleanup()
    finally:
        kill_group(child.pid, tag)
    return subprocess.CompletedProcess(cmd, child.returncode, out, err), time.perf_counter() - start


def processes_under(folder: Path) -> list[str]:
    """Command lines of live processes that name ``folder`` (a Ray session's daemons and workers name its
    temporary folder in their arguments)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            line = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(folder) in line and state != "Z":
            found.append(f"{entry}: {line[:160]}")
    return found


def test_launch_lines_are_found_where_rays_log_thread_left_a_line_open(capsys):
    """Ray's log thread prints workers' lines into the driver's output; a line of its left without its
    newline runs into ours. The rehearsal still reads what was reached, and ``say`` writes a line at once."""
    from crossed_rlvr.cluster import MARKER, say
    from crossed_rlvr.train.rehearsal import launch_lines

    say("REACHED WorkerDict.x: no NCCL")
    said = capsys.readouterr().out
    assert said == f"{MARKER} REACHED WorkerDict.x: no NCCL\n"
    log = f"{MARKER} 17 CPUs\n(CrossedTaskRunner pid=1)     raise RuntimeError(){said}\n(pid=2) more\n"
    assert launch_lines(log) == ["17 CPUs", "REACHED WorkerDict.x: no NCCL"]


@pytest.mark.exclusive
def test_under_provisioned_node_is_refused_within_seconds(paper_gsm8k):
    """1 GPU and 6 CPUs: verl would hang in its TransferQueue; the preflight says why at once."""
    overrides = [*arm_files(paper_gsm8k)[2], "trainer.n_gpus_per_node=1", "ray_kwargs.ray_init.num_cpus=6"]
    proc, seconds = launch(overrides, "--weighted", "--rehearse", "1")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if "PREFLIGHT FAILED" in x)
    assert "6 CPUs < 8" in line and "{CPU: 3, GPU: 1}" in line and "TransferQueue 2 storage unit" in line
    assert seconds < 150  # verl's import and config check on a busy machine; a hang would wait out the 300 s limit


@pytest.mark.exclusive
def test_a_real_launch_without_a_gpu_says_why(paper_gsm8k):
    proc, _ = launch(arm_files(paper_gsm8k)[2], "--weighted")
    assert proc.returncode == 2
    assert "PREFLIGHT FAILED: torch" in proc.stdout and "CPU build" in proc.stdout


def test_a_gpu_launch_checks_host_memory_and_free_disk_against_the_prepared_plan(paper_gsm8k, monkeypatch, capsys,
                                                                                 tmp_path):
    """The plan prepare wrote beside the checkpoints, against the node the launch starts on: MemAvailable, then the
    free space of the checkpoints' file system; refused in one line before Ray starts. (The rehearsal's arm plans
    the tiny model it runs; its plan here is the 7B model's, as prepare writes it for the preset.)"""
    from collections import namedtuple

    from crossed_rlvr.train import verl_launch
    from crossed_rlvr.train.memory import KNOWN_SHAPES, check
    from crossed_rlvr.train.run import read_resolved

    arm = tmp_path / "arm"
    shutil.copytree(paper_gsm8k / "train" / "hash" / "s83", arm)
    written = json.loads((arm / "memory_plan.json").read_text())
    assert {"host_gib", "host_peak_gib", "disk_peak_gb"} <= set(written)  # prepare writes the plan's new parts
    cfg = read_resolved(arm / "resolved_config.json")  # typed, as the launch reads it: unset settings at None
    big = check(cfg, KNOWN_SHAPES["Qwen/Qwen2.5-7B-Instruct"])
    (arm / "memory_plan.json").write_text(json.dumps({**written, "host_peak_gib": big.host_peak,
                                                      "disk_peak_gb": big.disk_peak}))
    assert 131 < big.host_peak < 134 and 182 < big.disk_peak < 184
    monkeypatch.setattr(verl_launch, "gpu_problem", lambda: None)  # as on a GPU node: the next checks speak
    monkeypatch.setattr(verl_launch, "launch_problem", lambda composed: None)
    monkeypatch.setattr(verl_launch, "check_nodes", lambda budget, offered: None)  # a node with Ray's CPUs
    monkeypatch.setenv("RAY_ADDRESS", "local")
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", verl_launch.PLUGINS)  # run() sets it for verl: put back after
    here = str(paper_gsm8k / "train" / "hash" / "s83")
    overrides = [o.replace(here, str(arm)) for o in arm_files(paper_gsm8k)[2]] + ["+ray_kwargs.ray_init.num_gpus=4"]
    monkeypatch.setattr(verl_launch, "available_memory_gib", lambda: 100.0)
    assert verl_launch.run(overrides, True, None, 10, True) == 2
    assert "PREFLIGHT FAILED: host memory: the offloaded state, the model load (or a checkpoint save) and verl's " \
           "worker processes need 132.9 GiB on a node, and this node has 100.0 GiB available" in capsys.readouterr().out
    monkeypatch.setattr(verl_launch, "available_memory_gib", lambda: 500.0)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 9 * 10**11, 10**11))
    assert verl_launch.run(overrides, True, None, 10, True) == 2
    out = capsys.readouterr().out
    assert "PREFLIGHT FAILED: disk: the checkpoints need 182.8 GB more at their fullest" in out
    assert "file system has 100.0 GB free" in out
    assert "no GPU read on this node: the plan is the prepared one" in out  # torch sees no GPU here
    # the GPUs first: the arm planned again on the cards torch reads (a fake device table), before memory and disk
    from crossed_rlvr.train import memory

    resolved = json.loads((arm / "resolved_config.json").read_text())
    resolved["model"]["path"] = "Qwen/Qwen2.5-7B-Instruct"  # the preset's model, as the 7B arm is planned
    (arm / "resolved_config.json").write_text(json.dumps(resolved))
    monkeypatch.setattr(memory, "gpu_table", lambda: [("NVIDIA A100-SXM4-40GB", 39.4)] * 4)
    assert verl_launch.run(overrides, True, None, 10, True) == 2
    said = next(x for x in capsys.readouterr().out.splitlines() if "PREFLIGHT FAILED" in x)
    assert "the update needs 42.7 GiB per GPU, more than the 39.4 GiB of this node's NVIDIA A100-SXM4-40GB; " \
           "fix: engine.fused_optimizer=true" in said
    monkeypatch.setattr(memory, "gpu_table", lambda: [("NVIDIA H100 80GB HBM3", 79.2)] * 4)
    assert verl_launch.run(overrides, True, None, 10, True) == 2  # fits the cards; the disk still speaks
    out = capsys.readouterr().out
    assert "memory plan on this node's 4 x NVIDIA H100 80GB HBM3 (79.2 GiB)" in out and "PREFLIGHT FAILED: disk" in out


def test_driver_too_old_for_the_locked_cuda_13_stack(monkeypatch, tmp_path):
    """A CUDA-13 torch on a node with driver 550: the preflight names the driver and the minimum (580)."""
    import torch

    from crossed_rlvr.train.verl_launch import gpu_problem, minimum_driver

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '550.54.15, NVIDIA H100 80GB HBM3'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert minimum_driver("13.0") == 580 and minimum_driver("12.8") == 525
    problem = gpu_problem()
    assert "NVIDIA driver 550.54.15 is too old" in problem and "driver >= 580" in problem
    smi.write_text("#!/bin/sh\necho '580.65.06, NVIDIA H100 80GB HBM3'\n")
    assert "look compatible, but torch sees no GPU" in gpu_problem()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "nvidia-smi is not on PATH" in gpu_problem()


def test_the_watchdog_names_a_wait_by_its_id_not_by_rays_map_order(monkeypatch):
    """Ray's placement-group table comes from protobuf maps whose key order changes from call to call
    ({'CPU': 3, 'GPU': 1} one time, {'GPU': 1, 'CPU': 3} the next): a wait keyed by its description would
    look new on every poll and its clock would never reach the limit. Keys are ids; the description's bundle
    keys are sorted."""
    import itertools

    import ray
    from ray._private.state import state

    from crossed_rlvr.train import verl_launch

    orders = itertools.cycle([{"CPU": 3.0, "GPU": 1.0}, {"GPU": 1.0, "CPU": 3.0}])
    monkeypatch.setattr(ray.util, "placement_group_table", lambda: {"ab12": {
        "state": "PENDING", "name": "verl_group_1:0", "bundles": {0: dict(next(orders))}}})
    monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 0.0})
    monkeypatch.setattr(state, "actor_table", lambda _job: {
        "cd34": {"State": "PENDING_CREATION", "ActorClassName": "WorkerDict", "Name": ""},
        "ef56": {"State": "ALIVE", "ActorClassName": "TaskRunner"}})
    polls = [verl_launch.pending_waits() for _ in range(4)]
    assert all(p == polls[0] for p in polls)
    assert polls[0] == {"pg:ab12": "placement group verl_group_1:0 [{'CPU': 3.0, 'GPU': 1.0}]",
                        "actor:cd34": "actor WorkerDict (no CPU free to schedule it)"}


def test_the_watchdog_ends_with_the_run_and_never_starts_a_ray_of_its_own(monkeypatch):
    """Once the run has shut Ray down, the watchdog's next poll ends it: Ray's calls auto-start a local Ray when none
    is running, which left a second Ray starting and stopping after every launch."""
    import ray

    from crossed_rlvr.train import verl_launch

    up = iter([True, True, True, False, False, False, False])  # up at the start and for two polls, then down
    polls: list[bool] = []
    state = {"up": True}

    def is_initialized() -> bool:
        state["up"] = next(up)
        return state["up"]

    monkeypatch.setattr(ray, "is_initialized", is_initialized)
    def pending_waits() -> dict[str, str]:
        polls.append(state["up"])
        if len(polls) > 3:
            raise RuntimeError("Ray's connection closed")  # the watchdog's other way out: no endless test
        return {}

    monkeypatch.setattr(verl_launch, "pending_waits", pending_waits)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("started a Ray"))
    verl_launch.watchdog(verl_launch.Budget.__new__(verl_launch.Budget), limit=1.0, interval=0.0)
    assert polls == [True, True]  # and none once Ray was down


@pytest.mark.exclusive
@pytest.mark.timeout(900)
def test_watchdog_ends_a_wait_that_cannot_be_satisfied(paper_gsm8k):
    """Preflight off, 6 CPUs for an 8-CPU budget: TransferQueue (3) and the weighted task runner (1) leave 2
    free, and verl's {CPU: 3, GPU: 1} placement group can never be placed. The watchdog ends the run after
    the wait limit, naming what waits, Ray's free resources and the budget. (With 7 the rehearsal reaches
    the workers: the budget's 8th CPU is for the default-resource actors verl creates after them, the
    vLLM servers and the reward- and agent-loop workers, which the CPU rehearsal cannot reach.)"""
    import tempfile

    overrides = [*arm_files(paper_gsm8k)[2], "trainer.n_gpus_per_node=1", "ray_kwargs.ray_init.num_cpus=6"]
    session = Path(tempfile.mkdtemp(prefix="rw", dir="/tmp"))  # this launch's Ray folder: short, for its sockets
    left: list[str] = []

    def survivors() -> None:  # the watchdog stops the Ray it started before it ends the driver
        deadline = time.monotonic() + 15
        while (found := processes_under(session)) and time.monotonic() < deadline:
            time.sleep(0.5)
        left.extend(found)

    # verl's start-up up to the placement group takes ~80 s here, and over 5 minutes with both cores busy: the
    # bound is a hang's, not the start-up's (the watchdog's own 8 s is checked in its line below; the group can
    # never be placed, so any limit shows the rule, and each second of it is a second this test only waits)
    proc, seconds = launch(overrides, "--weighted", "--rehearse", "1", "--no-preflight", "--wait-limit", "8",
                           timeout=720, env={"RAY_TMPDIR": str(session)}, before_cleanup=survivors)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert left == [], left  # no daemon, agent or worker of its Ray session outlives the driver
    line = next(x for x in proc.stdout.splitlines() if "WAIT LIMIT" in x)
    assert "placement group" in line and "in 8 s" in line and "'CPU': 6.0" in line
    assert "'CPU': 2.0" in line.split("free", 1)[1]  # 6 less TransferQueue's 3 and the task runner's 1
    assert "8 CPUs and 1 GPU(s)" in line
    assert seconds < 720


# ---------------------------------------------------------------- the launch rehearsal of the 7B preset
@pytest.mark.exclusive
@pytest.mark.timeout(900)
def test_paper_preset_rehearsal_reaches_the_gpu_workers_with_the_weighted_trainer(local, online_env, tmp_path):
    """``stages=rehearse``: the hash arm's launch script runs verl's start-up on a local Ray with the preset's
    17 CPUs and 4 logical GPUs; our task runner builds ImportanceWeightedTrainer in verl's sync mode, the
    TransferQueue and the 4-bundle placement group are placed, and the 4 FSDP workers are constructed up to
    ``init_process_group(nccl)``, the first point that needs CUDA. One arm: the boxed arm's launch differs only in
    its reward program and names (``paper_gsm8k``'s tests read both arms' scripts; gpu_smoke's dry run rehearses
    a boxed arm), and each rehearsed arm costs a verl start-up on 4 workers."""
    run = tmp_path / "paper"
    cmd = [sys.executable, "-m", "crossed_rlvr.study.cli", "experiment=qwen2.5-7b-gsm8k-crossed", "stages=rehearse",
           "arms.seeds=[83]", "rehearsal.conventions=[hash]", f"run_dir={run}", f"model.path={local['model']}",
           *task_overrides(local, "gsm8k")]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, **online_env})  # the preset tracks online (its preflight)
    out, err = child.communicate(timeout=880)
    proc = subprocess.CompletedProcess(cmd, child.returncode, out, err)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((run / "rehearsal.json").read_text())
    assert sorted(result) == ["grpo-hash/s83"]
    for arm in result.values():
        assert arm["trainer"] == "ImportanceWeightedTrainer" and arm["gpus"] == 4 and arm["exit"] == 0
        assert arm["reached"].startswith("WorkerDict.actor_rollout_init_model") and "NCCL" in arm["reached"]
        assert any(x.startswith("preflight passed") for x in arm["launch_lines"])
        assert "17 CPUs and 4 GPU(s)" in arm["launch_lines"][0]
        log = Path(arm["log"]).read_text()
        assert log.count("WorkerDict pid=") >= 4  # one worker per logical GPU was constructed
    train = pd.read_parquet(run / "train" / "hash" / "s83" / "data" / "train.parquet")
    # P/Q of App. D.1's three strata: w_s = t_s / ((1-ε) v_s + ε t_s), whatever the stratum sizes
    t, v = np.array(T) / sum(T), np.array(V) / sum(V)
    expected = sorted(np.round(t / ((1 - EPS) * v + EPS * t), 6))
    assert sorted({round(e["is_weight"], 6) for e in train["extra_info"]}) == expected
    from crossed_rlvr.train.rehearsal import tagged

    assert tagged(prefix=f"{child.pid}-") == []  # nothing of its rehearsals (Ray's daemons included) is left running


# ---------------------------------------------------------------- SLURM
def test_slurm_script_waits_for_every_node_and_finds_the_head_address(paper_gsm8k):
    _, slurm, _ = arm_files(paper_gsm8k)
    assert "sleep" not in slurm
    assert slurm.count("--wait-nodes 1 ") == 2  # the head first, then every node (1 here)
    assert "${HEAD_IP:-" in slurm and "grep -v '^127\\.'" in slurm
    assert 'RAY_ADDRESS="$head_ip:$port"' in slurm and "verl_launch \\\n  --weighted" in slurm
    # the driver runs in the batch script on the head, not as a job step that would ask for the GPUs Ray holds
    driver = next(x for x in slurm.splitlines() if "crossed_rlvr.train.verl_launch" in x)
    assert driver.startswith('RAY_ADDRESS="$head_ip:$port" ') and "srun" not in driver and "--overlap" not in slurm


@pytest.mark.exclusive
@pytest.mark.timeout(300)
def test_join_wait_counts_nodes_and_fails_loudly():
    """The SLURM script's join wait against a real Ray head started with ``ray start`` (1 node)."""
    import tempfile

    ray = str(Path(sys.executable).parent / "ray")
    port = "6391"
    short = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay under 107 characters
    subprocess.run([ray, "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
                    f"--temp-dir={short}"], check=True, capture_output=True, timeout=120)
    def wait(n: int, timeout: int) -> subprocess.CompletedProcess:  # as the SLURM script runs it
        return subprocess.run([sys.executable, "-m", "crossed_rlvr.cluster", "--wait-nodes", str(n),
                               "--address", f"127.0.0.1:{port}", "--join-timeout", str(timeout)],
                              capture_output=True, text=True, timeout=240, check=False)

    try:
        joined = wait(1, 60)
        assert joined.returncode == 0 and "1 of 1 Ray node(s) joined" in joined.stdout, joined.stdout + joined.stderr
        start = time.perf_counter()
        short_of = wait(2, 8)
        assert short_of.returncode == 4 and "JOIN TIMEOUT: 1 of 2 Ray node(s) joined" in short_of.stdout
        assert time.perf_counter() - start < 60
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=120, check=False)
        shutil.rmtree(short, ignore_errors=True)


# ---------------------------------------------------------------- App. D.1 strata and proposal
T, V, EPS = (2302, 3282, 1912), (24334, 34693, 40973), 1e-6


def test_proposal_masses_and_weights_match_app_d1():
    """Strata of App. D.1's target sizes: P_i = t_s/n_s, Q_i = (1-ε)v_s/n_s + εP_i, weight P_i/Q_i, by hand
    in exact fractions."""
    names = ("s1_easy", "s2_medium", "s3_hard")
    sizes = (23, 33, 19)  # n_s: any sizes; P and Q are per item
    items = [{"item_id": f"train-{k}", "stratum": s} for s, n in zip(names, sizes, strict=True) for k in range(n)]
    prop = frozen_proposal(items, list(T), list(V), EPS)
    t = [Fraction(x, sum(T)) for x in T]
    v = [Fraction(x, sum(V)) for x in V]
    eps = Fraction(EPS)
    for j, (s, n) in enumerate(zip(names, sizes, strict=True)):
        idx = [k for k, it in enumerate(items) if it["stratum"] == s]
        p = t[j] / n
        q = (1 - eps) * v[j] / n + eps * p
        assert np.allclose(prop.p[idx], float(p), rtol=1e-12) and np.allclose(prop.q[idx], float(q), rtol=1e-9)
        assert np.allclose(prop.p[idx] / prop.q[idx], float(p / q), rtol=1e-9)
    assert abs(prop.q.sum() - 1) < 1e-12 and abs(prop.p.sum() - 1) < 1e-12
    # the hard stratum is over-proposed 1.6x: its weight is < 1, the others' > 1
    first = {s: sum(sizes[:j]) for j, s in enumerate(names)}
    w = {s: prop.p[k] / prop.q[k] for s, k in first.items()}
    assert round(w["s1_easy"], 4) == round(w["s2_medium"], 4) == 1.2620 and round(w["s3_hard"], 4) == 0.6225
    assert round(w["s1_easy"], 6) == 1.262008 and round(w["s2_medium"], 6) == 1.262022
    draws = prop.sample(200_000, seed=83)
    share = np.bincount([sum(i >= np.cumsum(sizes)[:-1]) for i, _ in draws[:60_000]], minlength=3) / 60_000
    assert np.allclose(share, [float(x) for x in v], atol=0.01)  # prompts drawn from Q
    weighted = np.bincount([sum(i >= np.cumsum(sizes)[:-1]) for i, _ in draws[:60_000]],
                           weights=[w for _, w in draws[:60_000]], minlength=3) / 60_000
    assert np.allclose(weighted, [float(x) for x in t], atol=0.01)  # weights undo Q: the target P


def test_strata_files_are_checked_line_by_line(tmp_path):
    from crossed_rlvr.train.strata import StrataError, attach_strata, read_strata, stratum_of

    assert [stratum_of(c, 4) for c in (4, 3, 1, 0)] == ["s1_easy", "s2_medium", "s2_medium", "s3_hard"]
    bad = tmp_path / "s.jsonl"
    cases = [('{"item_id": "a", "stratum": "x"}\n{"item_id": "b"}\n', r"s.jsonl:2: field 'stratum'"),
             ('{"item_id": "a", "stratum": "x"}\nnot json\n', r"s.jsonl:2: not valid JSON"),
             ('{"item_id": "a", "stratum": "x"}\n{"item_id": "a", "stratum": "y"}\n', r"s.jsonl:2: item_id 'a' repeated"),
             ("", r"empty strata file"), ('[1]\n', r"s.jsonl:1: expected an object")]
    for text, message in cases:
        bad.write_text(text)
        with pytest.raises(StrataError, match=message):
            read_strata(bad)
    with pytest.raises(StrataError, match=r"no stratum for 1 of 2 training items \(first: b\)"):
        attach_strata([{"item_id": "a"}, {"item_id": "b"}], {"a": "x"}, "f")


def test_a_task_without_strata_gets_one_clear_error(local, online_env, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "crossed_rlvr.study.cli", "experiment=qwen2.5-7b-gsm8k-crossed", "stages=prepare",
         "arms.seeds=[83]", f"run_dir={tmp_path / 'r'}", f"model.path={local['model']}",
         *task_overrides(local, "gsm8k")[:-1]], capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
        env={**os.environ, **online_env})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "no difficulty strata" in proc.stderr and "recipe.proposal.strata_file=PATH" in proc.stderr


@pytest.mark.timeout(600)
def test_strata_estimated_with_the_initial_policy_are_frozen_into_both_arms(local, tmp_path):
    """With the CPU backend the study estimates the strata itself (2 samples per item, Math-Verify), freezes
    them in data/strata.jsonl, and both arms' configs carry its sha256 (so the matched-arm check covers it)."""
    from crossed_rlvr.errors import RecipeError
    from crossed_rlvr.study.pipeline import Study
    from crossed_rlvr.train.strata import NAMES

    run = tmp_path / "est"
    overrides = ["experiment=qwen2.5-7b-gsm8k-crossed", "stages=prepare", "arms.seeds=[83]", "eval=cpu",
                 "eval.max_new_tokens=8", "eval.batch_size=64", "recipe.proposal.estimate_samples=2",
                 "arms.train_items=30", f"model.path={local['model']}", *task_overrides(local, "gsm8k")[:-1]]
    study = Study(study_cfg(run, *overrides))
    try:
        study.prepare()
    except RecipeError as err:  # a tiny random model answers nothing right: every item is hard
        assert "non-empty strata (s3_hard)" in str(err)
    rows = [json.loads(x) for x in (run / "data" / "strata.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and {r["k"] for r in rows} == {2} and {r["stratum"] for r in rows} <= set(NAMES)
    assert all(r["stratum"] == {2: "s1_easy", 0: "s3_hard", 1: "s2_medium"}[r["correct"]] for r in rows)
    # reused while nothing changed; its hash reaches each arm's config
    weights = "not hashed (stages=prepare)"
    sha = study.strata(str(local["model"]), weights)["sha256"]
    mtime = (run / "data" / "strata.jsonl").stat().st_mtime_ns
    assert study.strata(str(local["model"]), weights)["sha256"] == sha
    assert (run / "data" / "strata.jsonl").stat().st_mtime_ns == mtime
    plan = next(p for p in study.plans if p.policy.convention == "hash")
    cfg = plan.config(str(local["model"]), weights, study.configs.train_task(), study.strata(str(local["model"]), weights))
    assert cfg["recipe"]["proposal"]["strata_sha256"] == sha


# ---------------------------------------------------------------- verl's v1 validation dumps in the study report
@pytest.mark.timeout(900)
def test_verl_v1_validation_dumps_reach_the_studys_over_training_section(local, tmp_path):
    """A GPU study after its arms trained: verl's v1 trainer wrote ``<arm>/validation/{step}.jsonl`` (with
    ``uid``) through its own ``PPOTrainer._write_generations``; the study imports every step of every arm and
    its report has the crossed interactions over training (0 at step 0, +200 pp at step 10)."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from crossed_rlvr.policies.loading import load_tokenizer
    from crossed_rlvr.study.pipeline import Study
    from crossed_rlvr.study.plan import Policy
    from crossed_rlvr.train.verl_reward import compute_score

    run = tmp_path / "gpu-study"
    study = Study(study_cfg(run, "experiment=qwen2.5-7b-gsm8k-crossed", "stages=prepare", "arms.seeds=[83]",
                            "eval=cpu", "eval.max_new_tokens=8", "evaluation.n_items=6", "evaluation.templates=[original]",
                            "analysis.resamples=200", "tracking=off", f"model.path={local['model']}",
                            *task_overrides(local, "gsm8k")))
    summary = study.prepare()
    tok = load_tokenizer(local["model"])
    for arm in summary["arms"].values():
        conv = arm["convention"]
        shutil.copytree(local["model"], arm["path"])  # stands for the merged checkpoint the launch script writes
        val = pd.read_parquet(Path(arm["run_dir"]) / "data" / "val.parquet")
        inputs = [tok.decode(tok.apply_chat_template(list(p), tokenize=True, add_generation_prompt=True,
                                                     return_dict=False), skip_special_tokens=True)
                  for p in val["prompt"]]
        gts = [rm["ground_truth"] for rm in val["reward_model"]]
        marker = {"hash": "#### {}", "boxed": "\\boxed{{{}}}"}[conv]
        for step, outputs in ((0, [f"The answer is {g}." for g in gts]), (10, [marker.format(g) for g in gts])):
            results = [compute_score(ds, out, g, dict(info)) for ds, out, g, info in
                       zip(val["data_source"], outputs, gts, val["extra_info"], strict=True)]
            infos = {k: [r[k] for r in results] for k in results[0]}
            uids = [f"{k:08x}_0_0" for k in range(len(val))]
            PPOTrainer._write_generations(inputs, outputs, gts, infos["score"],
                                          {"reward": infos["score"], **infos, "uid": uids},
                                          str(Path(arm["run_dir"]) / "validation"), step)
        assert "uid" in json.loads((Path(arm["run_dir"]) / "validation" / "10.jsonl").read_text().splitlines()[0])
    initial = Policy.initial(local["model"])
    arms = [Policy.from_record(k, a) for k, a in summary["arms"].items()]
    study.evaluate(initial, arms)
    info = study.score()
    assert "validation_scores" in info
    report = Path(study.analyze(arms)["report"]).read_text()
    assert "## Crossed interactions over training" in report
    rows = pd.read_csv(run / "analysis" / "over_training.csv")
    ip = rows[(rows.contrast == "I_P") & (rows.seed == "s83")].set_index("step")["estimate"]
    assert ip.loc[0] == 0 and ip.loc[10] == 200


@pytest.mark.parametrize(("address", "code", "last"), [
    ("127.0.1.1", 1, "no IPv4 address found for head node nodeA; set HEAD_IP"),
    ("10.1.2.3", 0, "head 10.1.2.3"),
])
def test_the_head_address_lookup_says_what_to_set(tmp_path, address, code, last):
    """Under ``set -euo pipefail`` a lookup that finds only loopback addresses used to end the
    script silently (grep's status 1 through pipefail); it now prints what to set. Run with stub SLURM tools."""
    from crossed_rlvr.cluster import RAY_CLUSTER

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho nodeA\n")
    (bin_dir / "srun").write_text(f"#!/bin/bash\necho {address}\n")
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    lookup = RAY_CLUSTER.split("port=6379")[0].format(cpus=1, ray="ray", python="python", nodes=1, gpus=0)
    script = tmp_path / "lookup.sh"
    token = tmp_path / "token"
    token.write_text("t\n")
    script.write_text(f"set -euo pipefail\nSLURM_JOB_NODELIST=nodeA\nRAY_AUTH_TOKEN_PATH={token}\n" + lookup
                      + 'echo "head $head_ip"\n')
    (bin_dir / "srun").write_text(f'#!/bin/bash\nshift 4; [ "$1" = test ] && exec "$@"; echo {address}\n')
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, timeout=60,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert out.returncode == code
    assert (out.stderr if code else out.stdout).strip().splitlines()[-1] == last


def test_a_node_that_cannot_read_the_ray_token_stops_the_start_naming_the_file(tmp_path):
    """A run_dir on node-local storage: the second node has no token file. The script says so at once instead of
    leaving the join wait to time out. Run with stub SLURM tools (the second node sees no file)."""
    from crossed_rlvr.cluster import RAY_CLUSTER

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho nodeA; echo nodeB\n")
    # srun --nodes=1 --ntasks=1 -w NODE CMD...: nodeB's file system lacks the run folder
    (bin_dir / "srun").write_text('#!/bin/bash\nnode=$4; shift 4\n[ "$1" = test ] || { echo 10.1.2.3; exit 0; }\n'
                                  '[ "$node" = nodeB ] && exit 1; exec "$@"\n')
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    token = tmp_path / "run" / ".ray_auth_token"
    token.parent.mkdir()
    token.write_text("t\n")
    lookup = RAY_CLUSTER.split("port=6379")[0].format(cpus=1, ray="ray", python="python", nodes=2, gpus=0)
    script = tmp_path / "start.sh"
    script.write_text(f"set -euo pipefail\nSLURM_JOB_NODELIST=nodeA,nodeB\nRAY_AUTH_TOKEN_PATH={token}\n" + lookup
                      + 'echo "every node reads it"\n')
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, timeout=60,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert out.returncode == 1 and "every node reads it" not in out.stdout
    assert out.stderr.strip().splitlines()[-1] == (f"node nodeB cannot read the Ray token file {token}: put run_dir "
                                                   "(or RAY_AUTH_TOKEN_PATH) on storage every node shares")
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho nodeA\n")  # one node, which has the file
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, timeout=60,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert out.returncode == 0 and out.stdout.strip() == "every node reads it"


def test_every_srun_that_starts_ray_gives_it_the_nodes_cpus(tmp_path, paper_gsm8k):
    """Since SLURM 22.05 an ``srun`` step no longer inherits ``--cpus-per-task`` from ``sbatch``: without it, where
    tasks are bound to cores, the raylet and every actor share one core. Both generated sbatch scripts (a verl arm's
    and crossed-eval's) start Ray through the shared cluster block; it is run here with stub SLURM tools that record
    each ``srun``, and every Ray start must carry the node's CPUs."""
    from crossed_rlvr.cluster import RAY_CLUSTER
    from crossed_rlvr.eval.generate.workers import main as eval_main

    _, slurm, _ = arm_files(paper_gsm8k)
    eval_script = tmp_path / "eval.sbatch"
    assert eval_main(["slurm", "--nodes", "2", "--gpus-per-node", "8", "--cpus-per-node", "32", "-o",
                      str(eval_script), "--", "crossed-eval"]) == 0
    for text in (slurm, eval_script.read_text()):
        starts = [x for x in text.splitlines() if " start --" in x and "srun" in x]
        assert len(starts) == 2 and all('--cpus-per-task="$cpus"' in x for x in starts), starts
        assert 'export SRUN_CPUS_PER_TASK="$cpus"' in text
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "srun.log"
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho nodeA; echo nodeB\n")
    (bin_dir / "srun").write_text(f'#!/bin/bash\necho "$@" >> {log}\n'
                                  'for a in "$@"; do [ "$a" = test ] && exit 0; done; echo 10.1.2.3\n')
    (bin_dir / "fake-python").write_text("#!/bin/bash\nexit 0\n")
    for tool in ("scontrol", "srun", "fake-python"):
        (bin_dir / tool).chmod(0o755)
    token = tmp_path / "token"
    token.write_text("t\n")
    script = tmp_path / "start.sh"
    script.write_text(f"set -euo pipefail\nSLURM_JOB_NODELIST=nodeA,nodeB\nSLURM_CPUS_PER_TASK=17\n"
                      f"RAY_AUTH_TOKEN_PATH={token}\n"
                      + RAY_CLUSTER.format(cpus=1, ray="ray", python="fake-python", nodes=2, gpus=4) + "wait\n")
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, timeout=60,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr
    ray_starts = [x for x in log.read_text().splitlines() if "ray start" in x]
    assert len(ray_starts) == 2 and all("--cpus-per-task=17" in x and "--num-cpus=17" in x for x in ray_starts), \
        ray_starts


def test_the_launch_reads_gpu_totals_without_a_cuda_context(monkeypatch):
    """The launch driver lives for the whole run: ``torch.cuda.mem_get_info`` would create a CUDA context on every GPU
    (~0.3-0.5 GiB each, taken from the plan's headroom). The table comes from the device properties; every call that
    creates a context is stubbed here to fail the test if it is made (``scripts/device_check.py`` checks the same
    on a GPU: no memory used on the device after ``gpu_table``)."""
    from types import SimpleNamespace

    import torch

    from crossed_rlvr.train import memory

    def context(*args, **kwargs):
        raise AssertionError("a CUDA context was created")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(name=f"NVIDIA H200 #{i}", total_memory=int(140.4 * 2**30)))
    for name in ("mem_get_info", "init", "set_device", "synchronize", "memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, context)
    assert memory.gpu_table() == [("NVIDIA H200 #0", pytest.approx(140.4)), ("NVIDIA H200 #1", pytest.approx(140.4))]
