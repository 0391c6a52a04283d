"""crossed-eval on Ray workers: a local Ray with 2 CPU workers writes the serial run's files
byte for byte; a worker or the driver killed mid-run loses at most its shard, and the resumed run
writes the same files; a cell split across workers equals the unsplit cell."""

import contextlib
import filecmp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossed_rlvr.eval.generate.plan import RunError
from crossed_rlvr.eval.generate.runner import run_eval
from tests.helpers import cfg_for, overrides

# Ray clusters of two workers (tests/conftest.py: the exclusive group also keeps the serial run on one worker)
pytestmark = [pytest.mark.exclusive]

N_ITEMS = 12


def args(run_dir, model, extra=()):
    policies = (f"policies=[{{name: initial, path: {model}, training_convention: initial, train_seed: null}},"
                f"{{name: grpo-hash/s1, path: {model}, training_convention: hash, train_seed: 1}}]")
    return overrides(run_dir, model, n_items=N_ITEMS, extra=["eval.max_new_tokens=40", policies, *extra])


def workers(n=2, shard=5, *more):
    return [f"distribute.workers={n}", f"distribute.shard_size={shard}", *more]


@pytest.fixture(scope="module")
def serial(tmp_path_factory, tiny):
    run = tmp_path_factory.mktemp("serial") / "run"
    run_eval(cfg_for(*args(run, tiny)), progress=False)
    return run


def same_files(a: Path, b: Path) -> None:
    left = sorted(p.name for p in (a / "responses").iterdir() if p.is_file())
    right = sorted(p.name for p in (b / "responses").iterdir() if p.is_file())
    assert left == right and len(left) == 16  # 2 policies x 2 requests x 2 wordings: records and settings
    differ = [n for n in left if not filecmp.cmp(a / "responses" / n, b / "responses" / n, shallow=False)]
    assert differ == []
    assert not list((b / "responses" / ".partial").iterdir())  # no scratch left behind


def test_two_workers_write_the_serial_files_and_split_cells(tmp_path, tiny, serial):
    events = []
    run = tmp_path / "run"
    summary = run_eval(cfg_for(*args(run, tiny, workers())), progress=False,
                       on_event=lambda kind, info: events.append((kind, info)))
    same_files(serial, run)
    assert len(summary) == 8 and all(s["n"] in (N_ITEMS, 3) for s in summary.values())
    started = [i["pid"] for k, i in events if k == "worker"]
    assert len(set(started)) == 2
    by_cell: dict[str, set[int]] = {}
    for kind, info in events:
        if kind == "shard":
            by_cell.setdefault(info["cell"], set()).add(info["pid"])
    # 12 items in shards of 5: three shards per original-wording cell, and some cell is served by both workers
    assert any(len(p) == 2 for p in by_cell.values())
    # the run's manifest names the workers' machine; a second run finds every cell finished
    import json

    assert json.loads((run / "run.json").read_text())["machines"]
    again = run_eval(cfg_for(*args(run, tiny, workers())), progress=False)
    assert all(v == {"skipped": True} for v in again.values())


def test_a_killed_worker_is_replaced_and_its_shard_retried(tmp_path, tiny, serial):
    events = []
    pids: list[int] = []

    def on_event(kind, info):
        events.append((kind, info))
        if kind == "worker":
            pids.append(info["pid"])
        if kind == "shard" and not any(k == "worker_died" for k, _ in events) and len(pids) == 2:
            other = next(p for p in pids if p != info["pid"])  # busy with a shard of its own
            if not any(k == "killed" for k, _ in events):
                events.append(("killed", {"pid": other}))
                os.kill(other, signal.SIGKILL)

    run = tmp_path / "run"
    run_eval(cfg_for(*args(run, tiny, workers(2, 4))), progress=False, on_event=on_event)
    assert any(k == "worker_died" for k, _ in events) and len(pids) == 3  # a third worker replaced it
    same_files(serial, run)


def test_a_shard_out_of_retries_is_reported_and_the_rerun_completes(tmp_path, tiny, serial):
    killed = []

    def on_event(kind, info):
        if kind == "shard" and not killed:
            killed.append(info["pid"])
            os.kill(info["pid"], signal.SIGKILL)  # it is idle for a moment: kill it as it takes its next shard

    run = tmp_path / "run"
    with pytest.raises(RunError) as err:
        run_eval(cfg_for(*args(run, tiny, workers(1, 4, "distribute.max_retries=0"))), progress=False,
                 on_event=on_event)
    text = str(err.value)
    assert "not generated after 0 retries" in text and "initial__hash__original" in text, text
    assert "re-run to generate the rest" in text
    kept = list((run / "responses" / ".partial").glob("*.shards/*.jsonl"))
    assert kept  # the shard finished before the kill is on disk, and reused
    run_eval(cfg_for(*args(run, tiny, workers(2, 4))), progress=False)
    same_files(serial, run)


