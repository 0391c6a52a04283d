"""crossed-study end to end at the smoke size: every stage, reuse by stage, reproducible responses.

The smoke preset runs the same stages as the default (warm start of a fresh tiny model, GRPO hash and
boxed arms for two seeds, crossed evaluation with paraphrased wordings, scoring, analysis), at the
smallest size.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crossed_rlvr.conf.ranges import check_ranges
from crossed_rlvr.errors import ConfigError
from crossed_rlvr.layout import FOLDER_LOCK
from crossed_rlvr.study.cli import NeedsGPU, check_device
from crossed_rlvr.study.pipeline import ArmsNotTrained, Study
from tests.helpers import study_cfg

# one worker builds the smoke study once for every test here (tests/conftest.py)
WORKER_GROUP = "smoke_study"
SHARED_FIXTURES = ("smoke",)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, warm_cache):
    from unittest import mock

    import crossed_rlvr.train.checks as checks

    run = tmp_path_factory.mktemp("study") / "a"
    checked: list[str] = []

    def counted(cfg, *args, **kwargs):
        checked.append(str(cfg.arm))
        return check_config(cfg, *args, **kwargs)

    check_config = checks.check_config
    # tracked offline here; the reruns below track nothing and must still reuse every stage
    with mock.patch.object(checks, "check_config", counted):  # run_train takes a checked config: it checks nothing
        summary = Study(study_cfg(run, "experiment=smoke", "tracking.mode=offline",
                                  f"initial.cache_dir={warm_cache}")).run_all()
    summary["arm_checks"] = checked
    return run, summary


def test_each_arm_config_is_checked_once_where_it_is_planned(smoke):
    """The study plans its arms once (study/plan.py) and checks each crossed-train config there; neither the arms
    stage nor the trainer checks it again."""
    _run, summary = smoke
    assert sorted(summary["arm_checks"]) == ["grpo-boxed/s83", "grpo-boxed/s84", "grpo-hash/s83", "grpo-hash/s84"]


def test_crossed_view_shows_the_smoke_study_in_a_real_browser(smoke):
    """crossed-view on the smoke study's folder, in chromium: every grid number is cells.csv's and every interaction
    the report's; the paired counts are the scores table's and ΔP's lost/gained (tests/view_fixtures.py). The docs'
    screenshots (docs/img/view_*.png) come from here with CROSSED_VIEW_SCREENSHOTS=docs/img."""
    import os

    from tests.view_fixtures import check_study_in_browser

    target = os.environ.get("CROSSED_VIEW_SCREENSHOTS")
    check_study_in_browser(smoke[0], Path(target) if target else None)


def test_smoke_study_writes_the_crossed_report(smoke):
    run, summary = smoke
    assert [s for s, t in summary["stages"].items() if t["reused"]] == []
    report = (run / "analysis" / "report.md").read_text()
    assert "grpo-hash" in report and "grpo-boxed" in report and "I_P" in report
    assert "## Training of the arms" in report
    # written once: the study's own sections (over training, training, warm start) are in the contents, and the
    # manifest lists their files
    contents = report.split("## Contents", 1)[1].split("\n## ", 1)[0]
    for head in ("Crossed interactions over training", "Training of the arms", "Warm start of the initial policy"):
        assert f"- [{head}]" in contents, head
    outputs = json.loads((run / "analysis" / "manifest.json").read_text())["outputs"]
    assert {"figures/training_curves.png", "over_training.csv", "validation/contrasts.csv"} <= set(outputs)
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


def test_smoke_study_shows_the_interactions_over_training(smoke):
    """Validation at every update (smoke: 0, 1, 2, 3) is scored, analysed and reported per seed and seed mean;
    at step 0 both arms are the initial policy with the same seeds, so every interaction is 0."""
    import pandas as pd

    run, _ = smoke
    rows = pd.read_csv(run / "analysis" / "over_training.csv")
    assert set(rows["contrast"]) == {"I_P", "I_S", "I_MV"}
    for seed in ("s83", "s84", "mean"):
        assert sorted(set(rows.loc[rows.seed == seed, "step"])) == [0, 1, 2, 3]
    step0 = rows[rows.step == 0]
    # zero up to float rounding (the seed mean of differences of non-trivial rates is not exactly 0.0)
    assert (step0[["estimate", "ci_low", "ci_high"]].abs() < 1e-9).all().all() and set(step0["n_items"]) == {6}
    # the figures' numbers are the validation analysis's own contrasts
    sub = pd.read_csv(run / "analysis" / "validation" / "contrasts.csv")
    pick = sub[(sub.name == "interaction") & (sub.measure == "payload") & (sub.policy == "grpo/mean@step3")]
    assert rows.loc[(rows.seed == "mean") & (rows.step == 3) & (rows.contrast == "I_P"), "estimate"].item() == \
        pick["estimate"].item()
    report = (run / "analysis" / "report.md").read_text()
    assert "## Crossed interactions over training" in report and "interaction_over_training.png" in report
    assert (run / "analysis" / "figures" / "interaction_over_training.png").stat().st_size > 10_000
    for conv in ("hash", "boxed"):
        summary = (run / "train" / conv / "s83" / "validation" / "summary.jsonl").read_text().splitlines()
        assert [json.loads(x)["step"] for x in summary] == [0, 1, 2, 3]


def test_smoke_study_learns(smoke):
    """The smoke preset trains for real: rewards above zero in every arm's GRPO groups, hash and
    boxed arms of one seed that end with different weights, and crossed interactions over training that
    move away from zero, so the end-to-end tests built on it can see a training bug."""
    import pandas as pd

    run, _ = smoke
    for conv in ("hash", "boxed"):
        for seed in (83, 84):
            lines = [json.loads(x) for x in (run / "train" / conv / f"s{seed}" / "metrics.jsonl").read_text().splitlines()]
            assert len(lines) == 3 and max(x["reward"] for x in lines) > 0, (conv, seed, lines)
            assert min(x["frac_reward_zero_std"] for x in lines) < 1  # some group had rewards that differ
    for seed in (83, 84):
        weights = [(run / "train" / conv / f"s{seed}" / "checkpoints" / "step-3" / "model.safetensors").read_bytes()
                   for conv in ("hash", "boxed")]
        assert weights[0] != weights[1]
    rows = pd.read_csv(run / "analysis" / "over_training.csv")
    # I_P read as its interval: after the last update the seed mean's interval starts above +25 pp. The suite runs
    # portable numerics (tests/conftest.py), the same on any x86-64 CPU: +66.7 [+50, +83.3] on the 6 validation
    # items (seed 83 +116.7, seed 84 +16.7), 25 pp to spare. Under each instruction set this machine can restrict
    # itself to, outside the portable mode: AVX-512 +75 [+41.7, +116.7], no vector unit (ATEN default) +75 [+58.3,
    # +91.7]; an AVX-512 Xeon's own kernels gave +50 [0, +96], which portable numerics no longer depend on. One seed
    # that learns clears the floor, two arm pairs that barely moved do not
    last = rows[(rows.step == 3) & (rows.contrast == "I_P") & (rows.seed == "mean")]
    assert last["ci_low"].item() > 25, last


def test_study_logs_one_wandb_run_per_arm_and_stage(smoke):
    from crossed_rlvr.tracking import offline_runs

    run, _ = smoke
    runs = {r["name"]: r for r in offline_runs(run)}
    arms = [f"grpo-{c}/s{s}" for c in ("hash", "boxed") for s in (83, 84)]
    # the warm start logs its run where it trains: in a whole suite run this study is the first to need the
    # policy (its group is handed out first) and builds it; run after verl's study, it copies it from the cache
    built = json.loads((run / "stages" / "initial.json").read_text())["info"]["from_cache"] is None
    assert sorted(runs) == sorted([*(["initial"] if built else []), "eval", "analysis", *arms])
    assert {r["group"] for r in runs.values()} == {"a"}  # the study's run directory name
    assert {runs[a]["job_type"] for a in arms} == {"train"}
    assert not built or runs["initial"]["job_type"] == "sft-warmstart"
    for arm in arms:
        conv = arm[5:].split("/")[0]
        assert all(f"{other}_reward" not in k for k in runs[arm]["history"] for other in {"hash", "boxed"} - {conv})
    # each arm's crossed validation: per-request scalars and the per-response table; the interactions over
    # training as a table of the analysis run
    for arm in arms:
        assert {"validation/hash/payload", "validation/boxed/math_verify", "validation/responses/path"} <= set(
            runs[arm]["history"])
    assert "over_training/path" in runs["analysis"]["history"]
    # headline contrasts in the analysis run's summary: I_P, I_S, I_MV per seed and seed mean, with intervals
    summary = set(runs["analysis"]["summary"])
    for policy in ("grpo/s83", "grpo/s84", "grpo/mean"):
        for name in ("I_P", "I_S", "I_MV"):
            key = f"arith_tiny/original/hashxboxed/{policy}/{name}"
            assert {key, f"{key}_lo", f"{key}_hi"} <= summary, key


def test_every_model_directory_loads_with_plain_auto_classes(smoke, tmp_path):
    """lm-eval, verl and vLLM load with AutoTokenizer / AutoModelForCausalLM: the tiny model, the warm-started
    initial policy and an arm checkpoint must round-trip text exactly through them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from crossed_rlvr.policies.tiny import build_tiny_model

    run, _ = smoke
    text = "Compute 7 × 8 − 3.\n\tSo  56 - 3 = 53.\n#### 53 and \\boxed{53} {\"answer\": 53} <answer>53</answer> é"
    for folder in (build_tiny_model(tmp_path / "fresh"), run / "models" / "initial",
                   run / "train" / "hash" / "s83" / "checkpoints" / "step-3"):
        tok = AutoTokenizer.from_pretrained(folder)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text, folder
        assert len(ids) == len(text.encode("utf-8")), folder  # one token per byte, as our loader reads it
        chat = tok.apply_chat_template([{"role": "user", "content": "1 + 1?"}], tokenize=False, add_generation_prompt=True)
        assert chat == "<|im_start|>user\n1 + 1?<|im_end|>\n<|im_start|>assistant\n"
        model = AutoModelForCausalLM.from_pretrained(folder)
        assert model.config.vocab_size == len(tok)


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


