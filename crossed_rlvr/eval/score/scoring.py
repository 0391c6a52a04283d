"""``crossed-score``: response files -> scores table (Parquet) + manifest (docs/formats.md).

Every reader of the panel and the payload detector is applied to every response, in worker
processes with a progress bar. The output is deterministic: rows are sorted by their key and the
same inputs give the same bytes. Scoring proceeds in shards written atomically into
``<output>.partial/``; an interrupted run resumes from the finished shards, so no row is lost or
duplicated. An existing output is never replaced silently: it is kept when its manifest matches
the inputs, and a different one is refused unless ``--overwrite`` is given.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from crossed_rlvr import __version__
from crossed_rlvr.errors import CrossedError
from crossed_rlvr.eval.score.panel import Item, Scorer, columns, score_response
from crossed_rlvr.eval.score.readers import READERS
from crossed_rlvr.files import atomic_write_json, sha256_file
from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.layout import EvalLayout, ScoresFiles
from crossed_rlvr.limits import Parser, add_number
from crossed_rlvr.machine import machine
from crossed_rlvr.records import PARTS, ResponseFileError, read_responses
from crossed_rlvr.tasks.code import CodeDataset, evaluated_dataset
from crossed_rlvr.tasks.items import item_order

KEY_COLUMNS = [
    "task", "policy", "training_convention", "train_seed", "request", "template", "item_id", "sample_idx",
    "gen_seed", "finish_reason", "prompt_tokens", "response_tokens", "reference",
]
SHARD_SIZE = 4096
# the record contract's optional decoding fields (records.OPTIONAL), with their column types
DECODING_FIELDS = {"temperature": pa.float64(), "top_p": pa.float64(), "max_new_tokens": pa.int64()}


def schema() -> pa.Schema:
    fields = [
        pa.field("task", pa.string()), pa.field("policy", pa.string()), pa.field("training_convention", pa.string()),
        pa.field("train_seed", pa.int64()), pa.field("request", pa.string()), pa.field("template", pa.string()),
        pa.field("item_id", pa.string()), pa.field("sample_idx", pa.int64()), pa.field("gen_seed", pa.int64()),
        pa.field("finish_reason", pa.string()), pa.field("prompt_tokens", pa.int64()),
        pa.field("response_tokens", pa.int64()), pa.field("reference", pa.string()),
        pa.field("stratum", pa.string()),  # optional item stratum (e.g. operations per expression, Table 20)
        # decoding of each response (null for imported outputs that do not record it): a sweep is one table
        *(pa.field(name, kind) for name, kind in DECODING_FIELDS.items()),
        # the policy's parts as its record stored them (null for records written before they were stored)
        *(pa.field(name, pa.string()) for name in PARTS),
    ]
    for col in columns():
        if col.endswith(".answer") or col == "category":
            fields.append(pa.field(col, pa.string()))
        elif col == "read_cap_chars":
            fields.append(pa.field(col, pa.int64()))
        else:
            fields.append(pa.field(col, pa.bool_()))
    return pa.schema(fields)


def _stratum(record: dict[str, Any]) -> str | None:
    value = record.get("stratum")
    return None if value is None else str(value)


def _manifest(files: list[Path], n_records: int) -> dict[str, Any]:
    return {
        "kind": "crossed-rlvr scores",
        "crossed_rlvr_version": __version__,
        "readers": list(READERS),
        "columns": schema().names,
        "n_records": n_records,
        "inputs": [{"path": str(p), "sha256": sha256_file(p)} for p in files],
        "machine": machine(),
    }


def _same_inputs(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("inputs", "readers", "columns", "n_records", "crossed_rlvr_version")
    return all(a.get(k) == b.get(k) for k in keys)


def _atomic_write_table(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def manifest_path(output: Path) -> Path:
    return ScoresFiles(output).manifest


def _score_shards(records: list[dict[str, Any]], shards: list[range], files: ScoresFiles, workers: int | None,
                  progress: bool, stop_after_shards: int | None) -> bool:
    """Score the shards not yet in ``files.partial`` (a shard is written whole, so an interrupted run resumes at the
    next one); False when stopped after ``stop_after_shards``."""
    from tqdm import tqdm

    todo = [k for k in range(len(shards)) if not files.shard(k).exists()]
    sch = schema()
    done_rows = sum(len(shards[k]) for k in range(len(shards)) if k not in todo)
    with tqdm(total=len(records), initial=done_rows, desc="crossed-score", unit="resp", disable=not progress) as bar:
        scorer = Scorer(workers) if todo and workers != 0 else None
        try:
            for n_done, k in enumerate(todo):
                if stop_after_shards is not None and n_done >= stop_after_shards:
                    return False
                shard = [records[i] for i in shards[k]]
                items = [Item(r["response"], r["reference"], r["request"], r["task"]) for r in shard]
                if scorer is None:
                    rows = [score_response(it.response, it.reference, it.request, task=it.task) for it in items]
                    bar.update(len(items))
                else:
                    rows = scorer.score(items, bar)
                table = pa.Table.from_pylist(
                    [{**{c: r[c] for c in KEY_COLUMNS}, "stratum": _stratum(r),
                      **{d: r.get(d) for d in DECODING_FIELDS}, **{p: r.get(p) for p in PARTS}, **row}
                     for r, row in zip(shard, rows, strict=True)], schema=sch
                )
                _atomic_write_table(table, files.shard(k))
        except OSError:
            if not files.shards():  # nothing to resume from: no empty scratch folder left
                shutil.rmtree(files.partial, ignore_errors=True)
            raise
        finally:
            if scorer is not None:
                scorer.close()
    return True


def score_files(
    inputs: Sequence[str | Path],
    output: str | Path,
    workers: int | None = None,
    overwrite: bool = False,
    shard_size: int = SHARD_SIZE,
    progress: bool = True,
    stop_after_shards: int | None = None,
) -> Path:
    """Validate and score response files into ``output`` (Parquet). Returns the output path.

    ``stop_after_shards`` stops early (as an interruption would), for tests of resumption.
    """

    output = Path(output)
    if output.is_dir():
        raise FileExistsError(f"{output} is a folder; --output names the scores table file "
                              f"(e.g. {EvalLayout(output).scores})")
    rs = read_responses(inputs)  # validates everything before anything is written
    manifest = _manifest(rs.files, len(rs.records))
    mpath = manifest_path(output)
    if output.exists():
        old = json.loads(mpath.read_text()) if mpath.exists() else {}
        if _same_inputs(old, manifest):
            print(f"{output} is up to date with its inputs; nothing to do", file=sys.stderr)
            return output
        if not overwrite:
            raise FileExistsError(
                f"{output} exists and was scored from different inputs; pass --overwrite to replace it "
                "or choose another --output"
            )

    records = sorted(rs.records, key=lambda r: (r["task"], r["policy"], r["request"], r["template"],
                                                item_order(r["item_id"]), r["sample_idx"]))
    partial, pmanifest = ScoresFiles(output).partial, ScoresFiles(output).partial_manifest
    if partial.exists() and (not pmanifest.exists() or not _same_inputs(json.loads(pmanifest.read_text()), manifest)):
        shutil.rmtree(partial)  # shards of other inputs: our own stale cache, not user data
    partial.mkdir(parents=True, exist_ok=True)
    atomic_write_json(pmanifest, manifest)

    shards = [range(i, min(i + shard_size, len(records))) for i in range(0, len(records), shard_size)]
    if not _score_shards(records, shards, ScoresFiles(output), workers, progress, stop_after_shards):
        return output  # stopped early (a test of resumption)
    sch = schema()
    tables = [pq.read_table(ScoresFiles(output).shard(k)) for k in range(len(shards))]
    full = pa.concat_tables(tables) if tables else sch.empty_table()
    output.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write_table(full, output)
    atomic_write_json(mpath, manifest)
    shutil.rmtree(partial)
    return output


def score_run(run_dir: Path, output: Path, workers: int | None = None, overwrite: bool = False,
              oracle_cache: Path | None = None) -> Path:
    """The one scoring entry of a crossed-eval run directory, whatever its task's kind: a code evaluation's
    programs run in the sandbox on the dataset its ``run.json`` names (:func:`score_code_run`), every other run's
    responses read by the reader panel (:func:`score_files`)."""
    code = evaluated_dataset(run_dir)
    if code is not None:
        return score_code_run(run_dir, code, output, workers, overwrite, oracle_cache)
    return score_files([run_dir], output, workers=workers, overwrite=overwrite)  # its responses/ alone are read


def score_code_run(run_dir: Path, ds: CodeDataset, output: Path, workers: int | None, overwrite: bool,
                   oracle_cache: Path | None = None) -> Path:
    """A code evaluation's responses (``crossed-eval`` on a code task) run in the sandbox on ``ds``, the dataset
    its ``run.json`` names (paper 001 App. D.3; eval/score/code.py), one sandbox slot per worker (default: every
    core this process may use); ``oracle_cache``: where the expected outputs are kept (default: the user's
    cache)."""
    from crossed_rlvr.eval.score.code import score_code
    from crossed_rlvr.records import read_responses

    if output.exists() and not overwrite:
        raise FileExistsError(f"{output} exists; pass --overwrite to score again")
    records = read_responses(sorted(EvalLayout(run_dir).responses.glob("*.jsonl")), prompt_names=True).records
    scores = score_code(records, ds, max(1, workers or len(os.sched_getaffinity(0))), oracle_cache)
    output.parent.mkdir(parents=True, exist_ok=True)
    scores.to_parquet(output, index=False)
    return output


@stops_cleanly("crossed-score")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        prog="crossed-score", description="Score response files with every reader and the payload detector."
    )
    parser.add_argument("inputs", nargs="+", help="response files (*.jsonl) or directories (a run directory)")
    parser.add_argument("-o", "--output", help="scores table (default: <run dir>/scores.parquet for one directory)")
    add_number(parser, "--workers", 0, 1024, default=None, why="0: score in this process", help="worker processes (default: all cores)")
    parser.add_argument("--overwrite", action="store_true", help="replace an output scored from other inputs")
    args = parser.parse_args(argv)
    output = args.output
    if output is None:
        if len(args.inputs) == 1 and Path(args.inputs[0]).is_dir():
            output = EvalLayout(Path(args.inputs[0])).scores
        else:
            parser.error("--output is required unless the input is one run directory")
    # A run directory's responses live in responses/; other *.jsonl there (metrics) are not responses.
    inputs = [str(EvalLayout(Path(p)).responses) if Path(p).is_dir() and EvalLayout(Path(p)).responses.is_dir()
              else p for p in args.inputs]
    try:
        if len(args.inputs) == 1 and Path(args.inputs[0]).is_dir():  # a run directory: one writer (folder_lock.py)
            from crossed_rlvr.folder_lock import hold

            hold(args.inputs[0], "crossed-score")
        if len(args.inputs) == 1 and Path(args.inputs[0]).is_dir():
            path = score_run(Path(args.inputs[0]), Path(output), args.workers, args.overwrite)
        else:
            path = score_files(inputs, output, workers=args.workers, overwrite=args.overwrite)
    except (ResponseFileError, FileExistsError, CrossedError) as err:
        print(f"crossed-score: {err}", file=sys.stderr)
        return 2
    manifest = manifest_path(Path(path))
    print(f"scores: {path}" + (f"\nmanifest: {manifest}" if manifest.exists() else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
