"""The GPU path up to the launch, on the CPU: every GPU preset's dress rehearsal and the launch hygiene.

Each preset runs ``stages=prepare`` on local GSM8K- and MATH-shaped files that, like the hub datasets,
have only train and test splits, with a tiny local model in place of the hub model. verl's own config
validation runs on every generated override list; the scripts are read line by line.
"""

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pytest
from omegaconf import OmegaConf

from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.study.pipeline import ArmsNotTrained, Study
from crossed_rlvr.study.plan import Policy
from crossed_rlvr.train.translate import ROLLOUT_SEED_KEY, VERL_SEED_KEYS
from crossed_rlvr.train.verl_engine import SDPA, validate_verl
from tests.gpu_fixtures import DEV, N_VAL, task_overrides
from tests.helpers import FakeVLLMEngine, arm_files, study_cfg

# with tests/test_launch.py on one worker, so the shared session fixtures (tests/gpu_fixtures.py) are built once
# for the tests here that are not exclusive (the exclusive ones build them again on their own worker)
WORKER_GROUP = "gpu_path"
SHARED_FIXTURES = ("local", "paper_gsm8k")

CONF = Path(__file__).resolve().parent.parent / "crossed_rlvr" / "conf" / "experiment"
GPU_PRESETS = sorted(p.stem for p in CONF.glob("*.yaml") if "requires_gpu: true" in p.read_text())
def test_gpu_presets_are_the_ones_rehearsed():
    assert GPU_PRESETS == ["gpu-smoke", "gpu-smoke-resume", "qwen2.5-1.5b-math-boxed", "qwen2.5-1.5b-sft-marker",
                           "qwen2.5-7b-code-transfer", "qwen2.5-7b-gsm8k-crossed", "qwen2.5-7b-math-boxed",
                           "qwen2.5-7b-math500-transfer"]


def check_grpo_rehearsal(run: Path, arms: list[str], n_test: int, updates: int, dev: int = DEV,
                         validation: str = "dev") -> None:
    """verl's data of each arm: validation on ``dev`` held-out train rows, or on the ``test`` split (the 7B preset,
    Table 23), under both requests; training rows disjoint from both."""
    summary = json.loads((run / "prepare_summary.json").read_text())
    assert sorted(summary["arms"]) == sorted(arms)
    test_questions = {json.loads(x)["question"] for x in (run / "eval" / "items").glob("*.jsonl").__next__()
                      .read_text().splitlines()}
    for name in arms:
        arm = Path(summary["arms"][name]["run_dir"])
        train = pd.read_parquet(arm / "data" / "train.parquet")
        val = pd.read_parquet(arm / "data" / "val.parquet")
        n_val = dev if validation == "dev" else n_test
        assert len(val) == 2 * n_val  # every validation item under both requests
        requests = [e["request"] for e in val["extra_info"]]
        assert sorted(set(requests)) == ["boxed", "hash"] and requests.count("hash") == n_val
        by_request = {r: {e["item_id"] for e in val["extra_info"] if e["request"] == r} for r in ("hash", "boxed")}
        assert by_request["hash"] == by_request["boxed"]
        train_ids = {e["item_id"] for e in train["extra_info"]}
        assert not train_ids & by_request["hash"]  # validation is held out of training
        assert all(i.startswith("train-") for i in train_ids)
        val_questions = {p[0]["content"].split("\n")[0] for p in val["prompt"]}
        train_questions = {p[0]["content"].split("\n")[0] for p in train["prompt"]}
        tests = {q.split("\n")[0] for q in test_questions}
        assert not tests & train_questions  # training is disjoint from the test split
        if validation == "dev":
            assert all(i.startswith("train-") for i in by_request["hash"]) and not tests & val_questions
        else:
            assert val_questions == tests
        assert set(val["data_source"]) == {f"{d}/{r}" for d in set(train["data_source"]) for r in ("hash", "boxed")}
        overrides = (arm / "verl_overrides.txt").read_text().split("\n")[:-1]
        for extra in ([], SDPA):  # verl's own validate_config, on both attention variants the launch may use
            composed = validate_verl(overrides + extra)
        assert composed.trainer.total_training_steps == updates
        for script in ("launch_single_node.sh", "launch_slurm_ray.sbatch"):
            assert (arm / script).exists()
    plan = json.loads((run / "eval_plan.json").read_text())
    assert len(plan["policies"]) == 1 + len(arms) and plan["n_items"] == n_test
    assert len(plan["cells"]) == len(plan["policies"]) * len(plan["requests"]) * len(plan["templates"])


def test_paper_preset_rehearses_on_gsm8k_files_without_dev_split(paper_gsm8k):
    """§3/B.1/Table 23: both arms train on the frozen train rows (all of them: no dev hold-out) named by file and
    sha256 in their configs, and verl validates on the test split."""
    from crossed_rlvr.files import sha256_file

    arms = [f"grpo-{c}/s{s}" for s in (83, 84, 85, 86, 87) for c in ("hash", "boxed")]  # §3: seeds 83-87
    check_grpo_rehearsal(paper_gsm8k, arms, n_test=40, updates=100, validation="test")
    frozen = paper_gsm8k / "data" / "train_rows.jsonl"
    rows = [json.loads(x) for x in frozen.read_text().splitlines()]
    assert len(rows) == 120 and rows[0]["item_id"] == "train-0" and "answer" in rows[0]  # the source's own rows
    for arm in ("hash", "boxed"):
        task = json.loads((paper_gsm8k / "train" / arm / "s83" / "resolved_config.json").read_text())["task"]
        assert task["train_rows"] == str(frozen.resolve()) and task["train_rows_sha256"] == sha256_file(frozen)
        assert task["dev_items"] == 0
    train = pd.read_parquet(paper_gsm8k / "train" / "hash" / "s83" / "data" / "train.parquet")
    assert {e["item_id"] for e in train["extra_info"]} <= {r["item_id"] for r in rows}
    manifest = json.loads((paper_gsm8k / "eval" / "run.json").read_text())
    assert manifest["splits"]["gsm8k-test.jsonl"]["dev"] == {"held_out_from": "train", "n": 0, "seed": 20260919}


