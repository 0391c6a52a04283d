"""Every command the README, CONTRIBUTING.md and every page under docs/ quote still exists and still parses.

A quoted preset that does not exist, a renamed flag, a Hydra key that moved or a script that was deleted
fails here, not in a reader's shell: each quoted executable answers ``--help``, every ``experiment=NAME``
names a preset, and every quoted Hydra command (crossed-study/-train/-eval/-sft, each job of a sweep)
composes with its overrides and passes the range and relation checks that run before anything starts.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
PRESETS = {p.stem for p in (ROOT / "crossed_rlvr" / "conf" / "experiment").glob("*.yaml")}
ENTRY = {  # console scripts (pyproject's [project.scripts]) -> their module, run with python -m
    "crossed-rlvr": "crossed_rlvr.cli", "crossed-score": "crossed_rlvr.eval.score.scoring",
    "crossed-analyze": "crossed_rlvr.analysis.cli", "crossed-import": "crossed_rlvr.eval.ingest.cli",
    "crossed-eval": "crossed_rlvr.eval.generate.cli", "crossed-sft": "crossed_rlvr.sft.cli",
    "crossed-train": "crossed_rlvr.train.cli", "crossed-match": "crossed_rlvr.train.matched",
    "crossed-study": "crossed_rlvr.study.cli", "crossed-calibrate": "crossed_rlvr.calibration.cli",
    "crossed-rescore": "crossed_rlvr.rescore.cli", "crossed-audit": "crossed_rlvr.study.audit",
}
HYDRA = {"crossed-study": "crossed_study", "crossed-train": "crossed_train", "crossed-eval": "crossed_eval",
         "crossed-sft": "crossed_sft", "crossed-audit": "crossed_audit"}


def _snippets(text: str) -> list[str]:
    """Shell lines of fenced blocks (continuations joined) and inline code spans."""
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        out += block.replace("\\\n", " ").splitlines()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    out += re.findall(r"`([^`\n]+)`", prose)
    return out


@cache
def quoted() -> list[tuple[str, list[str]]]:
    """(file, tokens) of every quoted command line that starts with one of the project's executables."""
    found = []
    for doc in DOCS:
        for line in _snippets(doc.read_text(encoding="utf-8")):
            for part in re.split(r"&&|;|\|", line):
                try:
                    toks = shlex.split(part, comments=True)
                except ValueError:
                    continue
                while toks and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", toks[0]):  # VAR=value prefixes
                    toks = toks[1:]
                if toks and toks[0].startswith(".venv/bin/"):
                    toks[0] = toks[0].removeprefix(".venv/bin/")
                if toks and (toks[0] in ENTRY or (toks[0] in ("python", "python3") and len(toks) > 1)):
                    found.append((doc.name, toks))
    return found


def executables() -> list[str]:
    names = set()
    for _, toks in quoted():
        if toks[0] in ENTRY:
            names.add(toks[0])
        elif toks[1] == "-m" and len(toks) > 2 and toks[2].startswith("crossed_rlvr"):
            names.add(f"-m {toks[2]}")
        elif toks[1].startswith("scripts/") and toks[1].endswith(".py"):
            names.add(toks[1])
    return sorted(names)


def test_the_docs_quote_commands():
    """The extractor finds what is there (a broken extractor would make every test below pass vacuously)."""
    names = executables()
    assert {"crossed-study", "crossed-eval", "crossed-analyze", "crossed-rescore"} <= set(names), names
    assert len([t for _, t in quoted() if t[0] == "crossed-study"]) >= 10


def test_every_quoted_preset_exists():
    named = set()
    for doc in DOCS:
        named |= {(doc.name, m) for m in re.findall(r"experiment=([A-Za-z0-9_.\-]+)", doc.read_text(encoding="utf-8"))}
    missing = sorted(f"{d}: experiment={m}" for d, m in named if m.rstrip(".") not in PRESETS)
    assert missing == []
    assert {m for _, m in named} & {"qwen2.5-7b-gsm8k-crossed", "tiny"}


@pytest.mark.parametrize("name", executables())
def test_every_quoted_executable_answers_help(name):
    if name in ENTRY:
        cmd = [sys.executable, "-m", ENTRY[name], "--help"]
    elif name.startswith("-m "):
        cmd = [sys.executable, "-m", name[3:], "--help"]
    else:
        cmd = [sys.executable, str(ROOT / name), "--help"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT, check=False)
    assert proc.returncode == 0, (name, proc.stdout[-500:], proc.stderr[-1500:])
    assert proc.stdout.strip()


def hydra_jobs() -> list[tuple[str, str, list[str]]]:
    """(file, command, overrides) for each job of every quoted Hydra command (sweeps expanded)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    jobs = []
    for doc, toks in quoted():
        if toks[0] not in HYDRA:
            continue
        args = [t for t in toks[1:] if t not in ("-m", "--multirun") and "=" in t and not t.startswith("-")]
        if any(re.search(r"[<>]|\$|\.\.\.", a) for a in args):  # placeholders (<DIR>, $RUN, ...) are not values
            args = [a for a in args if not re.search(r"[<>]|\$|\.\.\.", a)]
        parsed = OverridesParser.create().parse_overrides(args)
        batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
        first = batches[0][0] if batches and batches[0] else args
        jobs.append((doc, toks[0], list(first)))
    return jobs


@pytest.mark.parametrize("doc, command, overrides", hydra_jobs(),
                         ids=lambda v: v if isinstance(v, str) else " ".join(v)[:80])
def test_every_quoted_hydra_command_composes_and_passes_its_range_checks(doc, command, overrides, tmp_path):
    from hydra import compose, initialize_config_module

    from crossed_rlvr.conf.ranges import check_overrides, check_ranges, check_relations

    check_overrides(overrides, HYDRA[command])
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name=HYDRA[command], overrides=[*overrides, f"run_dir={tmp_path}"])
    check_ranges(cfg, HYDRA[command])
    check_relations(cfg)
