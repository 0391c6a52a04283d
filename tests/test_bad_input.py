"""Bad input never becomes data. One row per case: the input, the command, and the first line
it must print (file, row or line, and field named), exit status 2, never a traceback and never an output.

Cases of other tables: bad overrides and ranges in tests/test_config.py (BAD), bad lm-eval and verl rows in
tests/test_importers.py (LM_EVAL_BAD, VERL_BAD), response-file fields in tests/test_records.py (BAD).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from crossed_rlvr.analysis.cli import main as analyze_main
from crossed_rlvr.calibration.cli import main as calibrate_main
from crossed_rlvr.eval.ingest.cli import main as import_main
from crossed_rlvr.eval.score.scoring import main as score_main
from crossed_rlvr.rescore.cli import main as rescore_main
from crossed_rlvr.rewards.conventions import request_suffix
from tests.helpers import rec, scores_table


def _set(col: str, value, row: int = 3):
    def change(df: pd.DataFrame) -> pd.DataFrame:
        df[col] = df[col].astype(object)
        df.at[row, col] = value
        return df
    return change


def _strings(col: str):
    return lambda df: df.assign(**{col: df[col].map(str)})


def _drop(col: str):
    return lambda df: df.drop(columns=[col])


def _repeat_row(df: pd.DataFrame) -> pd.DataFrame:
    df = pd.concat([df, df.iloc[[2]]], ignore_index=True)
    df.loc[len(df) - 1, "requested_payload"] = not df.loc[2, "requested_payload"]
    return df


def analyze_case(change, *flags: str):
    def run(tmp: Path) -> list[str]:
        return [str(scores_table(tmp, change)), "-o", str(tmp / "out"), "--resamples", "10", *flags]
    return analyze_main, run


def _same(df: pd.DataFrame) -> pd.DataFrame:
    return df


def calibrate_case(change):
    def run(tmp: Path) -> list[str]:
        return ["sample", str(scores_table(tmp, change)), "-o", str(tmp / "out")]
    return calibrate_main, run


def rescore_items_case(item_line: bytes):
    def run(tmp: Path) -> list[str]:
        from crossed_rlvr.records import write_responses

        write_responses(tmp / "r.jsonl", [rec(0, "initial", reference="A", response="The answer is A."),
                                          rec(0, "grpo-hash/s83", reference="A", response="#### A")])
        (tmp / "gsm8k-test.jsonl").write_bytes(item_line + b"\n")
        return [str(tmp / "r.jsonl"), "--pair", "initial=grpo-hash/s83", "--items", str(tmp / "gsm8k-test.jsonl"),
                "-o", str(tmp / "out"), "--no-audit"]
    return rescore_main, run


def score_case(raw: bytes):
    def run(tmp: Path) -> list[str]:
        (tmp / "a.jsonl").write_bytes(json.dumps(rec(0)).encode() + b"\n" + raw + b"\n")
        return [str(tmp / "a.jsonl"), "-o", str(tmp / "out.parquet")]
    return score_main, run


def score_records(*records: dict):
    def run(tmp: Path) -> list[str]:
        (tmp / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return [str(tmp / "a.jsonl"), "-o", str(tmp / "out.parquet")]
    return score_main, run


def verl_case(rows: list[dict], *flags: str):
    def run(tmp: Path) -> list[str]:
        (tmp / "5.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return ["verl", str(tmp / "5.jsonl"), "-o", str(tmp / "out.jsonl"), "--policy", "initial", *flags]
    return import_main, run


def _verl_row(source: str, text: str = "Compute 2 + 3.") -> dict:
    return {"input": text, "output": "#### 5", "gts": "5", "data_source": source}


# (case, (command, arguments built in a fresh folder), first line of stderr)
CASES = [
    # crossed-score: response files
    ("score: non-UTF-8 bytes", score_case(b'{"response": "\xff\xfe"}'),
     "crossed-score: {tmp}/a.jsonl:2: not UTF-8 text (byte 14 of the line)"),
    ("score: unknown request", score_case(json.dumps(rec(1, request="latex")).encode()),
     "crossed-score: {tmp}/a.jsonl:2: field 'request' is 'latex'; expected one of ('hash', 'boxed', 'json', 'xml') "
     "(another prompt's outputs can be re-scored with crossed-rescore, not scored crossed)"),
    # crossed-analyze: scores tables
    ("analyze: a reader column missing", analyze_case(_drop("math_verify.correct")),
     "crossed-analyze: {tmp}/scores.parquet: scores table lacks column 'math_verify.correct', needed for every "
     "request (score the responses again with crossed-score)"),
    ("analyze: the strict reader of a request missing", analyze_case(_drop("boxed_first.correct")),
     "crossed-analyze: {tmp}/scores.parquet: scores table lacks column 'boxed_first.correct', needed for the boxed "
     "request (score the responses again with crossed-score)"),
    ("analyze: unknown request", analyze_case(_set("request", "latex")),
     "crossed-analyze: {tmp}/scores.parquet: row 4 (policy 'initial', request 'latex', item '3'): field 'request' is "
     "'latex'; expected one of hash, boxed, json, xml"),
    ("analyze: requested_payload as text", analyze_case(_strings("requested_payload")),
     "crossed-analyze: {tmp}/scores.parquet: row 1 (policy 'initial', request 'hash', item '0'): field "
     "'requested_payload' is 'True' (str); expected true or false"),
    ("analyze: a null measure", analyze_case(_set("math_verify.correct", None)),
     "crossed-analyze: {tmp}/scores.parquet: row 4 (policy 'initial', request 'hash', item '3'): field "
     "'math_verify.correct' is null; expected true or false"),
    ("analyze: a null key", analyze_case(_set("item_id", None)),
     "crossed-analyze: {tmp}/scores.parquet: row 4 (policy 'initial', request 'hash', item null): field 'item_id' "
     "is null"),
    ("analyze: unknown template", analyze_case(_set("template", "para_z")),
     "crossed-analyze: {tmp}/scores.parquet: row 4 (policy 'initial', request 'hash', item '3'): field 'template' "
     "is 'para_z'; expected one of original, para_a, para_b, "
     "rephrased, one_shot"),
    ("analyze: a response twice with other scores", analyze_case(_repeat_row),
     "crossed-analyze: {tmp}/scores.parquet: row 25 (policy 'initial', request 'hash', item '2'): the same response "
     "key as row 3 (task, policy, training_convention, request, template, item_id, sample_idx); a table holds "
     "each response once"),
    ("analyze: no rows", analyze_case(lambda df: df.iloc[0:0]),
     "crossed-analyze: {tmp}/scores.parquet: scores table has no rows"),
    ("analyze: negative sample index", analyze_case(_set("sample_idx", -1)),
     "crossed-analyze: {tmp}/scores.parquet: row 4 (policy 'initial', request 'hash', item '3'): field 'sample_idx' "
     "is -1 (int64); expected a whole number in [0, 100,000,000]"),
    # crossed-analyze: the bootstrap's settings: refused before any work, never an empty interval
    *[(f"analyze: --resamples {v}", analyze_case(_same, "--resamples", v),
       f"crossed-analyze: argument --resamples: {v} is outside its range [10, 1,000,000] (an interval needs at least "
       "10 resamples) (see crossed-analyze --help)") for v in ("0", "1", "-5", "9", "1000001")],
    *[(f"analyze: --rng-seed {v}", analyze_case(_same, "--rng-seed", v),
       f"crossed-analyze: argument --rng-seed: {v} is outside its range [0, 2**64 - 1] (see crossed-analyze --help)")
      for v in ("-1", str(2**64))],
    # partial designs are named in one line and refused (--allow-partial analyses the complete rest)
    ("analyze: half a policy", analyze_case(lambda df: df[~((df.policy == "grpo-hash/s1") & (df.request == "boxed"))]),
     "crossed-analyze: {tmp}/scores.parquet: partial design: t/original: policy 'grpo-hash/s1' has no response under "
     "request 'boxed' (the table holds 'boxed', 'hash' there); pass --allow-partial to analyse only the complete "
     "policies"),
    ("analyze: 2 of 4 items", analyze_case(lambda df: df[~((df.policy == "grpo-boxed/s1") & (df.request == "hash")
                                                           & df.item_id.isin(["2", "3"]))]),
     "crossed-analyze: {tmp}/scores.parquet: partial design: t/original: policy 'grpo-boxed/s1' has 2 of the 4 items "
     "under request 'hash'; pass --allow-partial to analyse only the complete policies"),
    ("analyze: an arm without its partner seed", analyze_case(lambda df: pd.concat(
        [df, df[df.policy == "grpo-hash/s1"].assign(policy="grpo-hash/s2", train_seed=2)], ignore_index=True)
        .astype({"train_seed": "Int64"})),
     "crossed-analyze: {tmp}/scores.parquet: partial design: t/original: policy 'grpo-hash/s2' (trained on hash, "
     "seed 2) has no boxed arm of seed 2 to cross with; pass --allow-partial to analyse only the complete policies"),
    ("analyze: one policy under two task names", analyze_case(
        lambda df: df.assign(task=df.task.where(df.request == "hash", "t2"))),
     "crossed-analyze: {tmp}/scores.parquet: partial design: t/original: policy 'grpo-boxed/s1' has its requests "
     "under different task names (t: hash; t2: boxed); import them under one task name (crossed-import --task) (and "
     "5 more gaps); pass --allow-partial to analyse only the complete policies"),
    # records and tables that contradict themselves
    ("score: a key twice in one record", score_case(json.dumps(rec(1)).replace('"reference": ', '"reference": "99", '
                                                                                  '"reference": ', 1).encode()),
     "crossed-score: {tmp}/a.jsonl:2: key 'reference' appears twice in one object (JSON keeps the last silently; "
     "say which one is meant)"),
    ("score: a policy named for another convention", score_case(json.dumps(rec(1, "grpo-hash/s83",
                                                                                 training_convention="boxed")).encode()),
     "crossed-score: {tmp}/a.jsonl:2: policy 'grpo-hash/s83' names convention 'hash' and seed 83, but its "
     "training_convention='boxed' and train_seed=83"),
    ("score: a number beyond 64 bits", score_records(rec(0), rec(1, gen_seed=2**70)),
     "crossed-score: {tmp}/a.jsonl:2: field 'gen_seed' is 1180591620717411303424, beyond a 64-bit integer"),
    ("score: a NaN temperature", score_case(json.dumps(rec(1, temperature=float("nan"))).encode()),
     "crossed-score: {tmp}/a.jsonl:2: field 'temperature' is nan; expected a number in [0, 10] (0 is greedy decoding)"),
    ("score: max_new_tokens 0", score_records(rec(0), rec(1, max_new_tokens=0)),
     "crossed-score: {tmp}/a.jsonl:2: field 'max_new_tokens' is 0; expected a number in [1, 1,048,576]"),
    ("score: prompt_tokens -5", score_records(rec(0), rec(1, prompt_tokens=-5)),
     "crossed-score: {tmp}/a.jsonl:2: field 'prompt_tokens' is -5; expected a number in [-1, 100,000,000] (-1: not "
     "recorded (outputs imported from lm-eval or verl))"),
    # a scores table's dtypes are checked like its values
    ("analyze: an integer item id", analyze_case(lambda df: df.assign(item_id=df.item_id.astype(int))),
     "crossed-analyze: {tmp}/scores.parquet: row 1 (policy 'initial', request 'hash', item 0): field 'item_id' is 0 "
     "(int64); expected text"),
    ("analyze: token counts as text", analyze_case(lambda df: df.assign(response_tokens=df.response_tokens.map(str))),
     "crossed-analyze: {tmp}/scores.parquet: row 1 (policy 'initial', request 'hash', item '0'): field "
     "'response_tokens' is '1' (str); expected a whole number in [-1, 100,000,000] or null"),
    ("analyze: sample index as text", analyze_case(_strings("sample_idx")),
     "crossed-analyze: {tmp}/scores.parquet: row 1 (policy 'initial', request 'hash', item '0'): field 'sample_idx' "
     "is '0' (str); expected a whole number in [0, 100,000,000]"),
    ("score: a line nested 100,000 deep", score_case(b"[" * 100_000 + b"]" * 100_000),
     "crossed-score: {tmp}/a.jsonl:2: nested deeper than a JSON value may be read"),
    ("score: one item with two references", score_records(rec(0), rec(0, "grpo-hash/s83", reference="99")),
     "crossed-score: {tmp}/a.jsonl:2: field 'reference' of item '0' is '99' but '18' at {tmp}/a.jsonl:1: one item "
     "has one reference"),
    ("score: an item id ending in a space", score_records(rec(0), rec(1, item_id="1 ")),
     "crossed-score: {tmp}/a.jsonl:2: field 'item_id' '1 ' (U+0031 U+0020) is empty or starts or ends with white "
     "space"),
    ("score: one id in two Unicode forms", score_records(rec(0, item_id="caf\u00e9"),
                                                         rec(0, "grpo-hash/s83", item_id="cafe\u0301")),
     "crossed-score: {tmp}/a.jsonl:2: item id 'cafe\u0301' (U+0063 U+0061 U+0066 U+0065 U+0301) and 'caf\u00e9' "
     "(U+0063 U+0061 U+0066 U+00E9) at {tmp}/a.jsonl:1 are the same text in another Unicode form; give one item "
     "one id"),
    ("analyze: a policy named for another seed", analyze_case(
        lambda df: df.assign(train_seed=df["train_seed"].where(df["policy"] != "grpo-boxed/s1", 2))),
     "crossed-analyze: {tmp}/scores.parquet: row 17 (policy 'grpo-boxed/s1', request 'hash', item '0'): policy "
     "'grpo-boxed/s1' names convention 'boxed' and seed 1, but its training_convention='boxed' and train_seed=2"),
    ("analyze: initial with a seed", analyze_case(
        lambda df: df.assign(train_seed=df["train_seed"].where(df["policy"] != "initial", 5))),
     "crossed-analyze: {tmp}/scores.parquet: row 1 (policy 'initial', request 'hash', item '0'): train_seed must be "
     "null exactly when training_convention is 'initial'"),
    # crossed-calibrate: the same checks before a sample is frozen
    ("calibrate: requested_payload as text", calibrate_case(_strings("requested_payload")),
     "crossed-calibrate: {tmp}/scores.parquet: row 1 (policy 'initial', request 'hash', item '0'): field "
     "'requested_payload' is 'True' (str); expected true or false"),
    ("calibrate: unknown request", calibrate_case(_set("request", "latex")),
     "crossed-calibrate: {tmp}/scores.parquet: row 4 (policy 'initial', request 'latex', item '3'): field 'request' "
     "is 'latex'; expected one of hash, boxed, json, xml"),
    # crossed-rescore: item files checked like every input
    ("rescore: an item file with n_options out of range",
     rescore_items_case(b'{"item_id": "0", "question": "q", "reference": "A", "n_options": 12}'),
     "crossed-rescore: {tmp}/gsm8k-test.jsonl:1: field 'n_options' is 12; expected an integer from 2 to 10"),
    ("rescore: an item file with non-UTF-8 bytes",
     rescore_items_case(b'{"item_id": "0", "question": "\xff", "reference": "A"}'),
     "crossed-rescore: {tmp}/gsm8k-test.jsonl:1: not UTF-8 text (byte 30 of the line)"),
    ("rescore: an item with a null reference",
     rescore_items_case(b'{"item_id": "0", "question": "q", "reference": null}'),
     "crossed-rescore: {tmp}/gsm8k-test.jsonl:1: field 'reference' is null"),
    # crossed-import verl: the request named by data_source decides; conflicts are refused
    ("import: data_source and --request disagree",
     verl_case([_verl_row("crossed_rlvr/gsm8k/boxed")], "--request", "hash"),
     "crossed-import: {tmp}/5.jsonl:1: data_source 'crossed_rlvr/gsm8k/boxed' says request 'boxed' but --request "
     "says 'hash'"),
    ("import: data_source and the prompt's suffix disagree",
     verl_case([_verl_row("crossed_rlvr/gsm8k/boxed", f"Compute 2 + 3.\n{request_suffix('hash', 'original')}")]),
     "crossed-import: {tmp}/5.jsonl:1: the prompt asks for 'hash' but data_source 'crossed_rlvr/gsm8k/boxed' "
     "says 'boxed'"),
]


@pytest.mark.parametrize(("case", "command", "first"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_its_first_line(tmp_path, capsys, case, command, first):
    main, build = command
    args = build(tmp_path)
    try:
        code = main(args)
    except SystemExit as stop:  # argparse's own refusal of a flag (crossed_rlvr/limits.py): one line, exit 2
        code = stop.code
    assert code == 2, case
    err = capsys.readouterr().err
    assert err.splitlines()[0] == first.format(tmp=tmp_path), err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.parquet").exists()
    assert not (tmp_path / "out.jsonl").exists()


def test_suffixless_rows_of_two_requests_stay_apart(tmp_path):
    """A dump of our val.parquet whose prompts carry no suffix: data_source keeps each row's request, so the
    boxed rows never fold into the hash cell as extra samples."""
    from crossed_rlvr.eval.ingest.common import given_policy
    from crossed_rlvr.eval.ingest.verl import import_verl_dump

    rows = [_verl_row("crossed_rlvr/gsm8k/hash"), _verl_row("crossed_rlvr/gsm8k/boxed")]
    (tmp_path / "5.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = import_verl_dump(tmp_path / "5.jsonl", policy=given_policy("initial", "initial"))
    assert [(r["request"], r["sample_idx"]) for r in records] == [("hash", 0), ("boxed", 0)]
    assert records[0]["item_id"] == records[1]["item_id"]  # one item under two requests


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_ctrl_c_ends_a_command_with_one_line_and_its_resume_hint(tmp_path):
    """Ctrl-C as a terminal sends it (SIGINT to the whole process group, scoring workers included): one
    line with the resume hint, exit 130, no traceback from the command or its workers; the rerun finishes."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from crossed_rlvr.records import write_responses

    records = [rec(i, policy, request, response=f"Step 1: {i} + 1 = {i + 1}\n#### {i + 1}")
               for policy in ("initial", "grpo-hash/s83") for request in ("hash", "boxed") for i in range(2500)]
    write_responses(tmp_path / "a.jsonl", records)
    out = tmp_path / "scores.parquet"
    cmd = [sys.executable, "-m", "crossed_rlvr.eval.score.scoring", str(tmp_path / "a.jsonl"), "-o", str(out),
           "--workers", "2"]
    # as from a terminal: SIGINT not ignored in the command, even when the suite itself was started in the
    # background (`cmd &` starts it with SIGINT ignored, a disposition children inherit; a handled signal is
    # reset to the default at exec)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, before)
    partial = tmp_path / "scores.parquet.partial"
    deadline = time.monotonic() + 120
    while not any(partial.glob("shard-*.parquet")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "scoring ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = [x for x in err.replace("\r", "\n").splitlines() if x.strip() and "resp/s" not in x and "resp]" not in x]
    assert lines == ["crossed-score: interrupted; run the same command again: the chunks already scored are kept "
                     "and the rest scored (the table is written only when complete)."], err
    assert not out.exists() and any(partial.glob("shard-*.parquet"))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0 and len(pd.read_parquet(out)) == len(records), done.stderr


