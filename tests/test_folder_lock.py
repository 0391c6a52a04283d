"""One writer per run folder (crossed_rlvr/folder_lock.py): a second command into a held folder is refused before
any work in one line naming the holder, exit 2; a holder killed with SIGKILL leaves a lock the next run takes over
and says so; the commands a writer starts count as that writer; reading a config (``--cfg job``) takes no lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossed_rlvr.folder_lock import HELD_ENV, FolderInUse, hold, holder_of, release
from crossed_rlvr.layout import FOLDER_LOCK
from tests.helpers import command_env

BIN = Path(sys.executable).parent


def holding(folder: Path, command: str = "crossed-study") -> subprocess.Popen[str]:
    """Another process holding ``folder`` until it is killed (as a running study would)."""
    env = command_env()
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom crossed_rlvr.folder_lock import hold\n"
                             f"hold({str(folder)!r}, {command!r}); print('held', flush=True); time.sleep(600)"],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv(HELD_ENV, raising=False)


def test_a_second_writer_is_refused_with_the_holders_pid_and_command(tmp_path, clean_env):
    other = holding(tmp_path / "run")
    try:
        with pytest.raises(FolderInUse) as err:
            hold(tmp_path / "run", "crossed-eval")
        said = str(err.value)
        assert f"pid {other.pid} on " in said and "`crossed-study" in said and "started 20" in said
        assert "another run_dir" in said and "\n" not in said
        assert holder_of(tmp_path / "run")["pid"] == other.pid  # the holder's line untouched
    finally:
        other.kill()
        other.wait()


def test_a_killed_holders_lock_is_taken_over_and_said(tmp_path, clean_env, capfd):
    other = holding(tmp_path / "run")
    other.send_signal(signal.SIGKILL)
    other.wait()
    hold(tmp_path / "run", "crossed-study")
    try:
        err = capfd.readouterr().err
        assert "taking over the lock of a run that ended without finishing" in err and f"pid {other.pid}" in err
        assert holder_of(tmp_path / "run")["pid"] == os.getpid()
    finally:
        release(tmp_path / "run")
    assert holder_of(tmp_path / "run") is None  # a clean end leaves nothing to take over
    assert (tmp_path / "run" / FOLDER_LOCK).exists()


def test_the_commands_a_writer_starts_and_folders_inside_it_count_as_that_writer(tmp_path, clean_env):
    hold(tmp_path / "run", "crossed-study")
    try:
        hold(tmp_path / "run" / "eval", "crossed-eval")  # inside the held folder: no second lock file
        assert not (tmp_path / "run" / "eval" / FOLDER_LOCK).exists()
        child = subprocess.run([sys.executable, "-c", "from crossed_rlvr.folder_lock import hold\n"
                                f"hold({str(tmp_path / 'run')!r}, 'crossed-eval'); print('ok')"],
                               capture_output=True, text=True, check=False)
        assert child.returncode == 0 and child.stdout.strip() == "ok", child.stderr
    finally:
        release(tmp_path / "run")


def test_a_second_study_into_a_held_folder_is_refused_before_any_work(tmp_path, clean_env):
    """The fault as a lab meets it: a second terminal (or a resubmitted job) into the folder of a running study."""
    run = tmp_path / "study"
    other = holding(run)
    try:
        start = time.perf_counter()
        env = command_env()
        out = subprocess.run([str(BIN / "crossed-study"), "experiment=smoke", f"run_dir={run}"], capture_output=True,
                             text=True, timeout=120, check=False, env=env, cwd=tmp_path)
        assert out.returncode == 2, out.stderr[-2000:]
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"crossed-study: {run.resolve()} is being written by "
                                                       f"another run (pid {other.pid} on "), lines
        assert sorted(p.name for p in run.iterdir()) == [FOLDER_LOCK]  # no hydra/, no log, no stage
        assert time.perf_counter() - start < 60
        # reading the config is not writing: no lock taken, no refusal
        shown = subprocess.run([str(BIN / "crossed-study"), "experiment=smoke", f"run_dir={run}", "--cfg", "job"],
                               capture_output=True, text=True, timeout=120, check=False, env=env, cwd=tmp_path)
        assert shown.returncode == 0 and "run_dir:" in shown.stdout, shown.stderr[-2000:]
    finally:
        other.kill()
        other.wait()


def test_crossed_score_holds_the_run_folder_it_scores(tmp_path, clean_env):
    run = tmp_path / "eval"
    other = holding(run, "crossed-eval")
    try:
        out = subprocess.run([str(BIN / "crossed-score"), str(run)], capture_output=True, text=True, timeout=120,
                             check=False)
        assert out.returncode == 2 and "is being written by another run" in out.stderr, out.stderr[-2000:]
        assert f"pid {other.pid}" in out.stderr and "`crossed-eval" in out.stderr
    finally:
        other.kill()
        other.wait()


def test_a_distributed_commands_other_ranks_count_as_rank_0s_writer(tmp_path, clean_env, monkeypatch):
    """torchrun starts the command once per rank: rank 0 holds the folder, the others write under its lock."""
    other = holding(tmp_path / "run", "crossed-sft")
    try:
        monkeypatch.setenv("RANK", "1")
        hold(tmp_path / "run", "crossed-sft")  # not refused: the same command's second rank
        monkeypatch.setenv("RANK", "0")
        with pytest.raises(FolderInUse):
            hold(tmp_path / "run", "crossed-sft")
    finally:
        other.kill()
        other.wait()


def test_the_holders_command_is_the_one_the_user_typed(tmp_path, clean_env, monkeypatch):
    """The lock names the command line as typed: the Hydra callback override every command adds to its own
    arguments (crossed_rlvr/command.py: with_checks_first) is not shown to the user the run refuses."""
    from crossed_rlvr.command import CHECKS_KEY, hold_or_refuse, with_checks_first

    typed = ["crossed-study", "experiment=smoke", f"run_dir={tmp_path / 'run'}"]
    monkeypatch.setattr(sys, "argv", with_checks_first(typed, "crossed-study"))
    assert any(a.startswith(CHECKS_KEY) for a in sys.argv)
    hold_or_refuse("crossed-study", str(tmp_path / "run"))
    try:
        assert holder_of(tmp_path / "run")["command"] == " ".join(typed)
    finally:
        release(tmp_path / "run")
