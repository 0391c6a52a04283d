"""The memory and disk plan of a verl arm: the 7B preset fits 4 x 80 GB, is refused on one 141 GB
card with foreach AdamW and fits it with the fused step; a tiny model always fits; host memory counts verl's
processes beside the offloaded state."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module

from crossed_rlvr.train.memory import GIB, KNOWN_SHAPES, PlanError, check, plan


def preset(*overrides: str):
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_study",
                       overrides=["experiment=qwen2.5-7b-gsm8k-crossed", "run_dir=/tmp/unused", *overrides])


def test_parameter_counts_match_the_published_sizes():
    counts = {k: round(v.parameters() / 1e9, 2) for k, v in KNOWN_SHAPES.items()}
    assert counts["Qwen/Qwen2.5-7B-Instruct"] == 7.62 and counts["Qwen/Qwen2.5-1.5B-Instruct"] == 1.54
    assert KNOWN_SHAPES["HuggingFaceTB/SmolLM2-135M-Instruct"].parameters() == 134_515_008  # counted from the model


def test_7b_preset_fits_four_80gb_gpus():
    p = check(preset())
    n = 7_615_616_512
    assert p.gpus == 4 and p.params == n
    assert p.train["fp32 parameters (4 B, sharded)"] == pytest.approx(4 * n / 4 / GIB)
    assert 40 < p.train_peak < 50, p.table()  # the estimate: a ~45-50 GiB peak per GPU
    assert p.rollout_peak == pytest.approx(0.6 * 79.6 + 2.0)


def test_7b_on_one_h200_is_refused_with_foreach_and_fits_with_the_fused_step():
    one = ("engine.n_gpus_per_node=1", "engine.gpu_memory_gib=140.4")
    with pytest.raises(PlanError) as info:
        check(preset(*one))
    first = str(info.value).splitlines()[0]
    assert first.startswith("Qwen/Qwen2.5-7B-Instruct: the update needs 149.1 GiB") and "more than the 140.4 GiB" in first
    assert "fix: engine.fused_optimizer=true (fused AdamW: no step copy, -28.4 GiB per GPU)" in first
    assert "AdamW exp_avg + exp_avg_sq (8 B, sharded)" in str(info.value)  # the arithmetic is printed
    p = check(preset(*one, "engine.fused_optimizer=true"))
    assert p.train_peak == pytest.approx(113.5 + 5.3 + 2.0, abs=0.6), p.table()


def test_a_tiny_model_always_fits():
    from crossed_rlvr.train.memory import Shape

    tiny = Shape(vocab=64, hidden=128, layers=3, intermediate=384, heads=4, kv_heads=2, tied=True,
                 attention_bias=False)
    p = check(preset("engine.n_gpus_per_node=1", "engine.gpu_memory_gib=8"), tiny)
    assert p.fits() and p.train_peak < 3


def test_checkpoint_sizes_on_disk():
    p = plan(preset("recipe.save_every=10"))
    n = 7_615_616_512
    assert p.disk["checkpoint (weights + AdamW, 12 B per parameter)"] == pytest.approx(12 * n / 1e9)  # ~91 GB
    assert p.disk["during a save (the previous one kept until done)"] == pytest.approx(24 * n / 1e9)  # ~183 GB
    assert p.disk["kept after the merge (optimizer removed)"] == pytest.approx(8 * n / 1e9)
    kept = plan(preset("recipe.save_every=10", "recipe.keep_optimizer=true")).disk
    assert kept["kept after the merge"] == pytest.approx(16 * n / 1e9)


def test_the_study_refuses_an_arm_that_does_not_fit_before_any_stage(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.study.cli", "experiment=qwen2.5-7b-gsm8k-crossed",
                           "stages=prepare", f"run_dir={tmp_path}/run", "engine.n_gpus_per_node=1",
                           "engine.gpu_memory_gib=140.4"], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("crossed-study: Qwen/Qwen2.5-7B-Instruct: the update needs 149.1 GiB"), proc.stderr
    assert any("optimizer step copy (foreach: 4 B)" in line for line in lines)
    assert not (tmp_path / "run" / "arms").exists() and not (tmp_path / "run" / "train").exists()


@pytest.fixture(scope="module")
def merged_tiny(tmp_path_factory):
    from crossed_rlvr.policies.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("ckpt")
    model = build_tiny_model(root / "step-2")
    return root, model


def _shards(root):
    actor = root / "global_step_2" / "actor"
    actor.mkdir(parents=True, exist_ok=True)
    for name in ("model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt", "optim_world_size_2_rank_0.pt",
                 "optim_world_size_2_rank_1.pt", "extra_state_world_size_2_rank_0.pt", "fsdp_config.json"):
        (actor / name).write_bytes(b"x" * 16)
    return actor


def test_a_verified_merge_frees_the_optimizer_state_unless_kept(merged_tiny, capsys):
    from crossed_rlvr.train.checkpoints import main

    root, _ = merged_tiny
    actor = _shards(root)
    assert main(["--merged", str(root / "step-2"), "--shards", str(actor), "--keep-optimizer"]) == 0
    assert len(list(actor.glob("optim_*"))) == 2
    assert main(["--merged", str(root / "step-2"), "--shards", str(actor)]) == 0
    assert sorted(p.name for p in actor.iterdir()) == ["fsdp_config.json", "model_world_size_2_rank_0.pt",
                                                       "model_world_size_2_rank_1.pt"]
    assert "removed 3 optimizer/extra-state file(s)" in capsys.readouterr().out


def test_an_unverified_merge_removes_nothing(merged_tiny, tmp_path, capsys):
    import shutil

    from crossed_rlvr.train.checkpoints import main

    root, _ = merged_tiny
    broken = tmp_path / "step-2"
    shutil.copytree(root / "step-2", broken)
    for f in broken.glob("*.safetensors"):
        f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 3])  # a merge cut short
    actor = _shards(tmp_path)
    assert main(["--merged", str(broken), "--shards", str(actor)]) == 1
    assert "not a readable safetensors file" in capsys.readouterr().err
    assert len(list(actor.glob("optim_*"))) == 2
    (broken / "config.json").unlink()
    assert main(["--merged", str(broken), "--shards", str(actor)]) == 1
    assert len(list(actor.glob("optim_*"))) == 2


def processes_gib(p) -> float:
    """GiB of the plan's process lines (``<kind>: <count> x <MiB> MiB``)."""
    return sum(v for k, v in p.host.items() if k.endswith(" MiB"))