def test_frozen_train_rows_are_checked_and_a_users_rows_are_used_as_given(local, tmp_path):
    """``task.train_rows=FILE`` (the paper's exact rows): used as the train split, its hash pinned; a changed file
    or a row that repeats a test question is refused with the file and row named."""
    from crossed_rlvr.tasks.items import ItemFileError
    from crossed_rlvr.tasks.splits import load_split

    train, test = local["gsm8k"]
    mine = tmp_path / "rows.jsonl"
    mine.write_text("".join(train.read_text().splitlines(keepends=True)[:7]))
    cfg = study_cfg(tmp_path / "r", "task=gsm8k", f"task.path={test}", f"task.train_rows={mine}", "task.split=train")
    items = load_split(cfg.task)
    assert [it["item_id"] for it in items] == [f"train-{k}" for k in range(7)]
    pinned = study_cfg(tmp_path / "r", "task=gsm8k", f"task.path={test}", f"task.train_rows={mine}", "task.split=train",
                       "task.train_rows_sha256=" + "0" * 64)
    with pytest.raises(ItemFileError, match=r"rows.jsonl: its sha256 is .* not the 0000000000000000"):
        load_split(pinned.task)
    mine.write_text(mine.read_text() + test.read_text().splitlines(keepends=True)[3])
    with pytest.raises(ItemFileError, match=r"rows.jsonl: row 8 has the question of test item '3'"):
        load_split(cfg.task)


def test_frozen_rows_are_reused_as_they_stand_and_other_task_settings_are_refused(local, tmp_path):
    """A study's frozen rows are written once; a rerun with the same task reuses them byte for byte, and a rerun whose
    task would cut other rows (another dev hold-out, another train file) is refused rather than silently kept."""
    from crossed_rlvr.tasks.items import ItemFileError
    from crossed_rlvr.tasks.splits import freeze_train_rows

    train, test = local["gsm8k"]
    out = tmp_path / "data" / "train_rows.jsonl"
    first = freeze_train_rows(study_cfg(tmp_path, "task=gsm8k", f"task.path={test}", f"task.train_path={train}",
                                        "task.dev_items=12").task, out)
    assert first["rows"] == 120 - 12
    again = freeze_train_rows(study_cfg(tmp_path, "task=gsm8k", f"task.path={test}", f"task.train_path={train}",
                                        "task.dev_items=12").task, out)
    assert again == first
    with pytest.raises(ItemFileError, match=r"train_rows.jsonl: frozen from other task settings \(dev_items: 12 -> 0\)"):
        freeze_train_rows(study_cfg(tmp_path, "task=gsm8k", f"task.path={test}", f"task.train_path={train}",
                                    "task.dev_items=0").task, out)


def test_paper_preset_rehearses_on_math_files(local):
    run = local["tmp"] / "math"
    Study(study_cfg(run, "experiment=qwen2.5-7b-gsm8k-crossed", "stages=prepare", "arms.seeds=[83]",
                    f"model.path={local['model']}", *task_overrides(local, "math500"))).prepare()
    check_grpo_rehearsal(run, ["grpo-hash/s83", "grpo-boxed/s83"], n_test=40, updates=100, validation="test")
    train = pd.read_parquet(run / "train" / "hash" / "s83" / "data" / "train.parquet")
    assert set(train["reward_model"].map(lambda r: r["ground_truth"])) == {"\\frac{1}{2}"}  # MATH train: last box
    val = pd.read_parquet(run / "train" / "hash" / "s83" / "data" / "val.parquet")
    assert set(val["reward_model"].map(lambda r: r["ground_truth"])) == {str(k + 2) for k in range(40)}  # MATH-500


