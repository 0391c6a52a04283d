"""The study's stages hand each other typed objects (study/plan.py: ``Policy``, ``ArmPlan``; the config typed by its
schema, ``StudyConf``), each command types its config once at its door (``conf.schema.conf_of``; crossed-train's
trainer takes only a ``CheckedTrainConf``), and a type checker holds them to it: mypy, pinned in the dev
dependencies, over the whole package. A stage that passed a dict where a policy is expected, asked the config for a
key its schema lacks, or trained on an unchecked config fails here; a default restated where a config is read
(``.get(key, default)``) and a parameter typed ``Any`` without its reason fail the scans below."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def mypy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", *args], check=False, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def test_the_whole_package_type_checks(cache: Path):
    """Every module of the package holds to its types: pyproject.toml's ``[tool.mypy]`` names the package whole."""
    import tomllib

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"] == ["crossed_rlvr"]
    run = mypy("--cache-dir", str(cache))
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_checker_sees_a_dict_passed_for_a_policy(tmp_path: Path, cache: Path):
    """The check has teeth: a stage that hands the evaluation a stamp's dict instead of the policies fails."""
    bad = tmp_path / "bad_stage.py"
    bad.write_text("from crossed_rlvr.study.configs import StudyConfigs\nfrom crossed_rlvr.study.plan import Policy\n\n\n"
                   "def evaluate(configs: StudyConfigs, initial: Policy) -> None:\n"
                   "    configs.evaluation(initial, {'arms': {}})\n\n\n"
                   "def threads(configs: StudyConfigs) -> object:\n"
                   "    return configs.cfg.arms.thread_count\n")
    run = mypy("--cache-dir", str(cache), str(bad))
    assert run.returncode == 1
    assert 'Argument 2 to "evaluation" of "StudyConfigs" has incompatible type' in run.stdout, run.stdout
    assert '"ArmsConf" has no attribute "thread_count"' in run.stdout, run.stdout


def test_the_trainer_takes_only_a_checked_config(tmp_path: Path, cache: Path):
    """A crossed-train config reaches the trainer only through the checks: ``run_train`` takes a
    ``CheckedTrainConf``, which the checks make, so a config typed but never checked is refused by the checker."""
    snippet = tmp_path / "train_door.py"
    snippet.write_text("from crossed_rlvr.train.checks import checked_train\n"
                       "from crossed_rlvr.conf.schema import TrainConf, conf_of\n"
                       "from crossed_rlvr.train.run import run_train\n\n\n"
                       "def unchecked(cfg: object) -> None:\n"
                       "    run_train(conf_of(TrainConf, cfg))\n\n\n"
                       "def checked(cfg: object) -> None:\n"
                       "    run_train(checked_train(cfg))\n")
    run = mypy("--cache-dir", str(cache), str(snippet))
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, run.stdout
    assert 'Argument 1 to "run_train" has incompatible type "TrainConf"; expected "CheckedTrainConf"' in errors[0]


def schema_defaults() -> dict[str, list[object]]:
    """Every schema field's name with its default values (a name several schemas share has several)."""
    import dataclasses

    from omegaconf import MISSING

    import crossed_rlvr.conf.schema as schema

    out: dict[str, list[object]] = {}
    for cls in vars(schema).values():
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            for f in dataclasses.fields(cls):
                value = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
                if value is not dataclasses.MISSING and value is not MISSING and not dataclasses.is_dataclass(value):
                    out.setdefault(f.name, []).append(value)
    return out


# ``.get`` calls on data rows, not configs, whose keys happen to share a schema field's name and default
DATA_GETS = {("sft/trainer.py", "row"), ("train/verl_vllm.py", "params")}