# Every stage of the smoke study (warm start, both arms, crossed evaluation over the wordings), cut to what a
# byte comparison needs: the property holds or fails at any size, and two of these cost less than one smoke run.
SAME_SEEDS = ["experiment=smoke", "initial.train_items=16", "sft.epochs=2", "recipe.updates=1", "arms.seeds=[83]",
              "arms.train_items=8", "validation.every=0", "evaluation.n_items=4", "analysis.resamples=50"]


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_fresh_run_directory_writes_identical_responses(tmp_path):
    """The same config and seeds in two fresh run directories: every response file is byte-identical. Both warm
    start their initial policy; the second keeps it in a warm-start cache, and a third study with the cache copies
    it from there instead of training (initial.cache_dir) and still writes the same files."""
    cache = tmp_path / "warm-cache"
    summaries = {name: Study(study_cfg(tmp_path / name, *SAME_SEEDS, *extra)).run_all()
                 for name, extra in (("a", []), ("b", [f"initial.cache_dir={cache}"]),
                                     ("c", [f"initial.cache_dir={cache}"]))}
    files = sorted((tmp_path / "a" / "eval" / "responses").glob("*.jsonl"))
    # initial + hash/boxed arms, each under both requests and the smoke's wordings
    assert len(files) == 3 * 2 * 3
    for other in ("b", "c"):
        for f in files:
            assert (tmp_path / other / "eval" / "responses" / f.name).read_bytes() == f.read_bytes(), (other, f.name)
    stamps = {name: json.loads((tmp_path / name / "stages" / "initial.json").read_text())["info"] for name in "bc"}
    # the cache holds the policy's folder and its lock file, listed in whatever order the file system keeps
    cached = [p for p in cache.iterdir() if p.suffix != ".lock"]
    assert stamps["b"]["from_cache"] is None and [stamps["c"]["from_cache"]] == [str(p) for p in cached]
    assert summaries["c"]["stages"]["initial"]["seconds"] < summaries["b"]["stages"]["initial"]["seconds"]
    for f in (tmp_path / "a" / "models" / "initial").glob("*.safetensors"):
        assert (tmp_path / "c" / "models" / "initial" / f.name).read_bytes() == f.read_bytes()


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
    # only Hydra's record of the config, its log and the run's writer lock (folder_lock.py); no stage ran
    assert made <= {"hydra", "crossed-study.log", FOLDER_LOCK}


