"""crossed-study end to end at the smoke size: every stage, reuse by stage, reproducible responses.

The smoke preset runs the same stages as the default (warm start of a fresh tiny model, GRPO hash and
boxed arms for two seeds, crossed evaluation with paraphrased wordings, scoring, analysis), at the
smallest size.
"""

import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module

from crossed_rlvr.study.cli import NeedsGPU, check_device
from crossed_rlvr.study.pipeline import Study


def study_cfg(run_dir, *overrides):
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_study", overrides=[f"run_dir={run_dir}", *overrides])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    run = tmp_path_factory.mktemp("study") / "a"
    summary = Study(study_cfg(run, "experiment=smoke")).run_all()
    return run, summary


def test_smoke_study_writes_the_crossed_report(smoke):
    run, summary = smoke
    assert [s for s, t in summary["stages"].items() if t["reused"]] == []
    report = (run / "analysis" / "report.md").read_text()
    assert "grpo-hash" in report and "grpo-boxed" in report and "I_P" in report
    assert "## Training of the arms" in report
    figures = {p.name for p in (run / "analysis" / "figures").glob("*.png")}
    assert "training_curves.png" in figures and len(figures) >= 3
    responses = sorted(p.name for p in (run / "eval" / "responses").glob("*.jsonl"))
    # 5 policies (initial + hash/boxed x seeds 83, 84) x 2 requests x 3 wordings
    assert len(responses) == 30 and "grpo-hash_s84__boxed__para_b.jsonl" in responses
    for seed in (83, 84):
        verdict = json.loads((run / "train" / "hash" / f"s{seed}" / "matched_check.json").read_text())
        assert verdict["matched"] is True
    contrasts = (run / "analysis" / "contrasts.csv").read_text()
    assert ",interaction,payload," in contrasts


def test_second_run_reuses_every_stage_and_a_change_redoes_only_later_stages(smoke):
    run, _ = smoke
    again = Study(study_cfg(run, "experiment=smoke")).run_all()
    assert all(t["reused"] for t in again["stages"].values())
    changed = Study(study_cfg(run, "experiment=smoke", "analysis.resamples=300")).run_all()
    assert [s for s, t in changed["stages"].items() if not t["reused"]] == ["analyze"]
    assert changed["stages"]["analyze"]["changed"] == ["analysis.resamples"]  # said, not silent
    stamp = json.loads((run / "stages" / "analyze.json").read_text())
    assert stamp["inputs"]["analysis"]["resamples"] == 300


def test_tampered_output_is_redone(smoke):
    run, _ = smoke
    scores = run / "eval" / "scores.parquet"
    good = scores.read_bytes()
    scores.write_bytes(b"not a table")
    summary = Study(study_cfg(run, "experiment=smoke", "analysis.resamples=300")).run_all()
    redone = [s for s, t in summary["stages"].items() if not t["reused"]]
    # Scoring is redone and gives the same bytes again, so the analysis of them stays valid.
    assert redone == ["score"] and scores.read_bytes() == good


def test_fresh_run_directory_writes_identical_responses(smoke, tmp_path):
    run, _ = smoke
    other = tmp_path / "b"
    Study(study_cfg(other, "experiment=smoke")).run_all()
    files = sorted((run / "eval" / "responses").glob("*.jsonl"))
    assert files
    for f in files:
        assert (other / "eval" / "responses" / f.name).read_bytes() == f.read_bytes(), f.name


