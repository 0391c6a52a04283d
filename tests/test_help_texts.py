"""What a user reads before running anything: each command's --help (crossed-rescore names its ``code``
subcommand; every option of crossed-analyze and crossed-match says what it is and its default), and the guides
that quote the code (an example's seed is the default it names, the shipped dataset as an installed package holds
it, the paper cited rather than a path outside the repository, the refusals an importer and the analysis give)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def flat(text: str) -> str:
    """Text with every run of white space one space (help and guides wrap lines anywhere)."""
    return " ".join(text.split())


def help_of(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 0
    return flat(capsys.readouterr().out)


def test_crossed_rescore_help_names_its_code_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    from crossed_rlvr.rescore.cli import main

    text = help_of(main, ["--help"], capsys)
    assert "crossed-rescore code --dataset DATASET --samples SAMPLES" in text and "crossed-rescore code --help" in text


@pytest.mark.parametrize("module", ["crossed_rlvr.analysis.cli", "crossed_rlvr.train.matched"])
def test_every_option_has_help_and_shows_its_default(module: str, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    mod = importlib.import_module(module)
    text = help_of(mod.main, ["--help"], capsys)
    actions = [a for a in mod.parser()._actions if not isinstance(a, argparse._HelpAction)]
    assert actions
    for action in actions:
        assert action.help and flat(action.help) in text, action.dest
        if action.option_strings and action.default is not argparse.SUPPRESS:
            assert f"{flat(action.help)} (default: {action.default})" in text, action.dest


def test_the_analysis_example_seed_is_the_default_the_text_names() -> None:
    from crossed_rlvr.analysis.analyze import DEFAULT_RNG_SEED

    text = (DOCS / "rescoring.md").read_text(encoding="utf-8")
    named = re.findall(r"default RNG seed, (\d+)", flat(text))
    example = re.findall(r"--rng-seed (\d+)", text)
    assert named and example
    assert {int(s) for s in named + example} == {DEFAULT_RNG_SEED}


def test_code_tasks_names_the_dataset_where_the_installed_package_holds_it(tmp_path: Path) -> None:
    text = (DOCS / "code-tasks.md").read_text(encoding="utf-8")
    assert "crossed_rlvr/tasks/data/" not in text  # a checkout's path, not an installed package's
    line = next(x for x in text.splitlines() if x.startswith("DATASET=$("))
    code = re.search(r'-c "(.+)"\)$', line)
    assert code is not None, line
    found = subprocess.run([sys.executable, "-c", code.group(1)], capture_output=True, text=True, check=True,
                           cwd=tmp_path).stdout.strip()  # from outside the checkout, as a user would run it
    from crossed_rlvr.tasks.code import HUMANEVAL_PLUS

    assert Path(found) == HUMANEVAL_PLUS and Path(found).is_file()
    assert '--dataset "$DATASET"' in text


def test_readers_cite_the_paper_by_section_not_a_path() -> None:
    text = flat((DOCS / "readers.md").read_text(encoding="utf-8"))
    assert "papers/" not in text and "shared/" not in text
    head = text.split("## ", 1)[0]
    assert "Learned Reporting Preferences in RLVR Can Conflict with the Current Request" in head
    assert all(sec in head for sec in ("App. C.1", "App. B.2", "App. D.1"))


def refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[tuple[str, list[str]]]:
    """(message, the parts a guide must quote) of each refusal, raised by the code itself: a reworded message fails
    here, not in a user's terminal. The parts leave out what is the user's own (file, line, task, policy)."""
    from crossed_rlvr.analysis.cli import main as analyze
    from crossed_rlvr.eval.ingest.common import policy_identity, request_of
    from crossed_rlvr.train.trl_reward import make_trl_reward
    from crossed_rlvr.train.verl_reward import row_convention
    from tests.helpers import scores_table

    calls = [lambda: request_of("What is 2+2?", None, "original", "resp.jsonl:3"),  # no request suffix
             lambda: policy_identity("grpo-hash/s83", "boxed"),  # a name and a flag that disagree
             lambda: make_trl_reward("hash")(prompts=["p"], completions=["c"], completion_ids=[[1]], answer=["1"]),
             lambda: row_convention("openai/gsm8k", {}, None)]  # a verl row that names no convention
    out = []
    for call in calls:
        with pytest.raises(ValueError) as err:
            call()
        message = re.sub(r"^\S+:\d+: ", "", str(err.value))  # the user's file and line
        out.append((message, [message[:60]]))
    partial = scores_table(tmp_path, lambda df: df[(df.policy != "grpo-hash/s1") | (df.request != "boxed")])
    assert analyze([str(partial), "-o", str(tmp_path / "out"), "--resamples", "10"]) == 2  # a missing cell
    message = capsys.readouterr().err.strip()
    out.append((message, ["crossed-analyze: ", "partial design: ", "has no response under request 'boxed'",
                          "--allow-partial"]))
    return out


def test_troubleshooting_covers_the_importers_and_the_analysiss_refusals(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = flat((DOCS / "troubleshooting.md").read_text(encoding="utf-8"))
    for message, parts in refusals(tmp_path, capsys):
        for part in parts:
            assert part in flat(message), (part, message)
            assert part in text, part
