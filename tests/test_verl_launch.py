"""verl's overrides are built at the launch edge and never read back: a typed arm (train/translate.py ``VerlArm``:
its folder's layout and its settings) becomes override strings in one function, and the launch
(train/verl_launch.py) reads what it needs of its arm from verl's composed config, through the layout that spells
verl's own file names (ArmLayout.verl_latest, verl_shards)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.train.translate import VerlArm, verl_overrides

ROOT = Path(__file__).resolve().parents[1] / "crossed_rlvr"


def arm_cfg(*overrides: str) -> Any:
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_train", overrides=["tracking=off", "engine=verl", *overrides])


def composed_arm(arm: ArmLayout, *overrides: str) -> Any:
    """verl's config as the launch composes it for the arm at ``arm``."""
    from crossed_rlvr.train.verl_engine import compose_verl

    return compose_verl(verl_overrides(VerlArm.of(arm_cfg(*overrides), arm, "r.py")))


def test_the_launch_finds_its_arm_in_verls_composed_config(tmp_path):
    """The arm's folder, its verl tracker file and its metrics come from verl's config as verl will run it (no
    override split, no overrides file read): with the arm's own overrides file gone the launch finds the same arm;
    a launch by hand into verl's default folder, or a folder that is no arm's, has none."""
    from crossed_rlvr.train.verl_launch import launched_arm, metrics_file, resumed_actor

    arm = ArmLayout(tmp_path / "train" / "hash" / "s83")
    composed = composed_arm(arm)
    assert not arm.verl_overrides.exists()  # nothing on disk names the arm: verl's config does
    assert launched_arm(composed) == arm
    path = Path(metrics_file(arm, composed))
    assert path.parent == arm.verl_metrics and path.parent.is_dir() and path.name.startswith("launch-")
    assert resumed_actor(arm, composed.trainer) is None  # no tracker file: verl trains from scratch
    arm.verl_latest.parent.mkdir(parents=True)
    arm.verl_latest.write_text("2\n")
    assert resumed_actor(arm, composed.trainer) == (2, arm.verl_shards(2))
    by_hand = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path / "ckpts"), "logger": ["file"]}})
    assert launched_arm(by_hand) is None and metrics_file(None, by_hand) is None
    from crossed_rlvr.train.verl_engine import compose_verl

    assert launched_arm(compose_verl([])) is None  # verl's own default folder (checkpoints/<project>/<name>)


def test_the_preflight_refuses_a_step_without_optimizer_state_in_the_arm_verl_names(tmp_path, monkeypatch, capsys):
    """A resumable arm whose latest step lost its optimizer state after its merge: the launch, given only verl's
    overrides, names the step's folder and the arm's merged model (both from the layout) before Ray starts."""
    from crossed_rlvr.train import verl_launch

    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", verl_launch.PLUGINS)  # run() sets it for verl: put back after
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "local")
    monkeypatch.setattr(verl_launch, "gpu_problem", lambda: None)  # as on a GPU node: the next checks speak
    monkeypatch.setattr(verl_launch, "launch_problem", lambda composed: None)
    monkeypatch.setattr(verl_launch, "check_nodes", lambda budget, offered: None)
    arm = ArmLayout(tmp_path / "arm")
    overrides = verl_overrides(VerlArm.of(arm_cfg("recipe.updates=4", "recipe.save_every=2"), arm, "r.py"))
    arm.verl_shards(2).mkdir(parents=True)
    arm.verl_latest.write_text("2")
    assert verl_launch.run(overrides, False, None, 10, True) == 2
    out = capsys.readouterr().out
    assert f"PREFLIGHT FAILED: {arm.verl_shards(2)} has no optimizer state" in out
    assert f"Its merged model is {arm.checkpoint(2)}" in out


def string_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant and f-string template of a module, its docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    inner = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            found.append((node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs | inner:
            found.append((node.lineno, node.value))
    return found


def test_verls_checkpoint_file_names_are_spelled_in_the_layout_only():
    """verl's tracker file and step folders (``latest_checkpointed_iteration.txt``, ``global_step_<N>``) are named in
    layout.py and asked of ArmLayout everywhere else; a message (a sentence) may mention them."""
    found = [f"{p.relative_to(ROOT)}:{line}: {text!r}" for p in sorted(ROOT.rglob("*.py")) if p.name != "layout.py"
             for line, text in string_literals(p)
             if ("latest_checkpointed_iteration" in text or "global_step_" in text) and " " not in text]
    assert found == []


def test_nothing_in_the_package_splits_an_override_string():
    """Override strings are written (train/translate.py) and handed to verl, never parsed back into settings: the
    launch and the translation tests read verl's composed config instead."""
    from crossed_rlvr.train import verl_launch

    found = []
    for path in sorted((ROOT / "train").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split" \
                    and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "=":
                found.append(f"{path.name}:{node.lineno}")
    assert found == [] and not hasattr(verl_launch, "given_keys")
