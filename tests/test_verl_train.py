"""verl's own trainer, for real on this CPU (engine.device=cpu: FSDP2 on one gloo rank, a transformers rollout,
train/verl_cpu.py and train/verl_rollout.py): the smoke study's arms trained through verl and analysed like TRL's,
a kill after the first update and a resume that ends on the same weights as the uninterrupted arm (the route
``gpu_smoke.sh --resume-check`` takes), and relaunches of a finished arm that do nothing.

Every test here starts verl on a local Ray: they run one after another on the exclusive worker (conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from crossed_rlvr.study.pipeline import Study
from crossed_rlvr.train.verl_launch import read_metrics
from tests.helpers import study_cfg

# The study fixture trains two verl arms (~95 s of start-up each on 2 cores) and evaluates them: 567 s in a whole
# suite run here, too near the suite's 600 s per test; its first test gets the time it needs.
pytestmark = [pytest.mark.exclusive, pytest.mark.timeout(1800)]

SEED = 83


@pytest.fixture(scope="module")
def verl_study(tmp_path_factory, warm_cache):
    """The smoke study with its hash and boxed arms trained by verl (one seed: the route, not the seed spread),
    from the smoke study's initial policy (the suite's warm-start cache)."""
    run = tmp_path_factory.mktemp("verl") / "study"
    summary = Study(study_cfg(run, "experiment=smoke-verl", f"arms.seeds=[{SEED}]",
                              f"initial.cache_dir={warm_cache}")).run_all()
    return run, summary


def arm(run: Path, conv: str) -> Path:
    return run / "train" / conv / f"s{SEED}"


def test_verl_arms_train_and_the_study_reports_their_crossed_interaction(verl_study):
    """Rewards above zero in verl's own metrics, arms that end on different weights, interactions over training
    that move away from zero, and the report's crossed interaction with its interval."""
    import pandas as pd

    run, summary = verl_study
    assert not any(s["reused"] for s in summary["stages"].values())
    for conv in ("hash", "boxed"):
        rows = read_metrics(arm(run, conv))
        steps = [r for r in rows if "critic/rewards/mean" in r]
        assert [r["step"] for r in steps] == [1, 2, 3], rows
        assert max(r["critic/rewards/mean"] for r in steps) > 0, (conv, steps)
        # the importance correction ran: the rollout's log-probs reached verl (absent, verl skips it silently)
        assert all(0.5 < r["rollout_corr/rollout_is_mean"] < 2.0 for r in steps)
        assert all(r["rollout_corr/log_ppl_abs_diff"] < 0.1 for r in steps)  # rollout and actor agree
    weights = [(arm(run, conv) / "checkpoints" / "step-3" / "model.safetensors").read_bytes() for conv in ("hash", "boxed")]
    assert weights[0] != weights[1]
    over = pd.read_csv(run / "analysis" / "over_training.csv")
    assert sorted(set(over["step"])) == [0, 1, 2, 3]
    assert (over.loc[(over.step > 0) & (over.contrast == "I_P"), "estimate"].abs() > 1e-9).any()
    assert (over.loc[over.step == 0, ["estimate", "ci_low", "ci_high"]].abs() < 1e-9).all().all()
    report = (run / "analysis" / "report.md").read_text()
    assert f"| grpo/s{SEED} | hashxboxed |" in report and "## Crossed interactions over training" in report
    con = pd.read_csv(run / "analysis" / "contrasts.csv")
    inter = con[(con.name == "interaction") & (con.measure == "payload")]
    assert len(inter) and inter[["ci_low", "ci_high"]].notna().all().all()


