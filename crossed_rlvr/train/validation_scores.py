"""Scoring crossed validation on the fly: each step's responses are scored by ``crossed-score``'s code in a
worker process while training goes on, then summarised and logged.

Per step and request the summary holds the requested-payload rate and the strict, lenient, Math-Verify
and training-reward accuracies (the reader panel of paper 001 §2.2); wandb gets them as scalars against
``train/global_step`` and a ``wandb.Table`` with one row per response and one column per reader, so
that disagreements between readers can be filtered in the wandb UI. Everything is also written to
``validation/summary.jsonl`` and ``validation/scores/step-<K>.parquet`` for users without wandb.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pandas as pd

from crossed_rlvr.eval.score.readers import LENIENT, STRICT
from crossed_rlvr.layout import ArmLayout

TABLE_KEYS = ["step", "policy", "request", "template", "item_id", "reference", "response", "category",
              "requested_payload"]


def step_scalars(scores: pd.DataFrame, convention: str) -> dict[str, float]:
    """``<request>/<measure>`` rates of one validation step (fractions of its responses)."""
    out: dict[str, float] = {}
    for request, part in scores.groupby("request", sort=True):
        out[f"{request}/payload"] = float(part["requested_payload"].mean())
        for name, reader in (("strict", STRICT.get(str(request))), ("lenient", LENIENT.get(str(request))),
                             ("math_verify", "math_verify"), ("reward", f"reward_{convention}")):
            column = f"{reader}.correct"
            if reader is not None and column in part:
                out[f"{request}/{name}"] = float(part[column].astype(float).mean())
    return out


def table_frame(scores: pd.DataFrame, step: int, files: list[Path]) -> pd.DataFrame:
    """One row per response: its keys and text, then one 0/1 column per reader (named by the reader)."""
    from crossed_rlvr.records import read_responses

    # the scores table keeps keys and reader outcomes, not the text: join it back from the responses
    keys = ["policy", "request", "template", "item_id", "sample_idx"]
    texts = {tuple(r[k] for k in keys): r["response"] for r in read_responses(files).records}
    readers = [c[: -len(".correct")] for c in scores.columns if c.endswith(".correct")]
    frame = scores.assign(step=step, response=[texts[tuple(row)] for row in scores[keys].itertuples(index=False)])
    frame = frame[TABLE_KEYS].copy()
    for name in readers:
        frame[name] = scores[f"{name}.correct"].astype(bool)
    return frame.reset_index(drop=True)


@functools.cache
def _warm_once() -> None:
    """Import Math-Verify once: the time-limited scoring processes forked per step inherit it."""
    from crossed_rlvr.eval.score.panel import warm

    warm()


def _score_step(files: list[str], output: str, workers: int) -> str:
    from crossed_rlvr.eval.score.scoring import score_files

    _warm_once()

    return str(score_files(files, output, workers=workers, overwrite=True, progress=False))


class StepScorer:
    """Scores each validation step with ``crossed-score``'s own code in one worker process, started once per
    arm (so the readers are imported once, not at every step); ``collect`` picks up the finished steps,
    summarises and logs them. Training never waits for a step still being scored; the readers' hard time
    limits hold inside the worker (``workers`` scoring processes of its own)."""

    def __init__(self, arm: ArmLayout, convention: str, workers: int = 1) -> None:
        import concurrent.futures as cf
        import multiprocessing as mp

        self.arm, self.convention, self.workers = arm, convention, workers
        from crossed_rlvr.interrupt import ignore_interrupts

        self.pool = cf.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"),
                                           initializer=ignore_interrupts)
        self.pending: dict[int, tuple[Any, Path, list[Path]]] = {}

    def submit(self, step: int, files: list[Path]) -> None:
        scores = self.arm.validation_scores(step)
        scores.parent.mkdir(parents=True, exist_ok=True)
        future = self.pool.submit(_score_step, [str(f) for f in files], str(scores), self.workers)
        self.pending[step] = (future, scores, files)

    def collect(self, wait: bool = False) -> list[dict[str, Any]]:
        done = []
        for step in sorted(self.pending):
            future, scores, files = self.pending[step]
            if not future.done() and not wait:
                continue
            del self.pending[step]
            try:
                future.result()
            except Exception as err:  # the worker's error, re-raised with the step it belongs to
                raise RuntimeError(f"scoring validation step {step} into {scores} failed: {err}") from err
            done.append(self.record(step, scores, files))
        return done

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def record(self, step: int, scores_path: Path, files: list[Path]) -> dict[str, Any]:
        scores = pd.read_parquet(scores_path)
        entry = {"step": step, "policy": str(scores["policy"].iloc[0]), "n_responses": len(scores),
                 "scores": str(scores_path), **step_scalars(scores, self.convention)}
        with self.arm.validation_summary.open("a") as fh:
            fh.write(json.dumps(entry, sort_keys=True) + "\n")
        log_to_wandb(step, entry, table_frame(scores, step, files))
        return entry


def log_to_wandb(step: int, entry: dict[str, Any], frame: pd.DataFrame) -> None:
    """Scalars and the per-response table of one step into the arm's open wandb run (if any)."""
    import wandb

    run = wandb.run
    if run is None:
        return
    scalars = {f"validation/{k}": v for k, v in entry.items() if isinstance(v, float)}
    run.log({**scalars, "validation/responses": wandb.Table(dataframe=frame), "train/global_step": step})
