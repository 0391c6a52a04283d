"""``eval.device``: where the transformers backend generates (a GPU torch sees, else the CPU; ``cuda`` without one
refused in one line, exit 2) and an unset ``eval.dtype``'s precision there (bfloat16 on a GPU, float32 on the CPU).
A cell made before the setting existed keeps its settings hash; a refused config leaves no file behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from crossed_rlvr.errors import ConfigError
from crossed_rlvr.eval.generate import engines
from crossed_rlvr.eval.generate.device import resolve_device
from crossed_rlvr.eval.generate.plan import plan, predates_numerics
from crossed_rlvr.eval.generate.runner import resolve_eval
from tests.helpers import BEFORE_DEVICE, small_eval

ROOT = Path(__file__).resolve().parents[1]
@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch says it sees a GPU (nothing is moved to one)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def no_gpu_here() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")


def test_auto_is_the_cpu_here_in_float32(tmp_path: Path) -> None:
    no_gpu_here()
    cfg = small_eval(tmp_path)
    gen = resolve_eval(cfg).eval
    assert (gen.device, gen.dtype) == ("cpu", "float32")
    assert (cfg.eval.device, cfg.eval.dtype) == ("auto", None)  # the caller's config is left as given


def test_a_cell_made_before_eval_device_keeps_its_settings_hash(tmp_path: Path) -> None:
    no_gpu_here()
    for extra in ((), ("eval.device=cpu",), ("eval.device=auto", "eval.dtype=float32")):
        cell = plan(resolve_eval(small_eval(tmp_path, *extra))).cells[0]
        assert "device" not in cell.meta["generation"] and cell.meta["generation"]["dtype"] == "float32"
        # its hash as then, less the CPU numerics records hold since (carried over: test_runner.py)
        assert predates_numerics({"sha256": BEFORE_DEVICE}, cell.meta), extra


@pytest.mark.long
def test_cuda_without_a_gpu_is_refused_in_one_line_with_exit_2(tmp_path: Path) -> None:
    no_gpu_here()
    with pytest.raises(ConfigError, match=r"^eval\.device=cuda but torch sees no GPU here"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match=r"^eval\.device='tpu' is unknown; expected one of auto, cpu, cuda"):
        resolve_device("tpu")
    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.eval.generate.cli", "eval.device=cuda"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "crossed-eval: eval.device=cuda but torch sees no GPU here (torch.cuda.is_available() is False); use "
        "eval.device=auto or eval.device=cpu"]
    assert sorted(tmp_path.iterdir()) == []  # refused before Hydra's run directory, config copies and log


def test_a_gpu_resolves_to_cuda_in_bfloat16_unless_the_dtype_is_set(tmp_path: Path, gpu: None) -> None:
    gen = resolve_eval(small_eval(tmp_path)).eval
    assert (gen.device, gen.dtype) == ("cuda", "bfloat16")
    gen = resolve_eval(small_eval(tmp_path, "eval.dtype=float32")).eval
    assert (gen.device, gen.dtype) == ("cuda", "float32")  # a dtype the user set is kept
    gen = resolve_eval(small_eval(tmp_path, "eval.device=cpu")).eval
    assert (gen.device, gen.dtype) == ("cpu", "float32")
    cell = plan(resolve_eval(small_eval(tmp_path))).cells[0]  # what ran on the GPU is in the cell's settings
    assert cell.meta["generation"]["device"] == "cuda" and cell.meta["sha256"] != BEFORE_DEVICE


def test_the_transformers_backend_loads_the_policy_on_the_gpu_in_bfloat16(
        tmp_path: Path, gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_backend hands load_policy the resolved device and dtype (the weights are not loaded here)."""
    asked: dict[str, Any] = {}
    tokenizer = SimpleNamespace(eos_token_id=0, pad_token_id=0, chat_template=None, get_vocab=dict)

    def load_policy(path: str, dtype: str = "float32", device: str = "cpu") -> tuple[Any, Any]:
        asked.update(path=path, dtype=dtype, device=device)
        return SimpleNamespace(device=device, generation_config=None), tokenizer

    monkeypatch.setattr("crossed_rlvr.policies.loading.load_policy", load_policy)
    backend, _ = engines.load_backend("org/tiny-policy", small_eval(tmp_path).eval)
    assert asked == {"path": "org/tiny-policy", "dtype": "bfloat16", "device": "cuda"}
    assert backend.device == "cuda"  # where its batches are put


def test_ray_workers_gpus_decide_the_device(tmp_path: Path) -> None:
    no_gpu_here()  # a driver without a GPU (a head node), workers with one each
    gen = resolve_eval(small_eval(tmp_path, "distribute.workers=2", "distribute.gpus_per_worker=1")).eval
    assert (gen.device, gen.dtype) == ("cuda", "bfloat16")
    with pytest.raises(ConfigError, match=r"^eval\.device=cuda but the Ray workers get no GPU"):
        resolve_eval(small_eval(tmp_path, "distribute.workers=2", "eval.device=cuda"))


def test_a_refused_override_leaves_no_run_folder_or_log(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.eval.generate.cli", "eval.dtype=bogus"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "crossed-eval: eval.dtype='bogus' is unknown; expected one of float32, bfloat16, float16, auto"]
    assert sorted(tmp_path.iterdir()) == []  # no runs/eval/hydra/, no crossed-eval.log


@pytest.mark.long  # ~20 s on a busy 2-core machine: handed out early (tests/conftest.py)
def test_the_device_checks_transformers_step_runs_on_this_cpu(tmp_path: Path) -> None:
    """scripts/device_check.py's step 5 (on a GPU: cuda and bfloat16) runs here on the CPU in float32."""
    no_gpu_here()
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import device_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    out = device_check.transformers_eval(tmp_path)
    assert "error" not in out, out
    assert (out["device"], out["dtype"], out["responses"]) == ("cpu", "float32", 4)
    assert out["same_seed_same_text"] is True  # one item seed, one response, wherever it sits in the batch
