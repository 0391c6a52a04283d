"""``crossed-audit``'s front door: its help shows the one-command example, and a command line it cannot run is
refused before any work in one line naming the key (exit 2); it is the one door for code tasks too (the presets
``code`` and ``d3``, a finished study's policies by ``from_study``). The audit itself runs in
tests/test_real_model.py (SmolLM2-135M-Instruct and two checkpoints trained in the suite)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

AUDIT = str(Path(sys.executable).parent / "crossed-audit")
ROOT = Path(__file__).resolve().parents[1]


def audit_cfg(*overrides: str):
    """The composed ``crossed_audit`` config with these overrides."""
    from hydra import compose, initialize_config_module

    from crossed_rlvr.command import spelled

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_audit", overrides=spelled("crossed-audit", list(overrides)))


def audit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([AUDIT, *args, f"run_dir={tmp_path / 'run'}"], capture_output=True, text=True,
                          timeout=120, check=False, cwd=tmp_path)


def test_help_shows_the_one_command_example():
    out = subprocess.run([AUDIT, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "crossed-audit initial=BASE hash=HASH_CKPT boxed=BOXED_CKPT task=gsm8k eval=vllm" in out
    assert "boxed=[SEED0_CKPT,SEED1_CKPT]" in out and "any convention's name" in out


@pytest.mark.parametrize(("args", "said"), [
    ((), "initial=PATH is required"),
    (("initial=MODEL", "boxed=/no/such/folder"), "boxed[0]=/no/such/folder: no such model folder"),
    (("initial=MODEL", "hash=[MODEL,/gone]"), "hash[1]=/gone: no such model folder"),
    (("initial=MODEL", "hash=MODEL", "task=humaneval_plus"),
     "hash=" + "MODEL: task=humaneval_plus takes policies trained to fence, begin_done"),
    (("initial=MODEL", "fence=MODEL"), "fence=MODEL: task=arith_tiny takes policies trained to hash, boxed"),
    (("initial=MODEL", "step=50"), "step=50: picks each arm's checkpoint of a study; give from_study=RUN_DIR"),
    (("from_study=MODEL", "preset=code"), "MODEL: no finished initial and arms stages"),
])
def test_a_command_line_it_cannot_run_is_refused_in_one_line(tmp_path, args, said):
    model = tmp_path / "model"
    model.mkdir()
    proc = audit(tmp_path, *(a.replace("MODEL", str(model)) for a in args))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    said = said.replace("MODEL", str(model))
    assert lines[-1].startswith("crossed-audit: ") and said in lines[-1], proc.stderr[-2000:]
    assert not (tmp_path / "run" / "eval").exists()  # refused before any work


def test_the_code_presets_hold_d3s_settings_and_the_code_evaluations_defaults(tmp_path):
    """``preset=d3`` is paper 001 App. D.3 with B.4's decoding (every HumanEval+ task, 200 samples under both code
    requests, T=0.6, top-p 0.95, 8,192 tokens, vLLM), the same D.3 values as the study's code-transfer preset;
    ``preset=code`` the CPU-sized evaluation. The command line still overrides a preset's value."""
    from crossed_rlvr.conf.schema import AuditConf, conf_of
    from crossed_rlvr.study.audit import study_config
    from crossed_rlvr.study.plan import Policy
    from tests.helpers import study_cfg

    given = conf_of(AuditConf, audit_cfg("preset=d3", f"initial={tmp_path}"))  # typed as the command's door types it
    d3 = study_config(given, Policy.initial(tmp_path))
    assert d3.task.name == "humaneval_plus" and d3.eval.backend == "vllm"
    assert (d3.evaluation.n_items, d3.evaluation.samples, list(d3.evaluation.requests),
            list(d3.evaluation.templates)) == (None, 200, ["fence", "begin_done"], ["original"])
    assert (d3.eval.temperature, d3.eval.top_p, d3.eval.max_new_tokens, d3.eval.context_limit) == (
        0.6, 0.95, 8192, 10240)
    study = study_cfg(tmp_path, "experiment=qwen2.5-7b-code-transfer")
    for key in ("task.name", "eval.backend", "evaluation.n_items", "evaluation.samples", "evaluation.requests",
                "evaluation.templates", "eval.temperature", "eval.top_p", "eval.max_new_tokens", "eval.context_limit"):
        assert _at(d3, key) == _at(study, key), key
    code = audit_cfg("preset=code", f"initial={tmp_path}", "evaluation.samples=2")
    assert (code.task.name, code.eval.backend, code.evaluation.n_items, code.evaluation.samples) == (
        "humaneval_plus", "hf", 40, 2)
    assert (code.eval.temperature, code.eval.max_new_tokens, code.eval.base_seed) == (0.8, 384, 0)
    assert audit_cfg("preset=d3", "task=mbpp_plus").task.name == "mbpp_plus"
    out = subprocess.run([AUDIT, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert re.search(r"preset:\n +code +Code tasks on the CPU", out) and "d3 " in out, out
    assert "crossed-audit preset=d3 from_study=RUN_DIR" in out


def _at(cfg, key: str):
    """A dotted key's value in a typed config or a composed node, lists as lists."""
    from functools import reduce

    from omegaconf import OmegaConf

    value = reduce(getattr, key.split("."), cfg)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else list(value) if isinstance(value, list) else value


def test_the_code_evaluation_has_one_front_door():
    """Code tasks run through crossed-audit: no second command keeps its own presets beside conf/."""
    old = ROOT / "crossed_rlvr" / "study" / "code_eval.py"
    if old.exists():
        text = old.read_text()
        assert len(text.splitlines()) <= 80 and not re.search(r"^[A-Z0-9_]+\s*=\s*\{", text, re.M)


def fake_study(root: Path) -> dict[str, Path]:
    """A finished study's stamps (initial and arms stages) over empty model folders: the hash and boxed arms of
    seed 83, each with checkpoints at updates 0, 50 and 100 (the last its final policy)."""
    from crossed_rlvr.files import atomic_write_json
    from crossed_rlvr.layout import ArmLayout, RunLayout
    from crossed_rlvr.study.plan import Policy
    from crossed_rlvr.study.stamps import Stamps

    run = RunLayout(root)
    run.initial.mkdir(parents=True)
    arms, folders = {}, {"initial": run.initial}
    for conv in ("hash", "boxed"):
        arm = ArmLayout(root / "train" / conv / "s83")
        arm.resolved_config.parent.mkdir(parents=True)
        arm.resolved_config.write_text("{}")  # what marks a folder as an arm's
        for step in (0, 50, 100):
            arm.checkpoint(step).mkdir(parents=True)
        policy = Policy.trained("grpo", conv, 83, arm.checkpoint(100))
        arms[policy.name] = policy.record()
        folders[policy.name] = arm.checkpoint(100)
    stamps = Stamps(root)
    run.stages.mkdir()
    atomic_write_json(stamps.path("initial"), {"info": {"path": str(run.initial)}})
    atomic_write_json(stamps.path("arms"), {"info": {"arms": arms}})
    return folders


def test_a_studys_policies_are_read_from_its_stamps(tmp_path):
    """What the arms stage recorded, not folder names: a folder named like an arm that the stage did not record is
    not one of the study's policies; ``step`` picks each arm's checkpoint at that update."""
    from crossed_rlvr.errors import CrossedError
    from crossed_rlvr.study.audit import study_policies

    with pytest.raises(CrossedError, match="no finished initial and arms stages"):
        study_policies(tmp_path)
    folders = fake_study(tmp_path)
    (tmp_path / "train" / "json" / "s83" / "checkpoints" / "step-100").mkdir(parents=True)
    assert study_policies(tmp_path) == {name: str(path) for name, path in folders.items()}
    assert study_policies(tmp_path, step=50)["grpo-hash/s83@step50"] == str(
        tmp_path / "train/hash/s83/checkpoints/step-50")
    with pytest.raises(CrossedError, match="grpo-boxed/s83 has no checkpoint at step 7"):
        study_policies(tmp_path, step=7)


def test_from_study_adds_a_finished_studys_policies_under_their_own_names(tmp_path):
    """``from_study``: the study's initial policy is the base and its arms are evaluated as they were recorded
    (method, convention, seed: no name parsed); ``step`` takes each arm's checkpoint at that update; policies given
    by convention join them; ``initial=`` takes the base's place."""
    from crossed_rlvr.conf.checks import check_command
    from crossed_rlvr.study.audit import given_policies

    folders = fake_study(tmp_path / "study")
    other = tmp_path / "mine"
    other.mkdir()
    cfg = audit_cfg(f"from_study={tmp_path / 'study'}", f"hash={other}", f"run_dir={tmp_path / 'run'}")
    check_command("crossed-audit", cfg)
    initial, arms = given_policies(cfg)
    assert (initial.name, initial.path) == ("initial", str(folders["initial"]))
    assert [(p.name, p.path, p.convention, p.seed, p.method) for p in arms] == [
        ("grpo-boxed/s83", str(folders["grpo-boxed/s83"]), "boxed", 83, "grpo"),
        ("grpo-hash/s83", str(folders["grpo-hash/s83"]), "hash", 83, "grpo"),
        ("given-hash/s0", str(other), "hash", 0, "given")]
    _, at_50 = given_policies(audit_cfg(f"from_study={tmp_path / 'study'}", "step=50"))
    assert [(p.name, Path(p.path).name, p.checkpoint, p.method) for p in at_50] == [
        ("grpo-boxed/s83@step50", "step-50", "step50", "grpo"), ("grpo-hash/s83@step50", "step-50", "step50", "grpo")]
    base, _ = given_policies(audit_cfg(f"from_study={tmp_path / 'study'}", f"initial={other}"))
    assert base.path == str(other)
