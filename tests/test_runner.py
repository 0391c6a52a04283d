"""crossed-eval: crossed cells on disk, resumable after a kill, frozen items, refusal of changed settings."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossed_rlvr.eval.generate.plan import RunError
from crossed_rlvr.eval.generate.runner import run_eval
from crossed_rlvr.records import read_responses
from crossed_rlvr.tasks.items import ItemFileError
from tests.helpers import cfg_for, overrides


def test_crossed_cells_records_and_skip(tmp_path, tiny):
    policies = (f"policies=[{{name: initial, path: {tiny}, training_convention: initial, train_seed: null}},"
                f"{{name: grpo-hash/s1, path: {tiny}, training_convention: hash, train_seed: 1}}]")
    cfg = cfg_for(*overrides(tmp_path / "run", tiny, extra=[policies]))
    summary = run_eval(cfg, progress=False)
    files = sorted(p.name for p in (tmp_path / "run" / "responses").glob("*.jsonl"))
    assert len(files) == 8 and "grpo-hash_s1__boxed__para_a.jsonl" in files
    rs = read_responses([tmp_path / "run" / "responses"])  # the response-record contract (docs/formats.md) holds
    para = [r for r in rs.records if r["template"] == "para_a"]
    assert len(rs.records) == 2 * 2 * 6 + 2 * 2 * 3 and len({r["item_id"] for r in para}) == 3
    import json

    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["items"]["arith-test.jsonl"]
    assert {r["items_sha256"] for r in rs.records} == {recorded} and len(summary) == 8
    assert all(r["gen_seed"] == 20260908 + int(r["item_id"]) for r in rs.records)
    # each record stores its policy's parts where it is made, so no reader parses the name back
    assert {(r["policy"], r["method"], r["checkpoint"]) for r in rs.records} == {("initial", "initial", ""),
                                                                                ("grpo-hash/s1", "grpo", "")}
    again = run_eval(cfg, progress=False)
    assert all(v == {"skipped": True} for v in again.values())


def test_changed_settings_and_items_are_refused(tmp_path, tiny):
    run = tmp_path / "run"
    run_eval(cfg_for(*overrides(run, tiny)), progress=False)
    with pytest.raises(RunError, match="generated with other settings; pass overwrite=true"):
        run_eval(cfg_for(*overrides(run, tiny, extra=["eval.temperature=0.7"])), progress=False)
    items = run / "items" / "arith-test.jsonl"
    items.write_text(items.read_text().replace('"reference": "', '"reference": "1', 1))
    with pytest.raises(ItemFileError, match="item file changed"):
        run_eval(cfg_for(*overrides(run, tiny)), progress=False)


def test_a_cell_made_before_records_held_numerics_is_refused_once_or_carried_over(tmp_path, tiny, monkeypatch):
    """A cell sampled on the CPU records the numerics it ran (``numerics.recorded``: portable named, native left out),
    so a run under other numerics makes it again instead of reusing it. A cell made before records held them cannot
    say which it ran: it is refused in one line until ``numerics_before`` says, then rewritten once with them (its
    response file untouched), and read as current after."""
    import json

    from crossed_rlvr.numerics import PORTABLE

    run = tmp_path / "run"
    with monkeypatch.context() as native:  # as every cell was made before: no numerics in its record
        for key in PORTABLE:
            native.delenv(key)
        run_eval(cfg_for(*overrides(run, tiny)), progress=False)
    metas = sorted((run / "responses").glob("*.meta.json"))
    before = {p: json.loads(p.read_text()) for p in metas}
    bytes_before = {p: p.read_bytes() for p in (run / "responses").glob("*.jsonl")}
    assert metas and all("numerics" not in m for m in before.values())
    with pytest.raises(RunError, match="sampled before a cell's settings held its CPU numerics: pass "
                                       "numerics_before=portable"):
        run_eval(cfg_for(*overrides(run, tiny)), progress=False)
    again = run_eval(cfg_for(*overrides(run, tiny, extra=["numerics_before=portable"])), progress=False)
    assert all(v == {"skipped": True} for v in again.values())
    for p in metas:
        now = json.loads(p.read_text())
        assert now["numerics"] == "portable" and now["records_sha256"] == before[p]["records_sha256"]
        assert now["sha256"] != before[p]["sha256"]
    assert {p: p.read_bytes() for p in (run / "responses").glob("*.jsonl")} == bytes_before
    assert all(v == {"skipped": True} for v in run_eval(cfg_for(*overrides(run, tiny)), progress=False).values())
    with monkeypatch.context() as native:  # the machine's own kernels now: sampled with others, refused as such
        for key in PORTABLE:
            native.delenv(key)
        with pytest.raises(RunError, match="generated with other settings"):
            run_eval(cfg_for(*overrides(run, tiny)), progress=False)


@pytest.mark.long
def test_killed_run_resumes_to_identical_files(tmp_path, tiny):
    args = overrides(tmp_path / "ref", tiny, n_items=24, extra=["eval.batch_size=2", "eval.max_new_tokens=40"])
    run_eval(cfg_for(*args), progress=False)
    killed = overrides(tmp_path / "killed", tiny, n_items=24, extra=["eval.batch_size=2", "eval.max_new_tokens=40"])
    cmd = [sys.executable, "-m", "crossed_rlvr.eval.generate.cli", *killed]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    partial = tmp_path / "killed" / "responses" / ".partial"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lines = sum(p.read_text().count("\n") for p in partial.glob("*.jsonl")) if partial.exists() else 0
        finished = list((tmp_path / "killed" / "responses").glob("*.jsonl"))
        if lines >= 4 or finished:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    run_eval(cfg_for(*killed), progress=False)  # resume
    ref = {p.name: p.read_bytes() for p in (tmp_path / "ref" / "responses").glob("*.jsonl")}
    got = {p.name: p.read_bytes() for p in (tmp_path / "killed" / "responses").glob("*.jsonl")}
    assert got == ref and len(ref) == 4
    assert not list(partial.glob("*.jsonl"))


@pytest.mark.long
def test_cli_error_is_one_clear_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.eval.generate.cli", f"run_dir={tmp_path}",
                           f"model.path={tmp_path / 'missing'}", "tracking=off"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode != 0
    assert f"crossed-eval: model tiny: {tmp_path / 'missing'} does not exist" in proc.stderr
    assert not (Path(tmp_path) / "responses" / "initial__hash__original.jsonl").exists()


def test_a_policys_hash_is_its_weights_not_its_run_records(tmp_path):
    """The protocol card's weights sha256 (runner.policy_hashes) leaves out the trainer's timings and pickled
    arguments, so the same seeds give the same report; the weights themselves still count."""
    from crossed_rlvr.files import policy_sha256, tree_sha256

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "sft_summary.json").write_text('{"seconds": 1.0}')
    (tmp_path / "training_args.bin").write_bytes(b"run A")
    before = policy_sha256(tmp_path)
    (tmp_path / "sft_summary.json").write_text('{"seconds": 2.5}')
    (tmp_path / "training_args.bin").write_bytes(b"run B")
    assert policy_sha256(tmp_path) == before
    assert tree_sha256(tmp_path) != policy_sha256(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert policy_sha256(tmp_path) != before


@pytest.mark.parametrize("flags, numerics, expected", [({"avx2"}, "native", "float32"),
                                                       ({"avx2", "amx_bf16"}, "native", "bfloat16"),
                                                       ({"avx2", "amx_bf16"}, "portable", "float32")])
def test_auto_dtype_is_bfloat16_only_where_computed_natively(tmp_path, tiny, monkeypatch, flags, numerics, expected):
    """``eval.dtype=auto``: emulated CPU bfloat16 is several times slower than float32, so ``auto`` runs float32
    unless the CPU has AMX/AVX512-BF16 and its kernels are the CPU's own (portable numerics hold them to AVX2,
    which has no bfloat16); the resolved dtype is what the cells and their summary record."""
    import json

    import torch

    from crossed_rlvr import machine
    from crossed_rlvr.numerics import PORTABLE

    if numerics == "native":  # what the run records as its numerics (the suite's torch keeps its kernels)
        for key in PORTABLE:
            monkeypatch.delenv(key, raising=False)

    monkeypatch.setattr(machine, "cpu_flags", lambda: flags)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = cfg_for(*overrides(tmp_path / "run", tiny, n_items=2, extra=["eval.dtype=auto", "templates=[original]"]))
    summary = run_eval(cfg, progress=False)
    assert {cell["dtype"] for cell in summary.values()} == {expected}
    assert cfg.eval.dtype == "auto"  # the caller's config is left as it was given
    metas = list((tmp_path / "run" / "responses").glob("*.meta.json"))
    assert metas and {json.loads(m.read_text())["generation"]["dtype"] for m in metas} == {expected}
    assert machine.eval_dtype("float16") == "float16"  # an explicit dtype is kept as asked
