"""Adversarial responses and a per-response time and peak-memory measurement.

A real RL policy that degenerates into repetition writes exactly these: 10^5 nested ``\\boxed{``,
one line of repeated ``####``, megabytes of digits or braces. ``measure`` scores one response with
the whole panel (Math-Verify included) in a forked child, as a scoring worker would, and reports
its wall time and the growth of its peak resident memory (Linux ``VmHWM``, reset through
``/proc/self/clear_refs``). Used by the suite and by ``scripts/bench_readers.py --pathological``.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable

# name -> response of about n characters
CASES: dict[str, Callable[[int], str]] = {
    "nested_boxes": lambda n: "\\boxed{" * (n // 7),
    "nested_boxes_balanced": lambda n: "\\boxed{" * (n // 8) + "7" + "}" * (n // 8),
    "repeated_hash": lambda n: "#### " * (n // 5),
    "repeated_hash_numbers": lambda n: "#### 7 " * (n // 7),
    "hash_lines": lambda n: "#### 18\n" * (n // 8),
    "digit_run": lambda n: "1" * n,
    "open_braces": lambda n: "{" * n,
    "close_braces": lambda n: "}" * n,
    "wrapped_hash": lambda n: "#### " + "$" * n,
    "flat_boxes": lambda n: "\\boxed{1}" * (n // 9),
    "json_answers": lambda n: '{"answer": 1' * (n // 12),
    "prose_hash": lambda n: "#### abc " * (n // 9),
}
# The three responses the issue measured: 1 MB of nested boxes (12.1 GB before), #### x 10^5 (6.0 GB).
PATHOLOGICAL = ("nested_boxes", "repeated_hash", "nested_boxes_balanced")


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _child(queue: mp.Queue, text: str, request: str, task: str) -> None:
    from crossed_rlvr.eval.score.panel import score_response

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak RSS to the current RSS
    base = _status_kb("VmRSS")
    start = time.perf_counter()
    row = score_response(text, "7", request, slow=True, task=task)
    seconds = time.perf_counter() - start
    queue.put((seconds, (_status_kb("VmHWM") - base) * 1024, bool(row["read_truncated"])))


def measure(text: str, request: str = "hash", task: str = "math500", limit_s: float = 120.0) -> dict:
    """Wall seconds and peak-memory growth (bytes) of scoring ``text`` once in a forked child.

    The parent should have imported and warmed Math-Verify (``panel.warm()``) so the child measures the
    reading, not the import. A child that runs past ``limit_s`` is killed and reported as such.
    """
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, text, request, task))
    proc.start()
    proc.join(limit_s)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return {"seconds": None, "peak_bytes": None, "truncated": None, "exitcode": "killed"}
    if proc.exitcode != 0:
        return {"seconds": None, "peak_bytes": None, "truncated": None, "exitcode": proc.exitcode}
    seconds, peak, truncated = queue.get()
    return {"seconds": seconds, "peak_bytes": peak, "truncated": truncated, "exitcode": 0}