def test_a_killed_driver_resumes_to_the_serial_files(tmp_path, tiny, serial):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "crossed_rlvr.eval.generate.cli", *args(run, tiny, workers(2, 3))]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 180
    shards = []
    while time.monotonic() < deadline and proc.poll() is None:
        shards = list((run / "responses" / ".partial").glob("*.shards/*.jsonl"))
        if len(shards) >= 2:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(shards) >= 2, "the driver wrote no shard before the deadline"
    assert not list((run / "responses").glob("*.jsonl")) or len(list((run / "responses").glob("*.jsonl"))) < 8
    run_eval(cfg_for(*args(run, tiny, workers(2, 3))), progress=False)
    same_files(serial, run)


def test_more_workers_than_the_cluster_holds_is_refused(tmp_path, tiny):
    with pytest.raises(RunError, match=r"distribute.workers=64 needs 64 CPU \(the cluster has \d+\)"):
        run_eval(cfg_for(*args(tmp_path / "run", tiny, workers(64))), progress=False)


@pytest.mark.timeout(400)
def test_a_ray_cluster_the_user_runs_is_joined_and_left_running(tmp_path, tiny, serial):
    """``ray start --head`` as on a cluster (or as the SLURM script does), then distribute.address: the
    workers run on that cluster, the files equal the serial run's, and the cluster is still up after."""
    import shutil
    import socket
    import tempfile

    ray = str(Path(sys.executable).parent / "ray")
    with socket.socket() as probe:  # a free port: another Ray on this machine (a second test run) keeps its own
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    short = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay under 107 characters
    subprocess.run([ray, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                    f"--temp-dir={short}"], check=True, capture_output=True, timeout=120)
    try:
        run = tmp_path / "run"
        run_eval(cfg_for(*args(run, tiny, workers(2, 6, f"distribute.address=127.0.0.1:{port}"))), progress=False)
        same_files(serial, run)
        status = subprocess.run([ray, "status", f"--address=127.0.0.1:{port}"], capture_output=True, text=True,
                                timeout=120, check=False)
        assert status.returncode == 0 and "2.0 CPU" in status.stdout.replace("0.0/2.0 CPU", "2.0 CPU"), status.stdout
    finally:
        _stop_cluster(short)  # only this cluster's processes: `ray stop` would stop every Ray on the machine
        shutil.rmtree(short, ignore_errors=True)


def _stop_cluster(temp_dir: str) -> None:
    """Kill the processes of the Ray cluster whose files live under ``temp_dir`` (its command lines name it)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if temp_dir in cmd and int(pid) != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def test_the_slurm_script_starts_ray_as_the_arms_do_then_drives_every_gpu(tmp_path):
    from crossed_rlvr.cluster import RAY_CLUSTER
    from crossed_rlvr.eval.generate.workers import main

    out = tmp_path / "eval.sbatch"
    assert main(["slurm", "--nodes", "2", "--gpus-per-node", "8", "--cpus-per-node", "32", "-o", str(out), "--",
                 "crossed-study", "experiment=qwen2.5-7b-gsm8k-crossed", "evaluation.n_items=100"]) == 0
    text = out.read_text()
    subprocess.run(["bash", "-n", str(out)], check=True)
    python = Path(sys.executable).absolute()
    cluster = RAY_CLUSTER.format(python=python, ray=python.parent / "ray", nodes=2, gpus=8, cpus=32)
    assert cluster in text and "--wait-nodes 2 " in cluster  # the arms' own cluster start, every node joined
    assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=8" in text
    # one auth decision (cluster.RAY_AUTH) before the head starts
    assert "export RAY_AUTH_MODE=token" in text and text.index("RAY_AUTH_TOKEN_PATH") < text.index("start --head")
    assert text.rstrip().endswith('distribute.address="$head_ip:$port" distribute.workers=16 '
                                  "distribute.gpus_per_worker=1 &\nchild=$!\nsettle")  # cluster.REQUEUE's
    assert str(Path(sys.executable).parent / "crossed-study") + " experiment=qwen2.5-7b-gsm8k-crossed" in text
    # the driver runs in the batch script on the head, not as a job step that would ask for the GPUs Ray holds
    assert text.split(cluster, 1)[1].lstrip().startswith(str(Path(sys.executable).parent / "crossed-study"))
    assert "--overlap" not in text
    assert main(["slurm", "--nodes", "1", "--gpus-per-node", "8", "-o", str(out), "--", "crossed-eval"]) == 2
    assert main(["slurm", "--nodes", "1", "--gpus-per-node", "8", "--gpus-per-worker", "3", "-o",
                 str(tmp_path / "b.sbatch"), "--", "crossed-eval"]) == 2
