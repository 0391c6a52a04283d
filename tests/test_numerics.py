"""Portable numerics: the same seeds give the same files on any x86-64 CPU with AVX2 (crossed_rlvr/numerics.py).

A smaller CPU (AVX2 alone) is simulated on this one the way each library would see it: PyTorch, MKL and oneDNN
each restricted to AVX2 through their own controls. The tiny study's warm start, a GRPO update and the crossed
evaluation run four ways: the machine's own kernels and the smaller CPU's, each under ``numerics=native`` and
``numerics=portable``. Natively the two CPUs train different weights (where this CPU offers more than AVX2);
portably every weight, response and table is the same byte for byte.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossed_rlvr.numerics import PORTABLE, cpu_flags
from tests.helpers import command_env

pytestmark = pytest.mark.long

# the smallest study with every stage: a warm start of one epoch, one arm pair of one seed for one update
ARGS = ["experiment=smoke", "initial.train_items=16", "sft.epochs=2", "recipe.updates=1", "recipe.prompts_per_update=2",
        "arms.seeds=[83]", "arms.train_items=8", "validation.every=0", "evaluation.n_items=6",
        "evaluation.templates=[original]", "analysis.resamples=50", "tracking=off"]
# each library held to AVX2 by its own control, as on a CPU that offers no more
SMALLER_CPU = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# the files compared: every weight, every response, the scores and the analysis tables
COMPARED = ("models/initial/*.safetensors", "train/*/*/checkpoints/*/*.safetensors", "eval/responses/*.jsonl",
            "eval/scores.parquet", "analysis/cells.csv", "analysis/contrasts.csv")


def study(run: Path, numerics: str, cpu: dict[str, str]) -> Path:
    """One study in its own process, in an environment with only ``cpu``'s restrictions."""
    env = {k: v for k, v in command_env().items() if k not in {*PORTABLE, *SMALLER_CPU}}
    env.update(cpu, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.study.cli", *ARGS, f"numerics={numerics}",
                           f"run_dir={run}"], env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


def files(run: Path) -> dict[str, bytes]:
    out = {str(p.relative_to(run)): p.read_bytes() for pattern in COMPARED for p in sorted(run.glob(pattern))}
    assert len(out) >= 8, sorted(out)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("numerics")
    return {(numerics, name): study(root / f"{numerics}-{name}", numerics, cpu)
            for numerics in ("native", "portable") for name, cpu in (("this", {}), ("smaller", SMALLER_CPU))}


def test_natively_a_larger_cpu_trains_other_weights_than_a_smaller_one(runs):
    this, smaller = files(runs[("native", "this")]), files(runs[("native", "smaller")])
    weights = [k for k in this if k.endswith(".safetensors")]
    differ = [k for k in weights if this[k] != smaller[k]]
    if "avx512f" in cpu_flags():  # this CPU's own kernels are AVX-512's: the warm start already ends elsewhere
        assert "models/initial/model.safetensors" in differ, differ
    else:  # an AVX2 CPU is the smaller one
        assert differ == []


def test_portably_every_file_is_the_same_on_both(runs):
    this, smaller = files(runs[("portable", "this")]), files(runs[("portable", "smaller")])
    assert sorted(this) == sorted(smaller)
    assert [k for k in this if this[k] != smaller[k]] == []


def test_portable_files_are_the_smaller_cpus_where_mkl_picks_alike(runs):
    """Portable numerics are a smaller CPU's own kernels for PyTorch and oneDNN; MKL's reproducible AVX2 mode is
    its own code path, which on this CPU computes what MKL held to AVX2 computes (measured: the same weights)."""
    portable, smaller = files(runs[("portable", "this")]), files(runs[("native", "smaller")])
    assert [k for k in portable if portable[k] != smaller[k]] == []


def test_a_process_whose_torch_chose_other_kernels_is_refused_portable_numerics():
    """torch reads its instruction set once, at its first kernel: a process that loaded it with its own kernels
    cannot switch; the refusal says how to start it instead."""
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE}
    code = ("import torch; torch.ones(4).sum()\n"
            "from crossed_rlvr.numerics import apply, NumericsError\n"
            "try:\n    apply('portable')\nexcept NumericsError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    if "avx512f" in cpu_flags():
        assert out.startswith("numerics=portable: torch already runs AVX512 kernels in this process; start it with "
                              "ATEN_CPU_CAPABILITY=avx2"), out
    else:
        assert out == ""


def test_portable_numerics_hold_bfloat16_back_and_are_recorded(runs):
    """bfloat16 is native only with AVX512-BF16 or AMX: portably ``eval.dtype=auto`` is float32 on every CPU (else
    the dtype, and the responses, would follow the CPU). Each stage's stamp and the report say which numerics ran."""
    import json

    from crossed_rlvr.machine import eval_dtype, native_bf16

    assert os.environ.get("ATEN_CPU_CAPABILITY") == "avx2"  # the suite runs portably (tests/conftest.py)
    assert not native_bf16() and eval_dtype("auto") == "float32"
    for (numerics, name), run in runs.items():
        for stage in ("initial", "arms", "eval", "score", "analyze"):
            recorded = json.loads((run / "stages" / f"{stage}.json").read_text())["machine"]["numerics"]
            assert recorded["mode"] == numerics, (run, stage, recorded)
        kernels = "AVX512" if numerics == "native" and name == "this" and "avx512f" in cpu_flags() else "AVX2"
        assert f"{numerics} CPU numerics (torch {kernels} kernels" in (run / "analysis" / "report.md").read_text()
