"""Score responses with the whole reader panel and the payload detector.

``score_response`` scores one response in-process. ``score_many`` scores many in worker processes
with a hard per-response time limit: chunks go to a process pool; a chunk that overruns is killed
and its responses are re-scored one by one, each under the limit; a response that still runs out
of time is scored without the slow (Math-Verify) readers, and if even that overruns it is
unreadable for every reader. Nothing hangs and nothing crashes the run.

We use pebble's ProcessPool because the standard library's pools cannot kill one hung task.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import crossed_rlvr.eval.score.mathverify as mathverify
import crossed_rlvr.eval.score.symbolic as symbolic
from crossed_rlvr.eval.score.payload import detect
from crossed_rlvr.eval.score.readers import READERS, STRICT
from crossed_rlvr.rewards import text as tx
from crossed_rlvr.rewards.conventions import REQUESTS

if TYPE_CHECKING:
    from tqdm import tqdm

PER_RESPONSE_LIMIT_S = 10.0


@dataclass(frozen=True)
class Item:
    """One response to score: its text, the reference answer and the request it was made under."""

    response: str
    reference: str
    request: str = "hash"
    task: str | None = None  # None: every reader; a GSM8K-style task skips the symbolic (MATH) readers


def reader_names(slow: bool = True) -> list[str]:
    return [n for n, r in READERS.items() if slow or not r.slow]


def _readers(slow: bool) -> list[tuple[str, str, str, Any]]:
    # (name, answer column, correct column, reader), rebuilt only when the registry grows.
    key = (slow, len(READERS))
    if key not in _READER_CACHE:
        _READER_CACHE[key] = [(n, f"{n}.answer", f"{n}.correct", READERS[n]) for n in reader_names(slow)]
    return _READER_CACHE[key]


_READER_CACHE: dict[tuple[bool, int], list[tuple[str, str, str, Any]]] = {}


def columns(slow: bool = True) -> list[str]:
    """Column names of one scored row, in a fixed order."""
    cols: list[str] = []
    for name in reader_names(slow):
        cols += [f"{name}.answer", f"{name}.correct"]
    cols += [f"payload.{c}" for c in REQUESTS] + ["category", "requested_payload", "extractable", "timed_out"]
    cols += ["read_truncated", "read_cap_chars"]
    cols += list(symbolic.DIAGNOSTICS)
    return cols


def score_response(response: str, reference: str, request: str = "hash", slow: bool = True,
                   task: str | None = None) -> dict[str, Any]:
    """Every reader and the payload detector on one response (paper 001 §2.1-2.2, App. B.2).

    ``requested_payload`` is d_r(y); ``extractable`` says whether the frozen requested-convention
    reader returns a value (the q_c indicator); ``category`` is the Table 11 category. Every reader sees
    ``text.read_window(response)``; ``read_truncated`` says whether that dropped the middle of the response.
    """
    truncated = len(response) > tx.READ_CAP_CHARS
    response = tx.read_window(response)
    row: dict[str, Any] = {}
    symbolic_task = task is None or symbolic.is_symbolic_task(task)
    for _, answer_col, correct_col, read in _readers(True):
        if (slow or not read.slow) and (symbolic_task or not read.symbolic_only):
            reading = read(response, reference, request)
            row[answer_col], row[correct_col] = reading.answer, reading.correct
        else:
            row[answer_col], row[correct_col] = None, False
    report = detect(response)
    for conv, n in report.counts.items():
        row[f"payload.{conv}"] = n > 0
    row["category"] = report.category(request)
    row["requested_payload"] = report.present(request)
    requested_reader = STRICT[request]
    row["extractable"] = row[f"{requested_reader}.answer"] is not None
    row["timed_out"] = False
    row["read_truncated"], row["read_cap_chars"] = truncated, tx.READ_CAP_CHARS
    # MATH diagnostics (Tables 16-17); the symbolic comparison is slow, so it runs with the slow readers
    row.update(symbolic.diagnostics(response) if slow and symbolic_task
               else dict.fromkeys(symbolic.DIAGNOSTICS, False))
    return row


def unreadable_row(request: str, response: str = "") -> dict[str, Any]:
    """The row of a response that ran out of time: every reader returns nothing."""
    row: dict[str, Any] = {}
    for name in reader_names(True):
        row[f"{name}.answer"], row[f"{name}.correct"] = None, False
    for conv in REQUESTS:
        row[f"payload.{conv}"] = False
    row.update(category="neither", requested_payload=False, extractable=False, timed_out=True)
    row.update(read_truncated=len(response) > tx.READ_CAP_CHARS, read_cap_chars=tx.READ_CAP_CHARS)
    row.update(dict.fromkeys(symbolic.DIAGNOSTICS, False))
    return row


def _score_chunk(items: Sequence[Item], slow: bool = True) -> list[dict[str, Any]]:
    return [score_response(it.response, it.reference, it.request, slow, it.task) for it in items]


def warm() -> None:
    # Import sympy/antlr once per worker rather than inside the first timed response.
    mathverify.verify_text("$1$", "1")


CLOSE_S = 10.0  # how long closing the pool waits for pebble's own join before it kills the workers


def _worker_start() -> None:
    from crossed_rlvr.interrupt import ignore_interrupts

    ignore_interrupts()  # Ctrl-C is the parent's to handle: it stops the pool and prints one line
    warm()


class Scorer:
    """A pool of scoring workers kept alive across calls (one fork and Math-Verify import per worker)."""

    def __init__(self, workers: int | None = None, chunk_size: int = 64, limit_s: float = PER_RESPONSE_LIMIT_S):
        from pebble import ProcessPool

        self.workers = workers or os.cpu_count() or 1
        self.chunk_size, self.limit_s = chunk_size, limit_s
        self.pool = ProcessPool(max_workers=self.workers, initializer=_worker_start)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, join_s: float = CLOSE_S) -> None:
        """Stop the workers, in at most about ``join_s``: pebble's ``join`` after ``stop`` can wait without end on a
        worker pipe nobody reads any more (noxdafox/pebble#147; seen once after a Ctrl-C), so past it the workers are
        killed and the pool's threads, daemons, end with the process."""
        import threading

        # this pool's own workers (pebble keeps them in its manager; no public API names them), not another pool's
        workers = list(self.pool._pool_manager.worker_manager.workers.values())
        self.pool.stop()
        joining = threading.Thread(target=self.pool.join, name="scorer-close", daemon=True)
        joining.start()
        joining.join(join_s)
        if joining.is_alive():
            for worker in workers:
                worker.kill()
                worker.join(1.0)

    def score(self, items: Sequence[Item], progress: tqdm | None = None) -> list[dict[str, Any]]:
        """Rows for ``items`` in input order; ``progress`` (a tqdm bar) advances per finished row. Identical items
        (the same response, reference, request and task: greedy decoding repeats itself) are scored once, since
        every reader is a pure function of them; each gets its own copy of the row."""
        where: dict[Item, int] = {}
        slots = [where.setdefault(it, len(where)) for it in items]
        unique = list(where)
        weight = [0] * len(unique)
        for k in slots:
            weight[k] += 1
        rows = self._score_unique(unique, weight, progress)
        return [dict(rows[k]) for k in slots]

    def _score_unique(self, items: Sequence[Item], weight: Sequence[int], progress: tqdm | None
                      ) -> list[dict[str, Any]]:
        from pebble import ProcessExpired

        pool, limit_s = self.pool, self.limit_s
        rows: list[dict[str, Any] | None] = [None] * len(items)
        size = self.chunk_size
        chunks = [range(i, min(i + size, len(items))) for i in range(0, len(items), size)]
        futures = [
            (idx, pool.schedule(_score_chunk, args=([items[i] for i in idx],), timeout=limit_s * 2 + 0.5 * len(idx)))
            for idx in chunks
        ]
        retry: list[int] = []
        for idx, fut in futures:
            try:
                for i, row in zip(idx, fut.result(), strict=True):
                    rows[i] = row
                if progress is not None:
                    progress.update(sum(weight[i] for i in idx))
            except (FutureTimeout, ProcessExpired):
                retry.extend(idx)
        # One by one under the hard limit, then without the slow readers, then unreadable.
        for slow in (True, False):
            pending = [(i, pool.schedule(_score_chunk, args=([items[i]], slow), timeout=limit_s)) for i in retry]
            retry = []
            for i, fut in pending:
                try:
                    row = fut.result()[0]
                    row["timed_out"] = not slow
                    rows[i] = row
                    if progress is not None:
                        progress.update(weight[i])
                except (FutureTimeout, ProcessExpired):
                    retry.append(i)
        for i in retry:
            rows[i] = unreadable_row(items[i].request, items[i].response)
        if progress is not None:
            progress.update(sum(weight[i] for i in retry))
        return rows  # type: ignore[return-value]


def score_many(
    items: Iterable[Item],
    workers: int | None = None,
    chunk_size: int = 64,
    limit_s: float = PER_RESPONSE_LIMIT_S,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Score items with the whole panel in worker processes; rows come back in input order.

    ``workers=0`` scores in this process (Math-Verify then relies on its own signal timeouts).
    """
    items = list(items)
    if workers == 0:
        return _score_chunk(items)
    from tqdm import tqdm

    with tqdm(total=len(items), desc="scoring", unit="resp", disable=not progress) as bar, \
            Scorer(workers, chunk_size, limit_s) as scorer:
        return scorer.score(items, bar)
