"""One-GPU smoke test of the whole GPU path (``scripts/gpu_smoke.sh``), for the first hour on a cluster.

    scripts/gpu_smoke.sh MODEL_DIR DATA_DIR [RUN_DIR] [hydra overrides ...]
    scripts/gpu_smoke.sh MODEL_DIR DATA_DIR RUN_DIR --preset gpu-smoke-resume --resume-check

``MODEL_DIR`` is a small instruct model in Hugging Face layout; ``DATA_DIR`` holds GSM8K's
``train.jsonl`` and ``test.jsonl`` (JSON Lines or Parquet with ``question`` and ``answer``). It runs
``experiment=gpu-smoke``: the dress rehearsal (data, verl overrides checked by verl, launch scripts,
evaluation plan), the launch rehearsal (each arm's launch script through verl's start-up on Ray with
no GPU visible, up to its first CUDA need: train/rehearsal.py), 2 GRPO updates per arm through verl, the FSDP->HF merge, crossed evaluation with
vLLM, scoring and analysis. One PASS/FAIL line per stage; the first failure exits non-zero.
``--preset gpu-smoke-resume --resume-check`` runs the 7B path's moving parts instead (the importance-weighted
trainer with a strata file ``DATA_DIR/strata.jsonl``, offload, a checkpoint after every update) and kills the
first arm after its first update, then relaunches it (``resume_check``). Nothing needs the network when the
model and data are local. ``--dry-run`` stops after the rehearsal
(it runs on a machine without a GPU; the test suite runs it).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.layout import ArmLayout, RunLayout

if TYPE_CHECKING:
    from crossed_rlvr.study.pipeline import Study
    from crossed_rlvr.study.plan import Policy


class SmokeDataMissing(CrossedError, FileNotFoundError):
    """The data folder lacks GSM8K's train or test rows."""


def smoke_config(model: str, data: str, run_dir: str, overrides: list[str], preset: str = "gpu-smoke") -> Any:
    from hydra import compose, initialize_config_module

    data_dir = Path(data)
    found = {split: next((p for p in (data_dir / f"{split}.jsonl", data_dir / f"{split}.parquet") if p.exists()),
                         None) for split in ("train", "test")}
    files = {s: p for s, p in found.items() if p is not None}
    missing = [s for s in found if s not in files]
    if missing:
        raise SmokeDataMissing(f"{data_dir} has no {' or '.join(missing)}.jsonl/.parquet (GSM8K rows with "
                               "question and answer)")
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        # the proposal's strata, when the data folder has them: named as a study names its own (RunLayout.strata)
        strata = data_dir / RunLayout(data_dir).strata.name
        extra = [f"recipe.proposal.strata_file={strata.resolve()}"] if strata.exists() else []
        return compose(config_name="crossed_study", overrides=[
            f"experiment={preset}", f"model.path={Path(model).resolve()}", f"task.path={files['test'].resolve()}",
            f"task.train_path={files['train'].resolve()}", f"run_dir={run_dir}", *extra, *overrides])


def check_merged(arms: list[Policy]) -> str:
    """Every arm's final checkpoint is a Hugging Face directory that transformers loads."""
    from transformers import AutoConfig, AutoTokenizer

    for arm in arms:
        path = Path(arm.path)
        weights = list(path.glob("*.safetensors")) + list(path.glob("*.bin"))
        if not weights:
            raise RuntimeError(f"{arm.name}: no weights in {path} (did the FSDP->HF merge run?)")
        AutoConfig.from_pretrained(path)
        AutoTokenizer.from_pretrained(path)
    return f"{len(arms)} merged checkpoints load"


def resume_check(study: Study, limit_s: float = 3600.0, poll_s: float = 5.0) -> str:
    """The study's first arm through ``resume_arm``. Needs ``recipe.save_every`` >= 1 (gpu-smoke-resume)."""
    if int(study.cfg.recipe.save_every or 0) < 1:
        raise RuntimeError("the resume check needs recipe.save_every >= 1 (use --preset gpu-smoke-resume)")
    study.prepare()
    plan = sorted(study.plans, key=lambda p: p.name)[0]
    return resume_arm(plan.name, plan.layout.root, int(study.cfg.recipe.updates), bool(study.cfg.recipe.proposal.enabled),
                      limit_s, poll_s)


def first_update_done(run_dir: Path) -> bool:
    """The arm's step-1 checkpoint is complete and its metrics are logged. verl writes the tracker file after the
    step's files, and logs the step after its checkpoint and validation: killed before that line, a resumed launch
    (which starts at step 2) would never log step 1."""
    from crossed_rlvr.train.verl_launch import read_metrics

    latest = ArmLayout(run_dir).verl_latest
    return latest.exists() and latest.read_text().strip() == "1" and \
        any(r["step"] == 1 and "critic/rewards/mean" in r for r in read_metrics(run_dir))


