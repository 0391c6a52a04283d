"""Code cells are cells of crossed-eval's one design (paper 001 App. D.3 through §3's matched evaluation): a code
cell cut mid-way resumes to the file an uninterrupted run writes, Ray workers write the serial run's files, and
a code cell is seeded by the answer cells' rule (the request is not in the seed)."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

import crossed_rlvr.eval.generate.runner as runner
from crossed_rlvr.eval.generate.runner import run_eval
from crossed_rlvr.tasks.code import tiny_code_rows, write_code_dataset
from tests.helpers import cfg_for

N_TASKS = 6


@pytest.fixture(scope="module")
def code_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("code") / "tiny_code.jsonl"
    write_code_dataset(data, tiny_code_rows(N_TASKS))
    return data


def code_args(run_dir: Path, model: Path, data: Path, *extra: str) -> list[str]:
    policies = (f"policies=[{{name: initial, path: {model}, training_convention: initial, train_seed: null}},"
                f"{{name: grpo-fence/s1, path: {model}, training_convention: fence, train_seed: 1}}]")
    return [f"run_dir={run_dir}", "task=humaneval_plus", f"task.path={data}", "requests=[fence,begin_done]",
            "templates=[original]", f"model.path={model}", policies, "samples=2", "eval.max_new_tokens=24",
            "eval.context_limit=512", "eval.batch_size=3", "tracking=off", *extra]


def response_files(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run / "responses").glob("*.json*")) if p.is_file()}


@pytest.fixture(scope="module")
def serial(tmp_path_factory, tiny, code_data) -> Path:
    run = tmp_path_factory.mktemp("serial") / "run"
    run_eval(cfg_for(*code_args(run, tiny, code_data)), progress=False)
    return run


def test_code_cells_are_seeded_by_the_answer_cells_rule(serial):
    """gen_seed = base + row + 10^7 x sample, whatever the request: fence and begin_done draw the same numbers."""
    records = [json.loads(line) for p in (serial / "responses").glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(records) == 2 * 2 * N_TASKS * 2
    ids = [f"TinyCode/{k}" for k in range(N_TASKS)]
    assert all(r["gen_seed"] == 20260908 + ids.index(r["item_id"]) + 10_000_000 * r["sample_idx"] for r in records)
    def seeds(request: str) -> list[tuple[str, int, int]]:
        return sorted((r["item_id"], r["sample_idx"], r["gen_seed"]) for r in records
                      if (r["policy"], r["request"]) == ("initial", request))

    assert seeds("fence") == seeds("begin_done") and len(seeds("fence")) == N_TASKS * 2
    manifest = json.loads((serial / "run.json").read_text())  # crossed-score runs the tests of the file named here
    assert manifest["tasks"] == ids and manifest["dataset_sha256"] and manifest["code_dataset"].endswith(".jsonl")


def test_a_code_cell_cut_midway_resumes_to_the_uninterrupted_file(tmp_path, tiny, code_data, serial, monkeypatch):
    """The engine stops after its first batch (as a kill would stop it), the last scratch line half written; the
    rerun generates only what the scratch lacks and writes the uninterrupted run's files byte for byte."""
    run = tmp_path / "run"
    real = runner.generate_jobs

    def cut(*args, **kwargs):
        stream = real(*args, **kwargs)
        yield next(stream)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "generate_jobs", cut)
    with pytest.raises(KeyboardInterrupt):
        run_eval(cfg_for(*code_args(run, tiny, code_data)), progress=False)
    scratch = sorted((run / "responses" / ".partial").glob("*.jsonl"))
    kept = sum(p.read_text().count("\n") for p in scratch)
    assert scratch and 0 < kept < 2 * 2 * N_TASKS * 2 and not list((run / "responses").glob("*.jsonl"))
    with scratch[0].open("a") as fh:
        fh.write('{"item_id": "TinyCode/')  # a line cut by the kill
    asked: list[int] = []

    def counted(backend, tokenizer, jobs, *rest):
        asked.append(len(jobs))
        yield from real(backend, tokenizer, jobs, *rest)

    monkeypatch.setattr(runner, "generate_jobs", counted)
    run_eval(cfg_for(*code_args(run, tiny, code_data)), progress=False)
    assert sum(asked) == 2 * 2 * N_TASKS * 2 - kept  # only the missing responses were generated
    assert response_files(run) == response_files(serial)
    assert not list((run / "responses" / ".partial").glob("*.jsonl"))


@pytest.mark.exclusive
def test_code_cells_on_two_ray_workers_write_the_serial_files(tmp_path, tiny, code_data, serial):
    run = tmp_path / "run"
    events: list[tuple[str, dict]] = []
    summary = run_eval(cfg_for(*code_args(run, tiny, code_data, "distribute.workers=2", "distribute.shard_size=5")),
                       progress=False, on_event=lambda kind, info: events.append((kind, info)))
    assert len({info["pid"] for kind, info in events if kind == "worker"}) == 2
    assert len(summary) == 4 and all(s["n"] == N_TASKS * 2 for s in summary.values())
    left, right = sorted(response_files(serial)), sorted(response_files(run))
    assert left == right and len(left) == 8  # 2 policies x 2 code requests: records and settings
    assert [n for n in left if not filecmp.cmp(serial / "responses" / n, run / "responses" / n, shallow=False)] == []
