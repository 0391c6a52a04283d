"""The fast subset (`make test-fast`: ``pytest -m "not heavy"``) leaves out every test that builds a heavy shared
fixture, runs in a heavy lane (exclusive, engines, long) or starts Ray: checked on this suite's own collection, and
on a throw-away suite for the rule itself (a fixture asked for through another one, a Ray session started outside
the heavy lanes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HEAVY, HEAVY_FIXTURES, HEAVY_MARKS

ROOT = Path(__file__).resolve().parent.parent

# a plugin for the collecting pytest: every collected test's marks and fixtures, selected or deselected by -m
PROBE = '''
import json, os

_deselected = []


def _row(item):
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return {"id": item.nodeid, "marks": sorted({m.name for m in item.iter_markers()}),
            "fixtures": sorted(getattr(item, "fixturenames", ())),
            "defined_in": {name: defs[name][-1].func.__module__ for name in os.environ["HEAVY_NAMES"].split(",")
                           if defs.get(name)}}


def pytest_deselected(items):
    _deselected.extend(_row(i) for i in items)


def pytest_collection_finish(session):
    with open(os.environ["SELECTION_OUT"], "w") as f:
        json.dump({"selected": [_row(i) for i in session.items], "deselected": _deselected}, f)
'''


def clean_env(**extra: str) -> dict[str, str]:
    """This test may run in an xdist worker: the pytest it starts must begin as `make test-fast` does."""
    drop = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAY_TMPDIR")
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k not in drop}, **extra}


@pytest.mark.long  # collects the whole suite
def test_the_fast_subset_leaves_out_every_heavy_fixture_and_lane(tmp_path):
    (tmp_path / "selection_probe.py").write_text(PROBE)
    out = tmp_path / "selection.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
         "-p", "no:randomly", "-p", "selection_probe", "-m", f"not {HEAVY}", "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env=clean_env(SELECTION_OUT=str(out), HEAVY_NAMES=",".join(HEAVY_FIXTURES),
                      PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)])))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads(out.read_text())
    selected, deselected = found["selected"], found["deselected"]
    assert len(selected) > 100 and deselected
    for row in selected:
        assert not set(row["marks"]) & {HEAVY, *HEAVY_MARKS}, row
        assert not set(row["fixtures"]) & set(HEAVY_FIXTURES), row
    assert all(HEAVY in row["marks"] for row in deselected)
    # each heavy fixture is still one some test asks for (a renamed fixture would otherwise slip into the subset),
    # defined once (a light fixture of the same name elsewhere would be left out with it)
    defined: dict[str, set[str]] = {}
    for row in selected + deselected:
        for name, module in row["defined_in"].items():
            defined.setdefault(name, set()).add(module)
    assert set(defined) == set(HEAVY_FIXTURES), set(HEAVY_FIXTURES) - set(defined)
    assert all(len(modules) == 1 for modules in defined.values()), defined
    # the shared studies' tests are out, a reader's are in
    left_out = {row["id"] for row in deselected}
    assert "tests/test_study.py::test_smoke_study_learns" in left_out
    assert any(row["id"].startswith("tests/test_real_model.py::") for row in deselected)
    assert any(row["id"].startswith("tests/test_readers.py::") for row in selected)


SUITE = '''
import os, pathlib, pytest


@pytest.fixture(scope="module")
def study(warm_cache):  # a heavy fixture asked for through another one
    return warm_cache


@pytest.fixture(scope="module")
def smoke():
    return 1


def test_plain():
    pass


def test_through_another_fixture(study):
    pass


def test_smoke(smoke):
    pass


@pytest.mark.exclusive
def test_exclusive():
    pass


@pytest.mark.long
def test_long():
    pass


def start_ray(name):  # what a Ray start leaves in the worker's own Ray folder
    (pathlib.Path(os.environ["RAY_TMPDIR"]) / "ray" / f"session_2099_{name}").mkdir(parents=True)


def test_starts_ray_outside_the_lanes():
    start_ray("outside")


@pytest.mark.exclusive
def test_starts_ray_in_its_lane():
    start_ray("in_lane")
'''


@pytest.mark.long  # a suite on two workers
def test_the_heavy_mark_follows_fixtures_and_lanes_and_ray_fails_outside_them(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text().replace(
        'pytest_plugins = ["tests.gpu_fixtures"]', ""))
    (suite / "test_lanes.py").write_text(SUITE)
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-c",
            str(ROOT / "pyproject.toml"), "--rootdir", str(suite)]
    env = clean_env(PYTHONPATH=str(suite))
    listed = subprocess.run([*base, "-n", "0", "--collect-only", "-m", f"not {HEAVY}", str(suite)], cwd=suite,
                            capture_output=True, text=True, timeout=300, check=False, env=env)
    ids = {line.split("::")[-1] for line in listed.stdout.splitlines() if "::" in line}
    assert ids == {"test_plain", "test_starts_ray_outside_the_lanes"}, listed.stdout + listed.stderr
    # on two workers (each its own Ray folder), the whole suite: only the Ray start outside the lanes fails
    ran = subprocess.run([*base, "-n", "2", "-rf", str(suite)], cwd=suite, capture_output=True, text=True,
                         timeout=300, check=False, env=env)
    assert "1 failed, 6 passed" in ran.stdout, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "FAILED test_lanes.py::test_starts_ray_outside_the_lanes" in ran.stdout, ran.stdout[-3000:]
    assert "started Ray (session_2099_outside)" in ran.stdout and "outside the heavy lanes: mark it exclusive" in ran.stdout
