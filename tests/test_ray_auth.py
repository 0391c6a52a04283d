"""Ray's token authentication on every path, with a real `ray start --head` on this CPU while a stale
~/.ray/auth_token exists (the one an earlier local ray.init leaves): the sbatch scripts' RAY_AUTH block decides
the mode and the token for the head, a second node started the way the scripts start one, the join check,
a plain driver and the crossed evaluation's driver; a driver that reads the stale file is refused."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from crossed_rlvr.cluster import RAY_AUTH

# real Ray nodes under a time limit (tests/conftest.py)
pytestmark = [pytest.mark.exclusive]

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def script_env(tmp: Path) -> dict[str, str]:
    """What the scripts' RAY_AUTH block exports, read back from a bash that ran it."""
    token = tmp / ".ray_auth_token"
    out = subprocess.run(["bash", "-c", RAY_AUTH.format(token=token, python=sys.executable) + "env -0"],
                         capture_output=True, check=True, env=base_env(tmp))
    env = dict(kv.split("=", 1) for kv in out.stdout.decode().split("\0") if "=" in kv)
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == str(token)
    assert token.stat().st_mode & 0o077 == 0 and len(token.read_text().strip()) == 64
    return env


def base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TQ_"))}
    return {**env, "HOME": str(tmp / "home"), "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture()
def cluster(tmp_path):
    """A head and a second node started as the sbatch script starts them (`ray start ... --block`, each in a session
    of its own so that the test stops exactly them, never another Ray on this machine)."""
    from crossed_rlvr.train.rehearsal import kill_group

    (tmp_path / "home" / ".ray").mkdir(parents=True)
    (tmp_path / "home" / ".ray" / "auth_token").write_text("stale-token-left-by-an-earlier-local-ray-init")
    env = script_env(tmp_path)
    port = free_port()
    procs = []
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 characters

    def start(*args: str) -> None:
        # --temp-dir: its ray_current_cluster file stays in this test's folder (one left in /tmp/ray would make a
        # later ray.init() without an address join this dead cluster)
        procs.append(subprocess.Popen([str(BIN / "ray"), "start", *args, "--num-cpus=1", "--block",
                                       "--disable-usage-stats", f"--temp-dir={ray_tmp}"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))

    before = Path("/tmp/ray/ray_current_cluster").read_bytes() if Path("/tmp/ray/ray_current_cluster").exists() \
        else None
    try:
        start("--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false")
        yield {"env": env, "address": f"127.0.0.1:{port}", "start": start, "tmp": tmp_path}
    finally:
        for p in reversed(procs):
            kill_group(p.pid)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        after = Path("/tmp/ray/ray_current_cluster")
        assert (after.read_bytes() if after.exists() else None) == before  # nothing left for later ray.init()


def join_check(env: dict[str, str], address: str, nodes: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crossed_rlvr.cluster", "--wait-nodes", str(nodes), "--address",
                           address, "--join-timeout", "90"], env=env, capture_output=True, text=True, timeout=150, check=False)


DRIVER = """import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
ray.shutdown()
"""

EVAL_DRIVER = """import sys
from types import SimpleNamespace
from crossed_rlvr.eval.generate.workers import _connect
import ray
_connect(SimpleNamespace(address=sys.argv[1], log_to_driver=False), {"CPU": 1.0})
print(int(ray.cluster_resources()["CPU"]))
ray.shutdown()
"""


@pytest.mark.timeout(600)
def test_the_head_a_second_node_the_join_check_and_the_drivers_share_one_token(cluster):
    env, address = cluster["env"], cluster["address"]
    first = join_check(env, address, 1)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"1 of 1 Ray node(s) joined at {address}" in first.stdout
    cluster["start"](f"--address={address}", "--node-ip-address=127.0.0.1")  # a second node, as the script starts it
    both = join_check(env, address, 2)
    assert both.returncode == 0 and f"2 of 2 Ray node(s) joined at {address}" in both.stdout, both.stdout + both.stderr
    driver = subprocess.run([sys.executable, "-c", DRIVER, address], env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert driver.returncode == 0 and driver.stdout.split()[-1] == "2", driver.stderr[-2000:]
    # crossed-eval's distribute.address driver with only the token file named (the mode left unset): it turns
    # token auth on itself (cluster.ray_auth_for_driver), as Ray's ray.init(address=...) never does
    partial = {k: v for k, v in env.items() if k != "RAY_AUTH_MODE"}
    evaluator = subprocess.run([sys.executable, "-c", EVAL_DRIVER, address], env=partial, capture_output=True,
                               text=True, timeout=120, check=False)
    assert evaluator.returncode == 0 and evaluator.stdout.split()[-1] == "2", evaluator.stderr[-2000:]
    # and the failure the scripts prevent: a driver that finds only the stale ~/.ray/auth_token is refused
    stale = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
    start = time.monotonic()
    refused = subprocess.run([sys.executable, "-c", "from crossed_rlvr.cluster import ray_auth_for_driver\n"
                              "ray_auth_for_driver()\n" + DRIVER, address], env=stale, capture_output=True,
                             text=True, timeout=180, check=False)
    assert refused.returncode != 0, refused.stdout
    assert "auth" in refused.stderr.lower() or "token" in refused.stderr.lower(), refused.stderr[-2000:]
    assert time.monotonic() - start < 170
