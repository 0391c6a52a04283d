"""The serial run of ``crossed-eval``: every missing response of the crossed design, one policy in memory
at a time, all of its cells in one stream of the engine (or spread over Ray workers, ``workers.py``); see
``plan.py`` for the design, resume and file rules (paper 001 §3 "Matched evaluation").
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from crossed_rlvr.conf.schema import EvalCommandConf, EvalConf, conf_of
from crossed_rlvr.eval.generate.device import placed
from crossed_rlvr.eval.generate.engines import load_backend, release
from crossed_rlvr.eval.generate.plan import (
    Cell,
    Job,
    Plan,
    cell_writes,
    finish_cell,
    generate_jobs,
    make_record,
    plan,
    recorded_path,
    todo_of,
    unfinished,
)
from crossed_rlvr.files import atomic_write_json, policy_sha256
from crossed_rlvr.layout import ArmLayout, EvalLayout
from crossed_rlvr.policies.policy import Policy

if TYPE_CHECKING:
    from collections.abc import Iterator

    from omegaconf import DictConfig
    from tqdm import tqdm
    from transformers import PreTrainedTokenizerBase

    from crossed_rlvr.eval.generate.engines import Backend
    from crossed_rlvr.eval.generate.workers import OnEvent
    from crossed_rlvr.tracking import Tracker


def run_eval(given: EvalCommandConf | DictConfig, progress: bool = True, on_event: OnEvent | None = None,
             release_last: bool = True) -> dict[str, Any]:
    """Generate every missing response of the crossed design; returns a summary per cell.

    ``distribute.workers`` > 0 spreads the cells (split into shards) over Ray workers, each with its own
    engine (``eval/generate/workers.py``); the files are the same as this process alone would write.
    ``on_event(kind, info)`` is told of worker starts and finished shards (tests, monitoring). ``release_last``
    False leaves the last policy's engine loaded for a caller whose process ends next (shutting a vLLM engine down
    took ~2 s of a 30 s command, measured on 2 cores); every earlier engine is shut down before the next loads."""
    from tqdm import tqdm

    # run_eval is the command's body and its door for Python callers (the study and validation hand it the typed
    # config; a notebook or test a composed node): typed once here, an EvalCommandConf passed as is; a code task's
    # cells are cells like any other (their prompts and rates from the task's kind)
    cfg = resolve_eval(conf_of(EvalCommandConf, given))
    p = plan(cfg)
    total = sum(c.size for c in p.cells)
    summary: dict[str, Any] = {}
    tracker = eval_tracker(cfg)
    bar = tqdm(total=total, desc="crossed-eval", unit="resp", disable=not progress)
    machines: list[dict[str, Any]] = []
    try:
        if cfg.distribute.workers > 0:
            from crossed_rlvr.eval.generate.workers import run_distributed

            machines = run_distributed(cfg, p, summary, bar, tracker, on_event)
        else:
            run_serial(cfg, p, summary, bar, tracker, release_last)
    finally:
        bar.close()
        if tracker is not None:
            tracker.finish()
    if any(not v.get("skipped") for v in summary.values()):  # where these responses were generated
        from crossed_rlvr.machine import machine

        manifest = json.loads(EvalLayout(p.run_dir).manifest.read_text())
        for here in machines or [machine()]:
            if here not in manifest.setdefault("machines", []):
                manifest["machines"].append(here)
        manifest["policies"] = {**manifest.get("policies", {}), **policy_hashes(p)}
        atomic_write_json(EvalLayout(p.run_dir).manifest, manifest)
    EvalLayout(p.run_dir).summary.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def resolve_eval(cfg: EvalCommandConf) -> EvalCommandConf:
    """A copy of the config with ``eval.device`` and ``eval.dtype`` resolved once, here: the cells record them
    and every worker runs them (a ``cuda`` nothing can run is refused before any file is written)."""
    gen = placed(cfg.eval, gpu_workers(cfg))
    return replace(cfg, eval=replace(cfg.eval, device=str(gen.device), dtype=str(gen.dtype)))


def gpu_workers(cfg: EvalCommandConf) -> bool | None:
    """None: generated in this process; else whether each Ray worker is given a GPU (they, not this driver, run
    the engines)."""
    if cfg.distribute.workers <= 0:
        return None
    return cfg.distribute.gpus_per_worker > 0


def policy_hashes(p: Plan) -> dict[str, dict[str, Any]]:
    """Each policy as evaluated: the recorded path and the sha256 of its folder (files.policy_sha256), for the report's
    protocol card (a hub name that is not a local folder is recorded as it is), then its facts
    (``Policy.entry``), so :func:`recorded_policies` reads it back whole."""

    out: dict[str, dict[str, Any]] = {}
    for pol in {c.pol.name: c.pol for c in p.cells}.values():
        here = Path(pol.path)
        facts = {k: v for k, v in pol.entry().items() if k not in ("name", "path")}
        out[pol.name] = {"path": recorded_path(pol.path, p.run_dir),
                         "weights_sha256": policy_sha256(here) if here.exists()
                         else "not a local folder", **facts}
        arm = ArmLayout.holding(here)  # a trained arm's checkpoint: the arm's config, for the protocol card
        if arm is not None:
            out[pol.name]["run_config"] = str(arm.resolved_config.resolve())
    return out


def recorded_policies(run_dir: str | Path) -> dict[str, Policy]:
    """The policies an evaluation's ``run.json`` records, by name, each with the weights hash it was evaluated with
    (its path as recorded: relative to the run directory for a local folder). Entries written before a policy's
    facts were recorded there are left out: their records carry the facts."""
    manifest = EvalLayout(Path(run_dir)).manifest
    recorded = json.loads(manifest.read_text()).get("policies", {}) if manifest.exists() else {}
    return {name: replace(Policy.from_entry(entry, name), weights=str(entry.get("weights_sha256") or ""))
            for name, entry in recorded.items() if "training_convention" in entry}


def run_serial(cfg: EvalCommandConf, p: Plan, summary: dict[str, Any], bar: tqdm, tracker: Tracker | None,
               release_last: bool = True) -> None:
    """One policy in memory at a time, the unfinished cells of each policy generated together: the engine decodes
    ``eval.batch_size`` rows whichever cells they answer, so a cell's last rows never leave the batch half empty."""
    from itertools import groupby

    gen = cfg.eval
    loaded: dict[str, tuple[Backend, PreTrainedTokenizerBase]] = {}
    try:
        for path, opened in groupby(unfinished(p, bool(cfg.overwrite), bar, summary), key=lambda c: c[0].pol.path):
            cells = [PolicyCell(cell, done, todo_of(cell, done)) for cell, done in opened]
            if any(c.todo for c in cells) and path not in loaded:
                release(loaded)  # one policy in memory at a time, its engine shut down first
                loaded[path] = load_backend(path, gen)
            backend, tokenizer = loaded.get(path, (None, None))
            for c, seconds in generate_cells(p, cells, backend, tokenizer, gen, bar):
                with cell_writes(c.cell):
                    summary[c.cell.name] = finish_cell(c.cell, c.done, seconds, p.measures)
                if tracker is not None:
                    tracker.log({f"{c.cell.name}/{k}": v for k, v in summary[c.cell.name].items()})
    except BaseException:
        release(loaded)
        raise
    if release_last:
        release(loaded)


