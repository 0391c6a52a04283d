"""Code scored by execution, by EvalPlus's rules (paper 001 App. D.3: HumanEval+ and MBPP+ pass@k).

A solution passes a part (``base``: the original tests' inputs; ``plus``: EvalPlus's added inputs) when, run in
the sandbox on every input of the part in order, each output matches the expected one; a solution passes a task
when it passes both parts. The expected outputs and the reference times come from the canonical solution, run in
the same sandbox and cached by the dataset's sha256. Matching follows EvalPlus 0.3.1 (``evalplus/eval``):

- exact equality, else, when the task has a tolerance (or the expected output is a float or a list of floats,
  which sets ``atol`` to 1e-6 for the rest of the part, as EvalPlus's loop does), the same type and length and
  ``numpy.allclose(out, exp, rtol=1e-7, atol=atol)``;
- HumanEval's ``find_zero`` passes when the polynomial at the returned point is within ``atol`` of zero;
- MBPP+'s special checks (set equality for the tasks that return collections in any order, "not None" for the
  tasks whose outputs EvalPlus cannot store, and its three tasks with their own oracles);
- each input gets ``max(1 s, 4 x the canonical solution's time)`` and a part ``min(60 s, their sum) + 2 s`` of
  wall-clock time; the first failing input ends the part (EvalPlus's fast check).

The comparison runs here, outside the sandbox, on the decoded outputs: nothing the code prints can change it.
A result is ``pass``, ``fail``, ``timeout``, ``memory`` or ``sandbox-error``; a sandbox error is never the
model's failure (the scoring stops instead). ``evalplus`` gives the status EvalPlus itself would report: it counts
an input over its time limit, or out of memory, as ``fail`` and only a part killed at its wall clock as
``timeout``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.layout import UserCache
from crossed_rlvr.sandbox.bwrap import Limits, Run, Sandbox, SandboxUnavailable, last_line
from crossed_rlvr.sandbox.harness import decode, encode
from crossed_rlvr.tasks.code import CodeDataset, CodeTask, subset

PARTS = ("base", "plus")
STATUSES = ("pass", "fail", "timeout", "memory", "sandbox-error")
MIN_TIME_LIMIT = 1.0  # EvalPlus's DEFAULT_MIN_TIME_LIMIT
TIME_FACTOR = 4.0  # EvalPlus's DEFAULT_GT_TIME_LIMIT_FACTOR
PART_WALL_S = 60.0  # EvalPlus's EVALPLUS_TIMEOUT_PER_TASK
ORACLE_INPUT_S = 60.0  # the canonical solution's own limit per input, generous: it defines the expected output

# MBPP+'s special checks (EvalPlus 0.3.1, evalplus/eval/_special_oracle.py)
MBPP_NOT_NONE = ("check_str", "text_match_three", "text_starta_endb")
MBPP_SET_EQUAL = ("similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly", "larg_nnum",
                  "intersection_array", "find_dissimilar", "Diff")


class OracleError(CrossedError, RuntimeError):
    """The canonical solution did not run on one of its own inputs: the dataset or the limits are wrong."""


def default_cache_dir() -> Path:
    return UserCache.default().code_oracle


# ---------------------------------------------------------------- matching (EvalPlus's rules)

def _poly(xs: Sequence[float], x: float) -> float:
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def _surface_area(base_edge: float, height: float) -> float:
    slant = math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 4 * (base_edge * slant) / 2)


def _digit_distance(a: int, b: int) -> int:
    x, y = str(a), str(b)
    width = max(len(x), len(y))
    return sum(abs(int(p) - int(q)) for p, q in zip(x.zfill(width), y.zfill(width)))


def _is_floats(x: object) -> bool:
    if isinstance(x, float):
        return True
    return isinstance(x, (list, tuple)) and bool(x) and all(isinstance(i, float) for i in x)


def matches(flavour: str, entry_point: str, args: list[Any], out: Any, exp: Any,  # Any: a program's values
            atol: float) -> tuple[bool, float]:
    """Whether one output matches, and the tolerance for the inputs after it (EvalPlus raises a zero tolerance to
    1e-6 for good once it meets a float output, and so do we)."""
    try:
        exact = bool(out == exp)
    except Exception:  # noqa: BLE001 - a comparison that raises is a mismatch, as in EvalPlus's try block
        exact = False
    try:
        if flavour == "mbpp":
            if entry_point == "are_equivalent":  # Mbpp/164
                exact = True
            elif entry_point == "sum_div":  # Mbpp/295
                exact = exact or out == 0
            elif entry_point == "surface_Area":  # Mbpp/581
                exact = exact or abs(out - _surface_area(*args)) <= atol
            elif entry_point == "digit_distance_nums":  # Mbpp/558
                exact = exact or out == _digit_distance(*args)
            elif entry_point in MBPP_SET_EQUAL:
                exact = set(out) == set(exp)
            elif entry_point in MBPP_NOT_NONE:
                exact = out == exp if isinstance(out, bool) else exp == (out is not None)
        if flavour == "humaneval" and entry_point == "find_zero":
            return abs(_poly(args[0], out)) <= atol, atol  # find_zero(xs): its one argument
        if atol == 0 and _is_floats(exp):
            atol = 1e-6
        if not exact and atol != 0:
            if type(out) is not type(exp):
                return False, atol
            if isinstance(exp, (list, tuple)) and len(out) != len(exp):
                return False, atol
            return bool(np.allclose(out, exp, rtol=1e-07, atol=atol)), atol
        return exact, atol
    except Exception:  # noqa: BLE001
        return False, atol


# ---------------------------------------------------------------- results

@dataclass(frozen=True)
class Verdict:
    """One part of one solution: ``status`` (ours), ``evalplus`` (what EvalPlus reports), how many inputs passed
    before the first failure, and what ended it."""

    status: str
    evalplus: str | None
    passed: int
    n: int
    detail: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "evalplus": self.evalplus, "passed": self.passed, "n": self.n,
                "detail": self.detail, "seconds": round(self.seconds, 4)}


LINE_FLOOR_KB = 256  # the least a result line may hold, however short the expected output


def output_caps(expected: Sequence[Any], limits: Limits) -> tuple[int, int]:
    """(MB of a part's whole output, KB of one result line): room for four times the expected outputs, and for
    four times the longest expected line (HumanEval/15's plus outputs are 147 MB encoded, its longest line ~4 MB).
    The line cap bounds what one line costs to parse (a 20 MB line of nested empty lists takes a GB)."""
    sizes = [len(json.dumps(o)) for o in expected]
    total_mb = math.ceil(4 * sum(sizes) / 2**20)
    line_kb = max(LINE_FLOOR_KB, math.ceil((4 * max(sizes, default=0) + 64) / 1024))
    return max(limits.output_mb, total_mb), line_kb


def time_limits(ref_times: Sequence[float]) -> list[float]:
    return [max(MIN_TIME_LIMIT, TIME_FACTOR * t) for t in ref_times]


def part_wall(limits: Sequence[float]) -> float:
    return min(PART_WALL_S, float(sum(limits))) + 2.0


class _Judge:
    """Compares a part's outputs as they arrive; returns True (stop the run) at the first mismatch or error."""

    def __init__(self, flavour: str, task: CodeTask, inputs: list[Any], expected: list[Any]) -> None:
        self.flavour, self.task, self.inputs, self.expected = flavour, task, inputs, expected
        self.atol = task.atol
        self.passed = 0
        self.failure: str | None = None

    def __call__(self, line: dict[str, Any]) -> bool:
        k = line.get("i")
        if type(k) is not int or k != self.passed:  # 0.0 == 0, but a float indexes nothing
            self.failure = "fail:out-of-order"
            return True
        if "error" in line:
            self.failure = {"timeout": "timeout", "memory": "memory"}.get(str(line["error"]), f"fail:{line['error']}")
            return True
        if "out" not in line:
            self.failure = "fail:no-output"
            return True
        try:
            out = decode(line["out"])
        except Exception:  # noqa: BLE001 - a forged or broken line is the code's doing
            self.failure = "fail:undecodable"
            return True
        ok, self.atol = matches(self.flavour, self.task.entry_point, self.inputs[k], out, self.expected[k], self.atol)
        if not ok:
            self.failure = "fail:mismatch"
            return True
        self.passed += 1
        # every input answered: judged now, whatever the code leaves running (a thread that never ends, as EvalPlus
        # records its result before it waits for the process)
        return self.passed == len(self.inputs)


def verdict(run: Run, judge: _Judge, n: int) -> Verdict:
    if run.ended == "sandbox-error":
        return Verdict("sandbox-error", None, judge.passed, n, run.detail, run.seconds)
    if run.ended == "wall":
        return Verdict("timeout", "timeout", judge.passed, n, "wall clock", run.seconds)
    if run.ended == "input-timeout":  # timed from outside: the code outlived its input's limit (its alarm ignored)
        return Verdict("timeout", "fail", judge.passed, n, f"input {judge.passed} over its time limit", run.seconds)
    if judge.failure is not None:
        status = judge.failure.split(":", 1)[0]
        # EvalPlus's per-input time limit and MemoryError both land in its "failed" branch
        return Verdict(status, "fail", judge.passed, n, judge.failure, run.seconds)
    if run.ended == "output":
        return Verdict("fail", "fail", judge.passed, n, "output over the cap", run.seconds)
    if run.bad_line:
        return Verdict("fail", "fail", judge.passed, n, run.detail or "an unreadable result line", run.seconds)
    if judge.passed == n:
        return Verdict("pass", "pass", n, n, "", run.seconds)
    return Verdict("fail", "fail", judge.passed, n, f"ended after {judge.passed} of {n} inputs", run.seconds)


# ---------------------------------------------------------------- expected outputs

def _oracle_dir(cache_dir: Path, ds: CodeDataset) -> Path:
    return cache_dir / f"{ds.flavour}-{ds.sha256[:32]}"


def _task_file(folder: Path, tid: str) -> Path:
    return folder / (tid.replace("/", "_") + ".json.gz")


def expected_outputs(ds: CodeDataset, sandbox: Sandbox, cache_dir: Path | None = None,
                     progress: Callable[[], None] | None = None) -> dict[str, dict[str, Any]]:
    """task id -> {part: encoded outputs, part_time: seconds}: the canonical solution's, run in the sandbox and
    cached by the dataset's sha256, one file per task (a subset computes and reads only its own tasks)."""
    folder = _oracle_dir(Path(cache_dir) if cache_dir is not None else default_cache_dir(), ds)
    out: dict[str, dict[str, Any]] = {}
    for tid in ds.tasks:
        if (path := _task_file(folder, tid)).exists():
            out[tid] = json.loads(gzip.decompress(path.read_bytes()))
    missing = [tid for tid in ds.tasks if tid not in out]
    jobs: list[dict[str, Any]] = []
    keys: list[tuple[str, str, int | None]] = []
    for tid in missing:
        task = ds.tasks[tid]
        for part in PARTS:
            inputs = getattr(task, f"{part}_input")
            if task.test and part == "base":  # HumanEval's script: its calls are the inputs (harness.py, recording)
                jobs.append({"code": task.reference, "entry_point": task.entry_point, "inputs": [], "time_limits": [],
                             "test": task.test, "define_limit": ORACLE_INPUT_S})
                keys.append((tid, part, None))
            elif inputs:
                jobs.append({"code": task.reference, "entry_point": task.entry_point,
                             "inputs": [encode(a) for a in inputs], "time_limits": [ORACLE_INPUT_S] * len(inputs),
                             "define_limit": ORACLE_INPUT_S})
                keys.append((tid, part, len(inputs)))
            else:  # a part without inputs (a script task's plus) passes without a run
                out.setdefault(tid, {}).update({part: [], f"{part}_time": []})
    # the dataset's own code, trusted to write what it must: any line up to the whole output (HumanEval/15's plus
    # outputs run to megabytes a line)
    limits = Limits(wall_s=600.0, cpu_s=900, output_mb=4096, line_kb=4096 * 1024)
    runs = sandbox.map(jobs, limits=[limits] * len(jobs), progress=progress) if jobs else []
    for (tid, part, n), run in zip(keys, runs):
        if run.ended == "sandbox-error":
            raise SandboxUnavailable(f"the code sandbox failed while running {tid}'s canonical solution: {run.detail}")
        good = [line for line in run.lines if "out" in line]
        bad = next((line for line in run.lines if "error" in line), {})
        if n is None:  # recorded: every call the script made, and the script passed
            if run.ended != "exited" or bad or not good:
                why = bad.get("why") or bad.get("error") or run.ended if (bad or run.ended != "exited") else "no call"
                raise OracleError(f"{ds.path}: {tid}'s canonical solution did not pass its own test script ({why})")
            out.setdefault(tid, {})[f"{part}_input"] = [line["in"] for line in good]
        elif run.ended != "exited" or len(good) != n:
            raise OracleError(f"{ds.path}: {tid}'s canonical solution did not run on its {part} input "
                              f"{len(good)} ({bad.get('error', run.ended)})")
        outputs = [line["out"] for line in good]
        if ds.flavour == "mbpp" and ds.tasks[tid].entry_point in MBPP_NOT_NONE:
            outputs = [decode(o) is not None for o in outputs]
        out.setdefault(tid, {})[part] = outputs
        out[tid][f"{part}_time"] = [line["s"] for line in good]
    if missing:
        folder.mkdir(parents=True, exist_ok=True)
        for tid in missing:
            path = _task_file(folder, tid)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(gzip.compress(json.dumps(out[tid]).encode(), compresslevel=5))
            os.replace(tmp, path)  # whole or absent: a reader never sees half a task
    return out


# ---------------------------------------------------------------- scoring many solutions

def code_sha256(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8", errors="surrogatepass")).hexdigest()


class Executor:
    """Scores solutions of one dataset: one execution per (dataset, task, code, part, limits), however many
    readers or samples share it."""

    def __init__(self, ds: CodeDataset, sandbox: Sandbox, cache_dir: Path | None = None,
                 oracle: dict[str, dict[str, Any]] | None = None) -> None:
        self.ds, self.sandbox, self.cache_dir = ds, sandbox, cache_dir
        self.oracle: dict[str, dict[str, Any]] = dict(oracle or {})
        self._done: dict[tuple[str, str, str, str], Verdict] = {}
        self._expected: dict[tuple[str, str], list[Any]] = {}
        self._cap_mb: dict[tuple[str, str], tuple[int, int]] = {}
        self._inputs_file: dict[tuple[str, str], str] = {}
        self._limits_key = json.dumps(sandbox.limits.key(), sort_keys=True)

    def _need(self, task_ids: set[str]) -> None:
        """The expected outputs of these tasks (only these are read or computed)."""
        missing = sorted(task_ids - set(self.oracle))
        if missing:
            self.oracle.update(expected_outputs(subset(self.ds, missing), self.sandbox, self.cache_dir))

    def inputs(self, tid: str, part: str) -> list[Any]:
        """A part's argument lists: the file's, or (a HumanEval test script's) the calls recorded from it."""
        task = self.ds.tasks[tid]
        if task.test and part == "base":
            self._need({tid})
            if (tid, "base_input") not in self._expected:
                self._expected[(tid, "base_input")] = [decode(a) for a in self.oracle[tid]["base_input"]]
            return self._expected[(tid, "base_input")]
        return getattr(task, f"{part}_input")

    def _key(self, tid: str, code: str, part: str) -> tuple[str, str, str, str]:
        return (tid, code_sha256(code), part, self._limits_key)

    def score(self, solutions: Sequence[tuple[str, str]], parts: Sequence[str] = PARTS,
              progress: Callable[[], None] | None = None) -> list[dict[str, Verdict]]:
        """(task id, code) pairs -> {part: Verdict} each, in order. Raises SandboxUnavailable on a sandbox error:
        a code score is never partly the sandbox's failure."""
        todo: dict[tuple[str, str, str, str], tuple[str, str, str]] = {}
        for tid, code in solutions:
            if tid not in self.ds.tasks:
                raise CrossedError(f"task {tid!r} is not in {self.ds.path}")
            for part in parts:
                key = self._key(tid, code, part)
                if key not in self._done:
                    todo[key] = (tid, code, part)
        self._need({tid for tid, _, _ in todo.values()})
        jobs, limits, judges, run_keys = [], [], [], []
        stops: list[Callable[[dict[str, Any]], bool] | None] = []
        for key, (tid, code, part) in todo.items():
            task = self.ds.tasks[tid]
            inputs = self.inputs(tid, part)
            if not inputs:  # nothing to run (HumanEval's own tasks have no plus inputs)
                self._done[key] = Verdict("pass", "pass", 0, 0)
                if progress is not None:
                    progress()
                continue
            run_keys.append(key)
            if (tid, part) not in self._expected:
                self._expected[(tid, part)] = [decode(o) for o in self.oracle[tid][part]]
            judge = _Judge(self.ds.flavour, task, inputs, self._expected[(tid, part)])
            lims = time_limits(self.oracle[tid][f"{part}_time"])
            wall = part_wall(lims)
            if (tid, part) not in self._inputs_file:  # encoded once, read by every sample of the task
                self._inputs_file[(tid, part)] = self.sandbox.shared(f"{self.ds.sha256}/{tid}/{part}",
                                                                     json.dumps([encode(a) for a in inputs]))
            jobs.append({"code": code, "entry_point": task.entry_point, "inputs_file": self._inputs_file[(tid, part)],
                         "time_limits": lims, "define_limit": wall})
            if (tid, part) not in self._cap_mb:
                self._cap_mb[(tid, part)] = output_caps(self.oracle[tid][part], self.sandbox.limits)
            output_mb, line_kb = self._cap_mb[(tid, part)]
            limits.append(Limits(**{**self.sandbox.limits.key(), "wall_s": wall, "output_mb": output_mb,
                                    "line_kb": line_kb}))
            stops.append(judge)
            judges.append(judge)
        runs = self.sandbox.map(jobs, limits=limits, stops=stops, progress=progress)
        for key, run, judge in zip(run_keys, runs, judges):
            v = verdict(run, judge, len(judge.inputs))
            if v.status == "sandbox-error":
                said = last_line(v.detail, "no message")
                raise SandboxUnavailable(f"the code sandbox failed on {key[0]} ({key[2]}): {said}; no code was scored")
            self._done[key] = v
        return [{part: self._done[self._key(tid, code, part)] for part in parts} for tid, code in solutions]

