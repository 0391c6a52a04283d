"""scripts/bench_vs_lmeval.py on the suite's tiny model: both tools run the same prompts (crossed-eval's own command
and lm-eval's ``hf`` model on the shipped tasks), both are measured, and the greedy texts are compared response by
response; where they differ, the difference names its item, policy and request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_vs_lmeval.py"
FIGURES = ("responses", "response_tokens", "load_s", "generation_s", "command_s", "responses_per_s", "tokens_per_s")


@pytest.mark.long  # two tools' commands, each importing torch and its harness (tests/conftest.py)
def test_both_tools_are_measured_on_the_same_prompts_and_their_texts_compared(tiny, tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--models", str(tiny), "--items", "3", "--max-new-tokens",
                           "8", "--backends", "hf", "hf-onednn", "--out", str(out)], capture_output=True, text=True, timeout=300,
                          check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads((out / "bench_vs_lmeval.json").read_text())
    assert report["settings"]["numerics"] == "portable"  # both tools under the same kernels (--numerics)
    runs = {(r["tool"], r["backend"]): r for r in report["runs"]}
    assert set(runs) == {("crossed-eval", "hf"), ("crossed-eval", "hf-onednn"), ("lm-eval", "hf")}
    packed = json.loads(next(Path(runs[("crossed-eval", "hf-onednn")]["run_dir"]).glob("responses/*.meta.json"))
                        .read_text())
    assert packed["generation"]["linear"] == "onednn"  # the setting reached the command and its cells
    for run in runs.values():
        assert run["ok"] and run["batch_size"] == 8, run
        f = run["figures"]
        assert set(FIGURES) <= set(f) and f["responses"] == 6, f  # 3 items x 2 requests x 1 policy
        assert 0 < f["generation_s"] < f["command_s"] and f["tokens_per_s"] > 0, f
        assert set(run["vs_lm_eval"]) == {"responses_per_s", "tokens_per_s", "generation_s", "command_s"}
    assert runs[("lm-eval", "hf")]["vs_lm_eval"]["tokens_per_s"] == pytest.approx(1.0)
    assert {r["peer"] for r in runs.values()} == {"hf"}  # each backend against lm-eval on its own engine
    machine = report["machine"]
    assert machine["cpu"] and machine["loop_s"] > 0 and machine["numerics"] == "portable"
    table = proc.stdout[proc.stdout.index("| tool | backend |"):].splitlines()
    assert len([x for x in table if x.startswith("| crossed-eval |") or x.startswith("| lm-eval |")]) == 3
    assert f"| {machine['cpu']} (portable) | {machine['loop_s']} |" in table[2]

    check = runs[("crossed-eval", "hf")]["agreement"]
    assert check["compared"] == 6 and check["missing"] == []
    assert check["prompts_differ"] == []  # the shipped tasks render crossed-eval's prompts, token for token
    assert check["agree"] == 6 - len(check["texts_differ"])
    assert f"{check['agree']}/6 greedy texts agree" in proc.stdout
    for d in check["texts_differ"]:  # a difference is named, with the characters where it starts
        assert d["crossed_eval"] != d["lm_eval"]
        assert f"item {d['item']} policy m request {d['request']}: first difference" in proc.stdout
