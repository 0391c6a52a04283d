"""No traceback on any file or disk condition: folders, FIFOs, symbolic-link loops, outputs that are
the wrong kind of path, and a disk that fills up or turns read-only mid-write. Each row: the command's input,
the first line it prints, its exit status and what is on disk afterwards."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from crossed_rlvr.analysis.cli import main as analyze_main
from crossed_rlvr.eval.score import scoring
from crossed_rlvr.eval.score.scoring import main as score_main
from tests.helpers import rec, scores_table


def responses(tmp: Path) -> Path:
    path = tmp / "a.jsonl"
    path.write_text("".join(json.dumps(rec(i)) + "\n" for i in range(3)))
    return path


def fifo(tmp: Path, name: str) -> Path:
    os.mkfifo(tmp / name)
    return tmp / name


def loop(tmp: Path, name: str) -> Path:
    (tmp / f"{name}.b").symlink_to(tmp / name)
    (tmp / name).symlink_to(tmp / f"{name}.b")
    return tmp / name


def parquet_folder(tmp: Path) -> Path:
    folder = tmp / "tables"
    folder.mkdir()
    path = scores_table(tmp)
    for name in ("a.parquet", "b.parquet"):
        (folder / name).write_bytes(path.read_bytes())
    return folder


def output_folder(tmp: Path) -> Path:
    (tmp / "scores.parquet").mkdir()
    return tmp / "scores.parquet"


def output_file(tmp: Path) -> Path:
    (tmp / "report").write_text("a file the user keeps\n")
    return tmp / "report"


# (case, command, argv builder, first line (formatted with tmp), exit status)
CASES = [
    ("score: a FIFO as input", score_main, lambda t: [str(fifo(t, "r.jsonl")), "-o", str(t / "out.parquet")],
     "crossed-score: {tmp}/r.jsonl: is not a regular file (a FIFO, socket or device)", 2),
    ("score: a symbolic-link loop", score_main, lambda t: [str(loop(t, "r.jsonl")), "-o", str(t / "out.parquet")],
     "crossed-score: {tmp}/r.jsonl: a loop of symbolic links", 2),
    ("score: a dangling link", score_main,
     lambda t: [str((t / "r.jsonl").symlink_to(t / "gone.jsonl") or t / "r.jsonl"), "-o", str(t / "out.parquet")],
     "crossed-score: {tmp}/r.jsonl: a symbolic link to nothing", 2),
    ("score: --output is a folder", score_main,
     lambda t: [str(responses(t)), "-o", str(output_folder(t)), "--overwrite", "--workers", "0"],
     "crossed-score: {tmp}/scores.parquet is a folder; --output names the scores table file "
     "(e.g. {tmp}/scores.parquet/scores.parquet)", 2),
    ("analyze: a folder of Parquet files", analyze_main,
     lambda t: [str(parquet_folder(t)), "-o", str(t / "out"), "--resamples", "10"],
     "crossed-analyze: {tmp}/tables: is a folder; expected a file", 2),
    ("analyze: a FIFO", analyze_main, lambda t: [str(fifo(t, "s.parquet")), "-o", str(t / "out"), "--resamples", "10"],
     "crossed-analyze: {tmp}/s.parquet: is not a regular file (a FIFO, socket or device)", 2),
    ("analyze: a symbolic-link loop", analyze_main,
     lambda t: [str(loop(t, "s.parquet")), "-o", str(t / "out"), "--resamples", "10"],
     "crossed-analyze: {tmp}/s.parquet: a loop of symbolic links", 2),
    ("analyze: -o is a file", analyze_main,
     lambda t: [str(scores_table(t)), "-o", str(output_file(t)), "--resamples", "10", "--overwrite"],
     "crossed-analyze: {tmp}/report is a file; -o names the output folder", 2),
]


@pytest.mark.parametrize(("case", "main", "argv", "first", "status"), CASES, ids=[c[0] for c in CASES])
def test_file_conditions_end_in_one_line(tmp_path, capsys, case, main, argv, first, status):
    args = argv(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    try:
        code = main(args)
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == status, err
    assert err.splitlines()[0] == first.format(tmp=tmp_path), err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written, nothing removed
    if (tmp_path / "report").exists():
        assert (tmp_path / "report").read_text() == "a file the user keeps\n"


@pytest.mark.parametrize("errno_", [errno.ENOSPC, errno.EROFS])
def test_a_full_or_read_only_disk_while_scoring_ends_in_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch,
                                                                                    errno_):
    def refuse(table, path):
        raise OSError(errno_, os.strerror(errno_), str(path))

    monkeypatch.setattr(scoring, "_atomic_write_table", refuse)
    out = tmp_path / "out.parquet"
    with pytest.raises(SystemExit) as stop:
        score_main([str(responses(tmp_path)), "-o", str(out), "--workers", "0"])
    err = capsys.readouterr().err
    assert stop.value.code == 1
    what = "no space left on the device" if errno_ == errno.ENOSPC else "read-only file system"
    assert err.splitlines()[-1] == (f"crossed-score: {out}.partial/shard-00000.parquet: {what}; nothing was "
                                    "half-written (finished files are kept: run the same command again once there "
                                    "is room or the disk is writable)"), err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]  # no table, no empty scratch folder


def test_a_full_disk_while_writing_the_analysis_leaves_no_folder(tmp_path, capsys, monkeypatch):
    from crossed_rlvr.analysis.report import write as report_write

    real = report_write.write_outputs

    def fill_up(result, folder, figures=True, sections=None):
        real(result, folder, figures, sections)
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "report.md"))

    monkeypatch.setattr("crossed_rlvr.analysis.report.folder.write_outputs", fill_up)
    path = scores_table(tmp_path)
    with pytest.raises(SystemExit) as stop:
        analyze_main([str(path), "-o", str(tmp_path / "out"), "--resamples", "10", "--no-figures"])
    err = capsys.readouterr().err
    assert stop.value.code == 1
    assert "report.md: no space left on the device; nothing was half-written" in err.splitlines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.parquet"]  # no out/, no hidden .out.* folder