def launch_until_first_update(name: str, run_dir: Path, log_path: Path, limit_s: float = 3600.0,
                              poll_s: float = 5.0) -> None:
    """An arm's launch script, killed (its whole process group, Ray's daemons included) once its first update is
    complete, as a preempted job would be."""
    import os
    import subprocess

    from crossed_rlvr.train.rehearsal import TAG, kill_group

    arm = ArmLayout(run_dir)
    tag = f"resume-{os.getpid()}-{time.monotonic_ns()}"  # every process of the launch, Ray's daemons too
    env = {**os.environ, "VERL_LOGGING_LEVEL": "INFO", TAG: tag}  # verl's v1 trainer says it resumes at INFO
    with log_path.open("w") as log:
        first = subprocess.Popen(["bash", str(arm.launch_single_node)], stdout=log, stderr=subprocess.STDOUT,
                                 env=env, start_new_session=True)
        start = time.monotonic()
        try:
            while not first_update_done(run_dir):
                if first.poll() is not None:
                    raise RuntimeError(f"{name}: the launch ended (exit {first.returncode}) before its step-1 "
                                       f"checkpoint; see {log_path}")
                if time.monotonic() - start > limit_s:
                    raise RuntimeError(f"{name}: no step-1 checkpoint within {limit_s:g} s")
                time.sleep(poll_s)
        finally:
            kill_group(first.pid, tag)


def resume_arm(name: str, run_dir: Path, updates: int, weighted: bool, limit_s: float = 3600.0,
               poll_s: float = 5.0, after_kill: Callable[[], None] | None = None,
               while_resuming: Callable[[], None] | None = None) -> str:
    """An arm's launch script, killed once its first update is complete (its resumable checkpoint and its logged
    metrics), then run again: it must resume from step 1 (verl: "Resuming from .../global_step_1"), finish (merge,
    check, optimizer state removed) and, importance-weighted, log the weights (``crossed/is_weight_mean``); run a
    third time, it must do nothing and say the arm has finished (a relaunch never resumes a step whose optimizer
    state is gone). The logs stay beside the arm: ``resume_first.log``, ``resume_second.log``, ``resume_third.log``.
    ``after_kill`` runs between the kill and the relaunch, ``while_resuming`` at every poll of the relaunch (a
    check may look at the disk as the relaunch saves). ``gpu_smoke.sh --resume-check`` and the suite's verl-on-CPU
    test both take this route."""
    import os
    import subprocess

    arm = ArmLayout(run_dir)
    script, latest = arm.launch_single_node, arm.verl_latest
    launch_until_first_update(name, run_dir, arm.resume_log("first"), limit_s, poll_s)
    if after_kill is not None:
        after_kill()
    env = {**os.environ, "VERL_LOGGING_LEVEL": "INFO"}
    with arm.resume_log("second").open("w") as log:
        second = subprocess.Popen(["bash", str(script)], stdout=log, stderr=subprocess.STDOUT, env=env)
        start = time.monotonic()
        while second.poll() is None:
            if while_resuming is not None:
                while_resuming()
            if time.monotonic() - start > limit_s:
                second.kill()
                raise RuntimeError(f"{name}: the relaunch did not end within {limit_s:g} s")
            time.sleep(min(poll_s, 0.25) if while_resuming is not None else poll_s)
    text = arm.resume_log("second").read_text(errors="replace")
    if second.returncode != 0:
        raise RuntimeError(f"{name}: the relaunch failed (exit {second.returncode}); see {arm.resume_log('second')}")
    step_one = arm.verl_shards(1).parent.name  # verl's folder of update 1, as verl names it in its log
    if "Resuming from" not in text or step_one not in text:
        raise RuntimeError(f"{name}: the relaunch did not resume from {step_one} (no 'Resuming from ...{step_one}' "
                           f"in {arm.resume_log('second')})")
    if weighted and "crossed/is_weight_mean" not in text:
        raise RuntimeError(f"{name}: the relaunch logged no importance weights (crossed/is_weight_mean)")
    if latest.read_text().strip() != str(updates):
        raise RuntimeError(f"{name}: the relaunch ended at step {latest.read_text().strip()}, not {updates}")
    third = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=600, check=False)
    arm.resume_log("third").write_text(third.stdout + third.stderr)
    if third.returncode != 0 or "this arm has finished" not in third.stdout:
        raise RuntimeError(f"{name}: a relaunch of the finished arm did not stop at once (exit {third.returncode}); "
                           f"see {arm.resume_log('third')}")
    return (f"{name} killed after its first update, resumed from {step_one}, finished; "
            + ("importance weights logged; " if weighted else "") + "a relaunch did nothing")


