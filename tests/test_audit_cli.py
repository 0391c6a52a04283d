"""``crossed-audit``'s front door: its help shows the one-command example, and a command line it cannot run is
refused before any work in one line naming the key (exit 2). The audit itself runs in tests/test_real_model.py
(SmolLM2-135M-Instruct and two checkpoints trained in the suite)."""

import subprocess
import sys
from pathlib import Path

import pytest

AUDIT = str(Path(sys.executable).parent / "crossed-audit")


def audit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([AUDIT, *args, f"run_dir={tmp_path / 'run'}"], capture_output=True, text=True,
                          timeout=120, check=False, cwd=tmp_path)


def test_help_shows_the_one_command_example():
    out = subprocess.run([AUDIT, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "crossed-audit initial=BASE hash=HASH_CKPT boxed=BOXED_CKPT task=gsm8k eval=vllm" in out
    assert "boxed=[SEED0_CKPT,SEED1_CKPT]" in out and "answer_only" in out


@pytest.mark.parametrize(("args", "said"), [
    ((), "initial=PATH is required"),
    (("initial=MODEL", "boxed=/no/such/folder"), "boxed[0]=/no/such/folder: no such model folder"),
    (("initial=MODEL", "hash=[MODEL,/gone]"), "hash[1]=/gone: no such model folder"),
    (("initial=MODEL", "hash=MODEL", "task=humaneval_plus"),
     "hash=" + "MODEL: task=humaneval_plus takes policies trained to fence, begin_done"),
    (("initial=MODEL", "fence=MODEL"), "fence=MODEL: task=arith_tiny takes policies trained to hash, boxed"),
])
def test_a_command_line_it_cannot_run_is_refused_in_one_line(tmp_path, args, said):
    model = tmp_path / "model"
    model.mkdir()
    proc = audit(tmp_path, *(a.replace("MODEL", str(model)) for a in args))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    said = said.replace("MODEL", str(model))
    assert lines[-1].startswith("crossed-audit: ") and said in lines[-1], proc.stderr[-2000:]
    assert not (tmp_path / "run" / "eval").exists()  # refused before any work
