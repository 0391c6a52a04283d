"""The crossed design of ``crossed-eval``: policies x requests x templates x items x samples -> cells, one
response file each; item seeds, the generation loop and the records every engine's run writes alike.

Paper 001 §3 "Matched evaluation": every policy sees identical prompts and per-item seeds. The
item set is frozen into ``<run_dir>/items/<task>.jsonl`` and its sha256 is recorded in
``<run_dir>/run.json``; a later run that finds a different item file refuses to go on. Every
record carries that hash.

Resumable: a cell's responses are appended as the engine finishes them to ``responses/.partial/<cell>.jsonl``;
a re-run reads back the complete lines, generates only what is missing and, when the cell is whole,
writes the final file sorted by item and sample. Because each response depends only on its item
seed, the files are identical to those of an uninterrupted run. Finished cells whose settings
match are skipped; a finished cell made with other settings is refused unless ``overwrite=true``.

A finished cell is reused only with the bytes it was written with: its ``.meta.json`` records the response file's
sha256 (``records_sha256``, beside the settings' hash), so a response file edited or truncated since is said and
generated again, not read back as this design's responses.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.eval.generate.device import hashed_settings
from crossed_rlvr.eval.generate.engines import Generation, GenParams
from crossed_rlvr.faults import at
from crossed_rlvr.files import atomic_write_json, atomic_write_text, config_sha256, settings, sha256_file
from crossed_rlvr.fingerprint import fingerprint
from crossed_rlvr.layout import EvalLayout
from crossed_rlvr.policies.policy import Policy
from crossed_rlvr.prompts import messages, render
from crossed_rlvr.task_sources import freezes_train_rows, task_kind
from crossed_rlvr.tasks.build import build_items
from crossed_rlvr.tasks.items import ItemFileError, read_items, write_items

if TYPE_CHECKING:
    from tqdm import tqdm
    from transformers import PreTrainedTokenizerBase

    from crossed_rlvr.conf.schema import EvalCommandConf, ModelConf, TaskConf
    from crossed_rlvr.eval.generate.engines import Backend


class RunError(CrossedError, ValueError):
    pass


# finished responses handed over for writing at least this often: vLLM runs up to 256 rows at once (eval=vllm_cpu), and
# a kill loses only what was not yet written
WRITE_EVERY = 32
# the key of a cell's settings record that holds its response file's sha256 (outside the settings' own hash)
RECORDS_SHA256 = "records_sha256"


def slug(name: str) -> str:
    return name.replace("/", "_")


def cell_name(policy: str, request: str, template: str) -> str:
    return f"{slug(policy)}__{request}__{template}"


def resolve_model_path(model_cfg: ModelConf) -> str:
    """Directory (or hub name) of a model config's weights."""
    if model_cfg.source == "gguf-smollm2":
        from crossed_rlvr.policies.smollm import smollm2_135m_dir

        return str(smollm2_135m_dir(model_cfg.path))
    if not model_cfg.path:
        raise RunError(f"model {model_cfg.name}: no path given (set model.path=...)")
    if model_cfg.source == "local" and not Path(model_cfg.path).exists():
        raise RunError(f"model {model_cfg.name}: {model_cfg.path} does not exist")
    return str(model_cfg.path)


def config_policies(cfg: EvalCommandConf) -> list[Policy]:
    """The policies a crossed-eval config lists, read into :class:`Policy` once, where the command starts (every
    fact as the entry gives it); none listed: ``model`` as the initial policy."""
    if not cfg.policies:
        return [Policy.initial(resolve_model_path(cfg.model))]
    return [Policy.from_entry(settings(entry)) for entry in cfg.policies]


def recorded_path(path: str, run_dir: Path) -> str:
    """A local model directory relative to the run directory (so the same study in another folder writes
    the same bytes); hub names stay as they are."""
    if Path(path).exists():
        return os.path.relpath(Path(path).resolve(), Path(run_dir).resolve())
    return path