def test_presets_compose(tmp_path):
    real = study_cfg(tmp_path, "experiment=real-cpu")
    assert real.model.name == "smollm2-135m-instruct" and real.recipe.lora.enabled is False
    assert real.initial.build == "warmstart" and real.initial.band.low < real.initial.band.high
    assert real.initial.band.every > 0 and study_cfg(tmp_path).initial.band.every == 0
    assert real.engine.bf16 is True and list(real.arms.seeds) == [83, 84] and real.validation.every > 0
    assert (real.distribute.workers, real.distribute.cpus_per_worker) == (2, 1)  # the evaluation on both cores
    assert real.sft.attention == "eager" and real.engine.attention == "eager"
    tiny = study_cfg(tmp_path)
    assert tiny.experiment_name == "tiny" and list(tiny.arms.seeds) == [83, 84]
    assert list(tiny.arms.conventions) == ["hash", "boxed"] and tiny.initial.build == "warmstart"
    paper = study_cfg(tmp_path, "experiment=qwen2.5-7b-gsm8k-crossed")
    assert paper.engine.name == "verl" and paper.eval.backend == "vllm" and paper.recipe.lr == 1e-6


def test_an_unset_fine_tuning_attention_stays_out_of_the_warm_starts_fingerprint(tmp_path):
    """``sft.attention`` unset is left out of the recipe the warm start is fingerprinted by (as every unset optional
    setting, without a mark on its field), so a study finished before the setting existed reuses its warm start;
    set, it is part of it."""
    import dataclasses

    from crossed_rlvr.conf.schema import StudyConf, conf_of
    from crossed_rlvr.files import settings

    unset = conf_of(StudyConf, study_cfg(tmp_path))
    assert "attention" not in settings(unset.sft)
    assert settings(unset.sft) == {f.name: getattr(unset.sft, f.name) for f in dataclasses.fields(unset.sft)
                                   if getattr(unset.sft, f.name) is not None}
    assert settings(conf_of(StudyConf, study_cfg(tmp_path, "sft.attention=eager")).sft)["attention"] == "eager"
    with pytest.raises(ConfigError, match=r"^sft\.attention='flash' is unknown; expected one of eager, sdpa$"):
        check_ranges(study_cfg(tmp_path, "sft.attention=flash"), "crossed_study")
    with pytest.raises(ConfigError, match=r"^engine\.attention='flash' is unknown; expected one of auto, eager, sdpa, "
                                          r"flash_attention_2$"):
        check_ranges(study_cfg(tmp_path, "engine.attention=flash"), "crossed_study")


