"""The fault matrix: every stage of a study (initial, arms, eval, score, analyze) under the faults a lab meets, each
checked the way SQLite checks its crash and I/O-error tests: what the user sees, what survives, and that the same
command run again once the fault is cleared ends with the files of a clean run.

- **Out of disk space** at a write inside the stage: one line naming the run folder and the stage, exit 1, no
  traceback on the console.
- **kill -9** at a point inside the stage (the command's whole process group, as a scheduler or the OOM killer
  would), and while it is held there **a second writer** into the same folder: refused before any work in one line
  naming the holder, exit 2. The next run takes the dead run's lock over and says so.
- **A truncated or hand-edited output** of each finished stage: the next run redoes that stage (and says why).

After each fault, no file of a stage finished before it changed (not even rewritten: same bytes, same mtime), the
faulted stage is not marked finished, and the finished stages' files equal the clean run's; the last run ends with
every file equal to the clean run's (``same_as_clean``: what is left out of that comparison, and why).

The faults are injected where the machine would raise them: a ``sitecustomize`` in the command's interpreter (and
its children's) wraps Python's ``open``: from the first opening for writing of a file whose path holds the fault's
text on, every opening for writing under the run folder fails with ``ENOSPC`` (a disk that filled up stays full),
or the writing process stops itself (SIGSTOP) so that the test can try a second writer and then kill the command's
process group with SIGKILL at exactly that point. Nothing in the package knows of it.

Cost: one clean study and one chain of faulted runs in one run folder (the faults of a stage need the stages
before it finished, which the previous stage's faulted runs leave), at the smallest size with all five stages.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossed_rlvr.folder_lock import HELD_ENV

# every test here uses the module's run folder: one worker runs them in order (tests/conftest.py)
WORKER_GROUP = "fault_matrix"
SHARED_FIXTURES = ("clean",)

# every stage at the smallest size that still has all five: a warm start of one epoch, both conventions' arms of
# one seed for one update, two wordings, no validation during training
ARGS = ["experiment=smoke", "initial.train_items=8", "sft.epochs=1", "recipe.updates=1", "recipe.prompts_per_update=2",
        "arms.seeds=[83]", "arms.train_items=8", "validation.every=0", "evaluation.n_items=4",
        "evaluation.templates=[original,para_a]", "analysis.resamples=50", "tracking=off"]
STAGES = ("initial", "arms", "eval", "score", "analyze")

# where each stage is cut: (out of disk space from this write on, kill -9 at this write), each a text of the path
# the stage opens for writing (in the order the stage writes them: the kill comes later in the stage, so that
# the rerun after it goes on from partial files of its own)
CUTS = {
    "initial": ("models/fresh/config.json",  # the tiny model built, before the warm start
                "models/initial.tmp/sft_summary.json"),  # the warm-started weights saved, the folder not yet in place
    "arms": ("train/hash/s83/metrics.jsonl",  # the first arm inside its first update
             "train/boxed/s83/checkpoints/step-1.tmp/config.json"),  # one arm finished, the other saving its model
    "eval": ("grpo-boxed_s83__hash__original.jsonl",  # the initial policy's cells written, an arm's first cell
             "responses/grpo-hash_s83__hash__original.jsonl."),  # a cell generated whole, not yet moved in place
    "score": ("scores.parquet.partial/manifest.json",  # the scores' first write
              "eval/scores.manifest.json"),  # the scores table written, its manifest not
    "analyze": ("figures/fig2a_interactions.png",  # the tables written, a figure
                "figures/training_curves.png"),  # the report being written
}

# the files of each stage (relative to the run folder), and its stamp
OWNED = {
    "initial": ("models/initial/*",),
    "arms": ("train/*",),
    "eval": ("eval/items/*", "eval/responses/*", "eval/run.json", "eval/eval_summary.json"),
    "score": ("eval/scores.parquet", "eval/scores.manifest.json"),
    "analyze": ("analysis/*",),
}

# Left out of the comparison with a clean run, each because two clean runs of one config in one folder differ there:
SKIPPED = {
    ".crossed-rlvr.lock": "the writer lock: the holder's pid and start time while a run holds it",
    "crossed-study.log": "the command's log: the original errors of the faults it kept, and times",
    "stages/*": "the stage stamps (when each finished, its seconds and CPU seconds, fingerprints over the records "
                "below) and the hash cache (file mtimes)",
    "study_summary.json": "each stage's seconds and whether it was reused",
    "eval/eval_summary.json": "what this invocation of the evaluation generated, with its seconds: a cell an "
                              "earlier, interrupted run finished is listed as skipped",
}
# ... and these keys of JSON records (every other key and every other file is compared byte for byte):
TIMES = {
    "models/initial/sft_summary.json": ("seconds",),
    "train/*/summary.json": ("seconds", "config_sha256"),  # the config's hash covers weights_sha256 below
    "train/*/metrics.jsonl": ("step_time",),
    # the initial policy's folder hash, which covers its sft_summary.json and so its seconds
    "train/*/resolved_config.json": ("weights_sha256",),
}

# the test hook: Python's open wrapped in the command and every Python process it starts
HOOK = '''
import builtins, errno, io, os, signal
_open, _root = io.open, os.environ["FAULT_ROOT"]
_at, _kind, _mark = os.environ["FAULT_AT"], os.environ["FAULT_KIND"], os.environ.get("FAULT_MARK", "")
_full = []

def _faulted(file, mode="r", *args, **kwargs):
    if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+"):
        path = os.path.abspath(os.fspath(file))
        # a full disk refuses new blocks: a file created or truncated fails, an existing one still opens to append
        # (the command's log keeps the original error)
        grows = "a" in mode and os.path.exists(path)
        if path.startswith(_root) and ((_full and not grows) or _at in path):
            if _kind == "stop":
                with _open(_mark, "w") as fh:
                    fh.write(path)
                os.kill(os.getpid(), signal.SIGSTOP)  # held here until the test kills the process group
            else:
                _full.append(path)  # a disk that filled up stays full
                raise OSError(errno.ENOSPC, "No space left on device", path)
    return _open(file, mode, *args, **kwargs)

builtins.open = io.open = _faulted
'''


def env(site: Path | None = None, **fault: str) -> dict[str, str]:
    """The command's environment: one torch thread (the same sums in every run), no folder inherited from a
    holder, and the fault hook when a fault is given."""
    out = {k: v for k, v in os.environ.items() if k != HELD_ENV}
    out.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    if site is not None:
        out["PYTHONPATH"] = os.pathsep.join([str(site), out.get("PYTHONPATH", "")])
        out.update(fault)
    return out


def study(run: Path, environ: dict[str, str], **popen) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "crossed_rlvr.study.cli", *ARGS, f"run_dir={run}"],
                            env=environ, cwd=run.parent, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True, **popen)


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def owner(rel: str) -> str | None:
    for stage, globs in OWNED.items():
        if any(fnmatch.fnmatch(rel, g) for g in globs):
            return stage
    return None


def files(run: Path) -> dict[str, Path]:
    return {p.relative_to(run).as_posix(): p for p in sorted(run.rglob("*")) if p.is_file()}


def content(rel: str, path: Path) -> bytes:
    """A file as compared with the clean run's: its bytes, or a JSON record's values less its times (``TIMES``)."""
    data = path.read_bytes()
    drop = next((keys for glob, keys in TIMES.items() if fnmatch.fnmatch(rel, glob)), None)
    if drop is None:
        return data

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in drop}
        return [strip(v) for v in value] if isinstance(value, list) else value

    lines = data.decode().splitlines() if rel.endswith(".jsonl") else [data.decode()]
    return json.dumps([strip(json.loads(x)) for x in lines if x.strip()], sort_keys=True).encode()


def digests(run: Path, stages: tuple[str, ...] = STAGES) -> dict[str, str]:
    """What is compared with a clean run: each file of these stages (``OWNED``), as ``content`` reads it; with all
    the stages, every file but the skipped ones (``SKIPPED``)."""
    out = {}
    for rel, path in files(run).items():
        if any(fnmatch.fnmatch(rel, g) for g in SKIPPED):
            continue
        stage = owner(rel)
        if stage in stages or (stage is None and stages == STAGES):
            out[rel] = hashlib.sha256(content(rel, path)).hexdigest()
    return out


def untouched(run: Path, stages: tuple[str, ...]) -> dict[str, tuple[str, int]]:
    """Each file of these finished stages and their stamps: its bytes' hash and mtime (a file rewritten with the
    same bytes is a change too: the stage was not left alone)."""
    keep = {f"stages/{s}.json" for s in stages}
    return {rel: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for rel, p in files(run).items() if owner(rel) in stages or rel in keep}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """A clean study in ``run`` and what its files hold (``digests``); the run folder is then the faults'."""
    root = tmp_path_factory.mktemp("faults")
    site = root / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOOK)
    run = root / "run"
    code, err = finish(study(run, env()))
    assert code == 0, err[-3000:]
    return run, digests(run), site