def test_host_memory_and_disk_of_the_7b_preset_are_planned():
    """Parameter and optimizer offload: 12 B per parameter pinned on the node, plus 4 B whole for the model load
    on rank 0 or a checkpoint save (~92 GB + ~30 GB), plus verl's processes; a save holds two resumable checkpoints
    (~183 GB)."""
    p = check(preset())
    n = p.params
    assert p.host_peak == pytest.approx(16 * n / GIB + processes_gib(p)) and 132 < p.host_peak < 134
    assert p.disk_peak == pytest.approx(2 * 12 * n / 1e9) and 182 < p.disk_peak < 184
    assert "host memory (per node)" in p.table() and "at the fullest" in p.table()
    two_nodes = check(preset("engine.nnodes=2", "engine.n_gpus_per_node=2"))
    # the offloaded shards split over the nodes
    assert two_nodes.host_peak == pytest.approx((6 + 4) * n / GIB + processes_gib(two_nodes))
    kept = check(preset("engine.optimizer_offload=false"))
    assert kept.host_peak == pytest.approx(8 * n / GIB + processes_gib(kept))


def test_one_h200_plans_each_kind_of_verl_process_in_host_memory():
    """On the one-H200 node every process verl starts beside its GPU worker is a line: its count as verl runs the
    arm times its measured resident memory (train/memory.py WORKER_MIB); the node's total is the real one."""
    from crossed_rlvr.train.memory import WORKER_MIB

    p = check(preset(*H200_NODE, "engine.fused_optimizer=true", "recipe.save_every=0"))
    counts = {k.split(": ")[0]: int(k.split(": ")[1].split(" x ")[0]) for k in p.host if k.endswith(" MiB")}
    assert counts == {"agent-loop workers": 8, "reward-loop workers": 8, "data-loader workers": 16,
                      "TransferQueue storage units": 2, "TransferQueue controller": 1, "task runner": 1,
                      "GPU workers' own imports": 1, "vLLM front ends": 1, "vLLM EngineCores": 1, "vLLM workers": 1,
                      "Ray's daemons": 1, "shared libraries (once)": 1}
    workers = sum(counts[k] * WORKER_MIB[k] for k in counts) * 2**20 / GIB
    assert workers == pytest.approx(13.7, abs=0.05)
    assert p.host_peak == pytest.approx(16 * p.params / GIB + workers) and 127.1 < p.host_peak < 127.3
    table = p.table()
    assert "    agent-loop workers: 8 x 473 MiB" in table and "    data-loader workers: 16 x 200 MiB" in table
    assert "127.2 GiB fits the declared 128 GiB" in table
    with pytest.raises(PlanError, match=r"verl's worker processes need 127.2 GiB on a node"):
        check(preset(*H200_NODE, "engine.fused_optimizer=true", "recipe.save_every=0", "engine.host_memory_gib=126"))