def test_output_hash_ignores_tracking_logs(tmp_path):
    from crossed_rlvr.files import tree_sha256

    (tmp_path / "report.md").write_text("r")
    before = tree_sha256(tmp_path)
    (tmp_path / "wandb" / "run-1").mkdir(parents=True)
    (tmp_path / "wandb" / "run-1" / "log").write_text("changes later")
    assert tree_sha256(tmp_path) == before
    (tmp_path / "report.md").write_text("changed")
    assert tree_sha256(tmp_path) != before


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_sft_marker_arms_study(tmp_path):
    """arms.kind=sft (the qwen2.5-1.5b-sft-marker design) through the same stages, at the smoke size."""
    run = tmp_path / "sft"
    summary = Study(study_cfg(run, "experiment=smoke", "arms.kind=sft", "sft=arms_tiny", "sft.epochs=1", "evaluation.n_items=8",
                              "evaluation.templates=[original]")).run_all()
    assert summary["stages"]["arms"]["reused"] is False
    names = sorted(p.name for p in (run / "eval" / "responses").glob("*.jsonl"))
    assert "sft-hash_s83__boxed__original.jsonl" in names and len(names) == 10
    pairs = [json.loads(x) for x in (run / "data" / "sft-hash.jsonl").read_text().splitlines()]
    controls = [json.loads(x) for x in (run / "data" / "sft-boxed.jsonl").read_text().splitlines()]
    assert pairs[0]["completion"].endswith("#### " + pairs[0]["completion"].rsplit(" ", 1)[1])
    assert pairs[0]["completion"].rsplit("\n", 1)[0] == controls[0]["completion"].rsplit("\n", 1)[0]
    assert "sft-hash/s84" in (run / "analysis" / "report.md").read_text()


def test_answer_only_crossed_control_with_table1_wordings_study(smoke, tmp_path):
    """Paper 001 App. D.2's answer-only 2 x 2 (answer-only reward under the hash and the boxed request) and
    Table 1's rephrased and one-shot prompts, through every stage at the smoke size: the arms train on their own
    request's prompt, the crossed evaluation runs every wording, and the report holds the pair's interaction
    per wording."""
    import pandas as pd

    from crossed_rlvr.rewards.conventions import request_suffix

    run = tmp_path / "ao"
    initial = smoke[0] / "models" / "initial"  # the smoke study's warm-started policy, given (saves a warm start)
    Study(study_cfg(run, "experiment=smoke", "initial.build=given", f"model.path={initial}",
                    "arms.conventions=[answer_only_hash,answer_only_boxed]", "arms.seeds=[83]",
                    "validation.every=0", "evaluation.n_items=8", "evaluation.template_subset=null",
                    "evaluation.templates=[original,rephrased,one_shot]")).run_all()
    for conv, request in (("answer_only_hash", "hash"), ("answer_only_boxed", "boxed")):
        cfg = json.loads((run / "train" / conv / "s83" / "resolved_config.json").read_text())
        assert cfg["convention"]["name"] == conv
        rows = [json.loads(x) for x in (run / "train" / conv / "s83" / "data" / "train.jsonl").read_text().splitlines()]
        assert {r["request"] for r in rows} == {request} and {r["convention"] for r in rows} == {conv}
        assert all(r["prompt"].endswith(request_suffix(request)) for r in rows)
    names = sorted(p.name for p in (run / "eval" / "responses").glob("*.jsonl"))
    # 3 policies x 2 requests x 3 wordings
    assert len(names) == 18 and "grpo-answer_only_boxed_s83__hash__one_shot.jsonl" in names
    def first(name):
        return json.loads((run / "eval" / "responses" / name).read_text().splitlines()[0])

    # the one-shot prompt carries its worked example: same item, a longer prompt than the original's
    shot, plain = first("initial__boxed__one_shot.jsonl"), first("initial__boxed__original.jsonl")
    assert shot["item_id"] == plain["item_id"] and shot["prompt_tokens"] > plain["prompt_tokens"] + 50
    con = pd.read_csv(run / "analysis" / "contrasts.csv")
    pair = con[(con.name == "interaction") & (con.request == "answer_only_hashxanswer_only_boxed")
               & (con.policy == "grpo/s83") & (con.measure == "payload")]
    assert sorted(pair.template) == ["one_shot", "original", "rephrased"] and pair.estimate.notna().all()
    report = (run / "analysis" / "report.md").read_text()
    assert "answer_only_hashxanswer_only_boxed" in report and "| one_shot |" in report


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_native_boxed_math_arm_study(tmp_path):
    """Paper 001 App. D.3.1's native-boxed MATH arm at the smoke size: MATH-shaped train rows (answers with nested
    braces, ``\\frac{1}{2}``) rewarded by the symbolic boxed program, a single-arm design evaluated on the MATH-500
    split with the frozen MATH readers (strict symbolic box, lenient last line), gains against the initial policy."""
    import pandas as pd

    from tests.task_files import math_files

    train, test = math_files(tmp_path / "data", n_train=160, n_test=16)
    run = tmp_path / "math"
    Study(study_cfg(run, "experiment=smoke", "task=math500", f"task.path={test}", f"task.train_path={train}",
                    "task.dev_items=8", "arms.conventions=[boxed_math]", "arms.seeds=[83]", "validation.every=0",
                    "evaluation.templates=[original]", "sft.epochs=16")).run_all()
    rows = [json.loads(x) for x in (run / "train" / "boxed_math" / "s83" / "data" / "train.jsonl").read_text().splitlines()]
    assert {r["convention"] for r in rows} == {"boxed_math"} and {r["reference"] for r in rows} == {"\\frac{1}{2}"}
    metrics = [json.loads(x) for x in (run / "train" / "boxed_math" / "s83" / "metrics.jsonl").read_text().splitlines()]
    # the warm-started model boxes \frac{1}{2}: the symbolic program rewards it (the GSM8K boxed program gives 0)
    assert max(m["rewards/boxed_math_reward/mean"] for m in metrics) > 0
    scores = pd.read_parquet(run / "eval" / "scores.parquet")
    assert set(scores.task) == {"math500"} and {"math_strict.correct", "math_lenient.correct"} <= set(scores.columns)
    con = pd.read_csv(run / "analysis" / "contrasts.csv")
    gain = con[(con.name == "gain") & (con.policy == "grpo-boxed_math/s83") & (con.request == "boxed")]
    assert {"acc.strict", "acc.lenient"} <= set(gain.measure) and gain.estimate.notna().all()
    report = (run / "analysis" / "report.md").read_text()
    assert "single-arm design" in report and "grpo-boxed_math/s83" in report


