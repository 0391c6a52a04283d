"""A fault of the machine ends in one line with nothing lost (crossed_rlvr/faults.py, study/space.py): a full disk
under a library that says so in its own words (safetensors), a read-only or vanished folder, a permission error, a
killed worker; and a study that will not fit its disk is refused before its first stage."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from crossed_rlvr.faults import MachineFault, fault_errno, writing
from tests.helpers import command_env, site_with

BIN = Path(sys.executable).parent
ENOSPC_RUST = "Error while serializing: I/O error: No space left on device (os error 28)"


@pytest.mark.parametrize(("err", "said"), [
    (RuntimeError(ENOSPC_RUST), "out of disk space"),
    (OSError(errno.EROFS, "Read-only file system", "/x/y"), "the file system is read-only"),
    (OSError(errno.EACCES, "Permission denied", "/x/y"), "permission denied"),
    (OSError(errno.ESTALE, "Stale file handle", "/x/y"), "the network share went away"),
    (subprocess.CalledProcessError(-9, ["torchrun"]), "a worker process was killed (SIGKILL"),
])
def test_each_fault_of_the_machine_becomes_one_line_naming_the_folder_and_the_way_on(tmp_path, err, said):
    with pytest.raises(MachineFault) as caught, writing(tmp_path, "the arms stage"):
        raise err
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"{tmp_path}: the arms stage stopped: ") and said in line
    assert "What finished before is kept" in line and "run the same command again" in line
    assert caught.value.__cause__ is err  # the original kept (the command's log writes it whole)


def test_a_bug_is_not_taken_for_a_fault_of_the_machine(tmp_path):
    with pytest.raises(KeyError), writing(tmp_path, "the eval stage"):
        raise KeyError("cells")
    assert fault_errno(ValueError("no space for the answer")) is None


def test_the_original_error_goes_to_the_commands_log_file_only(tmp_path, capsys):
    log = tmp_path / "crossed-study.log"
    handler = logging.FileHandler(log)
    logging.getLogger().addHandler(handler)
    try:
        with pytest.raises(MachineFault), writing(tmp_path, "the arms stage", needed_gb=1.5):
            raise RuntimeError(ENOSPC_RUST)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    assert "Traceback" in log.read_text() and ENOSPC_RUST in log.read_text()
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.long
def test_a_full_disk_inside_a_study_stage_ends_in_one_line_and_exit_1(tmp_path):
    """The study's first write of a model, as safetensors reports a full disk (its Rust I/O error): one line naming
    the run folder and the stage, exit 1, the traceback in the study's log."""
    full = ("import safetensors, safetensors.torch\n"
            "def full(*a, **k):\n"
            f"    raise safetensors.SafetensorError({ENOSPC_RUST!r})\n"
            "safetensors.torch.save_file = full\n")
    env = command_env(site_with(tmp_path, full))
    run = tmp_path / "study"
    out = subprocess.run([str(BIN / "crossed-study"), "experiment=smoke", f"run_dir={run}"], capture_output=True,
                         text=True, timeout=300, check=False, env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"crossed-study: {run}: the initial stage stopped: out of disk space."), last
    assert "Traceback" not in out.stderr
    assert "os error 28" in (run / "crossed-study.log").read_text()
    assert not (run / "stages" / "initial.json").exists()  # nothing half-finished counted as done


@pytest.mark.long
def test_a_study_that_will_not_fit_its_disk_is_refused_before_its_first_stage(tmp_path):
    tight = ("import collections, shutil\n"
             "_real = shutil.disk_usage\n"
             "def tight(path):\n"
             "    u = _real(path)\n"
             "    return type(u)(u.total, u.total - 1_000, 1_000)\n"
             "shutil.disk_usage = tight\n")
    env = command_env(site_with(tmp_path, tight))
    run = tmp_path / "study"
    out = subprocess.run([str(BIN / "crossed-study"), "experiment=smoke", f"run_dir={run}"], capture_output=True,
                         text=True, timeout=300, check=False, env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    lines = [x for x in out.stderr.strip().splitlines() if x.startswith("crossed-study:")]
    assert len(lines) == 1 and f"{run}: 0.0 MB free, but this study writes about " in lines[0], out.stderr[-2000:]
    # 25 models of 2.5 MB: the initial policy, and 4 arms each keeping its final model, its step-0 weights and the
    # model its crossed validation saved at each of steps 0-3 (validation.every=1 over 3 updates)
    assert "writes about 62.5 MB (the initial policy and 4 arm(s)' models" in lines[0], lines[0]
    assert "parameters at 4 B each" in lines[0] and "another run_dir" in lines[0]
    assert not (run / "stages").exists()
