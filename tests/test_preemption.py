"""What a cluster does to a run: SIGUSR1 (SLURM's warning before a time limit) makes a TRL arm save at its next
update and stop; kill -9 and SIGTERM after a saved update lose only the updates since; the arm run again goes on
from its last save and ends on the uninterrupted arm's weights, with the same metrics.

Cost: one short arm (7 updates of the smallest tiny model, a resumable checkpoint every 3) trained once in this
process and once as a chain of four commands, each stopped as a cluster stops it but the last.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import command_env, session_of

# the arm: the smallest tiny model, its updates short; an entropy bonus moves the weights at every update although
# the tiny model earns no reward (a comparison of weights that never moved would prove nothing)
ARM = ["tracking=off", "recipe=tiny", "recipe.updates=7", "recipe.save_every=3", "recipe.prompts_per_update=2",
       "recipe.max_response_tokens=16", "recipe.entropy_coeff=0.01", "train_items.n=64", "convention=boxed"]

# stops the command once, at its first opening for writing of a path holding STOP_AT (a point the test chooses),
# until the test sends its signal and SIGCONT
HOLD = '''
import io, os, signal
_open, _at, _mark = io.open, os.environ["STOP_AT"], os.environ["STOP_MARK"]

def _held(file, mode="r", *args, **kwargs):
    if isinstance(file, (str, os.PathLike)) and "a" in mode and _at in os.fspath(file) and not os.path.exists(_mark):
        with _open(_mark, "w") as fh:
            fh.write(os.fspath(file))
        os.kill(os.getpid(), signal.SIGSTOP)
    return _open(file, mode, *args, **kwargs)

import builtins
builtins.open = io.open = _held
'''


def said(err: str) -> list[str]:
    """The command's own lines on stderr (progress bars and the libraries' lines left out)."""
    return [line[line.index("crossed-train: "):] for line in re.split(r"[\r\n]", err) if "crossed-train: " in line]


def weights(folder: Path) -> dict[str, object]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.long
def test_a_trl_arm_saved_on_sigusr1_then_killed_then_terminated_ends_on_the_uninterrupted_weights(tmp_path, tiny):
    import torch
    from hydra import compose, initialize_config_module

    from crossed_rlvr.train.checks import checked_train
    from crossed_rlvr.train.run import run_train

    # the arm uninterrupted
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_train", overrides=[*ARM, f"model.path={tiny}", f"run_dir={tmp_path}/clean"])
    run_train(checked_train(cfg))

    arm = tmp_path / "arm"
    trl = arm / "trl"
    cmd = [sys.executable, "-m", "crossed_rlvr.train.cli", *ARM, f"model.path={tiny}", f"run_dir={arm}"]
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOLD)
    mark = tmp_path / "held"
    environ = command_env(site, STOP_AT=str(arm / "metrics.jsonl"), STOP_MARK=str(mark), OMP_NUM_THREADS="1")

    systmp = tmp_path / "systmp"  # the system's temporary folder as the commands see it
    systmp.mkdir()

    def start(environ: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen(cmd, env={**environ, "TMPDIR": str(systmp)}, text=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)

    def when(proc: subprocess.Popen[str], ready: Path) -> None:
        deadline = time.monotonic() + 300
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), proc.communicate()[1][-3000:]

    def ended(proc: subprocess.Popen[str]) -> str:
        _, err = proc.communicate(timeout=300)
        deadline = time.monotonic() + 10
        while session_of(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert session_of(proc.pid) == [], session_of(proc.pid)  # nothing of the command left running
        assert "Traceback" not in err, err[-3000:]
        if proc.returncode != -signal.SIGKILL:  # its temporary folder removed (a killed one's: by the next command)
            assert list(systmp.iterdir()) == []
        return err

    # SIGUSR1 while update 1 is logged: the arm saves at update 2 (not a cadence update) and stops
    proc = start(environ)
    when(proc, mark)
    os.kill(proc.pid, signal.SIGUSR1)
    os.kill(proc.pid, signal.SIGCONT)
    err = ended(proc)
    assert proc.returncode == 138, err[-3000:]
    assert said(err) == ["crossed-train: stopped by SIGUSR1 (a time limit's warning); run the "
                         "same command again: the arm goes on from its last saved update (recipe.save_every; 0: from "
                         "its initial policy)."], err[-3000:]
    assert sorted(p.name for p in trl.glob("checkpoint-*")) == ["checkpoint-2"]
    assert not (arm / "checkpoints" / "step-7").exists() and not (arm / "summary.json").exists()

    # kill -9 once update 3 is saved (the cadence's first): the run after it goes on from there
    proc = start(command_env(OMP_NUM_THREADS="1"))
    when(proc, trl / "checkpoint-3" / "trainer_state.json")
    os.killpg(proc.pid, signal.SIGKILL)
    ended(proc)

    # SIGTERM to the command alone (as a scheduler sends it) once update 6 is saved: one line, exit 143
    proc = start(command_env(OMP_NUM_THREADS="1"))
    when(proc, trl / "checkpoint-6" / "trainer_state.json")
    os.kill(proc.pid, signal.SIGTERM)
    err = ended(proc)
    assert proc.returncode == 143, err[-3000:]
    took_over, *lines = said(err)  # the run after kill -9 takes the dead run's lock over and says so
    assert "taking over the lock of a run that ended without finishing" in took_over, err[-3000:]
    assert lines == ["crossed-train: stopped by SIGTERM; run the same command again: the arm goes on from its "
                         "last saved update (recipe.save_every; 0: from its initial policy)."], err[-3000:]

    done = subprocess.run(cmd, env=command_env(OMP_NUM_THREADS="1", TMPDIR=str(systmp)), capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(systmp.iterdir()) == []
    clean, resumed = weights(tmp_path / "clean" / "checkpoints" / "step-7"), weights(arm / "checkpoints" / "step-7")
    start_weights = weights(arm / "checkpoints" / "step-0")
    assert max(float((clean[k] - start_weights[k]).abs().max()) for k in clean) > 1e-5  # the weights moved
    assert max(float((clean[k] - resumed[k]).abs().max()) for k in clean) < 1e-6
    steps = [json.loads(x) for x in (arm / "metrics.jsonl").read_text().splitlines()]
    clean_steps = [json.loads(x) for x in (tmp_path / "clean" / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(1, 8))
    assert [s["loss"] for s in steps] == pytest.approx([s["loss"] for s in clean_steps], abs=1e-6)
    assert not trl.exists()  # the resumable checkpoints go once the final one is in place
    assert torch.isfinite(torch.tensor([s["loss"] for s in steps])).all()


def header(script: str) -> list[str]:
    """The ``#SBATCH`` lines of an sbatch script as sbatch reads them: before its first command."""
    lines = []
    for line in script.splitlines()[1:]:
        if line and not line.startswith("#"):
            break
        if line.startswith("#SBATCH "):
            lines.append(line.split(None, 1)[1])
    return lines