def test_no_config_default_is_restated_where_it_is_read():
    """Defaults live in the schema: no ``cfg.x.get("key", default)`` repeats a schema field's default where the
    config is read (a typed config is read by attribute, and the schema's default changes in one place)."""
    defaults = schema_defaults()
    found = []
    package = ROOT / "crossed_rlvr"
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package))
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in defaults):
                continue
            if (where, ast.unparse(node.func.value)) in DATA_GETS:
                continue
            try:
                given = ast.literal_eval(node.args[1])
            except ValueError:
                continue
            if any(given == d and isinstance(given, bool) == isinstance(d, bool) for d in defaults[node.args[0].value]):
                found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def test_no_study_function_takes_the_config_untyped():
    """A study function's config parameter is typed by its schema (``StudyConf``, one of its parts), not ``Any``."""
    found = []
    for path in sorted((ROOT / "crossed_rlvr" / "study").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for a in node.args.args + node.args.kwonlyargs:
                    if a.arg in ("cfg", "study", "initial", "arms", "analysis", "ds") and a.annotation is not None \
                            and ast.unparse(a.annotation) == "Any":
                        found.append(f"{path.name}:{node.lineno} {node.name}({a.arg}: Any)")
    assert found == []


ANY_LIMIT = 20  # parameters typed ``Any`` in the whole package, each one saying why on its own line


def any_parameters(package: Path) -> list[tuple[str, int, str, str]]:
    """(file, line, parameter, that line's text) for each parameter annotated ``Any`` (alone or ``Any | None``) and
    each parameter left unannotated (an implicit ``Any``: ``*args``/``**kwargs`` too), ``self``/``cls`` aside;
    ``*args``/``**kwargs: Any`` apart (the idiom for passing arguments through)."""
    from tests.helpers import code_metrics as code_metrics_module

    code_metrics = code_metrics_module()
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for fn, bound in code_metrics.functions(ast.parse(text)):
            a = fn.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            if bound and params:
                params = params[1:]  # self / cls
            variadic = [p for p in (a.vararg, a.kwarg) if p is not None and p.annotation is None]
            for p in [*params, *variadic]:
                if p.annotation is None or code_metrics.is_any(p.annotation):
                    found.append((str(path.relative_to(package.parent)), p.lineno, p.arg, lines[p.lineno - 1]))
    return sorted(found)


def test_few_parameters_are_typed_any_and_each_says_why():
    """A parameter is typed by what it takes (a schema dataclass, a path, a tokenizer, ``object`` for a value only
    inspected): ``Any`` is left only where nothing narrower is true (a third party's untyped object), at most
    ``ANY_LIMIT`` of them, each with ``# Any: why`` on the parameter's own line."""
    found = any_parameters(ROOT / "crossed_rlvr")
    silent = [f"{where}:{line} {name}" for where, line, name, text in found if "# Any:" not in text]
    assert silent == [], "an Any parameter without '# Any: why' on its line"
    assert len(found) <= ANY_LIMIT, [f"{where}:{line} {name}" for where, line, name, _ in found]


def test_the_any_rule_sees_a_silent_any(tmp_path: Path):
    """The rule has teeth: a parameter typed ``Any`` with no reason on its line is found, one with a reason is
    counted but passes; an unannotated parameter (``**kwargs`` too) is an ``Any`` without a reason, a method's
    ``self`` is not counted."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("from typing import Any\n\n\ndef f(a: Any, b: int,\n      c: Any | None = None,  # Any: "
                              "a third party's object\n      *rest: Any) -> None: ...\n\n\n"
                              "class K:\n    def g(self, d, e: int = 0, **kw) -> None: ...\n")
    found = any_parameters(pkg)
    assert [(line, name, "# Any:" in text) for _, line, name, text in found] == [
        (4, "a", False), (5, "c", True), (10, "d", False), (10, "kw", False)]


class _Stop(Exception):
    """Raised by a stand-in for a command's first stage, once it has seen the config the door handed it."""


@pytest.mark.parametrize(("command", "module", "stage", "args"), [
    ("crossed-study", "crossed_rlvr.study.cli", "crossed_rlvr.study.pipeline.Study", ["experiment=tiny"]),
    ("crossed-audit", "crossed_rlvr.study.audit", "crossed_rlvr.study.audit.Audit", ["initial=HF/none"]),
    ("crossed-eval", "crossed_rlvr.eval.generate.cli", "crossed_rlvr.eval.generate.cli.run_eval", []),
])
def test_each_command_hands_its_stages_the_schemas_dataclasses(command, module, stage, args, tmp_path, monkeypatch):
    """Hydra's config is typed once where the command starts: the study, the audit and the evaluation receive the
    schema's own dataclasses (``StudyConf``, ``AuditConf``, ``EvalCommandConf``), not an OmegaConf node that only
    claims the type."""
    import importlib
    from unittest import mock

    from omegaconf import OmegaConf

    seen: list[object] = []

    def stand_in(cfg: object, *rest: object, **named: object) -> None:
        seen.append(cfg)
        raise _Stop

    monkeypatch.setattr(sys, "argv", [command, f"run_dir={tmp_path / 'run'}", *args])
    monkeypatch.chdir(tmp_path)
    with mock.patch(stage, side_effect=stand_in), pytest.raises((_Stop, SystemExit)):
        importlib.import_module(module).main()
    assert len(seen) == 1, seen
    typed = seen[0]
    assert type(typed).__name__ == {"crossed-study": "StudyConf", "crossed-audit": "AuditConf",
                                    "crossed-eval": "EvalCommandConf"}[command]
    assert not OmegaConf.is_config(typed)


# Config nodes below the doors (outside study/ and conf/), each with why it stays: a command's Hydra entry point
# receives Hydra's node and types it there (``conf_of``), and crossed-eval's runner and Ray workers still take a node
# (their signatures belong to the evaluation's own code). verl's composed config is verl's, not ours: it is named
# only through ``train/budget.py``'s ``VerlConfig`` alias, a string the scan does not count.
CONFIG_NODES_ALLOWED = {
    "crossed_rlvr/train/cli.py": {"DictConfig": 1},  # crossed-train's door: _run(cfg: DictConfig)
    "crossed_rlvr/sft/cli.py": {"DictConfig": 1},  # crossed-sft's door
    "crossed_rlvr/eval/generate/cli.py": {"DictConfig": 2},  # crossed-eval's door and its device check there
    "crossed_rlvr/eval/generate/runner.py": {"DictConfig": 1},  # run_eval: the command's door for Python callers
}


def config_nodes(package: Path) -> dict[str, dict[str, int]]:
    """Uses of an OmegaConf node below the doors, per file and kind, counted from the AST as
    scripts/code_metrics.py counts them (``DictConfig`` named, ``OmegaConf.create/merge/structured``,
    ``OmegaConf.to_container``, ``plain()``)."""
    from tests.helpers import code_metrics as code_metrics_module

    found: dict[str, dict[str, int]] = {}
    for item in code_metrics_module().measure(package).items.get("config", []):
        where, kind = item.split(" ", 1)
        path = where.rsplit(":", 1)[0]
        found.setdefault(path, {}).setdefault(kind, 0)
        found[path][kind] += 1
    return found


def test_stages_below_the_doors_take_the_schemas_dataclasses_not_config_nodes():
    """Each command types its config once at its door; every stage, trainer, translator, engine and task builder below
    takes the schema's dataclasses: no config node is named or made there outside the allow-list (a typed config
    changed by ``dataclasses.replace``, not rebuilt as a node)."""
    found = config_nodes(ROOT / "crossed_rlvr")
    over = {f"{path} {kind}: {n}": CONFIG_NODES_ALLOWED.get(path, {}).get(kind, 0)
            for path, kinds in found.items() for kind, n in kinds.items()
            if n > CONFIG_NODES_ALLOWED.get(path, {}).get(kind, 0)}
    assert over == {}, "config nodes below the doors (found: allowed)"
    assert found == CONFIG_NODES_ALLOWED, "the allow-list names only what is there (a use removed leaves its entry)"


def test_the_config_node_scan_sees_a_node_made_below_a_door(tmp_path: Path):
    """The scan has teeth: a task builder that rebuilds its config as a node is counted, the study's own uses are not."""
    pkg = tmp_path / "crossed_rlvr"
    (pkg / "tasks").mkdir(parents=True)
    (pkg / "study").mkdir()
    (pkg / "tasks" / "m.py").write_text("from omegaconf import DictConfig, OmegaConf\n\n\n"
                                        "def f(task: DictConfig) -> DictConfig:\n"
                                        "    return OmegaConf.create({**OmegaConf.to_container(task), 'split': 'dev'})\n")
    (pkg / "study" / "s.py").write_text("from omegaconf import OmegaConf\n\nX = OmegaConf.create({})\n")
    assert config_nodes(pkg) == {"crossed_rlvr/tasks/m.py": {"DictConfig": 2, "OmegaConf.create/merge/structured()": 1,
                                                             "OmegaConf.to_container()": 1}}