def test_the_planned_worker_counts_are_those_verls_composed_config_runs():
    """The counts the plan assumes are read back from verl's own config composed with the arm's overrides: verl's
    defaults on the GPU route, the CPU route's own (train/verl_cpu.py), the storage units the arm asks for."""
    from pathlib import Path

    from crossed_rlvr.layout import ArmLayout
    from crossed_rlvr.train import verl_cpu
    from crossed_rlvr.train.memory import CPU_WORKERS, VERL_WORKERS, plan
    from crossed_rlvr.train.translate import VerlArm, verl_overrides
    from crossed_rlvr.train.verl_engine import compose_verl

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_train", overrides=["tracking=off", "engine=verl", "recipe=paper",
                                                                "model=qwen2.5-7b-instruct", *H200_NODE])
    arm = verl_overrides(VerlArm.of(cfg, ArmLayout(Path("out")), "r.py"))
    for overrides, expected in ((arm, VERL_WORKERS), ([*arm, *verl_cpu.OVERRIDES], CPU_WORKERS)):
        composed = compose_verl(overrides)
        assert {"agent": composed.actor_rollout_ref.rollout.agent.num_workers, "reward": composed.reward.num_workers,
                "dataloader": composed.data.dataloader_num_workers} == expected
    units = compose_verl(arm).transfer_queue.backend.SimpleStorage.num_data_storage_units
    assert f"TransferQueue storage units: {units} x 272 MiB" in plan(cfg).host
    cpu = plan(preset(*H200_NODE, "engine.device=cpu")).host
    assert "agent-loop workers: 1 x 473 MiB" in cpu and not any(k.startswith("data-loader") for k in cpu)


def test_a_node_short_of_memory_or_disk_is_named_with_the_fix():
    from crossed_rlvr.train.memory import node_problem

    planned = {"host_peak_gib": 113.5, "disk_peak_gb": 182.8}
    assert node_problem(planned, 200.0, 500.0, 0.0, "/scratch") is None
    said = node_problem(planned, 100.0, 500.0, 0.0, "/scratch")
    assert said.startswith("host memory: the offloaded state, the model load (or a checkpoint save) and verl's worker "
                           "processes need 113.5 GiB on a node, and this node has 100.0 GiB available")
    assert "engine.optimizer_offload=false" in said
    said = node_problem(planned, 200.0, 120.0, 0.0, "/scratch")
    assert said.startswith("disk: the checkpoints need 182.8 GB more at their fullest (two at a save) and /scratch's "
                           "file system has 120.0 GB free") and "recipe.save_every=0" in said
    assert node_problem(planned, 200.0, 120.0, 91.4, "/scratch") is None  # a resume: one checkpoint is there already


def test_available_memory_is_read_from_meminfo(tmp_path):
    from crossed_rlvr.train.verl_launch import available_memory_gib

    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       263867260 kB\nMemFree:         1000000 kB\nMemAvailable:   104857600 kB\n")
    assert available_memory_gib(str(info)) == 100.0
    assert 0 < available_memory_gib() < float("inf")  # this machine's


# The lent 1 x H200 machine: one card of 139.8 GiB as torch reads it, 128 GiB of host memory, 64 GB of disk
H200_NODE = ("engine.n_gpus_per_node=1", "engine.gpu_memory_gib=139.8", "engine.host_memory_gib=128",
             "engine.disk_free_gb=64")


def test_a_declared_node_is_planned_for_the_cheapest_fix_first():
    """stages=prepare plans for the node declared in engine.*: its GPUs, its card, its host memory and its disk,
    each printed; refused with the fix that costs least: fused AdamW before a second GPU, then a model-only
    checkpoint where the disk is short."""
    with pytest.raises(PlanError) as info:
        check(preset(*H200_NODE))
    first = str(info.value).splitlines()[0]
    assert "more than the 139.8 GiB of engine.gpu_memory_gib; fix: engine.fused_optimizer=true" in first
    assert first.index("fused_optimizer") < first.index("engine.n_gpus_per_node=2")
    with pytest.raises(PlanError) as info:
        check(preset(*H200_NODE, "engine.fused_optimizer=true"))
    first = str(info.value).splitlines()[0]
    assert first.startswith("disk: the checkpoints need 182.8 GB more at their fullest (two at a save) and the "
                            "declared node has 64.0 GB free (engine.disk_free_gb); fix: recipe.save_every=0")
    p = check(preset(*H200_NODE, "engine.fused_optimizer=true", "recipe.save_every=0"))
    table = p.table()
    assert "  node: 1 x GPU of 139.8 GiB, 128 GiB host memory, 64 GB free disk" in table
    assert "fits the declared 128 GiB (checked again at launch)" in table and p.disk_peak < 64
    with pytest.raises(PlanError, match=r"need 127.2 GiB on a node, and the declared node has 100.0 GiB "
                                        r"\(engine.host_memory_gib\)"):
        check(preset(*H200_NODE, "engine.fused_optimizer=true", "recipe.save_every=0", "engine.host_memory_gib=100"))
    assert "host memory not declared, free disk not declared" in check(preset()).table()


