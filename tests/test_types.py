"""The study's stages hand each other typed objects (study/plan.py: ``Policy``, ``ArmPlan``; the config typed by its
schema, ``StudyConf``), and a type checker holds them to it: mypy, pinned in the dev dependencies, over the
study, ``names.py`` and ``layout.py`` (pyproject.toml's ``[tool.mypy]``). A stage that passed a dict where a
policy is expected, or asked the config for a key its schema lacks, fails here."""

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


def test_the_study_type_checks(cache: Path):
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