@pytest.mark.long
def test_verl_arms_stop_until_their_launch_scripts_have_run(tmp_path):
    """engine=verl without engine.launch: the study writes each arm's verl data and launch scripts, stops
    with instructions, and after the scripts have produced the merged checkpoints it carries on."""
    import shutil

    run = tmp_path / "verl"
    overrides = ["experiment=smoke", "engine=verl", "sft.epochs=2", "arms.seeds=[83]", "evaluation.n_items=4",
                 "evaluation.templates=[original]"]
    with pytest.raises(ArmsNotTrained, match="no final checkpoint"):
        Study(study_cfg(run, *overrides)).run_all()
    for conv in ("hash", "boxed"):
        arm = run / "train" / conv / "s83"
        assert "verl.model_merger merge" in (arm / "launch_slurm_ray.sbatch").read_text()
        shutil.copytree(run / "models" / "initial", arm / "checkpoints" / "step-3")  # what the script leaves
    summary = Study(study_cfg(run, *overrides)).run_all()
    assert summary["stages"]["initial"]["reused"] and not summary["stages"]["arms"]["reused"]
    assert (run / "eval" / "responses" / "grpo-hash_s83__boxed__original.jsonl").exists()


def test_output_hashes_are_cached_by_path_size_and_mtime(tmp_path, monkeypatch):
    from crossed_rlvr import fingerprint
    from crossed_rlvr.study import stamps

    out = tmp_path / "ckpt"
    out.mkdir()
    for k in range(3):
        (out / f"shard-{k}.bin").write_bytes(bytes([k]) * 1000)
    reads = []
    real = fingerprint.sha256_file
    monkeypatch.setattr(fingerprint, "sha256_file", lambda p: reads.append(p.name) or real(p))
    first = stamps.Stamps(tmp_path).hash(out)
    assert len(reads) == 3
    reads.clear()
    assert stamps.Stamps(tmp_path).hash(out) == first and reads == []  # a new run re-reads nothing
    (out / "shard-1.bin").write_bytes(b"x" * 999)
    assert stamps.Stamps(tmp_path).hash(out) != first and reads == ["shard-1.bin"]