def test_the_launch_plans_again_on_the_gpus_it_reads_from_a_device_table():
    """At launch the arm is planned again on the node's own cards (a fake device table here, as torch would read
    it): the prepared 4 x 80 GB plan fits 4 H100s, is refused on 4 A100s of 40 GB with the fixes, and one H200
    read at launch fits an arm prepared for it with the fused step."""
    from crossed_rlvr.conf.schema import StudyConf, conf_of
    from crossed_rlvr.train.memory import replan_problem

    def typed(*overrides: str) -> StudyConf:  # replan_problem takes the schema's dataclasses, as its callers type them
        return conf_of(StudyConf, preset(*overrides))

    cfg = typed()
    problem, said = replan_problem(cfg, [("NVIDIA H100 80GB HBM3", 79.2)] * 4)
    assert problem is None and said.startswith("memory plan on this node's 4 x NVIDIA H100 80GB HBM3 (79.2 GiB): update")
    problem, _ = replan_problem(cfg, [("NVIDIA A100-SXM4-40GB", 39.4)] * 4)
    assert problem.startswith("Qwen/Qwen2.5-7B-Instruct: the update needs 4")
    assert "more than the 39.4 GiB of this node's NVIDIA A100-SXM4-40GB; fix: " in problem
    assert problem.endswith("(prepare the arm again with it: crossed-study ... stages=prepare)")
    # the smallest card of the ones the arm uses counts; a fifth GPU it does not use is not read
    mixed = [("NVIDIA H100 80GB HBM3", 79.2)] * 3 + [("NVIDIA A100-SXM4-40GB", 39.4), ("NVIDIA H200", 139.8)]
    assert "39.4 GiB" in replan_problem(cfg, mixed)[1]
    h200 = typed("engine.n_gpus_per_node=1", "engine.gpu_memory_gib=139.8", "engine.fused_optimizer=true")
    problem, said = replan_problem(h200, [("NVIDIA H200", 139.8)])
    assert problem is None and "1 x NVIDIA H200 (139.8 GiB)" in said
    problem, _ = replan_problem(typed("engine.n_gpus_per_node=1", "engine.gpu_memory_gib=139.8"), [("NVIDIA H200", 139.8)])
    assert "fix: engine.fused_optimizer=true" in problem
    assert replan_problem(cfg, []) == (None, "no GPU read on this node: the plan is the prepared one")


def test_the_gpu_smokes_report_reads_the_gpu_without_a_cuda_context(monkeypatch, tmp_path):
    """The smoke's driver lives for the whole run: its GPU line comes from the device properties (train/memory.py
    gpu_table) and nvidia-smi, never from a call that creates a CUDA context on the card the workers need."""
    import types

    import torch

    from crossed_rlvr.study import smoke

    def creates_a_context(name: str):
        def call(*args, **kwargs):
            raise AssertionError(f"torch.cuda.{name} asks for a CUDA context")
        return call  # one function a name: torch's compiler keeps a rule per function object

    for name in ("mem_get_info", "init", "_lazy_init", "set_device", "current_device", "synchronize",
                 "memory_reserved", "memory_allocated", "empty_cache", "get_device_name"):
        monkeypatch.setattr(torch.cuda, name, creates_a_context(name))
    props = types.SimpleNamespace(name="NVIDIA H200", total_memory=int(139.8 * GIB))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    # the GPU extra's modules, stood in for: verl's import would build torch's compiler rules from the patched calls
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.24.0"))
    monkeypatch.setitem(sys.modules, "verl", types.SimpleNamespace())
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$3 $4" = "-i GPU-abc" ] && echo 120832\n')  # MiB free of the visible GPU
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc,GPU-def")
    assert smoke.gpu_report() == f"NVIDIA H200, 140 GiB (118 free), torch {torch.__version__}, vllm 0.24.0"
    monkeypatch.setenv("PATH", "/nonexistent")
    assert smoke.gpu_report().startswith("NVIDIA H200, 140 GiB (? free), torch ")
