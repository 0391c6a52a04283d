"""The suite's own rules for sharing two cores (tests/conftest.py), checked on a throw-away suite run the way
`make test` runs this one: every exclusive test on one worker and handed out first, the engines one at a time on
one worker, a module's WORKER_GROUP on one worker, a long test before the short ones, one torch thread and a Ray folder of its own per worker. A pytest or xdist release that drops the groups (pytest 9.2
did, silently) fails here instead of letting two Ray clusters share the machine."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

GROUPED = '''
import json, os, pytest
WORKER_GROUP = "shared"
SHARED_FIXTURES = ("thing",)

@pytest.fixture(scope="module")
def thing():
    return 1

def record(name):
    import torch
    with open(os.environ["WHERE"], "a") as f:
        f.write(json.dumps({"test": name, "worker": os.environ["PYTEST_XDIST_WORKER"],
                            "threads": torch.get_num_threads(), "omp": os.environ.get("OMP_NUM_THREADS"),
                            "ray": os.environ.get("RAY_TMPDIR")}) + "\\n")

@pytest.mark.parametrize("k", range(6))
def test_shared(k, thing):
    record(f"shared{k}")

@pytest.mark.parametrize("k", range(2))
def test_loose(k):  # in the module, without its shared fixture: free to run on any worker
    record(f"loose{k}")

@pytest.mark.exclusive
@pytest.mark.parametrize("k", range(3))
def test_exclusive_in_group(k):
    record(f"exclusive-a{k}")
'''

OTHERS = '''
import pytest
from test_grouped import record

@pytest.mark.exclusive
@pytest.mark.parametrize("k", range(3))
def test_exclusive_elsewhere(k):
    record(f"exclusive-b{k}")

@pytest.mark.parametrize("k", range(8))
def test_free(k):
    record(f"free{k}")

@pytest.mark.engines
@pytest.mark.parametrize("k", range(2))
def test_engines(k):
    record(f"engines{k}")

@pytest.mark.long
def test_long():  # collected last of its module, handed out before the free tests
    record("long")
'''


@pytest.mark.long
def test_groups_exclusive_tests_threads_and_ray_folders_under_two_workers(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text().replace(
        'pytest_plugins = ["tests.gpu_fixtures"]', ""))
    (suite / "test_grouped.py").write_text(GROUPED)
    (suite / "test_others.py").write_text(OTHERS)
    where = tmp_path / "where.jsonl"
    # the project's addopts (-n auto --dist loadgroup), read from pyproject.toml as `make test` reads them
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                           str(ROOT / "pyproject.toml"), "--rootdir", str(suite), "-n", "2", str(suite)],
                          check=False, capture_output=True, text=True, timeout=300, cwd=suite,
                          env={**_clean_env(), "WHERE": str(where), "PYTHONPATH": str(suite),
                               "CROSSED_SUITE_TIMELINE": str(tmp_path / "timeline")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(x) for x in where.read_text().splitlines()]
    assert len(rows) == 6 + 2 + 3 + 3 + 8 + 2 + 1

    def workers(prefix: str) -> set[str]:
        return {r["worker"] for r in rows if r["test"].startswith(prefix)}

    assert len(workers("exclusive")) == 1  # both modules' exclusive tests, one after another on one worker
    # LONG_GROUPS' groups are handed out first (collected first, xdist's reordering off): the exclusive worker starts
    # with them, though the shared group's tests come first in the files
    ran = [r["test"] for r in rows if r["worker"] in workers("exclusive")]
    assert ran[0].startswith("exclusive"), ran
    assert len(workers("shared")) == 1
    assert len(workers("engines")) == 1  # one engine after another, on one worker
    # a long test of no group goes before the short ones: on its worker, before every free test
    on_long = [r["test"] for r in rows if r["worker"] in workers("long")]
    free = [k for k, t in enumerate(on_long) if t.startswith("free")]
    assert not free or on_long.index("long") < free[0], on_long
    assert workers("free") | workers("shared") | workers("exclusive") | workers("loose") == {"gw0", "gw1"}
    assert {(r["threads"], r["omp"]) for r in rows} == {(1, "1")}
    ray = {r["worker"]: r["ray"] for r in rows}
    assert len(set(ray.values())) == 2 and all(v.startswith(f"/tmp/ray-{w}-") for w, v in ray.items())
    # removed when each worker ends; xdist's controller may return while a worker is still tearing down
    deadline = time.monotonic() + 120  # a loaded machine took over 30 s
    while any(Path(v).exists() for v in ray.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(v).exists() for v in ray.values())
    # the timeline: every test once, on the worker that ran it, with its group (scripts/suite_timeline.py)
    sys.path.insert(0, str(ROOT / "scripts"))
    from suite_timeline import load, summary

    timeline = load(tmp_path / "timeline")
    assert len(timeline) == 25 and timeline["test"].is_unique and set(timeline["worker"]) == {"gw0", "gw1"}
    assert timeline.groupby("group")["worker"].nunique()[["exclusive", "engines", "shared"]].tolist() == [1, 1, 1]
    groups = timeline.set_index(timeline["test"].str.extract(r"::(test_\w+)")[0])["group"]
    assert set(groups["test_shared"]) == {"shared"} and set(groups["test_loose"]) == {"(none)"}
    assert (timeline["end"] >= timeline["start"]).all() and (timeline["cpu"] >= 0).all()
    text = summary(timeline)
    assert text.startswith("25 tests in ") and "exclusive" in text and "shared" in text


def _clean_env() -> dict[str, str]:
    import os

    # this test may itself run in a worker: its child suite must start as `make test` does
    return {k: v for k, v in os.environ.items()
            if not k.startswith("PYTEST_") and k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                        "OPENBLAS_NUM_THREADS", "RAY_TMPDIR")}
