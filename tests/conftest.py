"""How the suite shares the machine when it runs on several cores (pytest-xdist; pyproject.toml's addopts
give ``-n auto --dist loadgroup``).

- **One torch thread per worker.** Torch starts one thread per core in every process; two workers with two
  threads each on a 2-core machine wait on each other's threads (the smoke warm start: 8x slower with the
  other core busy). Set before anything imports torch, and inherited by the commands a test starts, so a
  test's subprocess stays in its worker's core; a test that needs more says so in the environment it hands
  its subprocess.
- **Exclusive tests never run beside one another.** A test marked ``exclusive`` (a Ray cluster, an engine
  that starts Ray or several servers, a test with a time limit on its own run) joins the one xdist group
  ``exclusive``: xdist runs a group on a single worker, one test after another, so no two of them ever
  overlap, and the other workers go on with the rest meanwhile (a lock between workers would leave a worker
  idle whenever its next test waited for the lock).
- **Multi-process engines run one at a time, beside the exclusive ones.** A test marked ``engines`` (torchrun
  or DeepSpeed ranks on free ports, no Ray, no time limit of its own) joins the group ``engines``: never two at
  once, but free to run while the exclusive chain waits on Ray's start-ups. In the exclusive group they made the
  chain the suite's tail (measured: the chain ~22 of the suite's ~23 minutes with ~15 core-minutes idle).
- **The long groups start first.** ``LONG_GROUPS`` orders the collection so that the longest groups are the first work
  units xdist hands out (``--no-loadscope-reorder`` keeps that order); a long group started last would be the
  suite's tail. Next come the long tests of no group (marked ``long``: 5 s and more), then the rest as collected: a
  90-second test handed out last ran alone for most of a minute while the other worker had nothing left (measured).
- **Shared fixtures stay on one worker.** A module whose tests share an expensive module- or session-scoped
  fixture (a study, a trained arm, scored tables) names its group in ``WORKER_GROUP`` and the fixtures in
  ``SHARED_FIXTURES``: the tests that use one of them (directly or through another fixture; not the
  exclusive ones) then run on one worker, so the fixture is built once, not once per worker, and the
  module's other tests are free to run on any worker. (No ``SHARED_FIXTURES``: the whole module is grouped.)
- **Each worker its own Ray folder.** Ray keeps its sessions under ``$RAY_TMPDIR/ray``; two workers starting
  local clusters would share ``session_latest`` there.
- **Ray's workers at normal priority.** Ray starts its worker processes at nice 15 so that a driver stays
  responsive; in the suite the test beside a Ray test (or any other busy process) runs at nice 0 and then takes
  nearly all the CPU its actors want: with one core held busy, a 41 s eval-workers test took 388 s.

With ``-n 0`` (one process) the tests run as they are, in collection order.

**The fast subset.** Every test that builds a shared heavy fixture (``HEAVY_FIXTURES``: a study, a trained model, the
warm start; asked for directly or through another fixture) or carries ``exclusive``, ``engines`` or ``long`` is also
marked ``heavy`` here, so ``pytest -m "not heavy"`` (``make test-fast``) runs the rest: no engine, no Ray cluster, no
heavy fixture. Under several workers, a test outside the heavy lanes that starts Ray (a new session in its worker's
Ray folder, started by the test or a command it ran) fails: it belongs in the exclusive chain.

``CROSSED_SUITE_TIMELINE=DIR`` records when each test ran, on which worker, and the CPU time it and the commands
it waited for used (``scripts/suite_timeline.py DIR`` sums it up; ``scripts/bench_suite.sh`` sets it).
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from pathlib import Path

import pytest

# xdist sets these in every worker's environment before it imports this file
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))

RAY_FOLDER_OWN = WORKER is not None and WORKERS > 1
if RAY_FOLDER_OWN:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    # short: Ray's socket paths under it must fit in 107 characters
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix=f"ray-{WORKER}-", dir="/tmp")

# read by every Ray cluster a test starts, in this process or in the commands it runs
os.environ.setdefault("RAY_worker_niceness", "0")

# The commands' default numerics in this process and every command a test runs, set before anything loads torch:
# what the tests assert about training then holds on any x86-64 CPU with AVX2 (crossed_rlvr/numerics.py).
from crossed_rlvr.numerics import apply  # noqa: E402 (after the environment above, before torch)

apply("portable")

# session fixtures of several modules (defined once, so built once per worker)
pytest_plugins = ["tests.gpu_fixtures"]



@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory) -> Path:
    """The warm-start cache (``initial.cache_dir``) of the studies that start from the smoke preset's initial policy:
    beside the workers' own temporary folders, so the first study to need that policy builds it (~3 minutes) and
    the others, on any worker, copy it. Within one run only: a code change could change the policy without
    changing its fingerprint."""
    root = tmp_path_factory.getbasetemp()
    return (root.parent if WORKER is not None else root) / "warm-cache"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The smallest tiny model (tests/helpers.py: SMALL), built once per module that asks for it (< 1 s)."""
    from crossed_rlvr.policies.tiny import build_tiny_model
    from tests.helpers import SMALL

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", SMALL)


