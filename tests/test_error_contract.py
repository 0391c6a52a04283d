"""The one error contract (crossed_rlvr/errors.py): every console command refuses a bad setting or input with
one line, ``<command>: <what is wrong>``, and exit status 2; an error that is bad input raised deep inside a run
(a RecipeError, a RunError) reaches the user the same way, never as a traceback or another status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crossed_rlvr.errors import BAD_INPUT, CrossedError

BIN = Path(sys.executable).parent


def bad_jsonl(tmp: Path) -> str:
    path = tmp / "bad.jsonl"
    path.write_text('{"response": "#### 1", "reference": "1"}\n[1, 2]\n')
    return str(path)


# (command, its main, arguments from the temporary folder, the first line's start); argparse commands in-process
IN_PROCESS = [
    ("crossed-rlvr", "crossed_rlvr.cli", lambda t: ["panel", "--input", bad_jsonl(t)],
     "crossed-rlvr: {tmp}/bad.jsonl:2: cannot read record"),
    ("crossed-score", "crossed_rlvr.eval.score.scoring", lambda t: [bad_jsonl(t), "-o", str(t / "s.parquet")],
     "crossed-score: {tmp}/bad.jsonl:1: missing field 'item_id'"),
    ("crossed-analyze", "crossed_rlvr.analysis.cli", lambda t: [str(t / "s.parquet"), "-o", str(t / "a"),
                                                                 "--resamples", "1"],
     "crossed-analyze: argument --resamples: 1 is outside its range"),
    ("crossed-import", "crossed_rlvr.eval.ingest.cli", lambda t: ["lm-eval", str(t / "none"), "-o",
                                                                         str(t / "r.jsonl"), "--policy", "initial"],
     "crossed-import: {tmp}/none"),
    ("crossed-calibrate", "crossed_rlvr.calibration.cli", lambda t: ["sample", str(t / "s.parquet"), "--cap", "0"],
     "crossed-calibrate sample: argument --cap: 0 is outside its range [1, 1,000,000]"),
    ("crossed-rescore", "crossed_rlvr.rescore.cli", lambda t: [bad_jsonl(t), "--pair", "a=b", "-o", str(t / "r")],
     "crossed-rescore: {tmp}/bad.jsonl:1: missing field 'item_id'"),
    ("crossed-match", "crossed_rlvr.train.matched", lambda t: [str(t / "a"), str(t / "b")],
     "crossed-match: {tmp}/a/resolved_config.json: no such file or folder"),
    ("crossed-view", "crossed_rlvr.view.cli", lambda t: [str(t / "none")], "crossed-view: {tmp}/none: no such folder"),
]


@pytest.mark.parametrize(("command", "module", "args", "first"), IN_PROCESS, ids=[r[0] for r in IN_PROCESS])
def test_every_argparse_command_refuses_bad_input_in_one_line_with_status_2(tmp_path, capsys, command, module, args,
                                                                            first):
    import importlib

    main = importlib.import_module(module).main
    try:
        status = main(args(tmp_path))
    except SystemExit as stop:
        status = stop.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == BAD_INPUT, err
    assert len(err) == 1 and err[0].startswith(first.format(tmp=tmp_path)), err


# the Hydra commands: a setting out of its range at composition, and bad input met inside the run
HYDRA = [
    ("crossed-train", ["recipe.updates=0"], "crossed-train: recipe.updates=0: outside its range"),
    ("crossed-sft", ["sft.epochs=0"], "crossed-sft: sft.epochs=0: outside its range"),
    ("crossed-eval", ["model.path=/nonexistent/model", "model.source=local"],
     "crossed-eval: model tiny: /nonexistent/model does not exist"),
    ("crossed-study", ["experiment=smoke", "recipe.proposal.enabled=true",
                       "recipe.proposal.strata_file=/nonexistent/strata.jsonl", "stages=prepare"],
     "crossed-study: recipe.proposal.strata_file=/nonexistent/strata.jsonl: no such file"),
    ("crossed-audit", ["initial=/nonexistent/model", "hash=/nonexistent/model"],
     "crossed-audit: initial=/nonexistent/model: no such model folder"),
]


@pytest.mark.parametrize(("command", "overrides", "first"), HYDRA, ids=[r[0] for r in HYDRA])
def test_every_hydra_command_refuses_bad_input_in_one_line_with_status_2(tmp_path, command, overrides, first):
    proc = subprocess.run([str(BIN / command), *overrides, f"run_dir={tmp_path / 'run'}"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300, check=False)
    err = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("─")]
    assert proc.returncode == BAD_INPUT, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and err[-1].startswith(first), err


def test_the_input_errors_share_one_base():
    """Each module's bad-input error is a CrossedError (and still the ValueError it was, for older callers)."""
    from crossed_rlvr.analysis.analyze import AnalysisError
    from crossed_rlvr.conf.checks import ConfigError
    from crossed_rlvr.errors import RecipeError
    from crossed_rlvr.eval.generate.plan import RunError
    from crossed_rlvr.eval.score.checks import ScoresTableError
    from crossed_rlvr.records import ResponseFileError
    from crossed_rlvr.tasks.items import ItemFileError
    from crossed_rlvr.train.memory import NoShape, PlanError

    for cls in (AnalysisError, ConfigError, RecipeError, RunError, ScoresTableError, ResponseFileError,
                ItemFileError, PlanError, NoShape):
        assert issubclass(cls, CrossedError) and issubclass(cls, ValueError), cls
    assert json.dumps(BAD_INPUT) == "2"


def test_the_tables_hold_every_console_command():
    """A command added to pyproject.toml without a row here would have no check of its error contract."""
    import tomllib

    scripts = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert sorted(scripts) == sorted([r[0] for r in IN_PROCESS] + [r[0] for r in HYDRA])


def test_a_preset_that_does_not_exist_exits_2_with_hydras_list_of_options(tmp_path):
    """Hydra names the options there are (good) and used to exit 1; a bad command line exits 2 everywhere."""
    proc = subprocess.run([str(BIN / "crossed-study"), "experiment=nonexistent"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == BAD_INPUT, proc.stderr[-2000:]
    assert "nonexistent" in proc.stderr and "smoke" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.long
def test_a_study_whose_arms_are_missing_exits_2_in_one_line(tmp_path, tiny):
    """The study's missing-file cases are bad input like any other: the given arms' checkpoints are not there."""
    proc = subprocess.run([str(BIN / "crossed-study"), "initial.build=given", f"model.path={tiny}", "arms.kind=given",
                           f"arms.from_run={tmp_path / 'none'}", "arms.seeds=[83]", f"run_dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    err = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("─")]
    assert proc.returncode == BAD_INPUT, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and err[-1].startswith("crossed-study: arms.kind=given: no checkpoint at"), err
