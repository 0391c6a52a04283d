"""scripts/device_check.py at a toy shape on this CPU, so the prepared GPU check cannot rot: FSDP as
verl configures it, both AdamW steps, the memory plan beside it, and the tiny model's GRPO update and evaluation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_the_device_check_runs_at_a_toy_shape(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_check.py"), "--shape", "tiny", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "device_check.json").read_text())
    assert [r["shape"] for r in result["fsdp"]] == ["tiny", "tiny"]
    for r in result["fsdp"]:
        assert r["parameters"] == r["plan"]["parameters"]  # the plan's parameter formula on a real Qwen2 model
        assert r["adamw_fused_peak_gib"] is None and r["adamw_foreach_peak_gib"] is None  # no CUDA here
    tiny = result["tiny"]
    assert tiny["eval_responses"] > 0 and tiny["grpo_update_s"] > 0, tiny
    table = (tmp_path / "device_check.md").read_text()
    assert table.startswith("| shape | tokens | card GiB | parameters |") and "tiny model on cpu" in table
    assert result["launch_context"] == {"skipped": "no GPU"} and "launch driver's GPU table" in table


def _wheel(folder: Path, name: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel of one module that records where it was imported from."""
    import base64
    import hashlib
    import zipfile

    files = {f"{name}.py": "import os\nWHERE = os.path.abspath(__file__)\n",
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                                               + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(v.encode())}\n" for k, v in files.items()) + f"{name}-1.0.dist-info/RECORD,,\n"
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in {**files, f"{name}-1.0.dist-info/RECORD": record}.items():
            z.writestr(k, v)
    return path


@pytest.mark.long  # handed out early (tests/conftest.py)
def test_wheels_travel_into_a_throwaway_venv_over_the_images_packages(tmp_path):
    """--wheels (the bare GPU image's route, scripts/device_bundle.py): the folder is installed with pip --no-index
    into a fresh venv that still sees this interpreter's packages, the check reruns there and says so, and the
    venv is gone afterwards."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "crossed_bundle_probe", ("numpy<1", "pandas", "crossed-absent-package", "colorama; sys_platform == 'win32'"))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_check.py"), "--shape", "tiny", "--out",
                           str(out), "--wheels", str(wheels)], capture_output=True, text=True, timeout=600, check=False,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((out / "device_check.json").read_text())
    bundle = result["bundle"]
    assert bundle["wheels"] == ["crossed_bundle_probe-1.0-py3-none-any.whl"]
    import numpy

    # a version the image does not meet and a package it lacks are named; met and other platforms' ones are not
    assert bundle["unmet"] == [f"crossed_bundle_probe 1.0 needs numpy<1; found numpy {numpy.__version__}",
                               "crossed_bundle_probe 1.0 needs crossed-absent-package; not installed"]
    assert "device_check: unmet: crossed_bundle_probe 1.0 needs numpy<1" in proc.stdout
    assert bundle["python"].startswith(bundle["prefix"]) and not Path(bundle["prefix"]).exists()
    assert result["tiny"]["eval_responses"] > 0  # the project's own packages were still there
    empty = tmp_path / "none"
    empty.mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_check.py"), "--wheels", str(empty)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "no .whl files" in proc.stderr


def test_the_bundle_carries_only_what_the_image_lacks_and_closes_over_it():
    """scripts/device_bundle.py: no wheel of a package the GPU image already has, and every requirement of every
    carried package (as installed here, markers evaluated) is carried or in the image: the step-3 closure."""
    import importlib.metadata as md

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import device_bundle as bundle
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    carried = {canonicalize_name(Requirement(r).name) for r, _ in bundle.BUNDLE + bundle.SOURCE_ONLY}
    assert len(bundle.IMAGE) > 150 and {"torch", "transformers", "pandas", "pyarrow", "fsspec"} <= bundle.IMAGE
    assert not carried & bundle.IMAGE, carried & bundle.IMAGE
    missing = []
    for name in sorted(carried):
        for line in md.requires(name) or []:
            req = Requirement(line)
            wanted = req.marker is None or req.marker.evaluate({"extra": ""})
            if wanted and canonicalize_name(req.name) not in carried | bundle.IMAGE:
                missing.append(f"{name} -> {req}")
    assert missing == []
