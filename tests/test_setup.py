"""`make setup` resolves on a standard machine: pip with no local configuration, reaching PyPI, and PyTorch's CPU
index for torch's CPU build alone (scripts/setup_cpu.sh).

The project's own machines have a local wheel folder in pip's configuration, so a lock line that only that folder
serves would pass every other test and fail every user. Here pip's configuration is ignored (``PIP_CONFIG_FILE``
set to /dev/null, no find-links) and a local file index stands in for PyTorch's: it holds torch's core metadata
(PEP 658) beside an empty wheel, which a dry run reads instead of the wheel. Every line of the lock is then
resolved against PyPI itself (``pip install --dry-run``), so a line PyPI cannot serve fails here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "locks" / "cpu-py311.txt"
SCRIPT = ROOT / "scripts" / "setup_cpu.sh"
ASKED = "not found through pip's configuration; asking"

# the exact stack is Python 3.11's (make setup installs the project's ranges on another Python)
pytestmark = [pytest.mark.long,
              pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="locks/cpu-py311.txt is Python 3.11's")]


def torch_pin() -> str:
    return next(line for line in LOCK.read_text().splitlines() if line.startswith("torch=="))


@pytest.fixture(scope="module")
def torch_index(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PEP 503 index serving the lock's torch, as PyTorch's CPU index does: the installed torch's metadata
    (the lock's build, tests/test_install.py checks) beside an empty wheel of this interpreter's tags."""
    version = torch_pin().split("==")[1]
    assert md.version("torch") == version
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    wheel = f"torch-{version}-{tag}-{tag}-manylinux_2_28_{sysconfig.get_platform().split('-')[-1]}.whl"
    folder = tmp_path_factory.mktemp("torch-index") / "torch"
    folder.mkdir()
    meta = md.distribution("torch").read_text("METADATA").encode()
    (folder / f"{wheel}.metadata").write_bytes(meta)
    (folder / wheel).write_bytes(b"")
    digest = hashlib.sha256(meta).hexdigest()
    (folder / "index.html").write_text(f'<!DOCTYPE html><html><body><a href="{wheel}" data-core-metadata="sha256='
                                       f'{digest}" data-dist-info-metadata="sha256={digest}">{wheel}</a></body></html>')
    return folder.parent.as_uri()


def dry_run(lock: Path, index: str, **pip_env: str) -> subprocess.CompletedProcess[str]:
    """scripts/setup_cpu.sh --dry-run with pip's configuration ignored (and ``pip_env`` in its place)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **pip_env)
    return subprocess.run(["bash", str(SCRIPT), sys.executable, str(lock), index, "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_the_whole_lock_resolves_from_pypi_and_torch_from_its_index(torch_index):
    proc = dry_run(LOCK, torch_index)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert f"{torch_pin()}: {ASKED} {torch_index}" in proc.stdout  # PyPI has no +cpu build: the index was asked


def test_a_lock_line_pypi_cannot_serve_fails(torch_index, tmp_path):
    """The check above can fail: a local-only build (here a +cpu numpy, which exists nowhere) stops the set-up."""
    lock = tmp_path / "lock.txt"
    lock.write_text(f"{torch_pin()}\nsix==1.16.0\nnumpy==2.3.5+cpu\n")
    proc = dry_run(lock, torch_index)
    assert proc.returncode != 0
    assert "numpy==2.3.5+cpu" in proc.stderr


def test_torch_index_is_not_contacted_where_pips_configuration_finds_torch(torch_index, tmp_path):
    """A machine whose pip already serves the CPU build (here a configured index; on the project's machines a
    local wheel folder) never asks TORCH_INDEX: an unreachable one does not matter."""
    lock = tmp_path / "lock.txt"
    lock.write_text(f"{torch_pin()}\nsix==1.16.0\n")
    proc = dry_run(lock, (tmp_path / "no-such-index").as_uri(), PIP_EXTRA_INDEX_URL=torch_index)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert ASKED not in proc.stdout
