"""The fault matrix: every stage of a study (initial, arms, eval, score, analyze) under the faults a lab meets, each
checked the way SQLite checks its crash and I/O-error tests: what the user sees, what survives, and that the same
command run again once the fault is cleared ends with the files of a clean run.

- **Out of disk space** at a write inside the stage: one line naming the run folder and the stage, exit 1, no
  traceback on the console.
- **SIGTERM** to the command alone at a point inside the stage (as a scheduler stops a job: one line, exit 143,
  nothing of the command left running), and in the analyze stage then **kill -9** there (the command's whole process
  group, as the OOM killer would); while it is held there, **a second writer** into the same folder: refused before
  any work in one line naming the holder, exit 2. The next run after a kill -9 takes the dead run's lock over and
  says so. The commands' temporary folder (crossed_rlvr/scratch.py) is empty once the last has ended.
- **A truncated or hand-edited output** of each finished stage: the next run redoes that stage (and says why).

After each fault, no file of a stage finished before it changed (not even rewritten: same bytes, same mtime), the
faulted stage is not marked finished, and the finished stages' files equal the clean run's; the last run ends with
every file equal to the clean run's (``SKIPPED``: what is left out of that comparison, and why).

The faults are injected where the machine would raise them: a ``sitecustomize`` in the command's interpreter (and
its children's) wraps Python's ``open``: from the first opening for writing of a file whose path holds the fault's
text on, every opening for writing under the run folder fails with ``ENOSPC`` (a disk that filled up stays full),
or the writing process stops itself (SIGSTOP) so that the test can try a second writer and then kill the command's
process group with SIGKILL at exactly that point. Nothing in the package knows of it.

Cost: one clean study and one chain of faulted runs in one run folder (the faults of a stage need the stages
before it finished, which the previous stage's faulted runs leave), at the smallest size with all five stages.

**crossed-eval run alone on Ray workers** goes through the same faults, cut inside its cells: out of disk space at
a shard's write (the line names the cell), SIGTERM to the command as its last cell is moved into place, with
a second writer refused meanwhile (one line, exit 143, nothing of the command, Ray's own processes included, left
running; a killed driver: tests/test_eval_workers.py),
and finished cells edited or truncated by hand, each said and generated again. After each, the cells finished before are
untouched and every finished cell equals a clean run's; the last run ends with a clean run's files (the serial
run's: the workers write its bytes). The serial run and the code tasks' evaluation are checked against damaged
cells too. Cost: one tiny model under two names, eight cells of 3 or 4 responses, three runs on Ray (~50 CPU s).
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

from crossed_rlvr.eval.generate.plan import RunError
from crossed_rlvr.eval.generate.runner import run_eval
from crossed_rlvr.layout import EvalLayout
from tests.helpers import cfg_for, command_env, overrides, session_of, site_with

# every test here uses the module's run folder: one worker runs them in order (tests/conftest.py)
WORKER_GROUP = "fault_matrix"
SHARED_FIXTURES = ("clean",)

# every stage at the smallest size that still has all five: a warm start of one epoch, both conventions' arms of
# one seed for one update, two wordings, no validation during training
ARGS = ["experiment=smoke", "initial.train_items=8", "sft.epochs=1", "recipe.updates=1", "recipe.prompts_per_update=2",
        "arms.seeds=[83]", "arms.train_items=8", "validation.every=0", "evaluation.n_items=4",
        "evaluation.templates=[original,para_a]", "analysis.resamples=50", "tracking=off"]
STAGES = ("initial", "arms", "eval", "score", "analyze")
# how each stage's held run is stopped, in turn: SIGTERM to the command alone, as a scheduler stops a job (the command
# must stop its worker processes: the warm start's, the arms', generation's, scoring's), and in the last stage then
# kill -9 of its whole process group (and the next run's lock takeover after it; kill -9 inside an arm, a cell or a
# verl arm: tests/test_preemption.py, tests/test_eval_workers.py, tests/test_verl_train.py)
SIGNALS = {"initial": (signal.SIGTERM,), "arms": (signal.SIGTERM,), "eval": (signal.SIGTERM,),
           "score": (signal.SIGTERM,), "analyze": (signal.SIGTERM, signal.SIGKILL)}
TERMINATED_LINE = ("crossed-study: stopped by SIGTERM; run the same command again: every finished stage is reused, "
                   "and an arm in training goes on from its last saved update (recipe.save_every).")
# what a stage's one line names as being written when the full disk stopped it, where the stage says
WRITING = {"eval": "the cell grpo-boxed_s83__hash__original"}

# where each stage is cut: (out of disk space from this write on, SIGTERM or kill -9 at this write), each a text of the path
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
    "train/*/file_hashes.json": "an arm's hashes of its final policy's files, by size and mtime",
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
import builtins, errno, io, os, signal, time
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
                # or sends SIGTERM and continues it: the signal may reach another thread first, and the main
                # thread (which runs Python's handler) would go on to write what the cut holds back meanwhile
                for _ in range(250):
                    time.sleep(0.02)
            else:
                _full.append(path)  # a disk that filled up stays full
                raise OSError(errno.ENOSPC, "No space left on device", path)
    return _open(file, mode, *args, **kwargs)

builtins.open = io.open = _faulted
'''


def env(site: Path | None = None, **fault: str) -> dict[str, str]:
    """The command's environment: one torch thread (the same sums in every run), no folder inherited from a
    holder, and the fault hook (``HOOK`` in ``site``) when a fault is given."""
    return command_env(site, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **fault)


def launch(cmd: list[str], run: Path, environ: dict[str, str]) -> subprocess.Popen[str]:
    """A command in a session of its own (its process group is what a scheduler would kill), its stderr kept, and
    ``systmp(run)`` as the system's temporary folder it and its libraries write to."""
    systmp(run).mkdir(exist_ok=True)
    return subprocess.Popen(cmd, env={**environ, "TMPDIR": str(systmp(run))}, cwd=run.parent, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def systmp(run: Path) -> Path:
    """The temporary folder of the commands run on ``run``: empty once a command ends (crossed_rlvr/scratch.py), or
    once the next ends after a kill -9. Short, in /tmp (Ray's sockets go under it, 107 bytes at most), named by the
    run folder; removed with the module (``systmps``)."""
    folder = Path("/tmp") / f"st-{hashlib.sha256(str(run.resolve()).encode()).hexdigest()[:10]}"
    SYSTMPS.add(folder)
    return folder


SYSTMPS: set[Path] = set()


@pytest.fixture(scope="module", autouse=True)
def systmps():
    yield
    for folder in SYSTMPS:
        shutil.rmtree(folder, ignore_errors=True)


def study_cmd(run: Path) -> list[str]:
    return [sys.executable, "-m", "crossed_rlvr.study.cli", *ARGS, f"run_dir={run}"]


def study(run: Path, environ: dict[str, str]) -> subprocess.Popen[str]:
    return launch(study_cmd(run), run, environ)


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


def content(rel: str, path: Path, times: dict[str, tuple[str, ...]] = TIMES) -> bytes:
    """A file as compared with the clean run's: its bytes, or a JSON record's values less its times (``times``)."""
    data = path.read_bytes()
    drop = next((keys for glob, keys in times.items() if fnmatch.fnmatch(rel, glob)), None)
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
    site = site_with(root, HOOK)
    run = root / "run"
    code, err = finish(study(run, env()))
    assert code == 0, err[-3000:]
    assert list(systmp(run).iterdir()) == []  # nothing the study's libraries wrote there is left (scratch.py)
    return run, digests(run), site


def said(err: str, head: str = "crossed-study: ") -> list[str]:
    """The command's own lines (starting ``head``) on stderr, progress bars and the console's lines left out (a
    bar the fault cut short is left without its line's end, so the line may follow it on the terminal's line)."""
    return [line[line.index(head):] for line in re.split(r"[\r\n]", err) if head in line]


@pytest.mark.long
def test_each_stage_killed_or_out_of_space_keeps_what_finished_and_resumes_to_the_clean_files(clean):
    """For each stage in turn: out of disk space inside it, then SIGTERM (and in the analyze stage kill -9) inside it
    with a second writer refused meanwhile; after each, the stages finished before are untouched and equal the clean
    run's, the faulted stage is not marked finished; the run after the kill -9 takes the dead run's lock over; the
    last run ends with the clean run's files."""
    run, reference, site = clean
    shutil.rmtree(run)
    mark = run.parent / "stopped"
    killed = False
    for k, stage in enumerate(STAGES):
        done = STAGES[:k]
        full_at, kill_at = CUTS[stage]

        # out of disk space from a write inside the stage on
        before = untouched(run, finished(run))  # the stage before this one may have been killed, not finished
        code, err = finish(study(run, env(site, FAULT_ROOT=str(run), FAULT_AT=full_at, FAULT_KIND="enospc")))
        lines = [x for x in said(err) if "taking over the lock" not in x]
        assert code == 1, (stage, err[-3000:])
        assert "Traceback" not in err and len(lines) == 1, (stage, err[-3000:])
        assert out_of_space(lines[0], "crossed-study", run, f"the {stage} stage", WRITING.get(stage)), (stage, lines)
        if k > 0 and killed:  # the run after a kill -9 (a SIGTERM leaves the lock released)
            assert f"{run.resolve()}: taking over the lock of a run that ended without finishing (pid " in err, stage
        assert "No space left on device" in (run / "crossed-study.log").read_text()
        check_kept(run, stage, done, before, reference)

        # SIGTERM to the command inside the stage (then kill -9, where SIGNALS says), a second writer refused while
        # it is held there
        for signum in SIGNALS[stage]:
            done_now = untouched(run, done)
            code, err = held_then_killed(study_cmd(run), run, env(site, FAULT_ROOT=str(run), FAULT_AT=kill_at,
                                                                   FAULT_KIND="stop", FAULT_MARK=str(mark)), signum)
            if signum == signal.SIGKILL:
                assert code == -signal.SIGKILL, (stage, err[-3000:])
            else:  # one line, exit 143, nothing of the command left running (held_then_killed), its folder removed
                assert code == 143 and "Traceback" not in err, (stage, err[-3000:])
                assert [x for x in said(err) if "taking over the lock" not in x] == [TERMINATED_LINE], (
                    stage, err[-3000:])
                assert list(systmp(run).iterdir()) == [], stage
            check_kept(run, stage, done, done_now, reference)
            killed = signum == signal.SIGKILL

    # the fault cleared: the same command ends with the clean run's files
    code, err = finish(study(run, env()))
    assert code == 0, err[-3000:]
    assert f"{run.resolve()}: taking over the lock of a run that ended without finishing (pid " in err
    assert digests(run) == reference, diff(digests(run), reference)
    assert list(systmp(run).iterdir()) == []  # the killed run's temporary folder removed by the run after it


def out_of_space(line: str, command: str, run: Path, what: str, written: str | None) -> bool:
    """Whether ``line`` is the one line of a full disk: the folder, what stopped (writing what, where it says), the
    fault, and the way on."""
    where = f" writing {written}" if written else ""
    return (line.startswith(f"{command}: {run}: {what} stopped{where}: out of disk space. What finished before is "
                            "kept: ")
            and line.endswith("then run the same command again (the original error is in the command's log)"))


def held_then_killed(cmd: list[str], run: Path, environ: dict[str, str],
                     signum: int = signal.SIGKILL) -> tuple[int, str]:
    """``cmd`` started with the stop hook (``environ``) and held at its cut; meanwhile the same command, a second
    writer into the same folder, is refused in one line naming the holder, exit 2; then the held command's process
    group is killed with SIGKILL, or (``signum=SIGTERM``) the command's own process alone is sent SIGTERM, as a
    scheduler sends it, and every held process continued. Its exit status and stderr."""
    mark = Path(environ["FAULT_MARK"])
    mark.unlink(missing_ok=True)
    proc = launch(cmd, run, environ)
    try:
        waited = time.monotonic() + 600
        while not mark.exists() and proc.poll() is None and time.monotonic() < waited:
            time.sleep(0.05)
        assert mark.exists(), (proc.poll(), proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        second = subprocess.run(cmd, env=env(), cwd=run.parent, capture_output=True, text=True, timeout=300,
                                check=False)
        command = "crossed-study" if "crossed_rlvr.study.cli" in cmd else "crossed-eval"
        assert second.returncode == 2, second.stderr[-3000:]
        assert second.stderr.count("\n") == 1 and second.stderr.startswith(
            f"{command}: {run.resolve()} is being written by another run (pid {proc.pid} on "), second.stderr
        assert "wait for it to end, or give this run another run_dir" in second.stderr
    finally:
        if signum == signal.SIGKILL:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signum)
            os.killpg(proc.pid, signal.SIGCONT)
    code, err = finish(proc)
    waited = time.monotonic() + 30
    while session_of(proc.pid) and time.monotonic() < waited:  # Ray's own processes end as they find their driver gone
        time.sleep(0.1)
    assert not session_of(proc.pid), session_of(proc.pid)  # nothing of the killed command goes on running
    return code, err


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


# --- crossed-eval run alone, on Ray workers -----------------------------------------------------------------------
# Two policies (one tiny model under two names, the cheapest policies tests/test_eval_workers.py uses), both requests,
# two wordings: eight cells of 4 or 3 responses, in shards of 2 over Ray workers (each worker's start costs ~5 CPU
# seconds: two for the kill, whose process group is killed with both at work or idle; one for the other runs)
EVAL_POLICIES = {"initial": "training_convention: initial, train_seed: null",
                 "grpo-hash/s1": "training_convention: hash, train_seed: 1"}
# where the evaluation is cut (each a text of a path its driver opens for writing): out of disk space at the first
# shard of an arm's third cell; kill -9 at the last cell generated whole, its shards written, its file not yet in
# place (a cut at a shard would leave the shards on disk to the race of two workers)
EVAL_CUTS = {"enospc": "grpo-hash_s1__boxed__original.shards/",
             "stop": "responses/grpo-hash_s1__boxed__para_a.jsonl."}
# what is compared with a clean run (every other file is the command's own: its lock, its log, Hydra's copy of its
# config, the summary of what that invocation generated), less where each run's workers ran (the serial reference
# ran in this process)
EVAL_COMPARED = ("items/*", "responses/*", "run.json")
EVAL_TIMES = {"run.json": ("machines",)}
# a finished cell damaged by hand: (file, what is done to it)
EVAL_EDITS = {"responses/initial__hash__original.jsonl": "a response edited",
              "responses/grpo-hash_s1__hash__original.jsonl": "truncated to half"}


def eval_args(run: Path, tiny: Path, *extra: str, policies: tuple[str, ...] = tuple(EVAL_POLICIES)) -> list[str]:
    listed = ",".join(f"{{name: {name}, path: {tiny}, {EVAL_POLICIES[name]}}}" for name in policies)
    return overrides(run, tiny, n_items=4, extra=[f"policies=[{listed}]", *extra])


def eval_cmd(run: Path, tiny: Path, workers: int = 1) -> list[str]:
    ray = [f"distribute.workers={workers}", "distribute.shard_size=2"]
    return [sys.executable, "-m", "crossed_rlvr.eval.generate.cli", *eval_args(run, tiny, *ray)]


def eval_digests(run: Path) -> dict[str, str]:
    """What an evaluation's folder holds, as compared with a clean run's (``EVAL_COMPARED``, ``EVAL_TIMES``)."""
    return {rel: hashlib.sha256(content(rel, path, EVAL_TIMES)).hexdigest() for rel, path in files(run).items()
            if any(fnmatch.fnmatch(rel, g) for g in EVAL_COMPARED)}


def finished_cells(run: Path) -> dict[str, tuple[str, int]]:
    """The files of each finished cell (its response file in place, and its settings record): bytes' hash, mtime."""
    done = cells_done(run)
    return {rel: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for rel, p in files(run).items()
            if rel.startswith("responses/") and rel.count("/") == 1 and EvalLayout.cell_of(p.name) in done}


def cells_done(run: Path) -> set[str]:
    """The cells whose response file is in place."""
    return {EvalLayout.cell_of(p.name) for p in EvalLayout(run).responses.glob("*.jsonl")}


def check_cells_kept(run: Path, before: dict[str, tuple[str, int]], reference: dict[str, str]) -> None:
    """After a fault: the cells finished before it untouched (bytes and mtime), every finished cell as the clean
    run's, and no response file in place without its settings record (the record is written first)."""
    now = finished_cells(run)
    assert {k: now.get(k) for k in before} == before, diff(now, before)
    ours = {k: v for k, v in eval_digests(run).items() if k in now}
    assert ours == {k: reference[k] for k in ours}, diff(ours, reference)
    assert all(EvalLayout(run).response_meta(cell).is_file() for cell in cells_done(run))


@pytest.mark.exclusive  # a Ray cluster (tests/conftest.py)
@pytest.mark.long
def test_crossed_eval_on_ray_workers_out_of_space_killed_or_damaged_resumes_to_the_clean_files(tmp_path, tiny):
    """crossed-eval on Ray workers, the initial policy's cells finished before by an earlier run: out of disk space
    at a shard's write (one line naming the folder and the cell, exit 1, the original error in the log), then SIGTERM
    to the command as its last cell is moved into place (a second writer refused meanwhile, exit 2); after each, the
    cells finished before are untouched and every finished cell is the clean run's. Then one finished cell edited by
    hand and another truncated: the next run says each damaged cell is generated again, and ends with a clean run's
    files. The commands' temporary folder is empty after each."""
    site = site_with(tmp_path, HOOK)
    ref, run = tmp_path / "ref", tmp_path / "run"  # side by side: the records name the model by its relative path
    run_eval(cfg_for(*eval_args(ref, tiny)), progress=False)  # the clean run, serial (the workers write its bytes)
    reference = eval_digests(ref)
    run_eval(cfg_for(*eval_args(run, tiny, policies=("initial",))), progress=False)

    # out of disk space from a shard's write on
    before = finished_cells(run)
    fault = env(site, FAULT_ROOT=str(run), FAULT_AT=EVAL_CUTS["enospc"], FAULT_KIND="enospc")
    code, err = finish(launch(eval_cmd(run, tiny), run, fault))
    lines = said(err, f"crossed-eval: {run}")
    assert code == 1 and "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert out_of_space(lines[0], "crossed-eval", run, "crossed-eval", "the cell grpo-hash_s1__boxed__original"), lines
    assert "No space left on device" in (run / "crossed-eval.log").read_text()
    check_cells_kept(run, before, reference)
    # one worker takes the shards in the design's order: the arm's first two cells were written, the third not
    assert cells_done(run) == cells_done(ref) - {f"grpo-hash_s1__boxed__{t}" for t in ("original", "para_a")}

    # SIGTERM to the command (as a scheduler stops a job; kill -9 of the driver: tests/test_eval_workers.py) as the
    # last cell is moved into place, a second writer refused meanwhile: one line, exit 143, nothing of the command
    # left running, Ray's processes included (held_then_killed), nothing left in the temporary folder
    before = finished_cells(run)
    fault = env(site, FAULT_ROOT=str(run), FAULT_AT=EVAL_CUTS["stop"], FAULT_KIND="stop",
                FAULT_MARK=str(tmp_path / "stopped"))
    code, err = held_then_killed(eval_cmd(run, tiny, workers=2), run, fault, signal.SIGTERM)
    assert code == 143 and "Traceback" not in err, err[-3000:]
    lines = [x for x in said(err, "crossed-eval: ") if "%|" not in x]  # its progress bar left out
    assert lines == ["crossed-eval: stopped by SIGTERM; run the same command again: finished response files are kept, "
                     "the rest generated."], err[-3000:]
    assert list(systmp(run).iterdir()) == []
    check_cells_kept(run, before, reference)
    # the held cell not in place, its two shards on disk to go on from (the cell before it may be finished or not:
    # one worker may serve both shards of the last cell while the other is still on its first)
    assert "grpo-hash_s1__boxed__para_a" not in cells_done(run)
    assert len(list(EvalLayout(run).shards("grpo-hash_s1__boxed__para_a").glob("*.jsonl"))) == 2

    # two finished cells damaged by hand; the fault cleared, the same command
    before = finished_cells(run)
    for rel, how in EVAL_EDITS.items():
        damage(run / rel, how)
    code, err = finish(launch(eval_cmd(run, tiny), run, env()))
    assert code == 0, err[-3000:]
    assert "taking over the lock" not in err  # the stopped run released it
    check_redone(err, run, EVAL_EDITS, before, reference)
    assert list(systmp(run).iterdir()) == []


def check_redone(err: str, run: Path, edits: dict[str, str], before: dict[str, tuple[str, int]],
                 reference: dict[str, str]) -> None:
    """After a run on damaged cells: it said each was generated again (and no other), the cells finished before and
    not damaged are untouched, and the folder holds the clean run's files."""
    redone = [x for x in said(err, f"crossed-eval: {run}") if "changed since it was written" in x]
    assert sorted(redone) == sorted(f"crossed-eval: {run / rel}: changed since it was written (its bytes differ from "
                                    f"the sha256 its {EvalLayout.meta_of(Path(rel)).name} records); generating it "
                                    "again" for rel in edits), err[-3000:]
    damaged = {EvalLayout.cell_of(Path(rel).name) for rel in edits}
    kept = {k: v for k, v in before.items() if EvalLayout.cell_of(Path(k).name) not in damaged}
    now = finished_cells(run)
    assert {k: now.get(k) for k in kept} == kept, diff(now, kept)
    assert eval_digests(run) == reference, diff(eval_digests(run), reference)


def test_crossed_eval_generates_again_a_finished_cell_edited_or_truncated_by_hand(tmp_path, tiny, capsys):
    """The serial run (no Ray): a finished cell is reused by its settings and its bytes, so a response file edited
    or truncated since it was written is said and generated again, and the others are left untouched; a cell whose
    settings record is cut short is refused in one line."""
    run = tmp_path / "run"
    cfg = cfg_for(*eval_args(run, tiny, policies=("initial",)))
    run_eval(cfg, progress=False)
    reference, before = eval_digests(run), finished_cells(run)
    edits = {"responses/initial__hash__original.jsonl": "a response edited",
             "responses/initial__boxed__para_a.jsonl": "truncated to half"}
    for rel, how in edits.items():
        damage(run / rel, how)
    capsys.readouterr()
    run_eval(cfg, progress=False)
    check_redone(capsys.readouterr().err, run, edits, before, reference)
    # a settings record cut short: what made the file is unknown, so it is neither reused nor replaced unasked
    meta = EvalLayout(run).response_meta("initial__hash__para_a")
    meta.write_text(meta.read_text()[:40])
    with pytest.raises(RunError, match=r"initial__hash__para_a.jsonl has no readable initial__hash__para_a.meta.json; "
                                       "pass overwrite=true or use a new run_dir"):
        run_eval(cfg, progress=False)


def test_a_code_tasks_response_file_edited_by_hand_is_generated_again(tmp_path, tiny, capsys):
    """The code tasks' evaluation keeps a finished file by its settings and its bytes alike."""
    from crossed_rlvr.tasks.code import tiny_code_rows, write_code_dataset

    data = tmp_path / "tiny_code.jsonl"
    write_code_dataset(data, tiny_code_rows(2))
    run = tmp_path / "run"
    cfg = cfg_for(f"run_dir={run}", "task=humaneval_plus", f"task.path={data}", "requests=[fence,begin_done]",
                  f"model.path={tiny}", "eval.max_new_tokens=8", "tracking=off")
    run_eval(cfg)
    reference, before = eval_digests(run), finished_cells(run)
    edits = {"responses/initial__fence__original.jsonl": "a response edited"}
    for rel, how in edits.items():
        damage(run / rel, how)
    capsys.readouterr()
    run_eval(cfg)
    check_redone(capsys.readouterr().err, run, edits, before, reference)