def rehearsed(summary: dict[str, Any]) -> str:
    reached = {r["reached"].split(":")[0] for r in summary["rehearsal"].values()}
    seconds = max((r["seconds"] for r in summary["rehearsal"].values()), default=0)
    return (f"{summary['responses_planned']} responses planned; {len(summary['rehearsal'])} arm(s) started through "
            f"verl on Ray up to {', '.join(sorted(reached))} (slowest {seconds:.0f} s)")


def free_gib(device: str | None = None) -> float | None:
    """Free memory of one GPU from nvidia-smi, which asks the driver without a CUDA context (None: no answer).
    ``device``: torch's device 0, the first of ``CUDA_VISIBLE_DEVICES`` (an index or a UUID, as nvidia-smi takes)."""
    import os
    import shutil
    import subprocess

    device = device or (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", device],
                             capture_output=True, text=True, timeout=20, check=False)
        return float(out.stdout.split()[0]) / 1024 if out.returncode == 0 else None  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def gpu_report() -> str:
    """The GPU the smoke runs on, read without a CUDA context (train/memory.py: gpu_table, and nvidia-smi): this
    driver lives for the whole run, and a context would hold ~0.3-0.5 GiB of the card the training workers need."""
    import torch

    from crossed_rlvr.train.memory import gpu_table
    from crossed_rlvr.train.verl_launch import gpu_problem

    if not torch.cuda.is_available():
        raise RuntimeError(f"no GPU visible: {gpu_problem()}")
    import verl  # noqa: F401  (the gpu extra)
    import vllm

    name, total = gpu_table()[0]
    free = free_gib()
    return (f"{name}, {total:.0f} GiB ({'?' if free is None else f'{free:.0f}'} free), torch {torch.__version__}, "
            f"vllm {vllm.__version__}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_smoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="local model directory (Hugging Face layout)")
    parser.add_argument("data", help="folder with GSM8K train.jsonl and test.jsonl")
    parser.add_argument("run_dir", nargs="?", default="runs/gpu-smoke")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (e.g. engine.n_gpus_per_node=2)")
    parser.add_argument("--dry-run", action="store_true", help="stop after the rehearsal (no GPU needed)")
    parser.add_argument("--preset", choices=["gpu-smoke", "gpu-smoke-resume"], default="gpu-smoke")
    parser.add_argument("--resume-check", action="store_true",
                        help="kill the first arm after its first save and relaunch it (gpu-smoke-resume)")
    args = parser.parse_args(argv)

    from crossed_rlvr.study.pipeline import Study

    study = Study(smoke_config(args.model, args.data, args.run_dir, args.overrides, args.preset))
    state: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], str]]] = [("rehearse", lambda: rehearsed(study.rehearse()))]
    if not args.dry_run:
        steps = [("gpu", gpu_report), *steps,
                 ("initial", lambda: state.setdefault("initial", study.initial()).path),
                 *([("resume", lambda: resume_check(study))] if args.resume_check else []),
                 ("train", lambda: f"{len(state.setdefault('arms', study.arms(state['initial'])))} arms"),
                 ("merge", lambda: check_merged(state["arms"])),
                 ("eval", lambda: f"{study.evaluate(state['initial'], state['arms'])['cells']} cells"),
                 ("score", lambda: study.score()["scores"]),
                 ("analyze", lambda: study.analyze(state["arms"])["report"])]
    return run_steps(steps)


def run_steps(steps: list[tuple[str, Callable[[], str]]]) -> int:
    """One PASS or FAIL line per step, in order; the first failure ends the smoke with 1. A step's failure is any
    error it raises (a check's RuntimeError, a stage's CrossedError, the arms' ArmsNotMatched), said with its
    traceback on stderr; an interrupt or an exit is no step's failure and ends the smoke as it is."""
    for name, step in steps:
        start = time.perf_counter()
        try:
            detail = step()
        except Exception as err:  # noqa: BLE001  (every error of a step is its FAIL line)
            print(f"FAIL {name} ({time.perf_counter() - start:.0f} s): {type(err).__name__}: {err}", flush=True)
            traceback.print_exc(file=sys.stderr)
            return 1
        print(f"PASS {name} ({time.perf_counter() - start:.0f} s): {detail}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
