"""Preflights for what only a cluster reveals: each a row, input -> the first line of the message, the
exit status, and nothing launched. Run with an empty HOME and Hugging Face cache and no wandb key."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from crossed_rlvr.layout import FOLDER_LOCK

PRESET = ["experiment=qwen2.5-7b-gsm8k-crossed"]


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "HF_", "NETRC"))}
    (tmp / "home").mkdir(exist_ok=True)
    return {**env, "HOME": str(tmp / "home"), "HF_HOME": str(tmp / "hf"), "HF_HUB_OFFLINE": "1", **extra}


def fake_cache(tmp: Path, kind: str, repo: str) -> None:
    """A repository in the Hugging Face cache layout (what scan_cache_dir reads)."""
    folder = tmp / "hf" / "hub" / f"{kind}s--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text("0" * 40)
    snap = folder / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "qwen2"}))


def netrc(tmp: Path, online: dict[str, str]) -> dict[str, str]:
    """A key where `wandb login` puts it, for the host that answers (netrc entries are per host)."""
    (tmp / "home" / ".netrc").write_text("machine 127.0.0.1\n  login user\n  password fake-key\n")
    (tmp / "home" / ".netrc").chmod(0o600)
    return {k: v for k, v in online.items() if k != "WANDB_API_KEY"}


def closed_port() -> int:
    """A port nothing listens on: a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ROWS = [
    ("wandb online without credentials", [], lambda t, o: {},
     "crossed-study: tracking=online needs wandb credentials here and on every node (WANDB_API_KEY, or `wandb "
     "login`); or pass tracking=offline and `wandb sync` the run folders later", 2),
    ("a key, but wandb's host refuses", [],
     lambda t, o: {"WANDB_API_KEY": "k", "WANDB_BASE_URL": f"http://127.0.0.1:{closed_port()}", "NO_PROXY": "*"},
     "crossed-study: tracking=online: wandb's host http://127.0.0.1:", 2),
    ("a key, but no name for wandb's host", [],
     lambda t, o: {"WANDB_API_KEY": "k", "WANDB_BASE_URL": "https://wandb.invalid"},
     "crossed-study: tracking=online: wandb's host https://wandb.invalid cannot be reached from this machine", 2),
    ("tracking=offline passes to the cache check", ["tracking=offline"], lambda t, o: {},
     "crossed-study: model.path: the model Qwen/Qwen2.5-7B-Instruct is not in this machine's Hugging Face cache "
     "(and 1 more); download it once with `crossed-study <the same overrides> stages=fetch` (the launch runs with "
     "HF_HUB_OFFLINE=1), or point model.path at a local copy", 2),
    ("a key from `wandb login` (netrc), the host answering", [], netrc,
     "crossed-study: model.path: the model Qwen/Qwen2.5-7B-Instruct is not in this machine's Hugging Face cache", 2),
    ("the model cached, the dataset not", ["tracking=offline"],
     lambda t, o: fake_cache(t, "model", "Qwen/Qwen2.5-7B-Instruct") or {},
     "crossed-study: task.path: the dataset openai/gsm8k is not in this machine's Hugging Face cache; download it "
     "once", 2),
    ("stages=fetch without the network", ["tracking=offline", "stages=fetch"], lambda t, o: {},
     "crossed-study: model.path: could not download the model Qwen/Qwen2.5-7B-Instruct", 1),
]


@pytest.mark.parametrize(("case", "overrides", "setup", "first", "status"), ROWS, ids=[r[0] for r in ROWS])
def test_preflights_refuse_before_anything_is_launched(tmp_path, online_env, case, overrides, setup, first, status):
    (tmp_path / "home").mkdir()
    env = clean_env(tmp_path, **(setup(tmp_path, online_env) or {}))
    stages = [] if any(o.startswith("stages=") for o in overrides) else ["stages=prepare"]
    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.study.cli", *PRESET, *stages, *overrides,
                           f"run_dir={tmp_path}/run"], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == status, proc.stderr[-2000:]
    assert lines[0].startswith(first), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    run = tmp_path / "run"
    # nothing ran: Hydra's config copies and log, and the run's writer lock (folder_lock.py), no stage's files
    assert not run.exists() or {p.name for p in run.iterdir()} <= {"hydra", "crossed-study.log", FOLDER_LOCK}