def test_the_slurm_scripts_ask_for_a_warning_and_requeue_themselves_after_a_warned_save(tmp_path):
    """The evaluation's sbatch script (the verl arms' shares its header and block: tests/test_verl_adapter.py) asks
    SLURM for its warning and the requeue; the block runs in bash with a stand-in ``scontrol`` on the PATH: the
    warning reaches the command, which saves and stops, then the job requeues itself; SIGTERM reaches the command
    and ends the job with its status, unrequeued; a command that fails unwarned fails the job."""
    from crossed_rlvr.cluster import REQUEUE, run_then_settle
    from crossed_rlvr.eval.generate.workers import main

    out = tmp_path / "eval.sbatch"
    assert main(["slurm", "--nodes", "1", "--gpus-per-node", "8", "--warning-s", "600", "-o", str(out), "--",
                 "crossed-eval", "experiment=smoke"]) == 0
    text = out.read_text()
    assert {"--signal=B:USR1@600", "--requeue"} <= set(header(text))
    assert REQUEUE in text and text.rstrip().endswith(" &\nchild=$!\nsettle")
    subprocess.run(["bash", "-n", str(out)], check=True)
    quiet = tmp_path / "quiet.sbatch"
    assert main(["slurm", "--nodes", "1", "--gpus-per-node", "8", "--warning-s", "0", "-o", str(quiet), "--",
                 "crossed-eval"]) == 0
    assert not [x for x in header(quiet.read_text()) if x.startswith(("--signal", "--requeue"))]

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol.calls"
    (bin_dir / "scontrol").write_text(f'#!/bin/bash\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    got = tmp_path / "got"
    # the command: says it started, then on SIGUSR1 "saves" and stops as a warned arm does (138); 143 on SIGTERM
    command = (f"bash -c 'trap \"echo USR1 > {got}; exit 138\" USR1; trap \"echo TERM > {got}; exit 143\" TERM; "
               f"touch {got}.started; while :; do sleep 0.05; done'")

    def job(signum: int | None, body: str = command) -> tuple[int, str]:
        for path in (got, calls, Path(f"{got}.started")):
            path.unlink(missing_ok=True)
        script = tmp_path / "job.sh"
        script.write_text("set -euo pipefail\n" + REQUEUE + run_then_settle(body) + "echo after\n")
        proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"})
        if signum is not None:
            deadline = time.monotonic() + 30
            while not Path(f"{got}.started").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            proc.send_signal(signum)  # to the batch shell alone, as --signal=B: sends it
        stdout, _err = proc.communicate(timeout=60)
        return proc.returncode, stdout

    code, stdout = job(signal.SIGUSR1)
    assert (code, got.read_text(), calls.read_text()) == (0, "USR1\n", "requeue 4242\n")
    assert "after" not in stdout  # the requeued job does the rest
    code, stdout = job(signal.SIGTERM)
    assert (code, got.read_text(), calls.exists()) == (143, "TERM\n", False)
    code, stdout = job(None, "bash -c 'exit 3'")
    assert (code, calls.exists(), stdout) == (3, False, "")
    code, stdout = job(None, "true")
    assert (code, calls.exists(), stdout) == (0, False, "after\n")


ENDS = '''
import atexit, sys, threading, time
from crossed_rlvr.interrupt import end_process
atexit.register(lambda: open(sys.argv[1], "a").write("exit handler ran\\n"))
if sys.argv[2] == "thread":  # a thread still writing: the process waits for it, as Python's own exit does
    threading.Thread(target=lambda: (time.sleep(0.5), open(sys.argv[1], "a").write("thread finished\\n"))).start()
end_process(3)
'''


@pytest.mark.parametrize("other", ["none", "thread"])
def test_a_finished_command_ends_at_once_with_its_exit_handlers_run(tmp_path, other):
    """interrupt.end_process: the exit handlers run and the status is kept; with another thread still running, the
    process waits for it (Python's own exit)."""
    out = tmp_path / "said"
    proc = subprocess.run([sys.executable, "-c", ENDS, str(out), other], capture_output=True, text=True, timeout=60,
                          check=False, env=command_env())
    assert proc.returncode == 3, proc.stderr
    want = ["exit handler ran"] if other == "none" else ["thread finished", "exit handler ran"]
    assert out.read_text().splitlines() == want


def test_a_checkpoint_whose_state_a_kill_cut_is_not_resumed_from(tmp_path):
    """Trainer writes a checkpoint's state last and not atomically: a kill -9 as the file appears leaves it empty
    (or cut). That checkpoint is incomplete: the arm goes on from the one before, and the cut ones are removed."""
    from crossed_rlvr.train.resume import STAMP, STATE, last_saved

    out = tmp_path / "trl"
    for step, state in ((2, json.dumps({"global_step": 2})), (3, ""), (4, '{"global_st')):
        (out / f"checkpoint-{step}").mkdir(parents=True)
        (out / f"checkpoint-{step}" / STATE).write_text(state)
    (out / "checkpoint-5").mkdir()  # killed before its state was begun
    (out / STAMP).write_text("d\n")  # written under this config
    assert last_saved(out, "d") == out / "checkpoint-2"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