@dataclass
class PolicyCell:
    """A cell of the policy being generated: the responses it has and those it lacks."""

    cell: Cell
    done: dict[tuple[str, int], dict[str, Any]]
    todo: list[tuple[int, dict[str, Any], int]]


def generate_cells(p: Plan, cells: list[PolicyCell], backend: Backend | None, tokenizer: PreTrainedTokenizerBase | None,
                   gen: EvalConf, bar: tqdm) -> Iterator[tuple[PolicyCell, float]]:
    """Each cell of one policy with its seconds, as its last response is written: every response is appended to its
    cell's scratch file and synced to disk as the engine hands it over (a kill loses at most the responses being
    generated). A cell's seconds are those since the policy's previous cell was finished (the cells share the engine's
    batch), so they add up to the policy's."""
    start = time.perf_counter()
    for c in cells:  # nothing to generate: finished from its scratch file
        if not c.todo:
            yield c, 0.0
    jobs = [(c, Job(c.cell.request, c.cell.template, k, it, s)) for c in cells for k, it, s in c.todo]
    if not jobs:
        return
    assert backend is not None and tokenizer is not None
    left = {id(c): len(c.todo) for c in cells}
    files: dict[int, IO[str]] = {}  # each unfinished cell's scratch file, open while the stream runs
    try:
        for c in cells:
            if c.todo:
                with cell_writes(c.cell):
                    files[id(c)] = c.cell.partial.open("a", encoding="utf-8")
        for ready in generate_jobs(backend, tokenizer, [j for _, j in jobs], p.system, int(gen.base_seed),
                                   int(gen.batch_size), p.params, p.prompt):
            touched: dict[int, PolicyCell] = {}
            for at, seed, sha, out in ready:
                c, job = jobs[at]
                rec = make_record(p, c.cell, job.item, job.sample, seed, sha, out)
                with cell_writes(c.cell):
                    files[id(c)].write(json.dumps(rec, ensure_ascii=False) + "\n")
                c.done[(rec["item_id"], job.sample)] = rec
                left[id(c)] -= 1
                touched[id(c)] = c
            for key, c in touched.items():
                with cell_writes(c.cell):
                    files[key].flush()
                    os.fsync(files[key].fileno())
            bar.update(len(ready))
            for key, c in touched.items():
                if left[key] == 0:
                    files.pop(key).close()
                    now = time.perf_counter()
                    yield c, now - start
                    start = now
    finally:
        for fh in files.values():
            fh.close()


def eval_tracker(cfg: EvalCommandConf) -> Tracker | None:
    """The evaluation's wandb run (name ``eval``, group = the study), or None when tracking is off."""
    from crossed_rlvr.tracking import resolved_config, start_run

    return start_run(cfg.tracking, name="eval", job_type="eval", run_dir=Path(cfg.run_dir), study=cfg.study,
                     config=resolved_config(cfg))
