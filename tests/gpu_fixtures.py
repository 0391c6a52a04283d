"""The local GSM8K/MATH-shaped files, tiny model and strata of the GPU-path tests, and the 7B preset's
``stages=prepare`` on them: session fixtures shared by tests/test_gpu_path.py and tests/test_launch.py (one
xdist group), built once per worker that runs them. Registered in tests/conftest.py; read-only for tests."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crossed_rlvr.policies.tiny import build_tiny_model
from tests.helpers import SMALL
from tests.task_files import gsm8k_files, math_files

DEV = 12
N_VAL = 40  # the 7B preset validates on the test split: the 40 items of the local test file (Table 23)


class Answer(BaseHTTPRequestHandler):
    """Any request answered 200 with nothing: a host that is there."""

    def do_HEAD(self) -> None:  # http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_HEAD

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="session")
def online_env():
    """What a run with ``tracking=online`` needs to pass its preflight here: a key, and a wandb host that answers
    (a local server: this machine has no route to api.wandb.ai). Nothing reaches it past the preflight."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    no_proxy = ",".join(x for x in (os.environ.get("NO_PROXY"), "127.0.0.1,localhost") if x)
    yield {"WANDB_API_KEY": "preflight-only", "WANDB_BASE_URL": f"http://127.0.0.1:{server.server_port}",
           "NO_PROXY": no_proxy, "no_proxy": no_proxy}
    server.shutdown()


@pytest.fixture(scope="session")
def local(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu")
    build_tiny_model(tmp / "model", SMALL)
    names = ("s1_easy", "s2_medium", "s3_hard")  # the user-given strata of the 7B preset's proposal (App. D.1)
    strata = tmp / "strata.jsonl"
    strata.write_text("".join(json.dumps({"item_id": f"train-{k}", "stratum": names[k % 3]}) + "\n"
                              for k in range(200)))
    return {"tmp": tmp, "model": tmp / "model", "gsm8k": gsm8k_files(tmp), "math": math_files(tmp),
            "strata": strata}


def task_overrides(local, task: str, dev: bool = True) -> list[str]:
    """Local task files; ``dev=False`` keeps the preset's own hold-out (the 7B preset: none, validation on test)."""
    train, test = local["gsm8k" if task == "gsm8k" else "math"]
    extra = [] if task == "gsm8k" else ["task=math500"]
    return [*extra, f"task.path={test}", f"task.train_path={train}", *([f"task.dev_items={DEV}"] if dev else []),
            f"recipe.proposal.strata_file={local['strata']}"]


@pytest.fixture(scope="session")
def paper_gsm8k(local, online_env):
    """The issue's command, from the command line: the 7B preset rehearsed on a machine without a GPU."""
    run = local["tmp"] / "paper"
    proc = subprocess.run(
        [sys.executable, "-m", "crossed_rlvr.study.cli", "experiment=qwen2.5-7b-gsm8k-crossed", "stages=prepare",
         f"run_dir={run}", f"model.path={local['model']}", *task_overrides(local, "gsm8k", dev=False)],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, **online_env})  # the preset tracks online: its preflight wants a key and wandb's host
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run