def test_code_task_study_evaluates_the_studys_arms_by_execution(smoke, tmp_path):
    """``crossed-study task=humaneval_plus``: the smoke study's initial policy and arms (arms.kind=given) answer
    code tasks under both code requests; the programs run in the sandbox and the analysis reports pass@k and γ
    per policy and request, with gains and coverage against the initial policy. A second run reuses every
    stage; fewer samples regenerate the responses."""
    import pandas as pd

    from crossed_rlvr.tasks.code import tiny_code_rows, write_code_dataset

    run, _ = smoke
    data = tmp_path / "tiny_code.jsonl"
    write_code_dataset(data, tiny_code_rows(3))
    args = ["experiment=smoke", "task=humaneval_plus", f"task.path={data}", "initial.build=given",
            f"model.path={run / 'models' / 'initial'}", "arms.kind=given", f"arms.from_run={run}", "arms.seeds=[83]",
            "evaluation.requests=[fence,begin_done]", "evaluation.templates=[original]", "evaluation.samples=2",
            "eval.max_new_tokens=16", "analysis.resamples=100", "tracking=off"]
    out = tmp_path / "code"
    summary = Study(study_cfg(out, *args)).run_all()
    assert not any(t["reused"] for t in summary["stages"].values())
    scores = pd.read_parquet(out / "eval" / "scores.parquet")
    assert set(scores.policy) == {"initial", "grpo-hash/s83", "grpo-boxed/s83"} and len(scores) == 3 * 2 * 3 * 2
    assert set(scores.task) == {"humaneval_plus"} and set(scores.request) == {"fence", "begin_done"}
    cells = pd.read_csv(out / "analysis" / "cells.csv")
    assert len(cells) == 6 and {"strict.pass@2", "lenient.pass@1", "gamma"} <= set(cells.columns)
    con = pd.read_csv(out / "analysis" / "contrasts.csv")
    assert {"gamma", "gain_strict", "gain_lenient", "coverage"} <= set(con.name)
    assert set(con.loc[con.name == "gain_strict", "policy"]) == {"grpo-hash/s83", "grpo-boxed/s83"}
    assert "## Gaps, gains and coverage (App. D.3)" in (out / "analysis" / "report.md").read_text()
    again = Study(study_cfg(out, *args)).run_all()
    assert all(t["reused"] for t in again["stages"].values())
    fewer = Study(study_cfg(out, *args[:-4], "evaluation.samples=1", *args[-3:])).run_all()
    assert [s for s, t in fewer["stages"].items() if not t["reused"]] == ["eval", "score", "analyze"]
    assert len(pd.read_parquet(out / "eval" / "scores.parquet")) == 3 * 2 * 3
    # crossed-audit from_study= is the same steps over the study's policies (read from its stamps): the same
    # settings give the same responses and verdicts, in a study's folder shape
    from hydra import compose, initialize_config_module

    from crossed_rlvr.conf.schema import AuditConf, conf_of
    from crossed_rlvr.study.audit import Audit

    g = study_cfg(out, *args).eval
    ce = tmp_path / "audit"
    decoding = [f"eval.{k}={g[k]}" for k in ("temperature", "top_p", "max_new_tokens", "context_limit", "batch_size",
                                             "base_seed")]
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        audit = compose(config_name="crossed_audit", overrides=[
            "preset=code", f"from_study={run}", f"task.path={data}", "evaluation.n_items=null", "evaluation.samples=1",
            *decoding, "analysis.resamples=100", f"run_dir={ce}"])
    Audit(conf_of(AuditConf, audit)).run()  # typed as the command's door types it
    keys = ["policy", "request", "item_id", "sample_idx"]
    ours, study = (pd.read_parquet(f / "eval" / "scores.parquet").sort_values(keys).reset_index(drop=True)
                   for f in (ce, out))
    assert set(ours.policy) == set(study.policy) | {"grpo-hash/s84", "grpo-boxed/s84"}  # every arm of the study
    ours = ours[ours.policy.isin(set(study.policy))].reset_index(drop=True)  # the seed the code study evaluated
    assert {"strict.correct", "lenient.correct", "requested_payload", "task"} <= set(ours.columns)
    pd.testing.assert_frame_equal(ours, study)  # payloads, verdicts, statuses, facts: every column


def test_real_lm_eval_run_of_the_study_is_imported_crossed(smoke, tmp_path):
    """lm-eval from PyPI loads the initial policy and the arms with its own ``hf`` model, runs a local task's
    hash and boxed variants with --log_samples; the import keeps the crossing and the analysis finds it."""
    import pandas as pd

    run, _ = smoke
    out = tmp_path / "lm"
    proc = subprocess.run([sys.executable, "scripts/lm_eval_crossed.py", str(run), str(out), "--limit", "4",
                           "--max-gen-toks", "24"], capture_output=True, text=True, cwd=Path(__file__).parents[1],
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores = pd.read_parquet(out / "scores.parquet")
    assert set(scores.policy) == {"initial", "grpo-hash/s83", "grpo-boxed/s83", "grpo-hash/s84", "grpo-boxed/s84"}
    assert set(scores.task) == {"arith_tiny"} and set(scores.request) == {"hash", "boxed"}
    assert set(scores.finish_reason) == {"unknown"}
    contrasts = pd.read_csv(out / "analysis" / "contrasts.csv")
    inter = contrasts[(contrasts.name == "interaction") & (contrasts.measure == "payload")]
    assert {"grpo/s83", "grpo/s84", "grpo/mean"} <= set(inter.policy)
    # paper 000's re-reading of the same lm-eval outputs: one row per comparison and harness extractor
    from crossed_rlvr.rescore.cli import main as rescore
    from crossed_rlvr.rescore.harness import REGISTRY

    assert rescore([str(out / "responses"), "--pair", "initial=grpo-hash/s83", "--resamples", "100",
                    "-o", str(out / "rescore")]) == 0
    table = pd.read_csv(out / "rescore" / "comparisons.csv")
    free_form = [n for n, h in REGISTRY.items() if "free" in h.kinds]
    assert len(table) == 2 * len(free_form) and set(table.prompt) == {"hash/original", "boxed/original"}
    assert {"g_rep", "g_fix", "D", "share", "read_omega_base", "admitted"} <= set(table.columns)
    assert (out / "rescore" / "reader_audit.csv").exists()  # every pair of extractors, omega included
    assert (out / "rescore" / "spread.png").exists()  # Fig. 5
    assert (out / "rescore" / "where_omega.png").exists() and "Pooled format share" in (
        out / "rescore" / "report.md").read_text()


def test_the_console_ends_with_the_studys_result(smoke):
    """crossed-study prints the report's opening sentences (one per task, wording and pair, with I_P) after its
    stages, so `make study` shows what training changed, not only where the report is."""
    from crossed_rlvr.study.cli import headline

    _run, summary = smoke
    lines = headline(summary["report"])
    assert [line.split("**")[1] for line in lines] == [f"arith_tiny · `{t}` · hashxboxed · grpo"
                                                       for t in ("original", "para_a", "para_b")]
    assert all("(I_P +" in line and "Caveats" not in line for line in lines), lines


def _edit_last(path: Path, key: str) -> None:
    """Another value of ``key`` in the last record of a JSON Lines file (a response's text, a step's time)."""
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    last[key] = f"{last[key]} 98765" if isinstance(last[key], str) else last[key] + 1  # a last number read anew
    path.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")


def _rebuilt_identically(run: Path, cache: Path, built: Path) -> list[str]:
    """The initial policy removed, and the warm-start cache holding the same policy with other run records (the
    seconds of another build, other pickled arguments): what an identical rebuild leaves."""
    import shutil

    shutil.rmtree(run / "models" / "initial")
    shutil.copytree(built, cache)
    for summary in cache.rglob("sft_summary.json"):
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "seconds": 12345.6}) + "\n")
        (summary.parent / "training_args.bin").write_bytes(b"another build's arguments")
    return [f"initial.cache_dir={cache}"]


