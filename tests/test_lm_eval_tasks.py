"""The lm-eval tasks shipped with the package: generated from the request suffixes, in the wheel, known to lm-eval.

The real lm-eval run of these tasks, imported crossed, is in tests/test_importers.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def printed_folder(capsys) -> Path:
    """The folder ``crossed-rlvr lm-eval-tasks`` prints (what ``lm_eval --include_path`` is given)."""
    from crossed_rlvr.cli import main

    assert main(["lm-eval-tasks"]) == 0
    return Path(capsys.readouterr().out.strip())


def test_shipped_yamls_are_what_the_request_suffixes_give():
    """Regenerate with ``python -m crossed_rlvr.lm_eval_tasks`` when a suffix changes; a hand edit fails here."""
    from crossed_rlvr.lm_eval_tasks import FOLDER, expected_files

    shipped = {p.name: p.read_text(encoding="utf-8") for p in sorted(FOLDER.glob("*.yaml"))}
    assert sorted(shipped) == sorted(expected_files())
    assert shipped == expected_files()
    assert len(shipped) == 2 * 2 * 3


def test_each_task_asks_for_its_request_in_its_wording_and_stops_only_at_the_models_end():
    """The name says the dataset, request and wording; the prompt ends in that suffix (conventions.py's) and no
    stop string names one model's chat tokens."""
    import yaml

    from crossed_rlvr.conf.schema import EvalConf
    from crossed_rlvr.lm_eval_tasks import FOLDER, parse_task_name
    from crossed_rlvr.rewards.conventions import request_suffix

    for path in sorted(FOLDER.glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
        dataset, request, template = parse_task_name(cfg["task"])
        assert path.stem == cfg["task"]
        assert cfg["doc_to_text"].endswith("\n" + request_suffix(request, template))
        assert cfg["metadata"] | {"version": None} == {"version": None, "dataset": dataset, "request": request,
                                                        "template": template}
        gen = cfg["generation_kwargs"]
        assert gen["until"] == []  # an absent until would stop at lm-eval's few-shot delimiter, a blank line
        assert (gen["temperature"], gen["top_p"]) == (EvalConf.temperature, EvalConf.top_p)
        assert gen["max_gen_toks"] == {"gsm8k": EvalConf.max_new_tokens, "math500": 8192}[dataset]
        assert (cfg["dataset_path"], cfg.get("dataset_name"), cfg["test_split"]) == {
            "gsm8k": ("openai/gsm8k", "main", "test"), "math500": ("HuggingFaceH4/MATH-500", None, "test")}[dataset]
        assert "im_end" not in path.read_text(encoding="utf-8")


def test_lm_eval_knows_every_shipped_task_from_the_printed_folder(capsys):
    from lm_eval.tasks import TaskManager

    from crossed_rlvr.lm_eval_tasks import task_names

    folder = printed_folder(capsys)
    names = [f"crossed_{d}_{r}_{t}" for d in ("gsm8k", "math500") for r in ("hash", "boxed")
             for t in ("original", "para_a", "para_b")]
    assert task_names() == names
    # without lm-eval's own tasks: indexing its ~15,000 YAMLs takes ~40 s here and proves nothing of ours
    known = set(TaskManager(include_path=str(folder), include_defaults=False).all_tasks)
    assert set(names) | {"crossed_gsm8k", "crossed_math500"} <= known


def test_the_yamls_ship_in_the_wheel(capsys):
    """pyproject's package data takes every shipped YAML (the folder the command prints is inside the package)."""
    folder = printed_folder(capsys)
    package = ROOT / "crossed_rlvr"
    assert folder.is_relative_to(package)
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["crossed_rlvr"]
    packaged = {p for pattern in patterns for p in package.glob(pattern)}
    assert sorted(folder.glob("*.yaml")) and set(folder.glob("*.yaml")) <= packaged


def test_local_tasks_include_the_shipped_ones_and_change_only_the_data(tmp_path, capsys):
    import yaml

    from crossed_rlvr.cli import main
    from crossed_rlvr.lm_eval_tasks import FOLDER

    data = tmp_path / "gsm8k.jsonl"
    data.write_text('{"question": "What is 2 + 3?", "answer": "#### 5"}\n')
    assert main(["lm-eval-tasks", "--data", f"gsm8k={data}", "--out", str(tmp_path / "tasks")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "tasks")
    written = sorted((tmp_path / "tasks").glob("*.yaml"))
    assert [p.stem for p in written] == sorted(f"crossed_gsm8k_{r}_{t}" for r in ("hash", "boxed")
                                               for t in ("original", "para_a", "para_b"))
    for path in written:
        cfg = yaml.safe_load(path.read_text())
        assert cfg == {"include": str(FOLDER / path.name), "dataset_path": "json", "dataset_name": None,
                       "dataset_kwargs": {"data_files": {"test": str(data)}}}
    out = str(tmp_path / "none")
    for bad, said in [(["--data", "gsm8k", "--out", out], "expected DATASET=FILE"),
                      (["--data", f"mmlu={data}", "--out", out], "unknown dataset 'mmlu'"),
                      (["--data", f"gsm8k={data}"], "--data needs --out"), (["--out", out], "--out needs --data")]:
        assert main(["lm-eval-tasks", *bad]) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("argv", [["--help"], []])
def test_help_says_what_the_command_does_and_lists_its_commands_in_plain_text(argv, capsys):
    from crossed_rlvr.cli import main

    with pytest.raises(SystemExit):
        main(argv)
    out = capsys.readouterr()
    text = out.out + out.err
    if argv:
        assert "Small tools around the crossed evaluation" in text
        assert "panel" in text and "lm-eval-tasks" in text and "print the folder of the shipped lm-eval tasks" in text
        assert not any(mark in text for mark in ("``", ":func:", ":mod:", "{panel"))
    else:
        assert "crossed-rlvr: the following arguments are required: COMMAND" in text
