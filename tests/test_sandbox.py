"""The code sandbox contains what model-written code may try (crossed_rlvr/sandbox/bwrap.py): every attack runs for
real inside bubblewrap under a slot's own uid, and each test checks from outside that nothing escaped, nothing is
left running, and the scoring ended with the right status while the machine's other work went on."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from crossed_rlvr.eval.score.execution import Executor
from crossed_rlvr.sandbox.bwrap import Limits, Sandbox, SandboxUnavailable, uid_processes
from crossed_rlvr.sandbox.harness import decode, encode
from crossed_rlvr.tasks.code import load_code_dataset
from tests.helpers import ADD


@pytest.fixture(scope="module")
def box():
    with Sandbox(slots=2, limits=Limits(wall_s=20)) as sandbox:
        sandbox.check()
        yield sandbox


@pytest.fixture(scope="module")
def executor(box, tmp_path_factory):
    folder = tmp_path_factory.mktemp("add")
    (folder / "add.jsonl").write_text(json.dumps(ADD) + "\n")
    return Executor(load_code_dataset(folder / "add.jsonl"), box, folder / "oracle")


def outputs(box: Sandbox, code: str, calls: list[list], limit: float = 5.0, **lim):
    """What ``f`` returned on each call (or ("error", kind)), and the run."""
    job = {"code": code, "entry_point": "f", "inputs": [encode(a) for a in calls], "time_limits": [limit] * len(calls),
           "define_limit": limit}
    run = box.run(job, Limits(**{**box.limits.key(), **lim}))
    return [decode(x["out"]) if "out" in x else ("error", x["error"]) for x in run.lines], run


def status(executor: Executor, code: str) -> tuple[str, str, str]:
    v = executor.score([("HumanEval/0", code)])[0]
    return v["base"].status, v["base"].evalplus, v["plus"].status


def no_sample_left(box: Sandbox) -> None:
    for uid in list(box._uids.queue):
        assert uid is None or uid_processes(uid) == [], f"processes of sandbox uid {uid} still run"


def test_a_right_and_a_wrong_solution(executor, box):
    assert status(executor, "def add(a, b):\n    return a + b\n") == ("pass", "pass", "pass")
    assert status(executor, "def add(a, b):\n    return a - b\n")[:2] == ("fail", "fail")
    assert status(executor, "    return a + b\n")[0] == "fail"  # a body without its signature is not a program
    no_sample_left(box)


@pytest.mark.long
def test_an_infinite_loop_times_out_at_the_input_and_at_the_wall(executor, box):
    start = time.monotonic()
    assert status(executor, "def add(a, b):\n    while True:\n        pass\n") == ("timeout", "fail", "timeout")
    # at definition the loop meets the part's wall clock (EvalPlus reports that one as a timeout)
    assert status(executor, "while True:\n    pass\n")[:2] == ("timeout", "timeout")
    assert time.monotonic() - start < 30
    no_sample_left(box)


def test_a_fork_bomb_is_contained_and_its_neighbour_still_passes(executor, box):
    bomb = ("import os\n"
            "def add(a, b):\n"
            "    while True:\n"
            "        try:\n"
            "            os.fork()\n"
            "        except OSError:\n"
            "            pass\n")
    neighbour: dict = {}

    def other() -> None:
        time.sleep(0.3)  # while the bomb runs in the other slot
        neighbour["result"] = outputs(box, "def f(x):\n    return x * 2\n", [[21]])[0]

    thread = threading.Thread(target=other)
    thread.start()
    got = status(executor, bomb)
    thread.join()
    assert got[0] == "timeout" and neighbour["result"] == [42]
    no_sample_left(box)


def test_a_64_gb_allocation_is_out_of_memory(executor, box):
    assert status(executor, "def add(a, b):\n    x = bytearray(64 * 2**30)\n    return a + b\n")[:2] == ("memory", "fail")
    no_sample_left(box)


def test_no_connection_reaches_a_listener_on_the_hosts_loopback(box):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    code = ("import socket\n"
            "def f(port):\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.1', port), timeout=2).close()\n"
            "        return 'connected'\n"
            "    except OSError as err:\n"
            "        return type(err).__name__\n")
    got, _ = outputs(box, code, [[port]])
    assert got == ["ConnectionRefusedError"]  # its own loopback, where nothing listens
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


def test_files_of_the_run_directory_and_the_home_folder_cannot_be_read(box, tmp_path):
    planted = tmp_path / "run" / "secret.txt"
    planted.parent.mkdir()
    planted.write_text("run secret")
    home = Path.home() / f".crossed-sandbox-secret-{os.getpid()}"
    home.write_text("home secret")
    try:
        code = ("def f(path):\n"
                "    try:\n"
                "        return open(path).read()\n"
                "    except OSError as err:\n"
                "        return type(err).__name__\n")
        got, _ = outputs(box, code, [[str(planted)], [str(home)], [str(Path.cwd() / "pyproject.toml")]])
    finally:
        home.unlink()
    assert got == ["FileNotFoundError"] * 3


def test_nothing_is_written_outside_its_own_temporary_folder(box, tmp_path):
    code = ("def f(path):\n"
            "    try:\n"
            "        with open(path, 'w') as fh:\n"
            "            fh.write('x')\n"
            "        return 'written'\n"
            "    except OSError as err:\n"
            "        return type(err).__name__\n")
    targets = [str(tmp_path / "escaped.txt"), "/job/escaped.txt", "/usr/escaped.txt", "/escaped.txt", "/tmp/inside.txt"]
    got, _ = outputs(box, code, [[t] for t in targets])
    assert got[-1] == "written" and all(g != "written" for g in got[:-1]), got
    assert not (tmp_path / "escaped.txt").exists() and not Path("/usr/escaped.txt").exists()


@pytest.mark.parametrize("code", [
    "import os\nos._exit(0)\n",
    "import sys\nsys.exit(0)\n",
    "import os\ndef add(a, b):\n    os._exit(0)\n",
    "import sys\ndef add(a, b):\n    sys.exit(0)\n",
], ids=["os._exit before", "sys.exit before", "os._exit inside", "sys.exit inside"])
def test_leaving_before_the_tests_is_a_failure(executor, code):
    assert status(executor, code)[:2] == ("fail", "fail")


def test_printing_or_forging_a_pass_gains_nothing(executor):
    fake = ("import os, sys\n"
            "print('PASS: all tests passed')\n"
            "os.write(int(sys.argv[1]), b'{\"i\": 0, \"out\": 999}\\n{\"i\": 1, \"out\": 999}\\n')\n"
            "os._exit(0)\n")
    assert status(executor, fake)[:2] == ("fail", "fail")
    # a forged line out of turn ends the part too
    ahead = ("import os, sys\n"
             "def add(a, b):\n"
             "    os.write(int(sys.argv[1]), b'{\"i\": 5, \"out\": 3}\\n')\n"
             "    return a + b\n")
    assert status(executor, ahead)[0] == "fail"


@pytest.mark.parametrize("code", [
    "import os\ndef add(a, b):\n    os.kill(os.getppid(), 9)\n    return a + b\n",
    "import os\ndef add(a, b):\n    os.kill(-1, 9)\n    return a + b\n",
], ids=["its parent", "everything it can"])
def test_killing_its_parent_kills_only_the_sample(executor, box, code, request):
    got = status(executor, code)
    assert got[0] in ("fail", "pass"), got  # what survives inside decides; nothing outside is touched
    # a right answer of this case's own runs after the kill: the executor keeps each program's verdict, so the
    # plain right answer, scored already by whichever test of the module ran before, would run nothing here
    after = f"def add(a, b):\n    return a + b  # after the kill of {request.node.callspec.id}\n"
    assert status(executor, after)[0] == "pass"
    no_sample_left(box)


def test_a_child_left_sleeping_does_not_survive_the_sample(executor, box):
    code = ("import os, time\n"
            "def add(a, b):\n"
            "    if os.fork() == 0:\n"
            "        os.setsid()\n"
            "        time.sleep(1000)\n"
            "        os._exit(0)\n"
            "    return a + b\n")
    assert status(executor, code)[0] == "pass"
    no_sample_left(box)


def test_100_mb_of_output_neither_stalls_nor_fails_a_right_answer(executor):
    start = time.monotonic()
    code = ("import sys\n"
            "def add(a, b):\n"
            "    sys.stdout.write('x' * 100_000_000)\n"
            "    sys.stderr.write('y' * 1_000_000)\n"
            "    return a + b\n")
    assert status(executor, code) == ("pass", "pass", "pass")
    assert time.monotonic() - start < 30


def test_inside_there_is_only_a_loopback_interface_and_the_slots_uid(box):
    got, _ = outputs(box, "import os, socket\ndef f():\n    return [[n for _, n in socket.if_nameindex()], os.getuid()]\n", [[]])
    names, uid = got[0]
    assert names == ["lo"]
    if os.geteuid() == 0:
        assert 60001 <= uid < 60001 + 4096  # a slot uid, never root
        assert uid != 0


def test_a_sandbox_that_cannot_start_refuses_to_score(monkeypatch):
    import crossed_rlvr.sandbox.bwrap as bwrap

    monkeypatch.setattr(bwrap, "PYTHON", "/nonexistent/python3")
    with Sandbox(slots=1) as sandbox, pytest.raises(SandboxUnavailable, match="cannot start here"):
        sandbox.check()


def test_a_sandbox_error_during_scoring_is_never_the_models_failure(executor, box, monkeypatch):
    import crossed_rlvr.sandbox.bwrap as bwrap

    # The expected outputs first (this test may run on a worker where no other test of the module recorded
    # them), so the failure below happens while scoring the model's code, not while recording the oracle.
    executor.score([("HumanEval/0", "def add(a, b):\n    return a + b\n")])
    monkeypatch.setattr(bwrap, "PYTHON", "/nonexistent/python3")
    with pytest.raises(SandboxUnavailable, match="no code was scored"):
        executor.score([("HumanEval/0", "def add(a, b):\n    return a + b  # new code\n")])