def frozen_items(run_dir: Path, task_cfg: TaskConf) -> tuple[list[dict[str, Any]], str, Path]:
    """The run's frozen item file: created on first use, then checked against run.json."""
    path = EvalLayout(run_dir).items(task_cfg.name, task_cfg.split)
    manifest_path = EvalLayout(run_dir).manifest
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    expected = manifest.get("items", {}).get(path.name)
    if not path.exists():
        if expected:
            raise ItemFileError(f"{path}: item file recorded in {manifest_path} is missing; restore it or use a new run_dir")
        expected = write_items(path, build_items(task_cfg))
        manifest.setdefault("items", {})[path.name] = expected
        if freezes_train_rows(task_cfg):  # how train/dev/test were cut, beside the hash
            from crossed_rlvr.tasks.splits import split_record

            manifest.setdefault("splits", {})[path.name] = split_record(task_cfg)
        atomic_write_json(manifest_path, manifest)
    items, sha = read_items(path, expected)
    if task_cfg.n_items:
        items = items[: int(task_cfg.n_items)]
    return items, sha, path


def item_seed(base: int, item: dict[str, Any], index: int, sample: int) -> int:
    """Per-item seed = base + item id (App. C.1); samples beyond the first are offset by 10^7 each. The one rule of
    every task kind: the request is not in it, so every request draws the same random numbers for an item and
    sample (common random numbers pair the crossed contrast; docs/architecture.md "Seeds")."""
    iid = str(item["item_id"])
    return base + (int(iid) if iid.isdigit() else index) + sample * 10_000_000


def template_items(items: list[dict[str, Any]], template: str, subset: int | None, seed: int) -> list[dict[str, Any]]:
    """All items for the original wording; a fixed seeded subset for the paraphrases (App. B.3)."""
    if template == "original" or not subset or subset >= len(items):
        return items
    chosen = set(random.Random(seed).sample(range(len(items)), subset))
    return [it for k, it in enumerate(items) if k in chosen]


