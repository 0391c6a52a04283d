"""SFT marker arms across processes on the CPU exactly as across GPUs (paper 001 App. D.2.1): ``crossed-sft``
under ``torchrun`` on 2 processes (gloo), plain DDP and DeepSpeed ZeRO-2 / ZeRO-3 through transformers'
Trainer, against the 1-process run of the same recipe; a hub-named base from a local offline hub cache.

DeepSpeed's CPU accelerator compiles its ``shm_comm`` op on first use (~2.5 min once, cached under
``TORCH_EXTENSIONS_DIR``); after that a 2-process arm pair takes ~30-60 s here.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from crossed_rlvr.policies.tiny import build_tiny_model
from tests.helpers import SMALL

# two training processes (tests/conftest.py: the engines group also keeps the module's fixtures on one worker)
pytestmark = [pytest.mark.engines]

ROOT = Path(__file__).resolve().parent.parent
N_ITEMS = 64  # effective batch 32: 2 optimizer steps an epoch on any number of processes


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("sftbase") / "m", SMALL)


def sft(run: Path, model: str, nproc: int, *overrides: str, env: dict | None = None) -> dict:
    """crossed-sft mode=arms (seed 83: the hash arm and the boxed control) on ``nproc`` processes."""
    args = ["-m", "crossed_rlvr.sft.cli", "mode=arms", "seeds=[83]", "tracking=off", "sft=arms_tiny",
            "sft.per_device_batch=8", "sft.epochs=2", f"train_items.n={N_ITEMS}", f"run_dir={run}",
            f"model.path={model}", *overrides]
    # torchrun as docs/gpu.md runs it: its own per-rank logs under --log-dir (without it, torchrun itself makes a
    # torchelastic_* folder in the system's temporary folder before any command of ours starts, and leaves it)
    launcher = [sys.executable] if nproc == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                    f"--nproc_per_node={nproc}", f"--log-dir={run}.torchrun"]
    systmp = Path(tempfile.mkdtemp(prefix="st-", dir="/tmp"))  # the system's temporary folder, as the command sees it
    try:
        proc = subprocess.run([*launcher, *args], capture_output=True, text=True, timeout=1500, check=False, cwd=ROOT,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(systmp), **(env or {})})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
        # nothing left there: DeepSpeed's, torch's and the ranks' own files lived in the command's folder
        assert sorted(p.name for p in systmp.iterdir()) == []
    finally:
        shutil.rmtree(systmp, ignore_errors=True)
    arm = run / "models" / "sft-hash" / "s83"
    assert not list(run.glob("models/*/*.tmp")) and not list(run.glob("models/*/*.trainer"))
    return json.loads((arm / "sft_summary.json").read_text())


@pytest.fixture(scope="module")
def one_process(base, tmp_path_factory):
    return sft(tmp_path_factory.mktemp("sft1") / "run", str(base), 1)


def test_effective_batch_holds_on_any_number_of_processes(one_process, base, tmp_path):
    """App. D.2.1's effective batch 32: 8 per device x 4 accumulation on 1 process, 8 x 2 x 2 on 2; the same
    number of optimizer steps, and the loss curve of plain DDP equal to the 1-process curve."""
    two = sft(tmp_path / "ddp", str(base), 2)
    assert (one_process["world_size"], one_process["per_device_batch"], one_process["accumulation"]) == (1, 8, 4)
    assert (two["world_size"], two["per_device_batch"], two["accumulation"]) == (2, 8, 2)
    assert one_process["steps"] == two["steps"] == 2 * N_ITEMS // 32
    assert len(two["losses"]) == len(one_process["losses"]) == two["steps"]
    assert two["losses"] == pytest.approx(one_process["losses"], abs=1e-5)  # measured: equal to 1e-6


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_deepspeed_zero_on_two_processes_matches_one(one_process, base, tmp_path, stage):
    """One arm across 2 processes under DeepSpeed ZeRO-2 / ZeRO-3 (gloo on the CPU): the loss curve equals the
    1-process run to 1e-5, only rank 0 writes the arm, and the arm loads as a model and tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / stage
    dist = sft(run, str(base), 2, f"sft.deepspeed={stage}")
    assert dist["world_size"] == 2 and dist["steps"] == one_process["steps"]
    assert dist["losses"] == pytest.approx(one_process["losses"], abs=1e-5)  # measured: equal to 1e-6
    arm = run / "models" / "sft-hash" / "s83"
    model = AutoModelForCausalLM.from_pretrained(arm)
    assert sum(p.numel() for p in model.parameters()) > 0
    tok = AutoTokenizer.from_pretrained(arm)
    assert tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=True, add_generation_prompt=True)


def hub_cache(base: Path, cache: Path, repo: str) -> None:
    """A local Hugging Face hub cache holding ``repo`` as the hub lays it out (offline, no download)."""
    snap = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
    shutil.copytree(base, snap)
    (snap.parent.parent / "refs").mkdir(parents=True)
    (snap.parent.parent / "refs" / "main").write_text("0" * 40)