# every stage, each of its inputs present, at the smallest size: a warm start of one epoch on 8 items, both
# conventions' arms of one seed for one update with validation before and after it, two wordings
ONE_UPDATE = ("experiment=smoke", "initial.train_items=8", "sft.epochs=1", "recipe.updates=1",
              "recipe.prompts_per_update=2", "arms.seeds=[83]", "arms.train_items=8", "validation.n_items=2",
              "evaluation.n_items=4", "evaluation.template_subset=2", "analysis.resamples=50", "tracking=off")


@pytest.mark.long
def test_each_input_of_each_stage_redoes_exactly_the_stages_that_read_it(tmp_path):
    """The one freshness rule (study/stamps.py), input by input: a setting of each stage and a file each stage reads
    is changed in turn in a copy of a one-update study, and exactly the stages whose inputs then differ are redone (a
    stage that rewrites a changed output with the same bytes leaves the stages after it fresh). The copy is restored
    at the study's own path (stamps name absolute paths; file hashes are cached by path, size and mtime)."""
    import shutil

    run, built = tmp_path / "study", tmp_path / "built"
    Study(study_cfg(run, *ONE_UPDATE, f"initial.cache_dir={built}")).run_all()  # the warm start also stored there
    pristine = tmp_path / "pristine"
    shutil.copytree(run, pristine, symlinks=True)
    arm = run / "train" / "hash" / "s83"
    responses = sorted((run / "eval" / "responses").glob("*.jsonl"))[0]
    cases = {
        "nothing": (lambda: [], []),
        "initial setting (sft.epochs), other weights": (
            lambda: ["sft.epochs=3"], ["initial", "arms", "eval", "score", "analyze"]),
        "initial policy rebuilt identically (other run records)": (
            lambda: _rebuilt_identically(run, tmp_path / "cache", built), ["initial", "analyze"]),
        "arms setting (arms.seeds)": (lambda: ["arms.seeds=[84]"], ["arms", "eval", "score", "analyze"]),
        "an arm's checkpoint weights": (
            lambda: (arm / "checkpoints" / "step-1" / "model.safetensors").write_bytes(b"damaged") and [],
            ["arms", "analyze"]),  # retrained to the same weights; its metrics hold the step times
        "eval setting (evaluation.samples)": (lambda: ["evaluation.samples=2"], ["eval", "score", "analyze"]),
        "a response file": (lambda: _edit_last(responses, "response") or [], ["eval"]),
        "an arm's validation responses": (
            lambda: _edit_last(sorted((arm / "validation" / "responses").glob("*.jsonl"))[0], "response") or [],
            ["score", "analyze"]),
        "the scores": (lambda: (run / "eval" / "scores.parquet").write_bytes(b"not a table") and [], ["score"]),
        "analysis setting (analysis.resamples)": (lambda: ["analysis.resamples=60"], ["analyze"]),
        "an arm's training metrics": (lambda: _edit_last(arm / "metrics.jsonl", "step_time") or [], ["analyze"]),
    }
    table = {}
    for what, (change, _expected) in cases.items():
        shutil.rmtree(run)
        shutil.copytree(pristine, run, symlinks=True)
        overrides = change()
        summary = Study(study_cfg(run, *ONE_UPDATE, *overrides)).run_all()
        table[what] = [s for s, t in summary["stages"].items() if not t["reused"]]
    print("\n".join(f"{what} -> {', '.join(redone) or 'none'}" for what, redone in table.items()))
    assert table == {what: expected for what, (_change, expected) in cases.items()}