def test_sft_preset_rehearses(local):
    run = local["tmp"] / "sft"
    cfg = study_cfg(run, "experiment=qwen2.5-1.5b-sft-marker", "stages=prepare", f"model.path={local['model']}",
                    *task_overrides(local, "gsm8k", dev=False))
    # D.2.1: 500 items x 4 samples, seeds 83-85, 10,000 resamples; the frozen rows, no dev hold-out
    assert (cfg.evaluation.n_items, cfg.evaluation.samples, cfg.analysis.resamples) == (500, 4, 10000)
    assert list(cfg.arms.seeds) == [83, 84, 85] and cfg.task.dev_items == 0
    assert (cfg.eval.temperature, cfg.eval.top_p) == (0.6, 0.95)
    summary = Study(cfg).prepare()
    assert sorted(summary["arms"]) == sorted(f"sft-{c}/s{s}" for s in (83, 84, 85) for c in ("hash", "boxed"))
    a = [json.loads(x) for x in (run / "data" / "sft-hash.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (run / "data" / "sft-boxed.jsonl").read_text().splitlines()]
    assert len(a) == len(b) == 120  # D.2.1: both arms on all the frozen train rows
    assert (run / "data" / "train_rows.jsonl").exists()
    # D.2.1: 500 items (the file has 40) x 4 samples, the original wording, 7 policies x 2 requests
    plan = json.loads((run / "eval_plan.json").read_text())
    assert plan["responses"] == 7 * 2 * 40 * 4 and list(plan["templates"]) == ["original"]


@pytest.mark.exclusive
@pytest.mark.timeout(900)
def test_gpu_smoke_dry_run_passes_on_the_cpu(local):
    """The dry run prepares both arms and rehearses the launch: verl's start-up on Ray (7 CPUs, 1 logical GPU),
    for the boxed arm here (``rehearsal.conventions``); the resume preset's rehearsal below takes the hash arm, so
    each convention's launch is rehearsed once and each test pays one verl start-up."""
    train, _ = local["gsm8k"]
    proc = subprocess.run(["bash", "scripts/gpu_smoke.sh", str(local["model"]), str(train.parent),
                           str(local["tmp"] / "smoke"), "rehearsal.conventions=[boxed]", "--dry-run"], capture_output=True,
                          text=True, timeout=840, check=False, cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 3 policies x 2 requests x 40 items (the file has 40 test items; the preset asks for up to 64)
    assert proc.stdout.splitlines() == [proc.stdout.splitlines()[0]] and "240 responses planned" in proc.stdout
    assert proc.stdout.startswith("PASS rehearse") and "WorkerDict.actor_rollout_init_model" in proc.stdout
    check_grpo_rehearsal(local["tmp"] / "smoke", ["grpo-hash/s83", "grpo-boxed/s83"], n_test=40, updates=2, dev=32)
    result = json.loads((local["tmp"] / "smoke" / "rehearsal.json").read_text())
    assert sorted(result) == ["grpo-boxed/s83"]
    for arm in result.values():
        assert arm["trainer"] == "CrossedSyncTrainer" and arm["gpus"] == 1 and "7 CPUs and 1 GPU(s)" in arm["launch_lines"][0]


def test_gpu_smoke_fails_on_the_first_stage_without_a_gpu(local):
    from crossed_rlvr.study.smoke import main

    train, _ = local["gsm8k"]
    assert main([str(local["model"]), str(train.parent), str(local["tmp"] / "smoke-gpu")]) == 1


def test_gpu_preset_without_prepare_stops_before_any_stage(local, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.study.cli", "experiment=qwen2.5-7b-gsm8k-crossed",
                           f"run_dir={tmp_path / 'r'}"], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0 and "stages=prepare" in proc.stderr
    assert not (tmp_path / "r" / "train").exists()


# ---------------------------------------------------------------- launch hygiene (on the 7B rehearsal)
def test_scripts_run_the_studys_interpreter(paper_gsm8k):
    single, slurm, _ = arm_files(paper_gsm8k)
    python = shlex.quote(str(Path(sys.executable).absolute()))
    for text in (single, slurm):  # the 7B preset's arms run the importance-weighted trainer (App. D.1)
        assert f"{python} -m crossed_rlvr.train.verl_launch" in text and f"{python} -m verl.model_merger merge" in text
        assert "--weighted" in text
        assert not [line for line in text.splitlines() if line.lstrip().startswith(("python ", "python3 "))]
    assert shlex.quote(str(Path(sys.executable).absolute().parent / "ray")) + " start" in slurm


def test_tracking_block_reaches_scripts_and_ray_actors(paper_gsm8k, local):
    single, slurm, overrides = arm_files(paper_gsm8k)
    expected = {"WANDB_MODE": "online", "WANDB_PROJECT": "crossed-rlvr", "WANDB_RUN_GROUP": "paper",
                "WANDB_NAME": "grpo-hash/s83", "WANDB_JOB_TYPE": "train", "HF_HUB_OFFLINE": "1"}
    for key, value in expected.items():
        assert f"export {key}={shlex.quote(value)}" in single and f"export {key}={shlex.quote(value)}" in slurm
    env = validate_verl(overrides).ray_kwargs.ray_init.runtime_env.env_vars
    assert {k: env[k] for k in expected} == expected
    assert validate_verl(overrides).trainer.experiment_name == "grpo-hash/s83"
    # an entity and offline mode from the study's tracking block
    run = local["tmp"] / "tracking"
    Study(study_cfg(run, "experiment=qwen2.5-7b-gsm8k-crossed", "stages=prepare", "arms.seeds=[83]",
                    "tracking=offline", "+tracking.entity=lab", "tracking.group=g1", f"model.path={local['model']}",
                    *task_overrides(local, "gsm8k"))).prepare()
    single, _, overrides = arm_files(run)
    assert "export WANDB_MODE=offline" in single and "export WANDB_ENTITY=lab" in single
    assert validate_verl(overrides).ray_kwargs.ray_init.runtime_env.env_vars.WANDB_RUN_GROUP == "g1"


def test_weighted_trainer_runs_in_verls_synchronous_mode(paper_gsm8k):
    """verl runs every mode but ``sync`` asynchronously: the importance-weighted trainer takes the ``sync``
    slot in its own process (the weighted arm's scripts are checked in test_verl_adapter)."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, get_trainer_cls

    from crossed_rlvr.train.verl_weighted import ImportanceWeightedTrainer, install_as_sync

    assert validate_verl(arm_files(paper_gsm8k)[2]).trainer.v1.trainer_mode == "sync"
    original = TRAINER_REGISTRY["sync"]
    try:
        install_as_sync()  # what our Ray task runner does in its own actor process
        assert get_trainer_cls("sync") is ImportanceWeightedTrainer
    finally:
        TRAINER_REGISTRY["sync"] = original


def test_checkpoints_are_resumable_every_save_every_updates(paper_gsm8k, local):
    """The 7B preset saves every 10 updates with optimizer and data-loader state, keeps the latest, and
    resumes from it (``resume_mode=auto``): an arm interrupted at update 99 restarts at 90, not 0."""
    composed = validate_verl(arm_files(paper_gsm8k)[2])
    assert composed.trainer.save_freq == 10 and composed.trainer.resume_mode == "auto"
    assert list(composed.actor_rollout_ref.actor.checkpoint.save_contents) == ["model", "optimizer", "extra"]
    assert composed.trainer.max_actor_ckpt_to_keep == 1
    run = local["tmp"] / "optim"
    Study(study_cfg(run, "experiment=qwen2.5-7b-gsm8k-crossed", "stages=prepare", "arms.seeds=[83]",
                    "recipe.save_every=0", f"model.path={local['model']}",
                    *task_overrides(local, "gsm8k"))).prepare()
    composed = validate_verl(arm_files(run)[2])  # final checkpoint only: the model alone
    assert composed.trainer.save_freq == 100 and list(composed.actor_rollout_ref.actor.checkpoint.save_contents) == [
        "model"]


def test_crossed_validation_during_training_is_dumped(paper_gsm8k, local):
    """verl validates before training, every validation.every updates (the preset's 10) and at the end,
    greedily as App. D.1 ("validation is greedy"), and dumps every step; validation.greedy=false samples
    with the evaluation's settings (T=0.6, top-p 0.95, one sample)."""
    composed = validate_verl(arm_files(paper_gsm8k)[2])
    assert composed.trainer.val_before_train is True and composed.trainer.test_freq == 10
    val = composed.actor_rollout_ref.rollout.val_kwargs
    assert (val.do_sample, val.temperature, val.top_p, val.n) == (False, 0.0, 1.0, 1)
    run = local["tmp"] / "sampled"
    Study(study_cfg(run, "experiment=qwen2.5-7b-gsm8k-crossed", "stages=prepare", "arms.seeds=[83]",
                    "validation.greedy=false", f"model.path={local['model']}",
                    *task_overrides(local, "gsm8k"))).prepare()
    val = validate_verl(arm_files(run)[2]).actor_rollout_ref.rollout.val_kwargs
    assert (val.do_sample, val.temperature, val.top_p, val.n) == (True, 0.6, 0.95, 1)
    assert composed.trainer.validation_data_dir == str((paper_gsm8k / "train" / "hash" / "s83").resolve()
                                                       / "validation")


def test_verl_validation_of_both_arms_over_training_is_analysed_crossed(paper_gsm8k, local, tmp_path):
    """Dumps written by verl 0.9.1's own writer (RayPPOTrainer._write_generations: ``input``, ``output``, ``gts``,
    ``score``, ``step``) for both arms at steps 0 and 10, imported with ``crossed-import verl --all-steps``:
    the steps become <arm>@step<K>, crossed-analyze pairs them across requests and reports the interactions
    over training (0 at step 0 where both arms answer alike, +200 pp at step 10 where each writes its own marker)."""
    import numpy as np
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from crossed_rlvr.analysis.report.folder import analyze
    from crossed_rlvr.eval.ingest.cli import main as import_main
    from crossed_rlvr.eval.score.scoring import score_files
    from crossed_rlvr.policies.loading import load_tokenizer
    from crossed_rlvr.train.verl_reward import compute_score

    tok = load_tokenizer(local["model"])
    responses = tmp_path / "responses"
    for conv in ("hash", "boxed"):
        val = pd.read_parquet(paper_gsm8k / "train" / conv / "s83" / "data" / "val.parquet")
        # what verl's _validate decodes: the chat-rendered prompt ids without special tokens
        inputs = [tok.decode(tok.apply_chat_template(list(p), tokenize=True, add_generation_prompt=True,
                                                     return_dict=False), skip_special_tokens=True)
                  for p in val["prompt"]]
        gts = [rm["ground_truth"] for rm in val["reward_model"]]
        marker = {"hash": "#### {}", "boxed": "\\boxed{{{}}}"}[conv]
        dump = tmp_path / conv / "validation"
        for step, outputs in ((0, [f"The answer is {g}." for g in gts]), (10, [marker.format(g) for g in gts])):
            # our reward entry on each row, as verl's reward loop calls it; verl keeps every key it returns
            results = [compute_score(ds, out, g, dict(info)) for ds, out, g, info in
                       zip(val["data_source"], outputs, gts, val["extra_info"], strict=True)]
            infos = {k: [r[k] for r in results] for k in results[0]}
            scores = infos["score"]
            RayPPOTrainer._write_generations(inputs, outputs, gts, scores, {"reward": scores, **infos}, str(dump),
                                             step)
            if step == 10:  # verl's own per-request validation metrics (logged at each validation step)
                metrics = RayPPOTrainer._val_metrics_update(None, np.array(val["data_source"]),
                                                            [str(k) for k in range(len(val))], infos, [])
                own, other = conv, {"hash": "boxed", "boxed": "hash"}[conv]
                assert metrics[f"val-aux/crossed_rlvr/gsm8k/{own}/payload/mean@1"] == 1.0
                assert metrics[f"val-aux/crossed_rlvr/gsm8k/{other}/payload/mean@1"] == 0.0
                assert metrics[f"val-aux/crossed_rlvr/gsm8k/{own}/strict/mean@1"] == 1.0
                # the arm's reward: its own marker, under either request
                assert metrics[f"val-core/crossed_rlvr/gsm8k/{other}/acc/mean@1"] == 1.0
        assert sorted(p.name for p in dump.iterdir()) == ["0.jsonl", "10.jsonl"]
        assert set(json.loads((dump / "10.jsonl").read_text().splitlines()[0])) >= {"input", "output", "gts", "score",
                                                                                    "step"}
        responses.mkdir(exist_ok=True)
        assert import_main(["verl", str(dump), "-o", str(responses / f"{conv}.jsonl"), "--policy",
                            f"grpo-{conv}/s83", "--all-steps", "--task", "gsm8k"]) == 0
    score_files([responses], tmp_path / "scores.parquet", progress=False)
    out = analyze(tmp_path / "scores.parquet", tmp_path / "analysis", n_resamples=200, rng_seed=1)
    contrasts = pd.read_csv(out / "contrasts.csv")
    ip = contrasts[(contrasts.name == "interaction") & (contrasts.measure == "payload")].set_index("policy")
    assert ip.loc["grpo/s83@step0", "estimate"] == 0 and ip.loc["grpo/s83@step10", "estimate"] == 200
    assert ip.loc["grpo/s83@step10", "n_items"] == N_VAL and ip.loc["grpo/s83@step10", "request"] == "hashxboxed"
    rows = pd.read_csv(out / "over_training.csv")
    assert sorted(set(rows.step)) == [0, 10] and set(rows.seed) == {"s83", "mean"}
    assert "## Crossed interactions over training" in (out / "report.md").read_text()


def test_slurm_and_ray_are_given_the_cpus_verl_reserves(paper_gsm8k):
    """4 GPUs x {CPU: 3} + TransferQueue (2 units on one node + controller) + the weighted task runner + 1 free
    = 17."""
    single, slurm, overrides = arm_files(paper_gsm8k)
    assert "#SBATCH --cpus-per-task=17" in slurm and slurm.count('--num-cpus="$cpus"') == 2
    assert "ray_kwargs.ray_init.num_cpus=17" in single
    assert "transfer_queue.backend.SimpleStorage.num_data_storage_units=2" in overrides


def test_arm_seed_reaches_every_seed_verl_has(paper_gsm8k):
    composed = OmegaConf.to_container(validate_verl(arm_files(paper_gsm8k, "boxed/s85")[2]), resolve=True)
    found = {}

    def walk(node, prefix=""):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        elif "seed" in prefix.rstrip(".").rsplit(".", 1)[-1]:
            found[prefix.rstrip(".")] = node

    walk(composed)
    assert set(found) == {*VERL_SEED_KEYS, "data.seed"}  # the list verl 0.9.1 has; a new seed fails here
    # the rollout's seed is spread over the arm's four vLLM engines (train.checks.rollout_seed)
    assert found.pop(ROLLOUT_SEED_KEY) == 85 * 4 and set(found.values()) == {85}


def test_attention_falls_back_to_sdpa_without_flash_attn(paper_gsm8k, tmp_path):
    single, _, _ = arm_files(paper_gsm8k)
    assert "import flash_attn" in single and '${ATTN[@]+"${ATTN[@]}"}' in single
    # run the script's own attention block: here flash-attn is absent, so ATTN holds the SDPA overrides
    block = single.split("set -euo pipefail\n", 1)[1].split("\nfi\n", 1)[0] + "\nfi\n"
    out = subprocess.run(["bash", "-c", block + 'printf "%s\\n" "${ATTN[@]}"'], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == SDPA


def test_no_generated_script_expands_an_array_that_bash_4_2_calls_unbound(paper_gsm8k):
    """Under ``set -u``, bash before 4.4 ends a script at ``"${A[@]}"`` of an empty array (this machine's bash 5
    does not, so the check is static): every array the scripts expand whole is guarded with ``${A[@]+...}``."""
    import re

    for text in arm_files(paper_gsm8k)[:2]:
        bare = [m.group(0) for m in re.finditer(r'(?<!\+)"\$\{\w+\[@\]\}"', text)]
        assert bare == [], bare
        assert text.count('${ATTN[@]+"${ATTN[@]}"}') == 1


class _FakeLLM:
    events: ClassVar[list] = []

    def __init__(self, model, **kwargs):
        self.model = model
        self.llm_engine = FakeVLLMEngine()
        _FakeLLM.events.append(("load", Path(model).name))

    def shutdown(self):
        _FakeLLM.events.append(("shutdown", Path(self.model).name))


def test_vllm_engines_are_shut_down_between_policies(local, tmp_path, monkeypatch):
    """The runner shuts each vLLM engine down before the next policy loads, and the last one at the end
    (vLLM itself replaced by a stand-in that records calls: this machine has no GPU)."""
    import types

    from crossed_rlvr.conf.schema import EvalConf
    from crossed_rlvr.eval.generate.runner import run_eval
    from crossed_rlvr.files import settings
    from crossed_rlvr.policies.loading import copy_tokenizer_files

    fake = types.ModuleType("vllm")
    fake.LLM = _FakeLLM
    fake.SamplingParams = lambda **kw: kw
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: prompt_token_ids
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        copy_tokenizer_files(local["model"], tmp_path / name)
    _FakeLLM.events = []
    cfg = OmegaConf.create({
        "model": {"name": "tiny", "source": "local", "path": str(tmp_path / "a"), "system": None},
        "task": {"name": "arith_tiny", "source": "arith", "split": "test", "n_test": 20, "n_dev": 4,
                 "seed": 1, "n_items": 3, "strata": [1], "max_operand": 9, "ops": ["+"]},
        "eval": {**settings(EvalConf()), "backend": "vllm", "dtype": "bfloat16", "batch_size": 8,  # schema defaults
                 "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 8, "context_limit": 256, "base_seed": 1},
        "tracking": {"mode": "off", "project": "x"}, "run_dir": str(tmp_path / "run"),
        "policies": [{"name": "initial", "path": str(tmp_path / "a")},
                     {"name": "grpo-hash/s1", "path": str(tmp_path / "b"), "training_convention": "hash",
                      "train_seed": 1}],
        "requests": ["hash", "boxed"], "templates": ["original"], "template_subset": None,
        "template_subset_seed": 0, "samples": 1, "overwrite": False})
    run_eval(cfg, progress=False)
    assert _FakeLLM.events == [("load", "a"), ("shutdown", "a"), ("load", "b"), ("shutdown", "b")]


def test_verl_validation_dump_imports_into_crossed_cells(paper_gsm8k, local, tmp_path):
    """A dump in verl 0.9.1's format (``input``, ``output``, ``gts``, ``score``, ``step``) of the arm's
    validation under both requests imports into hash and boxed cells whose items pair, and scores."""
    from crossed_rlvr.eval.ingest.common import given_policy
    from crossed_rlvr.eval.ingest.verl import import_verl_dump
    from crossed_rlvr.eval.score.scoring import score_files
    from crossed_rlvr.policies.loading import load_tokenizer
    from crossed_rlvr.records import write_responses

    tok = load_tokenizer(local["model"])
    val = pd.read_parquet(paper_gsm8k / "train" / "hash" / "s83" / "data" / "val.parquet")
    rows = []
    for k, (prompt, reward_model) in enumerate(zip(val["prompt"], val["reward_model"], strict=True)):
        text = tok.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
        ref = reward_model["ground_truth"]
        rows.append({"input": text, "output": f"So the answer is #### {ref}", "gts": ref, "score": 1.0, "step": 100,
                     "acc": 1.0, "is_weight": 1.0, "uid": f"{k:08x}_0_0"})  # v1: one key per sample
    dump = tmp_path / "validation" / "100.jsonl"
    dump.parent.mkdir()
    dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = import_verl_dump(dump, policy=given_policy("grpo-hash/s83", "hash", 83))
    cells = {r: {x["item_id"] for x in records if x["request"] == r} for r in ("hash", "boxed")}
    assert len(cells["hash"]) == len(cells["boxed"]) == N_VAL and cells["hash"] == cells["boxed"]
    out = tmp_path / "resp"
    out.mkdir()
    write_responses(out / "verl.jsonl", records)
    score_files([out], tmp_path / "scores.parquet")
    scores = pd.read_parquet(tmp_path / "scores.parquet")
    assert sorted(scores.groupby("request").size().to_dict().items()) == [("boxed", N_VAL), ("hash", N_VAL)]
    assert scores.loc[scores.request == "hash", "payload.hash"].all()


@pytest.mark.exclusive
def test_the_resume_preset_rehearses_on_the_cpu(local, tmp_path):
    """The gpu-smoke-resume preset (importance-weighted trainer from a strata file, offload, a checkpoint after every
    update) through verl's start-up on Ray up to NCCL, as gpu_smoke.sh's dry run does for it."""
    import shutil

    data = tmp_path / "data"
    data.mkdir()
    train, test = local["gsm8k"]
    shutil.copy(train, data / "train.jsonl")
    shutil.copy(test, data / "test.jsonl")
    shutil.copy(local["strata"], data / "strata.jsonl")
    # one arm: what differs from gpu-smoke's dry run (the boxed arm, above) is the preset, rehearsed on the hash arm
    proc = subprocess.run(["bash", "scripts/gpu_smoke.sh", str(local["model"]), str(data), str(tmp_path / "run"),
                           "arms.conventions=[hash]", "--preset", "gpu-smoke-resume", "--dry-run"],
                          capture_output=True, text=True, timeout=840,
                          check=False, cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("PASS rehearse") and "WorkerDict.actor_rollout_init_model" in proc.stdout
    overrides = (tmp_path / "run" / "train" / "hash" / "s83" / "verl_overrides.txt").read_text()
    assert "trainer.save_freq=1" in overrides and "actor_rollout_ref.actor.fsdp_config.param_offload=True" in overrides
    assert "optimizer_offload=True" in overrides and "save_contents=[model,optimizer,extra]" in overrides
    single = (tmp_path / "run" / "train" / "hash" / "s83" / "launch_single_node.sh").read_text()
    assert "--weighted" in single and "crossed_rlvr.train.checkpoints --merged" in single


def test_both_launch_scripts_ask_whether_the_arm_has_finished_before_anything_starts(paper_gsm8k):
    """The single-node and the SLURM script take the same first step: a finished arm (its merge verified and stamped
    with these settings) exits 0 before Ray or verl start, so a relaunch never resumes a step whose optimizer state
    went with the merge."""
    for text in arm_files(paper_gsm8k)[:2]:
        lines = text.splitlines()
        check = next(k for k, x in enumerate(lines) if "crossed_rlvr.train.checkpoints --finished" in x)
        assert lines[check].endswith("&& exit 0 || [ $? -eq 1 ]") and "/checkpoints/step-100 --trained-with " in lines[check]
        first_ray = next(k for k, x in enumerate(lines)
                         if not x.lstrip().startswith("#") and ("ray start" in x or "verl_launch" in x))
        assert check < first_ray


FAKE_LAUNCH = """#!/usr/bin/env bash
# a stand-in for verl: the first run saves step 1 and hangs (to be killed); a rerun resumes and finishes; a third
# run finds the finished arm and does nothing (the launch scripts' --finished check)
d=$(dirname "$0")/checkpoints; mkdir -p "$d"
if [ -f "$d/step-2/crossed_rlvr_arm.json" ]; then {finished}; fi
if [ ! -f "$d/latest_checkpointed_iteration.txt" ]; then
  echo $$ > "$d/../first.pid"; echo 1 > "$d/latest_checkpointed_iteration.txt"; mkdir -p "$d/../verl_metrics"
  sleep 0.5; echo '{"step": 1, "data": {"critic/rewards/mean": 0.25}}' > "$d/../verl_metrics/launch-1.jsonl"
  exec sleep 600
fi
{resume}echo "step:2 - crossed/is_weight_mean:1.013 - crossed/is_weight_max:2.0"
echo 2 > "$d/latest_checkpointed_iteration.txt"; mkdir -p "$d/step-2"; echo '{}' > "$d/step-2/crossed_rlvr_arm.json"
"""


@pytest.mark.parametrize("case", ["resumes", "no resume", "relaunch trains again"])
def test_the_resume_check_kills_after_the_first_save_and_relaunches(tmp_path, case):
    from types import SimpleNamespace

    from crossed_rlvr.study.smoke import resume_check

    arm = tmp_path / "train" / "hash" / "s83"
    arm.mkdir(parents=True)
    resume = 'echo "Resuming from $d/global_step_1, setting global step to 1"\n' if case != "no resume" else ""
    # without the finished check, verl would resume the last step, whose optimizer state the merge removed
    finished = ('echo "checkpoints: this arm has finished"; exit 0' if case != "relaunch trains again"
                else 'echo "FileNotFoundError: $d/global_step_2/actor/optim_world_size_1_rank_0.pt" >&2; exit 1')
    (arm / "launch_single_node.sh").write_text(FAKE_LAUNCH.replace("{resume}", resume).replace("{finished}", finished))
    study = SimpleNamespace(cfg=OmegaConf.create({"recipe": {"save_every": 1, "updates": 2, "proposal": {"enabled": True}}}),
                            prepare=lambda: {}, plans=[SimpleNamespace(name="grpo-hash/s83", layout=ArmLayout(arm))])
    if case == "resumes":
        said = resume_check(study, limit_s=60, poll_s=0.2)
        assert said == ("grpo-hash/s83 killed after its first update, resumed from global_step_1, finished; "
                        "importance weights logged; a relaunch did nothing")
        # killed only once step 1 was logged too: its metrics line would be lost with a kill between the two
        assert (arm / "verl_metrics" / "launch-1.jsonl").read_text().startswith('{"step": 1')
    else:
        match = "did not resume from global_step_1" if case == "no resume" else "finished arm did not stop at once"
        with pytest.raises(RuntimeError, match=match):
            resume_check(study, limit_s=60, poll_s=0.2)
    status = Path(f"/proc/{(arm / 'first.pid').read_text().strip()}/status")
    state = next((line.split()[1] for line in status.read_text().splitlines() if line.startswith("State:")), "gone") \
        if status.exists() else "gone"
    assert state in ("Z", "X", "gone"), state  # the first launch was killed with its session


def test_the_7b_preset_holds_the_papers_evaluation_and_bootstrap_settings(tmp_path):
    """Paper 001 App. B.2: GSM8K in vLLM batches of 16 at memory utilisation 0.8, bf16, T = 0.6, top-p = 0.95,
    640/4,096 tokens, item seeds 20260908 + i; the five-seed intervals from 20,000 draws with seed 20260913."""
    cfg = study_cfg(tmp_path, "experiment=qwen2.5-7b-gsm8k-crossed")
    e = cfg.eval
    assert (e.backend, e.dtype, e.batch_size, e.gpu_memory_utilization) == ("vllm", "bfloat16", 16, 0.8)
    assert (e.temperature, e.top_p, e.max_new_tokens, e.context_limit, e.base_seed) == (0.6, 0.95, 640, 4096,
                                                                                        20260908)
    assert (cfg.analysis.resamples, cfg.analysis.rng_seed) == (20000, 20260913)


def test_protocol_card_names_each_arms_frozen_rows(tmp_path):
    """The card states the split and the training rows (file and sha256) each trained policy used, read
    from the arm's own resolved config beside its checkpoint."""
    from crossed_rlvr.analysis.protocol import protocol_section, training_rows

    weights = {}
    for conv in ("hash", "boxed"):
        arm = tmp_path / "train" / conv / "s83"
        (arm / "checkpoints" / "step-100").mkdir(parents=True)
        (arm / "resolved_config.json").write_text(json.dumps({"task": {
            "name": "gsm8k", "train_rows": "/runs/p/data/train_rows.jsonl", "train_rows_sha256": "ab" * 32,
            "dev_items": 0}, "train_items": {"n": 7473}}))
        weights[f"grpo-{conv}/s83"] = {"path": str(arm / "checkpoints" / "step-100"), "weights_sha256": "c" * 64}
    rows = training_rows(weights)
    assert rows["grpo-hash/s83"]["sha256"] == "ab" * 32 and rows["grpo-boxed/s83"]["items"] == 7473
    card = {"policies": sorted(weights), "weights": weights, "tasks": {"gsm8k": 1319}, "items_sha256": {},
            "splits": {"gsm8k-test.jsonl": {"source": "gsm8k", "test": "hub", "train": "hub",
                                            "dev": {"n": 0, "seed": 20260919},
                                            "train_rows": {"file": "/runs/p/data/train_rows.jsonl",
                                                           "sha256": "ab" * 32}}},
            "training_rows": rows, "decoding": [], "training_seeds": [83], "generation_seeds": "x",
            "bootstrap": {"resamples": 20000, "rng_seed": 20260913}, "generation_machines": [],
            "analysis_machine": {}, "commit": "c", "responses_from_several_machines": False}
    text = protocol_section(card)
    assert "- **Split of `gsm8k-test.jsonl`**: gsm8k test from hub; training rows from " \
           "`/runs/p/data/train_rows.jsonl` (sha256 `abababababababab…`)" in text
    assert "- **Training rows**: `/runs/p/data/train_rows.jsonl` (sha256 `abababababababab…`), for 2 policies: " \
           "`grpo-boxed/s83`, `grpo-hash/s83`" in text


@pytest.mark.parametrize("preset, model, gpus", [("qwen2.5-1.5b-math-boxed", "qwen2.5-1.5b-instruct", 4),
                                                 ("qwen2.5-7b-math-boxed", "qwen2.5-7b-instruct", 4)])
def test_native_math_boxed_presets_prepare_with_the_papers_values(local, preset, model, gpus, monkeypatch):
    """App. D.3.1: boxed_math arms at seeds 83-85 on MATH's frozen train rows (MATH-500 held out), the recipe of
    the other arms, D.3.1's panel under the boxed request with 256 samples, B.4's MATH500 generation settings."""
    monkeypatch.setenv("WANDB_API_KEY", "preflight-only")
    run = local["tmp"] / preset
    cfg = study_cfg(run, f"experiment={preset}", "stages=prepare", f"model.path={local['model']}",
                    *task_overrides(local, "math500"))
    assert cfg.model.name == model and list(cfg.arms.conventions) == ["boxed_math"]
    assert list(cfg.arms.seeds) == [83, 84, 85] and cfg.engine.n_gpus_per_node == gpus
    assert (cfg.recipe.updates, cfg.recipe.lr, cfg.recipe.group_size) == (100, 1e-6, 8)
    assert list(cfg.evaluation.requests) == ["boxed"] and cfg.evaluation.samples == 256
    e = cfg.eval
    assert (e.max_new_tokens, e.context_limit, e.batch_size, e.gpu_memory_utilization, e.base_seed) == (
        8192, 12288, 32, 0.8, 20260909)
    summary = Study(cfg).prepare()
    assert sorted(summary["arms"]) == [f"grpo-boxed_math/s{s}" for s in (83, 84, 85)]
    frozen = run / "data" / "train_rows.jsonl"
    train = pd.read_parquet(run / "train" / "boxed_math" / "s83" / "data" / "train.parquet")
    assert {e["convention"] for e in train["extra_info"]} == {"boxed_math"}
    assert train["prompt"].map(lambda p: p[0]["content"]).str.endswith("within \\boxed{}.").all()
    task = json.loads((run / "train" / "boxed_math" / "s84" / "resolved_config.json").read_text())["task"]
    assert task["train_rows"] == str(frozen.resolve()) and len(frozen.read_text().splitlines()) == 120 - DEV
    plan = json.loads((run / "eval_plan.json").read_text())
    assert plan["responses"] == 4 * 1 * 40 * 256 and plan["requests"] == ["boxed"]


def test_code_transfer_preset_prepares_with_d3s_values(local, tmp_path, monkeypatch):
    """App. D.3: the GSM8K study's final arms and the initial policy on every HumanEval+ task (the shipped file,
    its sha256 in the plan) under both code requests, 200 samples each, B.4's decoding; nothing is trained."""
    from crossed_rlvr.tasks.code import HUMANEVAL_PLUS_SHA256

    monkeypatch.setenv("WANDB_API_KEY", "preflight-only")
    source = tmp_path / "gsm8k-study"
    cfg = study_cfg(tmp_path / "t", "experiment=qwen2.5-7b-code-transfer", "stages=prepare",
                    f"arms.from_run={source}", f"model.path={local['model']}")
    e = cfg.eval
    assert (e.temperature, e.top_p, e.max_new_tokens, e.base_seed) == (0.6, 0.95, 8192, 20260909)
    assert cfg.task.name == "humaneval_plus" and list(cfg.evaluation.requests) == ["fence", "begin_done"]
    summary = Study(cfg).prepare()
    assert sorted(summary["arms"]) == ["grpo-boxed/s83", "grpo-hash/s83"]
    plan = json.loads((tmp_path / "t" / "eval_plan.json").read_text())
    assert plan["dataset_sha256"] == HUMANEVAL_PLUS_SHA256 and plan["n_items"] == 164
    assert plan["responses"] == 3 * 2 * 164 * 200 and len(plan["tasks"]) == 164


def test_math500_transfer_preset_prepares_with_b4s_values(local, tmp_path, monkeypatch):
    """App. B.4: the GSM8K study's final hash and boxed arms (arms.kind=given, arms.from_run) and the initial policy
    on MATH-500 under both requests, one sample, 8,192/12,288 tokens, batch 32, seed 20260909 + i, 20,000
    resamples with seed 20260909; nothing is trained, and an absent checkpoint is named before anything runs."""
    monkeypatch.setenv("WANDB_API_KEY", "preflight-only")
    source = tmp_path / "gsm8k-study"
    cfg = study_cfg(tmp_path / "t", "experiment=qwen2.5-7b-math500-transfer", "stages=prepare", f"arms.from_run={source}",
                    f"model.path={local['model']}", *task_overrides(local, "math500", dev=False))
    e = cfg.eval
    assert cfg.arms.kind == "given" and list(cfg.arms.seeds) == [83] and cfg.model.name == "qwen2.5-7b-instruct"
    assert (e.max_new_tokens, e.context_limit, e.batch_size, e.gpu_memory_utilization, e.base_seed, e.temperature,
            e.top_p) == (8192, 12288, 32, 0.8, 20260909, 0.6, 0.95)
    assert (cfg.analysis.resamples, cfg.analysis.rng_seed, cfg.evaluation.samples) == (20000, 20260909, 1)
    summary = Study(cfg).prepare()
    want = {f"grpo-{c}/s83": str(source / "train" / c / "s83" / "checkpoints" / "step-100") for c in ("hash", "boxed")}
    assert {k: v["path"] for k, v in summary["arms"].items()} == want
    assert not any(v["exists"] for v in summary["arms"].values())
    plan = json.loads((tmp_path / "t" / "eval_plan.json").read_text())
    assert plan["responses"] == 3 * 2 * 40 and plan["task"] == "math500"
    assert plan["templates"]["original"]["first_item_seed"] == 20260909  # item 0 of MATH-500
    for c in ("hash", "boxed"):  # the checkpoints appear: now the arms stage takes them as they are
        Path(want[f"grpo-{c}/s83"]).mkdir(parents=True)
        (Path(want[f"grpo-{c}/s83"]) / "model.safetensors").write_bytes(b"w")
    run = Study(study_cfg(tmp_path / "t", "experiment=qwen2.5-7b-math500-transfer", f"arms.from_run={source}",
                          f"model.path={local['model']}", *task_overrides(local, "math500", dev=False)))
    arms = run.arms(Policy.initial(local["model"]))
    assert {a.name: a.path for a in arms} == want
    shutil.rmtree(want["grpo-boxed/s83"])
    with pytest.raises(ArmsNotTrained, match=r"arms.kind=given: no checkpoint at .*boxed/s83/checkpoints/step-100"):
        Study(study_cfg(tmp_path / "t2", "experiment=qwen2.5-7b-math500-transfer", f"arms.from_run={source}",
                        f"model.path={local['model']}", *task_overrides(local, "math500", dev=False))).arms(Policy.initial(local["model"]))