def said(err: str) -> list[str]:
    """The command's own lines (``crossed-study: …``) on stderr, progress bars and the console's lines left out (a
    bar the fault cut short is left without its line's end, so the line may follow it on the terminal's line)."""
    return [line[line.index("crossed-study: "):] for line in re.split(r"[\r\n]", err) if "crossed-study: " in line]


@pytest.mark.long
def test_each_stage_killed_or_out_of_space_keeps_what_finished_and_resumes_to_the_clean_files(clean):
    """For each stage in turn: out of disk space inside it, then kill -9 inside it with a second writer refused
    meanwhile; after each, the stages finished before are untouched and equal the clean run's, the faulted stage is
    not marked finished; the run after the kill takes the dead run's lock over; the last run ends with the clean
    run's files."""
    run, reference, site = clean
    shutil.rmtree(run)
    mark = run.parent / "stopped"
    for k, stage in enumerate(STAGES):
        done = STAGES[:k]
        full_at, kill_at = CUTS[stage]

        # out of disk space from a write inside the stage on
        before = untouched(run, finished(run))  # the stage before this one may have been killed, not finished
        code, err = finish(study(run, env(site, FAULT_ROOT=str(run), FAULT_AT=full_at, FAULT_KIND="enospc")))
        lines = [x for x in said(err) if "taking over the lock" not in x]
        assert code == 1, (stage, err[-3000:])
        assert "Traceback" not in err and len(lines) == 1, (stage, err[-3000:])
        assert lines[0].startswith(f"crossed-study: {run}: the {stage} stage stopped: out of disk space. What "
                                   "finished before is kept: "), (stage, lines)
        assert lines[0].endswith("then run the same command again (the original error is in the command's log)")
        if k > 0:  # the run after a kill
            assert f"{run.resolve()}: taking over the lock of a run that ended without finishing (pid " in err, stage
        assert "No space left on device" in (run / "crossed-study.log").read_text()
        check_kept(run, stage, done, before, reference)

        # kill -9 inside the stage, a second writer refused while it is held there
        done_now = untouched(run, done)
        mark.unlink(missing_ok=True)
        proc = study(run, env(site, FAULT_ROOT=str(run), FAULT_AT=kill_at, FAULT_KIND="stop", FAULT_MARK=str(mark)))
        try:
            waited = time.monotonic() + 600
            while not mark.exists() and proc.poll() is None and time.monotonic() < waited:
                time.sleep(0.05)
            assert mark.exists(), (stage, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
            second = subprocess.run([sys.executable, "-m", "crossed_rlvr.study.cli", *ARGS, f"run_dir={run}"],
                                    env=env(), cwd=run.parent, capture_output=True, text=True, timeout=300,
                                    check=False)
            assert second.returncode == 2, (stage, second.stderr[-3000:])
            assert second.stderr.count("\n") == 1 and second.stderr.startswith(
                f"crossed-study: {run.resolve()} is being written by another run (pid {proc.pid} on "), second.stderr
            assert "wait for it to end, or give this run another run_dir" in second.stderr
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
        code, err = finish(proc)
        assert code == -signal.SIGKILL, (stage, err[-3000:])
        check_kept(run, stage, done, done_now, reference)

    # the fault cleared: the same command ends with the clean run's files
    code, err = finish(study(run, env()))
    assert code == 0, err[-3000:]
    assert f"{run.resolve()}: taking over the lock of a run that ended without finishing (pid " in err
    assert digests(run) == reference, diff(digests(run), reference)


def finished(run: Path) -> tuple[str, ...]:
    return tuple(s for s in STAGES if (run / "stages" / f"{s}.json").is_file())


def check_kept(run: Path, stage: str, done: tuple[str, ...], before: dict[str, tuple[str, int]],
               reference: dict[str, str]) -> None:
    """After a fault in ``stage``: the stages finished before it untouched and as the clean run's, it not done."""
    assert not (run / "stages" / f"{stage}.json").exists(), stage
    now = untouched(run, done)
    assert {k: v for k, v in now.items() if k in before} == before, (stage, diff(now, before))
    assert all((run / "stages" / f"{s}.json").is_file() for s in done), stage
    ours = digests(run, done)
    assert ours == {k: v for k, v in reference.items() if owner(k) in done}, (stage, diff(ours, reference))


def diff(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))[:10]