def test_a_stamp_of_the_earlier_rule_is_carried_over_once(tmp_path):
    """A stamp written when a policy was hashed by every file of its folder (its run records too) still matches while
    those files are unchanged: it is rewritten once under the one rule and the stage is not redone; a real change of
    the policy's weights redoes the stage."""
    from crossed_rlvr.files import atomic_write_json, tree_sha256
    from crossed_rlvr.fingerprint import Read, digest, with_numerics
    from crossed_rlvr.study.stamps import RULE, StageCache

    policy, out = tmp_path / "policy", tmp_path / "out.txt"
    policy.mkdir()
    (policy / "model.safetensors").write_bytes(b"weights")
    (policy / "sft_summary.json").write_text('{"seconds": 81.4}')
    out.write_text("made")
    cache = StageCache(tmp_path / "run", ("eval",), lambda _: None)
    old_inputs = with_numerics({"weights": {"initial": tree_sha256(policy)}})
    atomic_write_json(cache.stamps.path("eval"), {"fingerprint": digest(old_inputs), "inputs": old_inputs,
                                                  "outputs_sha256": {str(out): tree_sha256(out)}, "info": {"n": 1},
                                                  "seconds": 1.0, "finished": "then"})
    runs = []
    inputs = {"weights": {"initial": Read.weights(policy)}}
    assert cache("eval", inputs, [out], lambda: runs.append(1) or {"n": 2}) == {"n": 1} and runs == []
    assert cache.stamps.read("eval")["rule"] == RULE
    assert StageCache(tmp_path / "run", ("eval",), lambda _: None)("eval", inputs, [out], lambda: {"n": 2}) == {"n": 1}
    (policy / "model.safetensors").write_bytes(b"other weights")
    assert StageCache(tmp_path / "run", ("eval",), lambda _: None)("eval", inputs, [out], lambda: {"n": 2}) == {"n": 2}


def test_cells_sampled_with_other_numerics_or_threads_are_made_again_when_the_eval_stage_is_redone(tmp_path):
    """A cell's settings record holds neither the CPU numerics nor the torch threads it was sampled with, which the eval
    stage's fingerprint holds: the stage redone for either removes the cells made with the others (crossed-eval would
    reuse them as they are), once; a redo for any other input keeps them. A folder made before the record existed is
    read from its eval stamp."""
    from types import SimpleNamespace

    from crossed_rlvr.files import atomic_write_json
    from crossed_rlvr.layout import RunLayout
    from crossed_rlvr.study.answer_steps import remake_if_made_otherwise
    from crossed_rlvr.study.stamps import Stamps

    run = tmp_path / "run"
    layout, said = RunLayout(run), []
    study = SimpleNamespace(layout=layout, stamps=Stamps(run), say=said.append)
    cell = layout.eval.response_file("a")

    def cells_made() -> None:
        cell.parent.mkdir(parents=True, exist_ok=True)
        cell.write_text("{}\n")

    portable = {"numerics": "portable", "threads": 1}
    cells_made()  # a folder from before the record: its eval stamp says what the cells were made with
    atomic_write_json(Stamps(run).path("eval"), {"inputs": {"numerics": "portable", "eval": {"threads": 1}}})
    remake_if_made_otherwise(study, portable)
    assert cell.exists() and said == [] and json.loads(layout.eval.made_with.read_text()) == portable
    remake_if_made_otherwise(study, portable)  # redone for another input (a new arm): the cells stay
    assert cell.exists() and said == []
    remake_if_made_otherwise(study, {"numerics": "portable", "threads": 2})
    assert not cell.exists() and said == ["    eval: every cell made again (threads: 1 -> 2)"]
    cells_made()  # the remake interrupted after a cell: resumed, not started over
    remake_if_made_otherwise(study, {"numerics": "portable", "threads": 2})
    assert cell.exists() and len(said) == 1
    remake_if_made_otherwise(study, {"threads": 2})  # numerics=native
    assert not cell.exists() and said[1] == "    eval: every cell made again (numerics: portable -> native)"


def test_a_stamp_that_recorded_unset_settings_as_null_is_carried_over_once(tmp_path):
    """Before unset settings were left out of every fingerprint (``files.settings``), a stamp recorded them as null:
    its stage is not redone for that alone, and is redone when a setting that is set differs."""
    import dataclasses

    from omegaconf import OmegaConf

    from crossed_rlvr.conf.schema import EvalConf
    from crossed_rlvr.files import atomic_write_json, tree_sha256
    from crossed_rlvr.fingerprint import digest, with_numerics
    from crossed_rlvr.study.stamps import RULE, StageCache

    out = tmp_path / "out.txt"
    out.write_text("made")

    def stamped(recorded: EvalConf) -> StageCache:
        cache = StageCache(tmp_path / "run", ("eval",), lambda _: None)
        old = with_numerics({"eval": OmegaConf.to_container(OmegaConf.structured(recorded))})  # every field, nulls too
        assert None in old["eval"].values()
        atomic_write_json(cache.stamps.path("eval"), {"fingerprint": digest(old), "inputs": old, "rule": 2,
                                                      "outputs_sha256": {str(out): tree_sha256(out)}, "info": {"n": 1},
                                                      "seconds": 1.0, "finished": "then"})
        return cache

    now = EvalConf()
    cache = stamped(now)
    assert cache("eval", {"eval": now}, [out], lambda: {"n": 2}) == {"n": 1}
    assert cache.stamps.read("eval")["rule"] == RULE and None not in cache.stamps.read("eval")["inputs"]["eval"].values()
    cache = stamped(dataclasses.replace(now, batch_size=8))
    assert cache("eval", {"eval": now}, [out], lambda: {"n": 2}) == {"n": 2}
