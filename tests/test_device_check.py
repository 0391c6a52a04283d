"""scripts/device_check.py at a toy shape on this CPU (issue 34), so the prepared GPU check cannot rot: FSDP as
verl configures it, both AdamW steps, the memory plan beside it, and the tiny model's GRPO update and evaluation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