@pytest.mark.parametrize("preset", ["qwen2.5-7b-gsm8k-crossed", "qwen2.5-1.5b-sft-marker"])
def test_gpu_presets_stop_at_once_without_a_gpu(preset, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    cfg = study_cfg(tmp_path / "gpu", f"experiment={preset}")
    assert cfg.requires_gpu is True and cfg.experiment_name == preset
    with pytest.raises(NeedsGPU, match="needs a GPU"):
        check_device(cfg)
    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.study.cli", f"experiment={preset}",
                           f"run_dir={tmp_path / 'gpu'}"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode != 0 and "needs a GPU" in proc.stderr
    made = {p.name for p in (tmp_path / "gpu").iterdir()} if (tmp_path / "gpu").exists() else set()
    assert made <= {"hydra", "cli.log"}  # only Hydra's record of the config and its log; no stage ran


def test_presets_compose(tmp_path):
    real = study_cfg(tmp_path, "experiment=real-cpu")
    assert real.model.name == "smollm2-135m-instruct" and real.recipe.lora.enabled is True
    assert real.initial.build == "given"
    tiny = study_cfg(tmp_path)
    assert tiny.experiment_name == "tiny" and list(tiny.arms.seeds) == [83, 84]
    assert list(tiny.arms.conventions) == ["hash", "boxed"] and tiny.initial.build == "warmstart"
    paper = study_cfg(tmp_path, "experiment=qwen2.5-7b-gsm8k-crossed")
    assert paper.engine.name == "verl" and paper.eval.backend == "vllm" and paper.recipe.lr == 1e-6


def test_output_hash_ignores_tracking_logs(tmp_path):
    from crossed_rlvr.study.stamps import tree_sha256

    (tmp_path / "report.md").write_text("r")
    before = tree_sha256(tmp_path)
    (tmp_path / "wandb" / "run-1").mkdir(parents=True)
    (tmp_path / "wandb" / "run-1" / "log").write_text("changes later")
    assert tree_sha256(tmp_path) == before
    (tmp_path / "report.md").write_text("changed")
    assert tree_sha256(tmp_path) != before


def test_sft_marker_arms_study(tmp_path):
    """arms.kind=sft (the qwen2.5-1.5b-sft-marker design) through the same stages, at the smoke size."""
    run = tmp_path / "sft"
    summary = Study(study_cfg(run, "experiment=smoke", "arms.kind=sft", "sft=arms_tiny", "evaluation.n_items=8",
                              "evaluation.templates=[original]")).run_all()
    assert summary["stages"]["arms"]["reused"] is False
    names = sorted(p.name for p in (run / "eval" / "responses").glob("*.jsonl"))
    assert "sft-hash_s83__boxed__original.jsonl" in names and len(names) == 10
    pairs = [json.loads(x) for x in (run / "data" / "sft-hash.jsonl").read_text().splitlines()]
    controls = [json.loads(x) for x in (run / "data" / "sft-boxed.jsonl").read_text().splitlines()]
    assert pairs[0]["completion"].endswith("#### " + pairs[0]["completion"].rsplit(" ", 1)[1])
    assert pairs[0]["completion"].rsplit("\n", 1)[0] == controls[0]["completion"].rsplit("\n", 1)[0]
    assert "sft-hash/s84" in (run / "analysis" / "report.md").read_text()


def test_verl_arms_stop_until_their_launch_scripts_have_run(tmp_path):
    """engine=verl without engine.launch: the study writes each arm's verl data and launch scripts, stops
    with instructions, and after the scripts have produced the merged checkpoints it carries on."""
    import shutil

    run = tmp_path / "verl"
    overrides = ["experiment=smoke", "engine=verl", "arms.seeds=[83]", "evaluation.n_items=4",
                 "evaluation.templates=[original]"]
    with pytest.raises(SystemExit, match="no final checkpoint"):
        Study(study_cfg(run, *overrides)).run_all()
    for conv in ("hash", "boxed"):
        arm = run / "train" / conv / "s83"
        assert "verl.model_merger merge" in (arm / "launch_slurm_ray.sbatch").read_text()
        shutil.copytree(run / "models" / "initial", arm / "checkpoints" / "step-2")  # what the script leaves
    summary = Study(study_cfg(run, *overrides)).run_all()
    assert summary["stages"]["initial"]["reused"] and not summary["stages"]["arms"]["reused"]
    assert (run / "eval" / "responses" / "grpo-hash_s83__boxed__original.jsonl").exists()