EXCLUSIVE = "exclusive"
ENGINES = "engines"
LONG = "long"
HEAVY = "heavy"
# the groups that take longest, in the order their first test is handed out (measured on a quiet 2-core machine:
# the exclusive chain, verl's trainer included, ~19 min; the engines ~4; the smoke study ~3.5; the real model ~3;
# the GPU-path checks ~2)
LONG_GROUPS = (EXCLUSIVE, ENGINES, "real_model", "smoke_study", "gpu_path")
# The shared fixtures whose tests take ten seconds and more between them (measured on a 2-core machine): a test that
# asks for one, even through another fixture, is ``heavy`` and stays out of ``make test-fast``.
# tests/test_suite_selection.py checks that each name here is one fixture, defined once, that some test uses.
HEAVY_FIXTURES = {
    "warm_cache": "the smoke preset's warm-started initial policy (~3 min when a test is the first to need it)",
    "smoke": "the smoke study, every stage (tests/test_study.py, ~3.5 min)",
    "real": "SmolLM2-135M's study (tests/test_real_model.py, ~3 min)",
    "local": "the GPU presets rehearsed on the CPU: each of its tests prepares a preset (~1.5 min over them all)",
    "paper_gsm8k": "the 7B preset prepared from the command line (~30 s)",
    "analysis": "the paper's GSM8K tables rebuilt as scored responses and analysed (~15 s)",
    "math_analysis": "the paper's MATH500 tables rebuilt the same way (~10 s)",
    "prepared": "a verl arm prepared by crossed-train, read back through verl's own config (~10 s)",
    "cache": "the mypy cache of tests/test_types.py: its first type check fills it, each check runs mypy (~10 s)",
}
HEAVY_MARKS = (EXCLUSIVE, ENGINES, LONG)  # a test in one of these lanes is heavy in itself


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown (and unused) with ``-p no:xdist``
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: the cores this process may run on (xdist's own count asks psutil for physical cores, which
    a 2-vCPU machine may report as 1), at most 4: every worker holds its own models and engines in memory. Not
    one more than the cores: the suite is CPU-bound (a third worker on two cores made it no faster, and its
    tests with a time limit of their own failed)."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


def pytest_configure(config: pytest.Config) -> None:
    # the markers themselves are registered, with what each means, in pyproject.toml's [tool.pytest.ini_options]
    if WORKER is not None and WORKERS > 1:
        import torch

        torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's xdist group: ``exclusive`` for an exclusive test, else its module's ``WORKER_GROUP`` if it uses
    one of the module's ``SHARED_FIXTURES``. Set here, one per test, because xdist joins every group mark a test
    carries into one name: a module-wide group mark would put the module's exclusive tests in a group of their
    own, beside the other exclusive ones. Also marks the heavy tests (``is_heavy``), before ``-m`` selects."""
    groups: dict[str, str] = {}
    for item in items:
        if is_heavy(item):
            item.add_marker(HEAVY)
        module = getattr(item, "module", None)
        if item.get_closest_marker(EXCLUSIVE) is not None:
            groups[item.nodeid] = EXCLUSIVE
        elif item.get_closest_marker(ENGINES) is not None:
            groups[item.nodeid] = ENGINES
        elif (group := getattr(module, "WORKER_GROUP", None)) is not None:
            shared = getattr(module, "SHARED_FIXTURES", None)
            if shared is None or set(shared) & set(getattr(item, "fixturenames", ())):
                groups[item.nodeid] = group
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    # the long groups first, in LONG_GROUPS' order, then the long tests of no group; the rest as collected (a stable
    # sort keeps each group's order)
    rank = {g: k for k, g in enumerate(LONG_GROUPS)}

    def order(item: pytest.Item) -> int:
        if item.nodeid in groups:
            return rank.get(groups[item.nodeid], len(LONG_GROUPS))
        return len(LONG_GROUPS) if item.get_closest_marker(LONG) is not None else len(LONG_GROUPS) + 1

    items.sort(key=order)


def is_heavy(item: pytest.Item) -> bool:
    """In a heavy lane (``HEAVY_MARKS``), or asking for a heavy shared fixture, directly or through another one
    (``fixturenames`` is the whole closure)."""
    if any(item.get_closest_marker(mark) is not None for mark in HEAVY_MARKS):
        return True
    return not HEAVY_FIXTURES.keys().isdisjoint(getattr(item, "fixturenames", ()))


def ray_sessions() -> set[str]:
    """The Ray sessions started so far under this worker's own Ray folder, by this process or a command it ran
    (empty in one process: the folder is set only for several workers)."""
    folder = Path(os.environ["RAY_TMPDIR"]) / "ray" if RAY_FOLDER_OWN else None
    return {p.name for p in folder.glob("session_2*")} if folder is not None and folder.is_dir() else set()


RAY_BEFORE = pytest.StashKey[set[str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[RAY_BEFORE] = ray_sessions()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A test outside the heavy lanes that started Ray (in its fixtures or its body, in this process or a command it
    ran) fails, naming the lane it belongs in: the fast subset promises no Ray, and a Ray test outside the exclusive
    chain can share the machine with another one."""
    result = yield
    started = ray_sessions() - item.stash.get(RAY_BEFORE, set())
    if started and item.get_closest_marker(HEAVY) is None:
        pytest.fail(f"started Ray ({sorted(started)[0]}) outside the heavy lanes: mark it {EXCLUSIVE}", pytrace=False)
    return result


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    if WORKER is not None and os.environ.get("RAY_TMPDIR", "").startswith(f"/tmp/ray-{WORKER}-"):
        shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)


TIMELINE = os.environ.get("CROSSED_SUITE_TIMELINE")


def _cpu_seconds() -> float:
    """User and system CPU time of this process and of the children it has waited for."""
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """With ``CROSSED_SUITE_TIMELINE``: one line per test (setup, call and teardown) in the worker's own file."""
    if not TIMELINE:
        yield
        return
    start, cpu = time.time(), _cpu_seconds()
    yield
    line = {"test": item.nodeid, "worker": WORKER or "main", "start": round(start, 3), "end": round(time.time(), 3),
            "cpu": round(_cpu_seconds() - cpu, 2)}
    Path(TIMELINE).mkdir(parents=True, exist_ok=True)
    with open(Path(TIMELINE) / f"{WORKER or 'main'}.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