@pytest.mark.timeout(900)
def test_hub_named_base_gives_arms_with_their_tokenizer_and_chat_template(base, tmp_path):
    """A hub base (no local folder to copy tokenizer files from) on 2 processes: rank 0 writes the loaded
    tokenizer with its chat template into each arm, which the crossed evaluator then runs under both requests."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from crossed_rlvr.eval.generate.runner import run_eval

    cache = tmp_path / "hub"
    hub_cache(base, cache, "crossed-test/tiny-instruct")
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    run = tmp_path / "run"
    sft(run, "crossed-test/tiny-instruct", 2, "model.source=hub", env=env)
    arm = run / "models" / "sft-hash" / "s83"
    tok = AutoTokenizer.from_pretrained(arm)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], tokenize=True,
                                  add_generation_prompt=True, return_dict=False)
    assert len(ids) > 10 and len(tok("#### 5")["input_ids"]) > 1
    cfg = OmegaConf.create({
        "model": {"name": "tiny", "source": "local", "path": str(arm), "system": None},
        "task": {"name": "arith_tiny", "source": "arith", "split": "test", "n_test": 20, "n_dev": 4,
                 "seed": 1, "n_items": 3, "strata": [1], "max_operand": 9, "ops": ["+"]},
        "eval": {"backend": "hf", "dtype": "float32", "batch_size": 8, "temperature": 0.6, "top_p": 0.95,
                 "max_new_tokens": 8, "context_limit": 512, "base_seed": 1},
        "tracking": {"mode": "off", "project": "x"}, "run_dir": str(tmp_path / "eval"),
        "policies": [{"name": "sft-hash/s83", "path": str(arm), "training_convention": "hash", "train_seed": 83}],
        "requests": ["hash", "boxed"], "templates": ["original"], "template_subset": None,
        "template_subset_seed": 0, "samples": 1, "overwrite": False})
    summary = run_eval(cfg, progress=False)
    assert len(summary) == 2 and all(not v.get("skipped") for v in summary.values())


def test_batch_plan_and_deepspeed_names():
    from crossed_rlvr.sft.trainer import SFTRecipeError, batch_plan, deepspeed_config

    assert batch_plan(32, 8, 1) == (8, 4) and batch_plan(32, 8, 2) == (8, 2) and batch_plan(32, 8, 8) == (4, 1)
    assert batch_plan(32, 32, 2) == (16, 1)  # a per-device batch above the share is lowered to it
    with pytest.raises(SFTRecipeError, match="cannot be split over 3 processes"):
        batch_plan(32, 8, 3)
    with pytest.raises(SFTRecipeError, match=r"not a multiple of sft.per_device_batch=5"):
        batch_plan(32, 5, 1)
    assert deepspeed_config("zero3").endswith("conf/sft/deepspeed/zero3.json") and deepspeed_config(None) is None
    with pytest.raises(SFTRecipeError, match="zero2, zero3"):
        deepspeed_config("zero9")


@pytest.mark.timeout(900)
def test_arms_side_by_side_equal_arms_one_after_another(base, tmp_path):
    """``sft.parallel_arms=2`` (the study's stage, crossed_rlvr/sft/worker.py): the hash arm and the boxed
    control train at once, one process each (one GPU each on a node), and give the same weights, byte for
    byte, as the same arms trained one after the other."""
    from crossed_rlvr.sft.worker import run_stage

    def spec(run: Path, parallel: int) -> dict:
        return {"model": {"name": "tiny", "source": "local", "path": str(base), "system": None},
                "task": {"name": "arith_tiny", "source": "arith", "split": "test", "n_test": 20, "n_dev": 4,
                         "seed": 1, "strata": [1, 2], "max_operand": 9, "ops": ["+", "-"]},
                "sft": {"epochs": 1, "learning_rate": 1e-3, "lr_scheduler": "cosine", "warmup_ratio": 0.0,
                        "effective_batch": 16, "per_device_batch": 8, "max_length": 256, "weight_decay": 0.0,
                        "deepspeed": None, "bf16": False, "nproc_per_node": 1, "parallel_arms": parallel},
                "run_dir": str(run), "seeds": [83], "arm": "hash", "control": "boxed",
                "train_items": {"n": 32, "seed": 7}, "tracking": {"mode": "off", "project": "x"}, "study": None}

    side = run_stage(spec(tmp_path / "side", 2), tmp_path / "side" / "data" / "spec.json")
    one = run_stage(spec(tmp_path / "one", 1), tmp_path / "one" / "data" / "spec.json")
    assert sorted(k for k in side if k != "pairs") == ["sft-boxed/s83", "sft-hash/s83"]
    for arm in ("sft-hash/s83", "sft-boxed/s83"):
        conv, seed = arm[4:].split("/")
        a = tmp_path / "side" / "models" / f"sft-{conv}" / seed / "model.safetensors"
        b = tmp_path / "one" / "models" / f"sft-{conv}" / seed / "model.safetensors"
        assert a.read_bytes() == b.read_bytes()
        assert side[arm]["losses"] == one[arm]["losses"]