# a finished stage's output damaged by hand: (file, what is done to it)
EDITS = {
    "initial": ("models/initial/model.safetensors", "truncated to half"),
    "arms": ("train/boxed/s83/checkpoints/step-1/model.safetensors", "truncated to half"),
    "eval": ("eval/responses/initial__hash__original.jsonl", "a response edited"),
    "score": ("eval/scores.parquet", "truncated to half"),
    "analyze": ("analysis/report.md", "a line added"),
}


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated to half":
        path.write_bytes(data[: len(data) // 2])
    elif how == "a response edited":
        first, rest = data.split(b"\n", 1)
        record = json.loads(first)
        record["response"] = "#### 42"
        path.write_bytes(json.dumps(record).encode() + b"\n" + rest)
    else:
        path.write_bytes(data + b"\nedited by hand\n")


@pytest.mark.long
def test_a_damaged_output_of_each_finished_stage_is_redone_to_the_clean_files(clean):
    """One output of every finished stage after the first truncated or edited by hand: the next run says each of
    them is redone because its outputs changed, and ends with the clean run's files; then the initial policy's
    weights truncated, the same (a rebuilt initial policy retrains the arms: its folder's hash covers its record's
    seconds)."""
    run, reference, _ = clean
    assert (run / "stages" / "analyze.json").is_file() and digests(run) == reference  # a finished study
    for damaged in (STAGES[1:], STAGES[:1]):
        for stage in damaged:
            damage(run / EDITS[stage][0], EDITS[stage][1])
        code, err = finish(study(run, env()))
        assert code == 0, err[-3000:]
        err = " ".join(err.split())  # the console wraps its lines at the width it assumes without a terminal
        for stage in damaged:
            # the analysis reads the arms' training records too, whose times a retrained arm rewrites: its inputs
            # changed as well
            why = "" if stage == "analyze" else "its outputs were changed or removed)"
            assert (f"[{STAGES.index(stage) + 1}/5] {stage}: redoing, replacing the earlier outputs (changed: "
                    f"{why}") in err, (stage, err[-3000:])
        assert digests(run) == reference, (damaged, diff(digests(run), reference))


def test_the_one_line_is_said_when_the_log_cannot_keep_the_original_error(tmp_path, capsys):
    """The log on the full (or vanished) disk: the original error is lost, but the fault's one line is said, and
    neither an error about the log nor logging's own traceback takes its place on the console."""
    import errno
    import logging

    from crossed_rlvr.faults import MachineFault, writing

    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

    gone = logging.FileHandler(tmp_path / "gone" / "crossed-study.log", delay=True)  # opened at its first record
    full = logging.FileHandler(tmp_path / "crossed-study.log")
    full.stream.close()
    full.stream = Full()
    for handler in (gone, full):
        logging.getLogger().addHandler(handler)
    try:
        with pytest.raises(MachineFault) as caught, writing(tmp_path, "the score stage"):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x"))
    finally:
        for handler in (gone, full):
            logging.getLogger().removeHandler(handler)
    assert str(caught.value).startswith(f"{tmp_path}: the score stage stopped: out of disk space.")
    assert capsys.readouterr().err == ""