def _read_partial(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """A cell's own scratch file read back; not through ``files.json_lines``, which refuses a bad line: here the
    last line may be cut by a kill, and everything from it on is generated again."""
    done: dict[tuple[str, int], dict[str, Any]] = {}
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            break  # a line cut by the interruption: regenerate from here
        done[(rec["item_id"], rec["sample_idx"])] = rec
    return done


# (question, request, template, system) -> the chat turns a policy is asked under (TaskKind's ``messages``)
Prompt = Callable[[str, str, str, "str | None"], list[dict[str, str]]]
# (a finished cell's records, its request) -> its rates for the run's summary (TaskKind's ``cell_measures``)
Measures = Callable[[list[dict[str, Any]], str], dict[str, Any]]


@dataclass
class Cell:
    """One policy x request x wording of the crossed design, with its files."""

    name: str
    pol: Policy
    request: str
    template: str
    items: list[dict[str, Any]]
    meta: dict[str, Any]
    final: Path
    meta_path: Path
    partial: Path       # a serial run's scratch, appended as responses finish
    partial_meta: Path
    shards: Path        # a distributed run's scratch: one file per finished shard (eval/generate/workers.py)

    @property
    def size(self) -> int:
        return len(self.items) * int(self.meta["samples"])


@dataclass
class Plan:
    """The crossed design of one crossed-eval run: its cells and what every record carries."""

    cells: list[Cell]
    task: str
    items_sha: str
    items_file: str
    run_dir: Path
    params: GenParams
    system: str | None
    prompt: Prompt  # the task kind's chat turns
    measures: Measures  # a finished cell's rates, by the task kind
    numerics_before: str | None = None  # what cells made before their records held numerics ran (open_cell)


def plan(cfg: EvalCommandConf) -> Plan:
    """The cells of the design (policies x requests x wordings), the item set frozen on first use; whatever the
    task's kind (its prompts and cell rates from crossed_rlvr/task_sources.py)."""
    run_dir = Path(cfg.run_dir)
    layout = EvalLayout(run_dir)
    layout.partial.mkdir(parents=True, exist_ok=True)
    items, items_sha, items_path = frozen_items(run_dir, cfg.task)
    kind = task_kind(cfg.task)
    facts = kind.hook("run_facts")
    if facts is not None:  # e.g. a code task's dataset file, whose tests crossed-score runs
        record_facts(layout, facts(cfg.task))
    gen = cfg.eval
    params = GenParams(float(gen.temperature), float(gen.top_p), int(gen.max_new_tokens), int(gen.context_limit))
    policies = config_policies(cfg)
    system = cfg.model.system
    cells = []
    for pol in policies:
        for request in cfg.requests:
            for template in cfg.templates:
                cell_items = template_items(items, template, cfg.template_subset, cfg.template_subset_seed)
                name = cell_name(pol.name, request, template)
                inputs = {"policy": pol.cell_settings(), "request": request, "template": template,
                          "items_sha256": items_sha, "n_items": len(cell_items), "samples": cfg.samples,
                          "system": system, "generation": hashed_settings(gen)}
                # the one fingerprint, with the CPU kernels sampled with (a GPU's have no such choice)
                meta, sha = fingerprint(inputs, numerics=gen.device == "cpu")
                meta["sha256"] = sha
                cells.append(Cell(name, pol, request, template, cell_items, meta, layout.response_file(name),
                                  layout.response_meta(name), layout.response_file(name, partial=True),
                                  layout.response_meta(name, partial=True), layout.shards(name)))
    return Plan(cells, cfg.task.name, items_sha, items_path.name, run_dir, params, system, kind.step("messages"),
                kind.step("cell_measures"), cfg.numerics_before)


def record_facts(layout: EvalLayout, facts: dict[str, Any]) -> None:
    """Add the task kind's facts to ``run.json`` (rewritten only when they change). A fact named ``*sha256`` is the
    hash of a file the frozen items were made from: one that changed since is refused, as a changed item file is."""
    manifest = json.loads(layout.manifest.read_text()) if layout.manifest.exists() else {}
    for key, value in facts.items():
        if key.endswith("sha256") and manifest.get(key) not in (None, value):
            raise ItemFileError(f"{layout.manifest}: field {key!r} is {manifest[key]} but the task's file now has "
                                f"{value}; a run must not mix item sets: restore the file or use a new run_dir")
    if any(manifest.get(k) != v for k, v in facts.items()):
        atomic_write_json(layout.manifest, {**manifest, **facts})


def read_meta(path: Path) -> dict[str, Any]:
    """A cell's settings record, or {} when it is missing or unreadable (cut by a kill, edited by hand)."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def changed_since_written(records: Path, meta: dict[str, Any]) -> bool:
    """Whether a finished response file's bytes differ from those its settings record says it was written with
    (a record from before the hash was kept has none to differ from: the file is trusted, as it was then)."""
    recorded = meta.get(RECORDS_SHA256)
    return recorded is not None and sha256_file(records) != recorded


def say_redone(records: Path) -> None:
    """One line on stderr (above a progress bar, if one is drawn) for a finished file generated again."""
    from tqdm import tqdm

    tqdm.write(f"crossed-eval: {records}: changed since it was written (its bytes differ from the sha256 its "
               f"{EvalLayout.meta_of(records).name} records); generating it again", file=sys.stderr)


def predates_numerics(old: dict[str, Any], meta: dict[str, Any]) -> bool:
    """Whether a finished cell's record ``old`` is ``meta`` as written before a cell's settings held the CPU numerics it
    was sampled with: the same settings less those."""
    rest = {k: v for k, v in meta.items() if k not in ("numerics", "sha256")}
    return "numerics" in meta and "numerics" not in old and old.get("sha256") == config_sha256(rest)


def carry_over(cell: Cell, old: dict[str, Any], numerics_before: str | None, overwrite: bool) -> dict[str, Any]:
    """A finished cell's record, rewritten once with the numerics it was sampled with where it predates them
    (:func:`predates_numerics`) and they are the ones sampled with now (``numerics_before``, given: nothing in the
    record says). Unknown, the cell is refused in one line saying how to go on."""
    if not predates_numerics(old, cell.meta):
        return old
    if numerics_before == cell.meta["numerics"]:
        new = {**cell.meta, **({RECORDS_SHA256: old[RECORDS_SHA256]} if RECORDS_SHA256 in old else {})}
        atomic_write_json(cell.meta_path, new)
        return new
    if numerics_before is None and not overwrite:
        raise RunError(f"{cell.final} was sampled before a cell's settings held its CPU numerics: pass "
                       f"numerics_before=portable (every command's default) or native, as it was made, or "
                       "overwrite=true to sample it again")
    return old


def open_cell(cell: Cell, overwrite: bool, numerics_before: str | None = None
              ) -> dict[tuple[str, int], dict[str, Any]] | None:
    """The responses a cell already has (its scratch files read back), or None when it is finished with
    these settings and these bytes. A finished cell of other settings is refused unless ``overwrite``; one whose
    response file changed since it was written is said and removed, so that it is generated again."""
    if cell.final.exists():
        old = carry_over(cell, read_meta(cell.meta_path), numerics_before, overwrite)
        if old.get("sha256") != cell.meta["sha256"]:
            if not overwrite:
                why = "was generated with other settings" if old else f"has no readable {cell.meta_path.name}"
                raise RunError(f"{cell.final} {why}; pass overwrite=true or use a new run_dir")
        elif changed_since_written(cell.final, old):
            say_redone(cell.final)
            cell.final.unlink()
            cell.meta_path.unlink(missing_ok=True)
        else:
            return None
    stale = read_meta(cell.partial_meta).get("sha256") != cell.meta["sha256"]
    if stale:  # an interrupted cell of other settings: our own scratch, not results
        cell.partial.unlink(missing_ok=True)
        shutil.rmtree(cell.shards, ignore_errors=True)
    cell.partial_meta.write_text(json.dumps(cell.meta, indent=2, sort_keys=True) + "\n")
    done = _read_partial(cell.partial)
    for shard in sorted(cell.shards.glob("*.jsonl")) if cell.shards.is_dir() else []:
        done.update(_read_partial(shard))  # written whole (atomically) by the driver of a distributed run
    return done


def unfinished(p: Plan, overwrite: bool, bar: tqdm, summary: dict[str, Any]
               ) -> Iterator[tuple[Cell, dict[tuple[str, int], dict[str, Any]]]]:
    """Every cell still to generate with the responses it already has; finished cells are counted on the
    bar and summarised as skipped (the serial run and the distributed driver walk the design alike)."""
    for cell in p.cells:
        with cell_writes(cell):
            done = open_cell(cell, overwrite, p.numerics_before)
        if done is None:
            bar.update(cell.size)
            summary[cell.name] = {"skipped": True}
            continue
        bar.update(len(done))
        yield cell, done


def cell_writes(cell: Cell) -> AbstractContextManager[None]:
    """The block writes this cell's files: a fault of the machine in it names the cell in its one line."""
    return at(f"the cell {cell.name}")


def todo_of(cell: Cell, done: dict[tuple[str, int], dict[str, Any]]) -> list[tuple[int, dict[str, Any], int]]:
    """(position, item, sample) of every response the cell still lacks, in the cell's order."""
    return [(k, it, s) for k, it in enumerate(cell.items) for s in range(int(cell.meta["samples"]))
            if (str(it["item_id"]), s) not in done]


def generate(backend: Backend, tokenizer: PreTrainedTokenizerBase, todo: list[tuple[int, dict[str, Any], int]],
             request: str, template: str, system: str | None, base_seed: int, batch_size: int,
             params: GenParams, prompt: Prompt = messages) -> Iterator[list[tuple[int, int, str, Generation]]]:
    """(position in ``todo``, item seed, prompt sha256, generation) of each response of one cell's ``todo``, as
    ``generate_jobs`` gives them."""
    jobs = [Job(request, template, k, it, s) for k, it, s in todo]
    yield from generate_jobs(backend, tokenizer, jobs, system, base_seed, batch_size, params, prompt)


@dataclass(frozen=True)
class Job:
    """One response to generate: the request and wording it answers, the item, its position in its cell, the
    sample."""

    request: str
    template: str
    index: int
    item: dict[str, Any]
    sample: int


def generate_jobs(backend: Backend, tokenizer: PreTrainedTokenizerBase, jobs: list[Job], system: str | None,
                  base_seed: int, batch_size: int, params: GenParams, prompt: Prompt = messages
                  ) -> Iterator[list[tuple[int, int, str, Generation]]]:
    """(position in ``jobs``, item seed, prompt sha256, generation) of each job as the engine finishes it,
    ``batch_size`` (at most ``WRITE_EVERY``) at a time: a kill loses at most those and the ones being generated. The
    engine gets every job at once and keeps ``batch_size`` rows decoding, refilling as rows end, whichever cells the
    jobs belong to. The one generation loop of the serial run and of every distributed worker, for every task kind
    (``prompt``: its messages; an answer task's by default)."""
    rendered = [render(tokenizer, prompt(j.item["question"], j.request, j.template, system)) for j in jobs]
    seeds = [item_seed(base_seed, j.item, j.index, j.sample) for j in jobs]
    ready: list[tuple[int, int, str, Generation]] = []
    for k, out in backend.stream([r[1] for r in rendered], seeds, params):
        ready.append((k, seeds[k], rendered[k][2], out))
        if len(ready) >= min(batch_size, WRITE_EVERY):
            yield ready
            ready = []
    if ready:
        yield ready


def make_record(p: Plan, cell: Cell, it: dict[str, Any], s: int, seed: int, sha: str, out: Generation) -> dict[str, Any]:
    """One response record (docs/formats.md), the same whichever process generated it."""
    pol = cell.pol
    rec = {
        "item_id": str(it["item_id"]), "task": p.task, **pol.facts(),  # the policy's facts as given, never parsed
        "request": cell.request, "template": cell.template, "sample_idx": s, "gen_seed": seed,
        "prompt_sha256": sha, "response": out.text, "finish_reason": out.finish_reason,
        "prompt_tokens": out.prompt_tokens, "response_tokens": out.response_tokens,
        "reference": str(it["reference"]), "items_sha256": p.items_sha,
        "items_file": p.items_file, "model_path": recorded_path(pol.path, p.run_dir),
        # decoding travels with every response, so a sweep over it scores and analyses as one study
        "temperature": p.params.temperature, "top_p": p.params.top_p, "max_new_tokens": p.params.max_new_tokens,
    }
    if it.get("stratum") is not None:  # e.g. operations per expression (Table 20)
        rec["stratum"] = str(it["stratum"])
    return rec


def finish_cell(cell: Cell, done: dict[tuple[str, int], dict[str, Any]], seconds: float, measures: Measures
                ) -> dict[str, Any]:
    """Write a whole cell's final file (sorted by item and sample) and clear its scratch; a cell that lacks
    any response is never written."""
    missing = todo_of(cell, done)
    if missing:
        _k, it, s = missing[0]
        raise RunError(f"{cell.name}: {len(missing)} responses missing (first: item {it['item_id']!r}, sample {s}); "
                       "re-run to generate them")
    order = {str(it["item_id"]): k for k, it in enumerate(cell.items)}
    records = sorted(done.values(), key=lambda r: (order[r["item_id"]], r["sample_idx"]))
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    # the record of what made the file first, with the file's own hash (of the bytes atomic_write_jsonl would
    # write): a kill between the two leaves the record of a file not yet in place (the cell unfinished, its scratch
    # kept), never a file without its record
    atomic_write_json(cell.meta_path, {**cell.meta, RECORDS_SHA256: hashlib.sha256(text.encode()).hexdigest()})
    atomic_write_text(cell.final, text)
    cell.partial.unlink(missing_ok=True)
    shutil.rmtree(cell.shards, ignore_errors=True)
    cell.partial_meta.unlink(missing_ok=True)
    gen = cell.meta["generation"]
    return {**cell_summary(records, cell.request, seconds, measures), "backend": gen.get("backend"),
            "dtype": gen.get("dtype")}


def answer_measures(records: list[dict[str, Any]], request: str) -> dict[str, Any]:
    """An answer cell's payload, extractable and strict and lenient accuracy, by the reader panel (fast readers)."""
    from crossed_rlvr.eval.score.panel import score_response
    from crossed_rlvr.eval.score.readers import STRICT

    rows = [score_response(r["response"], r["reference"], request, slow=False) for r in records]
    n = max(1, len(rows))
    return {
        "n": len(rows),
        "payload": sum(r["requested_payload"] for r in rows) / n,
        "extractable": sum(r["extractable"] for r in rows) / n,
        "strict_accuracy": sum(r[f"{STRICT[request]}.correct"] for r in rows) / n,
        "lenient_accuracy": sum(r["last_number.correct"] for r in rows) / n,
    }


def cell_summary(records: list[dict[str, Any]], request: str, seconds: float, measures: Measures
                 ) -> dict[str, Any]:
    """A finished cell's line in the run's summary: the task kind's rates, truncation and throughput."""
    n = max(1, len(records))
    tokens = sum(int(r.get("response_tokens") or 0) for r in records)
    return {
        **measures(records, request),
        "truncated": sum(rec["finish_reason"] == "length" for rec in records) / n,
        "seconds": round(seconds, 1),
        # the measured throughput, so the backend and dtype of a preset are chosen by figures (a resumed
        # cell counts only this run's seconds, so its rate reads high)
        "response_tokens": tokens,
        "tokens_per_second": round(tokens / seconds, 1) if seconds > 0 else None,
        "threads": _threads(),
    }


def _threads() -> int | None:
    import sys

    torch = sys.modules.get("torch")  # never import torch only to report its threads
    return torch.get_num_threads() if torch is not None else None