def test_the_launch_checks_credentials_and_the_cache_again(tmp_path, monkeypatch, capsys, online_env):
    """verl_launch's preflight, before Ray starts, on the node: the same checks on the composed verl config (a
    login node may reach wandb when the compute nodes cannot)."""
    from crossed_rlvr.train import verl_launch
    from crossed_rlvr.train.verl_launch import run

    monkeypatch.setattr(verl_launch, "gpu_problem", lambda: None)  # as on a GPU node: the next checks speak
    for key in [k for k in os.environ if k.startswith(("WANDB_", "NETRC"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    overrides = ["trainer.logger=[console,wandb]", "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
                 "algorithm.adv_estimator=grpo", "critic.enable=False",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
                 "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1"]
    assert run(overrides, False, None, 10, True) == 2
    assert "PREFLIGHT FAILED: tracking=online needs wandb credentials" in capsys.readouterr().out
    monkeypatch.setenv("WANDB_API_KEY", "fake")
    monkeypatch.setenv("NO_PROXY", "*")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")  # a node with no route to wandb
    assert run(overrides, False, None, 10, True) == 2
    assert "PREFLIGHT FAILED: tracking=online: wandb's host http://127.0.0.1:" in capsys.readouterr().out
    monkeypatch.setenv("WANDB_BASE_URL", online_env["WANDB_BASE_URL"])
    assert run(overrides, False, None, 10, True) == 2
    assert "PREFLIGHT FAILED: model.path: the model Qwen/Qwen2.5-7B-Instruct is not in this machine's Hugging Face " \
           "cache" in capsys.readouterr().out
    monkeypatch.setenv("WANDB_MODE", "offline")  # the launch scripts export the study's tracking mode
    fake_cache(tmp_path, "model", "Qwen/Qwen2.5-7B-Instruct")
    from crossed_rlvr.train.verl_engine import compose_verl
    from crossed_rlvr.train.verl_launch import launch_problem

    assert launch_problem(compose_verl(overrides)) is None


class Status(BaseHTTPRequestHandler):
    """Every request refused with 401: an answer all the same."""

    def do_HEAD(self) -> None:  # http.server's name
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_wandbs_host_that_answers_refuses_or_hangs(monkeypatch):
    """Any HTTP answer passes (a 401 included: the host is there); a refused connection, an unknown name and a
    host that accepts and never answers are each refused within the time limit, with the fix."""
    from http.server import ThreadingHTTPServer

    from crossed_rlvr.train.preflight import tracking_problem, unreachable

    monkeypatch.setenv("NO_PROXY", "*")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Status)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert unreachable(f"http://127.0.0.1:{server.server_port}", 1.0) is None
    finally:
        server.shutdown()
    assert "refused" in unreachable(f"http://127.0.0.1:{closed_port()}", 1.0)
    assert unreachable("http://wandb.invalid", 1.0) is not None
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        assert unreachable(url, 1.0) == "no answer in 1 s"
        assert time.monotonic() - start < 5
        monkeypatch.setenv("WANDB_API_KEY", "k")
        monkeypatch.setenv("WANDB_BASE_URL", url)
        said = tracking_problem("online", timeout=1.0)
    assert said == (f"tracking=online: wandb's host {url} cannot be reached from this machine (no answer in 1 s); "
                    "pass tracking=offline and `wandb sync` the run folders later from a machine that can reach it")
    assert tracking_problem("offline") is None and tracking_problem("off") is None  # nothing sent


def test_the_launch_scripts_run_offline(tmp_path):
    from hydra import compose, initialize_config_module

    from crossed_rlvr.conf.schema import TrainConf, conf_of
    from crossed_rlvr.train.verl_engine import launch_env

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = conf_of(TrainConf, compose(config_name="crossed_train", overrides=[
            "tracking=offline", "tracking.project=p", f"run_dir={tmp_path}", "arm=a"]))
    assert launch_env(cfg)["HF_HUB_OFFLINE"] == "1"


def test_a_temporary_folder_too_long_for_rays_sockets_is_refused_with_the_fix(tmp_path, capsys):
    """Ray's sockets go under RAY_TMPDIR, else TMPDIR: a per-job TMPDIR on a cluster can leave them over 107 bytes.
    The launch refuses before Ray starts and names the variable and a folder that fits."""
    from crossed_rlvr.train.preflight import RAY_SOCKET_TAIL, SOCKET_PATH_MAX, socket_path_problem
    from crossed_rlvr.train.verl_launch import run

    fits = "/" + "t" * (SOCKET_PATH_MAX - RAY_SOCKET_TAIL - 1)
    assert socket_path_problem({"TMPDIR": fits}) is None and socket_path_problem({}) is None
    long = fits + "x"
    said = socket_path_problem({"TMPDIR": long})
    assert said.startswith(f"TMPDIR={long} ({len(long)} bytes) leaves Ray's socket paths over 107 bytes")
    assert "export RAY_TMPDIR=/tmp/ray-$USER" in said
    assert socket_path_problem({"TMPDIR": long, "RAY_TMPDIR": "/tmp/r"}) is None  # Ray's own variable wins
    # Ray's own check, on the path its first socket would have: the arithmetic above is Ray's limit
    from ray._private.utils import validate_socket_filepath

    validate_socket_filepath(f"{fits}/ray/session_2026-12-02_01-46-52_467512_4194304/sockets/plasma_store")
    with pytest.raises(OSError, match="cannot exceed 107 bytes"):
        validate_socket_filepath(f"{long}/ray/session_2026-12-02_01-46-52_467512_4194304/sockets/plasma_store")
    from crossed_rlvr.train.verl_launch import PLUGINS

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_TMPDIR", raising=False)
        mp.setenv("TMPDIR", long)
        mp.setenv("RAY_ADDRESS", "local")
        mp.setenv("VERL_USE_EXTERNAL_MODULES", PLUGINS)  # run() sets it for verl: put back afterwards
        overrides = ["algorithm.adv_estimator=grpo", "critic.enable=False", f"actor_rollout_ref.model.path={tmp_path}",
                     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                     "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
                     "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1"]
        assert run(overrides, False, 1, 10, True) == 2
    assert f"PREFLIGHT FAILED: TMPDIR={long}" in capsys.readouterr().out


def test_a_gpu_node_without_a_compiler_or_python_headers_is_refused_by_name(tmp_path, monkeypatch):
    """Triton and vLLM compile kernels at first use, inside the rollout: the launch checks for cc and Python.h."""
    import sysconfig

    from crossed_rlvr.train.preflight import compiler_problem

    assert compiler_problem() is None  # this machine has both
    monkeypatch.setenv("PATH", str(tmp_path))
    assert compiler_problem().startswith("no C compiler (cc) on PATH") and "build-essential" in compiler_problem()
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\n")
    cc.chmod(0o755)
    assert compiler_problem() is None
    said = compiler_problem(str(tmp_path / "include"))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert said.startswith(f"no Python headers ({tmp_path}/include/Python.h)") and f"python{version}-dev" in said
    assert Path(sysconfig.get_paths()["include"], "Python.h").is_file()
