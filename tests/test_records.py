"""Response-file validation: every bad input gives one clear error naming file, line and field."""

import json

import pytest

from crossed_rlvr.eval.score.scoring import score_files
from crossed_rlvr.records import ResponseFileError, read_responses, write_responses
from tests.helpers import rec


def write(path, records, raw_lines=()):
    with path.open("a") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
        for line in raw_lines:
            fh.write(line + "\n")
    return path


def good(tmp_path):
    return write(tmp_path / "a.jsonl", [rec(i, p) for p in ("initial", "grpo-hash/s83") for i in range(3)])


def test_good_file_reads(tmp_path):
    rs = read_responses([good(tmp_path)])
    assert len(rs.records) == 6 and rs.records[0]["item_id"] == "0"


BAD = [
    ("not json", None, ["{not json"], r"a\.jsonl:7: not valid JSON"),
    ("missing", "response", None, r"a\.jsonl:7: missing field 'response'"),
    ("type", ("sample_idx", "0"), None, r"a\.jsonl:7: field 'sample_idx' must be int, got str"),
    ("bool", ("prompt_tokens", True), None, r"a\.jsonl:7: field 'prompt_tokens' must be int, got bool"),
    ("request", ("request", "latex"), None, r"a\.jsonl:7: field 'request' is 'latex'"),
    ("finish", ("finish_reason", "eos"), None, r"a\.jsonl:7: field 'finish_reason' is 'eos'"),
    ("seed", ("train_seed", 5), None, r"a\.jsonl:7: field 'train_seed' must be null exactly when"),
]


@pytest.mark.parametrize(("label", "change", "raw", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_record(tmp_path, label, change, raw, message):
    path = good(tmp_path)
    if raw:
        write(path, [], raw)
    else:
        r = rec(0, "initial", sample=1)
        if isinstance(change, str):
            del r[change]
        else:
            r[change[0]] = change[1]
        write(path, [r])
    out = tmp_path / "scores.parquet"
    with pytest.raises(ResponseFileError, match=message):
        score_files([path], out, workers=0, progress=False)
    assert not out.exists() and not (tmp_path / "scores.parquet.partial").exists()


def test_duplicate_key(tmp_path):
    path = write(good(tmp_path), [rec(1, "grpo-hash/s83", response="other")])
    with pytest.raises(ResponseFileError, match=r"a\.jsonl:7: duplicate key \(task='gsm8k', item_id='1', policy='grpo-hash/s83'.*"
                                                 r"first seen at .*a\.jsonl:5"):
        read_responses([path])


def test_duplicate_across_files(tmp_path):
    good(tmp_path)
    write(tmp_path / "b.jsonl", [rec(2, "initial")])
    with pytest.raises(ResponseFileError, match=r"b\.jsonl:1: duplicate key .* first seen at .*a\.jsonl:3"):
        read_responses([tmp_path])


def test_item_set_mismatch(tmp_path):
    path = write(tmp_path / "a.jsonl", [rec(i, "initial") for i in range(3)] + [rec(i, "grpo-hash/s83") for i in (0, 1)])
    with pytest.raises(ResponseFileError, match=r"a\.jsonl:4: cell \(policy='grpo-hash/s83'.*lacks item '2'"):
        read_responses([path])


def test_samples_mismatch(tmp_path):
    records = [rec(i, "initial") for i in range(2)] + [rec(i, "grpo-hash/s83") for i in range(2)]
    records.append(rec(1, "grpo-hash/s83", sample=1))
    path = write(tmp_path / "a.jsonl", records)
    with pytest.raises(ResponseFileError, match=r"mixes items with different sample indices"):
        read_responses([path])


def test_prompt_hash_differs_across_policies(tmp_path):
    records = [rec(i, "initial") for i in range(2)] + [rec(0, "grpo-hash/s83"), rec(1, "grpo-hash/s83", prompt_sha256="f" * 64)]
    path = write(tmp_path / "a.jsonl", records)
    with pytest.raises(ResponseFileError, match=r"a\.jsonl:4: field 'prompt_sha256' for item '1' .*differs between "
                                                 r"policy 'grpo-hash/s83' and policy 'initial' \(.*a\.jsonl:2\)"):
        read_responses([path])


def test_missing_path_and_empty_dir(tmp_path):
    with pytest.raises(ResponseFileError, match="no such file"):
        read_responses([tmp_path / "nope.jsonl"])
    with pytest.raises(ResponseFileError, match="no response files"):
        read_responses([tmp_path])


def test_extra_fields_are_kept(tmp_path):
    path = tmp_path / "a.jsonl"
    write_responses(path, [rec(0, "initial", note="kept")])
    assert read_responses([path]).records[0]["note"] == "kept"
    assert json.loads(path.read_text().splitlines()[0])["note"] == "kept"


def test_an_interrupted_cells_scratch_is_never_read(tmp_path):
    """Scoring a responses folder directly skips hidden folders: ``.partial/`` holds a killed evaluation's
    scratch, which is not a finished cell."""
    from crossed_rlvr.records import find_response_files

    responses = tmp_path / "responses"
    write(responses.mkdir() or responses / "initial__hash__original.jsonl", [rec(0)])
    (responses / ".partial").mkdir()
    write(responses / ".partial" / "initial__boxed__original.jsonl", [rec(0, request="boxed")])
    assert find_response_files([responses]) == [responses / "initial__hash__original.jsonl"]
    assert find_response_files([tmp_path]) == [responses / "initial__hash__original.jsonl"]