def test_a_killed_analysis_leaves_no_hidden_folder_after_the_next_run(tmp_path):
    """A SIGKILL runs no cleanup: the temporary folder of a dead process is removed at the next start, one
    of a live process is left alone."""
    import os
    import subprocess

    from crossed_rlvr.analysis.report.folder import replace_folder

    out = tmp_path / "analysis"
    proc = subprocess.Popen(["sleep", "0"])  # a pid that has ended
    proc.wait()
    stale = tmp_path / f".analysis.{proc.pid}.abcd"
    stale.mkdir()
    (stale / "report.md").write_text("half")
    live = tmp_path / f".analysis.{os.getpid()}.efgh"
    live.mkdir()
    replace_folder(out, lambda tmp: (tmp / "report.md").write_text("whole"))
    assert (out / "report.md").read_text() == "whole"
    assert not stale.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["analysis", live.name])


def test_allow_partial_analyses_the_complete_policies_and_names_the_rest(tmp_path, capsys):
    """--allow-partial leaves the incomplete policy out (and its partner, now unpaired), says so, and
    the protocol card lists it."""
    def half(df):
        extra = df[df.policy == "grpo-hash/s1"].assign(policy="grpo-hash/s2", train_seed=2)
        return pd.concat([df, extra[extra.request == "hash"]], ignore_index=True).astype({"train_seed": "Int64"})

    path = scores_table(tmp_path, half)
    assert analyze_main([str(path), "-o", str(tmp_path / "out"), "--resamples", "10", "--allow-partial"]) == 0
    err = capsys.readouterr().err
    assert "crossed-analyze: left out (--allow-partial): t/original: policy 'grpo-hash/s2' has no response under " \
           "request 'boxed'" in err
    cells = pd.read_csv(tmp_path / "out" / "cells.csv")
    assert set(cells.policy) == {"initial", "grpo-hash/s1", "grpo-boxed/s1"}
    protocol = json.loads((tmp_path / "out" / "manifest.json").read_text())["protocol"]
    assert any("grpo-hash/s2" in line for line in protocol["left_out"])
    assert "**Left out (partial design, `--allow-partial`)**: t/original: policy 'grpo-hash/s2'" in \
        (tmp_path / "out" / "report.md").read_text()


def test_a_nullable_boolean_column_without_nulls_is_read_as_true_or_false(tmp_path):
    """Pandas' nullable boolean dtype (what some tools write) is plain true/false when no value is null."""
    path = scores_table(tmp_path, lambda df: df.assign(requested_payload=df.requested_payload.astype("boolean")))
    assert analyze_main([str(path), "-o", str(tmp_path / "out"), "--resamples", "10", "--no-figures"]) == 0