def test_a_relaunched_finished_arm_does_nothing_and_says_so(verl_study):
    run, _ = verl_study
    folder = arm(run, "hash")
    merged = folder / "checkpoints" / "step-3" / "model.safetensors"
    before = (merged.stat().st_mtime_ns, sorted(p.name for p in (folder / "verl_metrics").iterdir()))
    start = time.perf_counter()
    out = subprocess.run(["bash", str(folder / "launch_single_node.sh")], capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "this arm has finished" in out.stdout and "verl_launch" not in out.stderr
    assert (merged.stat().st_mtime_ns, sorted(p.name for p in (folder / "verl_metrics").iterdir())) == before
    assert time.perf_counter() - start < 60  # no Ray, no verl


@pytest.fixture(scope="module")
def resumed(verl_study, tmp_path_factory):
    """The study's hash arm again, resumable (a checkpoint every update), through the route ``gpu_smoke.sh
    --resume-check`` takes (study/smoke.py: resume_arm): killed once its first update is complete, relaunched to
    the end, then launched a third time."""
    from crossed_rlvr.study.smoke import resume_arm
    from crossed_rlvr.train.run import run_train

    run, _ = verl_study
    cfg = OmegaConf.create(json.loads((arm(run, "hash") / "resolved_config.json").read_text()))
    folder = tmp_path_factory.mktemp("resume") / "arm"
    cfg.run_dir = str(folder)
    cfg.recipe.save_every = 1
    cfg.engine.launch = False
    cfg.tracking = {"mode": "off", "project": "crossed-rlvr"}
    run_train(cfg)
    said = resume_arm(f"grpo-hash/s{SEED}", folder, 3, weighted=False, limit_s=900, poll_s=0.5)
    logs = [(folder / f"resume_{k}.log").read_text(errors="replace") for k in ("first", "second", "third")]
    return run, folder, said, logs


def test_a_killed_arm_resumes_where_it_stopped_and_ends_on_the_uninterrupted_weights(resumed):
    """Dataloader position, optimizer state and weights continue from step 1; the rollout seeds every completion
    by (update, prompt, sample), so the resumed arm's final weights equal the uninterrupted arm's exactly."""
    from safetensors.torch import load_file

    run, folder, said, (killed, relaunched, _) = resumed
    assert said == f"grpo-hash/s{SEED} killed after its first update, resumed from global_step_1, finished; a relaunch did nothing"
    assert "Training from scratch" in killed and "global_step_2" not in killed  # killed before a second save
    assert "global_step_1" in relaunched and "Training from scratch" not in relaunched
    rows = read_metrics(folder)
    assert [r["step"] for r in rows if "critic/rewards/mean" in r] == [1, 2, 3]
    assert len(list((folder / "verl_metrics").glob("launch-*.jsonl"))) == 2  # the first launch's lines kept
    got = load_file(folder / "checkpoints" / "step-3" / "model.safetensors")
    want = load_file(arm(run, "hash") / "checkpoints" / "step-3" / "model.safetensors")
    assert got.keys() == want.keys()
    different = [k for k in want if not (got[k] == want[k]).all()]
    assert different == [], different[:5]
    uninterrupted = {r["step"]: r["critic/rewards/mean"] for r in read_metrics(arm(run, "hash")) if "critic/rewards/mean" in r}
    assert {r["step"]: r["critic/rewards/mean"] for r in rows if "critic/rewards/mean" in r} == uninterrupted


def test_a_step_without_its_optimizer_state_is_refused_before_verl_starts(resumed):
    """The finished resumable arm's optimizer state went with the verified merge. Relaunched, it does nothing;
    with its merge moved away, verl's resume_mode=auto would load that step and crash on the missing optimizer:
    the launch refuses in one line before Ray starts."""
    _, folder, _, (_, _, again) = resumed
    ckpt = folder / "checkpoints"
    assert not list((ckpt / "global_step_3" / "actor").glob("optim_world_size_*"))  # removed after the merge
    script = folder / "launch_single_node.sh"
    assert "this arm has finished" in again and "Started a local Ray" not in again  # the third launch
    (ckpt / "step-3").rename(folder / "merged-elsewhere")
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=300, check=False)
    said = [x for x in out.stdout.splitlines() if "PREFLIGHT FAILED" in x]
    assert out.returncode == 2 and said, (out.stdout + out.stderr)[-3000:]
    assert "no optimizer state" in said[0] and "global_step_3" in said[0]
    assert "Started a local Ray" not in out.stdout + out.stderr
